"""What the submit operator and the sensor share: they wait for a job to end, in a worker or
deferred to the triggerer, then report how it ended and fail unless it succeeded.

Importing this module stays cheap (it is imported at every DAG parse): the hook, the trigger and
their HTTP and Google libraries are imported only when a task runs.
"""

from __future__ import annotations

import time
from dataclasses import fields
from datetime import timedelta
from functools import cached_property
from typing import TYPE_CHECKING, Any, NoReturn

from airflow.providers.common.compat.sdk import AirflowException, conf

from airflow_provider_slurmapi.client.jobs import JobStatus
from airflow_provider_slurmapi.client.numbers import checked_number
from airflow_provider_slurmapi.client.output import (
    DEFAULT_OUTPUT_WAIT,
    DEFAULT_TAIL_BYTES,
    DEFAULT_TAIL_LINES,
    OutputSettings,
    console_url,
)
from airflow_provider_slurmapi.client.usage import JobUsage
from airflow_provider_slurmapi.client.wait_policy import LOST_JOB_GRACE
from airflow_provider_slurmapi.links import SlurmJobOutputLink
from airflow_provider_slurmapi.operators.base import SlurmBaseOperator

if TYPE_CHECKING:
    from airflow.providers.common.compat.sdk import Context
    from airflow.providers.openlineage.extractors import OperatorLineage


class SlurmWaitingOperator(SlurmBaseOperator):
    """A task that sees a Slurm job to its end: the submit operator and the sensor.

    Its output arguments are declared here once: a new one is an ``OutputSettings`` field and a
    parameter ``output_<field>`` below.

    :param deferrable: wait in the triggerer instead of a worker slot; default from
        ``[operators] default_deferrable``.
    :param shared_polling: while deferred, read the job's state through the poller the triggerer
        shares among all jobs of the cluster (default); False polls this job by itself.
    :param lost_grace: seconds the job may be missing from both the live queue and accounting
        (which can lag), or stay in a state this provider does not know, before the task fails.
    :param output_uri: where Airflow reads job output, ``gs://bucket/prefix`` or ``file:///path``;
        overrides the connection's. See "Job output and usage".
    :param output_cluster_path: the absolute path where the cluster's nodes see ``output_uri``;
        overrides the connection's.
    :param output_tail_lines: last lines of stdout and of stderr shown in the task log (1-10000).
    :param output_tail_bytes: at most this many bytes read from the end of each file (1 KiB-16 MiB).
    :param output_wait: seconds to wait for the output to appear after the job ends (0-600).
    :param output_staged_retention_days: a DAG's staged scripts (past the request limit) not staged
        again for this many days are removed when it stages another (0-3650, 0 keeps them), but
        those a job in the cluster's live queue may still run (pending, running, suspended,
        requeued: its comment carries the script's mark); overrides the connection's, else 7. The
        submit operator's only.
    """

    operator_extra_links = (SlurmJobOutputLink(),)
    job_id: str | int | None = None  # the job waited for, once known
    final_status: JobStatus | None = None  # the finished job, as finish_job saw it (for lineage)
    final_usage: JobUsage | None = None
    output_console_url = ""  # the "Slurm job output" link: the Cloud console page of a gs:// object

    def __init__(
        self,
        *,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        shared_polling: bool = True,
        lost_grace: float = LOST_JOB_GRACE,
        output_uri: str | None = None,
        output_cluster_path: str | None = None,
        output_tail_lines: int = DEFAULT_TAIL_LINES,
        output_tail_bytes: int = DEFAULT_TAIL_BYTES,
        output_wait: float = DEFAULT_OUTPUT_WAIT,
        output_staged_retention_days: float | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        check_seconds("lost_grace", lost_grace)
        self.deferrable = deferrable
        self.shared_polling = shared_polling
        self.lost_grace = lost_grace
        self.output_uri = output_uri
        self.output_cluster_path = output_cluster_path
        self.output_tail_lines = output_tail_lines
        self.output_tail_bytes = output_tail_bytes
        self.output_wait = output_wait
        self.output_staged_retention_days = output_staged_retention_days
        OutputSettings(**self._output_arguments)  # refused when the DAG is parsed, naming the argument

    @property
    def _output_arguments(self) -> dict[str, Any]:
        return {field.name: getattr(self, f"output_{field.name}") for field in fields(OutputSettings)}

    @cached_property
    def output_settings(self) -> OutputSettings:
        """The output arguments over the connection's ``output_uri`` and ``output_cluster_path``."""
        return self.hook.resolve_output_settings(**self._output_arguments)

    def show_job(self, context: Context, job_id: str) -> None:
        """XCom ``job_id``, and how to reach the job (``slurm_connection``: the connection's ID and
        names, no secret), for the Slurm job tab of Airflow 3.1+'s UI, which trusts them only as
        far as ``ui.trust`` says."""
        from airflow_provider_slurmapi.ui.task_job import CONNECTION_XCOM, JOB_ID_XCOM

        ti = context["ti"]
        ti.xcom_push(key=JOB_ID_XCOM, value=job_id)
        access = {
            "connection": self.hook_kwargs,
            "output": {"uri": self.output_uri, "cluster_path": self.output_cluster_path},
        }
        ti.xcom_push(key=CONNECTION_XCOM, value=access)

    def finish_job(self, context: Context, status: JobStatus, *, live_shown: dict[str, int] | None = None) -> None:
        """Report the finished job (usage as XCom ``usage``, output in the log and its link), then
        fail the task, naming the state, the reason, the exit code and the end of its error output,
        unless the job succeeded. ``live_shown``: the bytes of each stream the log showed while it ran."""
        from airflow_provider_slurmapi.client.live_wrapper import uncopied_script_headline
        from airflow_provider_slurmapi.client.staging import changed_script_headline
        from airflow_provider_slurmapi.job_report import report_job_end

        self.final_status = status
        report = report_job_end(self.hook, self.output_settings, status, self.log, live_shown=live_shown)
        self.final_usage = report.usage
        if report.usage is not None:
            context["ti"].xcom_push(key="usage", value=report.usage.to_dict())
        self.show_output_link(context, report.output_location)
        if not status.is_success:
            excerpt = report.failure_excerpt
            headline = changed_script_headline(status, excerpt) or uncopied_script_headline(status, excerpt)
            raise AirflowException(f"{headline}{status.describe()}{report.failure_excerpt}")
        self.log.info("%s", status.describe())

    def show_output_link(self, context: Context, location: str | None) -> None:
        """Give the task's "Slurm job output" link the Cloud console page of a ``gs://`` location."""
        url = console_url(location) if location else None
        if url:
            self.output_console_url = url
            context["ti"].xcom_push(key=SlurmJobOutputLink.key, value=url)

    def defer_until_finished(
        self,
        context: Context,
        job_id: str,
        *,
        poll_interval: float,
        timeout: float | None,
        cancel_on_kill: bool = False,
        live_output: dict[str, Any] | None = None,
    ) -> NoReturn:
        """Hand the wait to the triggerer; ``execute_complete`` receives the trigger's event.

        The trigger carries the absolute deadline of ``timeout`` and of the task's
        ``execution_timeout``, which Airflow does not enforce while a task is deferred.
        """
        from airflow_provider_slurmapi.triggers.job import SlurmJobTrigger

        self.defer(
            trigger=SlurmJobTrigger(
                job_id,
                poll_interval=poll_interval,
                deadline=task_deadline(context, timeout, self.execution_timeout),
                hook_kwargs=self.hook_kwargs,
                lost_grace=self.lost_grace,
                cancel_on_kill=cancel_on_kill,
                shared_polling=self.shared_polling,
                live_output=live_output,
            ),
            method_name="execute_complete",
            kwargs={"deferred_in_try": context["ti"].try_number},
        )

    def resumed_by_an_earlier_try(self, context: Context, deferred_in_try: int | None) -> bool:
        """Whether ``execute_complete`` got the event of an earlier try's deferral: the task must start over.

        Airflow 3.0 and 3.1.0 keep ``next_method`` and ``next_kwargs`` when a deferred try fails, so the
        retry resumes in ``execute_complete`` with that try's event (apache/airflow#56704, fixed in 3.1.1).
        """
        try_number = context["ti"].try_number
        if deferred_in_try is None or deferred_in_try == try_number:
            return False
        self.log.warning(
            "Try %s resumed with the event of try %s's deferral (an Airflow before 3.1.1 kept it): starting over",
            try_number,
            deferred_in_try,
        )
        return True

    def get_openlineage_facets_on_complete(self, task_instance: object) -> OperatorLineage:
        """The ``slurmJob`` run facet: cluster, job ID, final state, exit code and usage."""
        from airflow_provider_slurmapi.lineage import task_lineage

        return task_lineage(self, self.job_id)

    def get_openlineage_facets_on_failure(self, task_instance: object) -> OperatorLineage:
        """As on complete; a task that failed before its job ended names what it knew."""
        from airflow_provider_slurmapi.lineage import task_lineage

        return task_lineage(self, self.job_id)


def check_seconds(name: str, value: float | None, *, optional: bool = False) -> None:
    """Refuse a wait argument that is not a positive number of seconds, naming it."""
    if value is not None or not optional:
        checked_number(name, value, low=0, above_low=True)


def task_deadline(context: Context, timeout: float | None, execution_timeout: timedelta | None) -> float | None:
    """The earliest of now + ``timeout`` and the task's start + ``execution_timeout`` (epoch s)."""
    deadlines = []
    if timeout:
        deadlines.append(time.time() + timeout)
    if execution_timeout:
        start = getattr(context["ti"], "start_date", None)
        started = start.timestamp() if start else time.time()
        deadlines.append(started + execution_timeout.total_seconds())
    return min(deadlines) if deadlines else None
