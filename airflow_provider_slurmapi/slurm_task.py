"""What the operators and the sensor share: connection arguments, the hook, deferring to the
trigger and reading its event.

Importing this module stays cheap (it is imported at every DAG parse): the hook, the trigger and
their HTTP and Google libraries are imported only when a task runs.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import timedelta
from functools import cached_property
from typing import TYPE_CHECKING, Any, NoReturn, Protocol

from airflow.providers.common.compat.sdk import AirflowException

from airflow_provider_slurmapi.client.jobs import JobStatus
from airflow_provider_slurmapi.client.output import (
    DEFAULT_OUTPUT_WAIT,
    DEFAULT_TAIL_BYTES,
    DEFAULT_TAIL_LINES,
    OutputSettings,
    console_url,
    error_excerpt,
)
from airflow_provider_slurmapi.client.usage import JobUsage
from airflow_provider_slurmapi.client.wait_policy import LOST_JOB_GRACE
from airflow_provider_slurmapi.links import SlurmJobOutputLink

if TYPE_CHECKING:
    from airflow.providers.common.compat.sdk import Context

    from airflow_provider_slurmapi.hooks.slurm_job_api import SlurmJobApiHook

# Templated connection and cluster arguments of every operator and the sensor.
CONNECTION_TEMPLATE_FIELDS = ("project_id", "region", "cluster_id", "api_version", "impersonation_chain")


class DeferringSlurmTask(Protocol):
    """What ``defer_until_finished`` needs: the mixin's arguments and a BaseOperator's ``defer``."""

    @property
    def hook_kwargs(self) -> dict[str, Any]: ...

    shared_polling: bool
    lost_grace: float
    execution_timeout: timedelta | None

    def defer(self, *, trigger: Any, method_name: str, kwargs: dict[str, Any] | None = None) -> NoReturn: ...


class ReportingSlurmTask(Protocol):
    """What ``report_job_end`` needs: the mixin's hook and output settings, a BaseOperator's log."""

    @property
    def hook(self) -> SlurmJobApiHook: ...

    @property
    def output_settings(self) -> OutputSettings: ...

    @property
    def log(self) -> Any: ...  # a logging.Logger, or a structlog logger in the Task SDK

    final_status: JobStatus | None
    final_usage: JobUsage | None

    def show_output_link(self, context: Context, location: str | None) -> None: ...


class SlurmTaskMixin:
    """Connection and cluster arguments, and the hook built from them."""

    slurm_conn_id: str
    project_id: str | None
    region: str | None
    cluster_id: str | None
    api_version: str | None
    impersonation_chain: str | Sequence[str] | None
    retry_attempts: int | None  # override the connection's retry settings
    retry_max_seconds: float | None
    shared_polling: bool = True  # while deferred, read the job through the cluster's shared poller
    lost_grace: float = LOST_JOB_GRACE
    output_uri: str | None = None  # override the connection's output locations
    output_cluster_path: str | None = None
    output_tail_lines: int = DEFAULT_TAIL_LINES
    output_tail_bytes: int = DEFAULT_TAIL_BYTES
    output_wait: float = DEFAULT_OUTPUT_WAIT
    final_status: JobStatus | None = None  # the finished job, as report_job_end saw it (for lineage)
    final_usage: JobUsage | None = None
    output_console_url = ""  # the "Slurm job output" link: the Cloud console page of a gs:// object

    def set_connection_arguments(
        self,
        slurm_conn_id: str,
        project_id: str | None,
        region: str | None,
        cluster_id: str | None,
        api_version: str | None,
        impersonation_chain: str | Sequence[str] | None,
        retry_attempts: int | None,
        retry_max_seconds: float | None,
    ) -> None:
        self.slurm_conn_id = slurm_conn_id
        self.project_id = project_id
        self.region = region
        self.cluster_id = cluster_id
        self.api_version = api_version
        self.impersonation_chain = impersonation_chain
        self.retry_attempts = retry_attempts
        self.retry_max_seconds = retry_max_seconds

    def set_output_arguments(
        self,
        output_uri: str | None,
        output_cluster_path: str | None,
        output_tail_lines: int,
        output_tail_bytes: int,
        output_wait: float,
    ) -> None:
        # refused when the DAG is parsed, naming the argument; the connection's values at run time
        OutputSettings(output_uri, output_cluster_path, output_tail_lines, output_tail_bytes, output_wait)
        self.output_uri = output_uri
        self.output_cluster_path = output_cluster_path
        self.output_tail_lines = output_tail_lines
        self.output_tail_bytes = output_tail_bytes
        self.output_wait = output_wait

    @cached_property
    def output_settings(self) -> OutputSettings:
        """The output arguments over the connection's ``output_uri`` and ``output_cluster_path``."""
        return self.hook.output_settings(
            uri=self.output_uri,
            cluster_path=self.output_cluster_path,
            tail_lines=self.output_tail_lines,
            tail_bytes=self.output_tail_bytes,
            wait=self.output_wait,
        )

    def report_job_end(self: ReportingSlurmTask, context: Context, status: JobStatus) -> str:
        """Log what the finished job used and the end of its output; push XCom ``usage``.

        Runs in the worker (a trigger's log is a separate file that remote log handlers can miss).
        Returns the end of a failed job's error output for the task's failure message, else "".
        Nothing read here changes the task's outcome.
        """
        ti = context["ti"]
        self.final_status = status
        try:  # the job's outcome is known: a report that fails must not change it
            records = self.hook.job_records(status.job_id)  # one read for usage and output
        except Exception as error:
            self.log.warning("Cannot read the records of Slurm job %s: %s", status.job_id, error)
            return ""
        usage = self.final_usage = self.hook.get_job_usage(status.job_id, records)
        if usage is not None:
            self.log.info("%s", usage.describe())
            ti.xcom_push(key="usage", value=usage.to_dict())
        try:
            tails = self.hook.read_job_output(status.job_id, self.output_settings, records)
        except Exception as error:
            self.log.warning("Cannot read the output of Slurm job %s: %s", status.job_id, error)
            return ""
        for tail in tails:
            self.log.info("%s", tail.frame())
        self.show_output_link(context, next((tail.location for tail in tails if tail.size is not None), None))
        return "" if status.is_success else error_excerpt(tails)

    def show_output_link(self, context: Context, location: str | None) -> None:
        """Give the task's "Slurm job output" link the Cloud console page of a ``gs://`` location."""
        url = console_url(location) if location else None
        if url:
            self.output_console_url = url
            context["ti"].xcom_push(key=SlurmJobOutputLink.key, value=url)

    @property
    def hook_kwargs(self) -> dict[str, Any]:
        chain = self.impersonation_chain
        return {
            "slurm_conn_id": self.slurm_conn_id,
            "project_id": self.project_id,
            "region": self.region,
            "cluster_id": self.cluster_id,
            "api_version": self.api_version,
            "impersonation_chain": list(chain) if chain and not isinstance(chain, str) else chain,
            "retry_attempts": self.retry_attempts,
            "retry_max_seconds": self.retry_max_seconds,
        }

    @cached_property
    def hook(self) -> SlurmJobApiHook:
        from airflow_provider_slurmapi.hooks.slurm_job_api import SlurmJobApiHook

        return SlurmJobApiHook(**self.hook_kwargs)

    def defer_until_finished(
        self: DeferringSlurmTask,
        context: Context,
        job_id: str,
        *,
        poll_interval: float,
        timeout: float | None,
        cancel_on_kill: bool = False,
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
            ),
            method_name="execute_complete",
            kwargs={"deferred_in_try": context["ti"].try_number},
        )


def check_positive(name: str, value: float | None, *, optional: bool = False) -> None:
    """Refuse a wait argument that is not a positive number of seconds, naming it."""
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        allowed = "a positive number of seconds" + (" or None" if optional else "")
        raise ValueError(f"{name} must be {allowed}, got {value!r}")


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


def resumed_by_an_earlier_try(context: Context, deferred_in_try: int | None, log: Any) -> bool:
    """Whether ``execute_complete`` got the event of an earlier try's deferral: the task must start over.

    Airflow 3.0 and 3.1.0 keep ``next_method`` and ``next_kwargs`` when a deferred try fails, so the
    retry resumes in ``execute_complete`` with that try's event (apache/airflow#56704, fixed in 3.1.1).
    """
    try_number = context["ti"].try_number
    if deferred_in_try is None or deferred_in_try == try_number:
        return False
    log.warning(
        "Try %s resumed with the event of try %s's deferral (an Airflow before 3.1.1 kept it): starting over",
        try_number,
        deferred_in_try,
    )
    return True


def status_from_event(event: dict[str, Any] | None) -> JobStatus:
    """The final status a trigger sent, or the task's failure with the trigger's reason."""
    event = event or {}
    if event.get("status") == "finished":
        return JobStatus.from_dict(event["job"])
    raise AirflowException(event.get("message") or f"Slurm job {event.get('job_id')}: no status received")
