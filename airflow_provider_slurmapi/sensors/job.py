"""A sensor that waits for a Slurm job to finish, poking from a worker or deferred to the triggerer."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow.providers.common.compat.sdk import AirflowException, AirflowSensorTimeout, BaseSensorOperator, conf

from airflow_provider_slurmapi.client.errors import JobLostError, UnknownJobStateError
from airflow_provider_slurmapi.client.jobs import JobStatus
from airflow_provider_slurmapi.client.output import DEFAULT_OUTPUT_WAIT, DEFAULT_TAIL_BYTES, DEFAULT_TAIL_LINES
from airflow_provider_slurmapi.client.wait_policy import LOST_JOB_GRACE, JobWaitPolicy, Verdict
from airflow_provider_slurmapi.get_provider_info import DEFAULT_CONN_ID
from airflow_provider_slurmapi.links import SlurmJobOutputLink
from airflow_provider_slurmapi.slurm_task import (
    CONNECTION_TEMPLATE_FIELDS,
    SlurmTaskMixin,
    check_positive,
    resumed_by_an_earlier_try,
    status_from_event,
)

if TYPE_CHECKING:
    from airflow.providers.common.compat.sdk import Context

# Where Airflow 3.3+'s task state store keeps the wait's memory across reschedules: since when
# the job is astray, the requeues and the hold already reported.
WAIT_MEMORY_KEY = "slurm_job_wait"


class SlurmJobSensor(SlurmTaskMixin, BaseSensorOperator):
    """Succeeds when the Slurm job ends COMPLETED with exit code 0; fails with the reason otherwise.

    :param job_id: the job to watch. Templated.
    :param slurm_conn_id: connection of type ``slurm_job_api``.
    :param deferrable: wait in the triggerer; default from ``[operators] default_deferrable``.
    :param shared_polling: while deferred, read the job's state through the poller the triggerer
        shares among all jobs of the cluster (default); False polls this job by itself.
    :param lost_grace: seconds the job may be missing from both the live queue and accounting
        (which can lag), or stay in a state this provider does not know, before the task fails.
        In ``mode="reschedule"`` the time the job went missing is kept across reschedules in
        Airflow 3.3+'s task state store; older Airflow keeps nothing between reschedules, so
        there a poke that finds the job missing waits out the grace itself.
    :param output_uri: where Airflow reads job output; overrides the connection's.
    :param output_cluster_path: where the cluster's nodes see ``output_uri``; overrides the connection's.
        With both set, the task log shows the end of the job's output once it has finished.
    :param output_tail_lines: last lines of stdout and of stderr shown in the task log.
    :param output_tail_bytes: at most this many bytes read from the end of each file.
    :param output_wait: seconds to wait for the output to appear after the job ends.
    """

    template_fields: Sequence[str] = ("job_id", *CONNECTION_TEMPLATE_FIELDS)
    ui_color = "#c7f4d6"
    operator_extra_links = (SlurmJobOutputLink(),)

    def __init__(
        self,
        *,
        job_id: str | int,
        slurm_conn_id: str = DEFAULT_CONN_ID,
        project_id: str | None = None,
        region: str | None = None,
        cluster_id: str | None = None,
        api_version: str | None = None,
        impersonation_chain: str | Sequence[str] | None = None,
        retry_attempts: int | None = None,
        retry_max_seconds: float | None = None,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        shared_polling: bool = True,
        lost_grace: float = LOST_JOB_GRACE,
        output_uri: str | None = None,
        output_cluster_path: str | None = None,
        output_tail_lines: int = DEFAULT_TAIL_LINES,
        output_tail_bytes: int = DEFAULT_TAIL_BYTES,
        output_wait: float = DEFAULT_OUTPUT_WAIT,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.set_output_arguments(output_uri, output_cluster_path, output_tail_lines, output_tail_bytes, output_wait)
        check_positive("lost_grace", lost_grace)
        self.job_id = job_id
        self.set_connection_arguments(
            slurm_conn_id,
            project_id,
            region,
            cluster_id,
            api_version,
            impersonation_chain,
            retry_attempts,
            retry_max_seconds,
        )
        self.deferrable = deferrable
        self.shared_polling = shared_polling
        self.lost_grace = lost_grace
        self._wait_memory: dict[str, Any] | None = None  # between pokes of one instance (mode="poke")

    def execute(self, context: Context) -> Any:
        self.output_settings  # noqa: B018 - the connection's output settings, refused now if bad
        if not self.deferrable:
            return super().execute(context)
        if not self.poke(context):
            self.defer_until_finished(context, str(self.job_id), poll_interval=self.poke_interval, timeout=self.timeout)
        return None

    def poke(self, context: Context) -> bool:
        verdict = self._judge_next_read(context)
        if verdict.status is None:
            return False
        if not verdict.finished:
            progress = verdict.progress()
            if progress:
                self.log.log(progress[0], "%s", progress[1])
            return False
        self.log.info("%s", verdict.status.describe())
        self._finish(context, verdict.status)
        return True

    def _finish(self, context: Context, status: JobStatus) -> None:
        output = self.report_job_end(context, status)
        if not status.is_success:
            raise AirflowException(f"{status.describe()}{output}")

    def _judge_next_read(self, context: Context) -> Verdict:
        store = context.get("task_state_store")  # Airflow 3.3+
        kept = self._wait_memory
        if kept is None and store is not None:
            stored = store.get(WAIT_MEMORY_KEY)
            kept = stored if isinstance(stored, dict) else None
        policy = JobWaitPolicy(str(self.job_id), lost_grace=self.lost_grace, **(kept or {}))
        try:
            while True:
                verdict = policy.judge(self.hook.find_job(str(self.job_id)), time.time())
                if verdict.status is None:
                    self.log.warning("%s", verdict.warning(str(self.job_id)))
                if policy.astray_since is None or store is not None or not self.reschedule:
                    break
                time.sleep(self.poke_interval)  # nothing is kept across reschedules: wait it out here
        except (JobLostError, UnknownJobStateError):
            self._keep(store, kept, None)
            raise
        if verdict.requeued and verdict.status is not None:
            self.log.warning("%s", self.hook.client.describe_requeue(verdict.status))
        self._keep(store, kept, policy.memory())
        return verdict

    def _keep(self, store: Any, kept: dict[str, Any] | None, memory: dict[str, Any] | None) -> None:
        self._wait_memory = memory
        if store is None or memory == kept:
            return
        if memory is None:
            store.delete(WAIT_MEMORY_KEY)
        else:
            store.set(WAIT_MEMORY_KEY, memory)

    def execute_complete(
        self, context: Context, event: dict[str, Any] | None = None, deferred_in_try: int | None = None
    ) -> None:
        if resumed_by_an_earlier_try(context, deferred_in_try, self.log):
            return self.execute(context)
        if event and event.get("status") == "timeout":
            raise AirflowSensorTimeout(f"{event.get('message')} (sensor timeout {self.timeout} s)")
        status = status_from_event(event)
        self.log.info("%s", status.describe())
        self._finish(context, status)

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:  # an OperatorLineage
        """The ``slurmJob`` run facet: cluster, job ID, final state, exit code and usage."""
        from airflow_provider_slurmapi.lineage import task_lineage

        return task_lineage(self, self.job_id)

    def get_openlineage_facets_on_failure(self, task_instance: Any) -> Any:  # an OperatorLineage
        """As on complete; a sensor that failed before the job ended names the job it watched."""
        from airflow_provider_slurmapi.lineage import task_lineage

        return task_lineage(self, self.job_id)
