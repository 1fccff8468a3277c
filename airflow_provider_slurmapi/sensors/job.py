"""A sensor that waits for a Slurm job to finish, poking from a worker or deferred to the triggerer."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow.providers.common.compat.sdk import AirflowSensorTimeout, BaseSensorOperator

from airflow_provider_slurmapi.client.errors import JobLostError, UnknownJobStateError
from airflow_provider_slurmapi.client.wait_policy import JobWaitPolicy
from airflow_provider_slurmapi.client.waiting import follow, run_wait
from airflow_provider_slurmapi.operators.base import CONNECTION_TEMPLATE_FIELDS
from airflow_provider_slurmapi.operators.waiting import SlurmWaitingOperator
from airflow_provider_slurmapi.triggers.events import EventStatus, status_from_event

if TYPE_CHECKING:
    from airflow.providers.common.compat.sdk import Context

    from airflow_provider_slurmapi.client.jobs import JobStatus

# Where Airflow 3.3+'s task state store keeps the wait's state across reschedules: since when
# the job is astray, the requeues and the hold already reported.
WAIT_STATE_KEY = "slurm_job_wait"


class _NextPoke(Exception):
    """The wait goes on at the next poke."""


class SlurmJobSensor(SlurmWaitingOperator, BaseSensorOperator):
    """Succeeds when the Slurm job ends COMPLETED with exit code 0; fails with the reason otherwise.

    :param job_id: the job to watch. Templated.

    The connection and cluster arguments (``slurm_conn_id``, ``project_id``...) are those of
    :class:`~airflow_provider_slurmapi.operators.base.SlurmBaseOperator`; ``deferrable``,
    ``shared_polling``, ``lost_grace`` and the output arguments (``output_uri``...) those of
    :class:`~airflow_provider_slurmapi.operators.waiting.SlurmWaitingOperator`. With
    ``output_uri`` and ``output_cluster_path`` set, the task log shows the end of the job's
    output once it has finished. In ``mode="reschedule"`` the time the job went missing is kept
    across reschedules in Airflow 3.3+'s task state store; older Airflow keeps nothing between
    reschedules, so there a poke that finds the job missing waits out ``lost_grace`` itself.
    """

    template_fields: Sequence[str] = ("job_id", *CONNECTION_TEMPLATE_FIELDS)
    ui_color = "#c7f4d6"

    def __init__(self, *, job_id: str | int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.job_id = job_id
        self._carried: dict[str, Any] | None = None  # the wait's state between pokes (mode="poke")

    def execute(self, context: Context) -> Any:
        self.output_settings  # noqa: B018 - the connection's output settings, refused now if bad
        self.show_job(context, str(self.job_id))
        if not self.deferrable:
            return super().execute(context)
        if not self.poke(context):
            self.defer_until_finished(context, str(self.job_id), poll_interval=self.poke_interval, timeout=self.timeout)
        return None

    def poke(self, context: Context) -> bool:
        status = self._read_on(context)
        if status is None:
            return False
        self.finish_job(context, status)
        return True

    def _read_on(self, context: Context) -> JobStatus | None:
        """One step of the wait, carried on from the last poke: the final status, or None."""
        job_id = str(self.job_id)
        store = context.get("task_state_store")  # Airflow 3.3+
        carried = self._carried
        if carried is None and store is not None:
            stored = store.get(WAIT_STATE_KEY)
            carried = stored if isinstance(stored, dict) else None
        policy = JobWaitPolicy(job_id, lost_grace=self.lost_grace, **(carried or {}))

        def sleep(seconds: float) -> None:
            # nothing is kept across reschedules before Airflow 3.3: a missing job is waited out here
            if policy.astray_since is None or store is not None or not self.reschedule:
                raise _NextPoke
            time.sleep(self.poke_interval)

        status: JobStatus | None
        try:
            status = run_wait(
                follow(policy, self.poke_interval, self.log),
                read=lambda: self.hook.find_job(job_id),
                describe_requeue=self.hook.describe_requeue,
                sleep=sleep,
            )
        except _NextPoke:
            status = None
        except (JobLostError, UnknownJobStateError):
            self._save_wait_state(store, carried, None)
            raise
        self._save_wait_state(store, carried, policy.carry_over())
        return status

    def _save_wait_state(self, store: Any, carried: dict[str, Any] | None, state: dict[str, Any] | None) -> None:
        self._carried = state
        if store is None or state == carried:
            return
        if state is None:
            store.delete(WAIT_STATE_KEY)
        else:
            store.set(WAIT_STATE_KEY, state)

    def execute_complete(
        self, context: Context, event: dict[str, Any] | None = None, deferred_in_try: int | None = None
    ) -> None:
        if self.resumed_by_an_earlier_try(context, deferred_in_try):
            return self.execute(context)
        if event and event.get("status") == EventStatus.TIMEOUT:
            raise AirflowSensorTimeout(f"{event.get('message')} (sensor timeout {self.timeout} s)")
        self.finish_job(context, status_from_event(event))
