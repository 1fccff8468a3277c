"""What a task tells of a job that ended: what it used and the end of its output.

Runs in the worker (a trigger's log is a separate file that remote log handlers can miss).
Nothing read here changes the task's outcome: a report that fails is a warning.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from airflow_provider_slurmapi.client.output import OutputSettings, error_excerpt

if TYPE_CHECKING:
    from airflow_provider_slurmapi.client.jobs import JobStatus
    from airflow_provider_slurmapi.client.usage import JobUsage
    from airflow_provider_slurmapi.client.waiting import Log
    from airflow_provider_slurmapi.hooks.slurm_job_api import SlurmJobApiHook


@dataclass(frozen=True)
class JobReport:
    """What the report found: usage (None without accounting), where the output can be read,
    and the end of a failed job's error output for the task's failure message ("" if none)."""

    usage: JobUsage | None = None
    output_location: str | None = None
    failure_excerpt: str = ""


def report_job_end(
    hook: SlurmJobApiHook,
    settings: OutputSettings,
    status: JobStatus,
    log: Log,
    *,
    live_shown: dict[str, int] | None = None,
) -> JobReport:
    """Log the finished job's usage and the last lines of its output, from one read of its records.

    ``live_shown``: bytes of the job's stdout and stderr the task log showed while it ran (live
    output), not shown again; the failure message keeps its excerpt whole.
    """
    try:
        records = hook.job_records(status.job_id)
    except Exception as error:
        log.warning("Cannot read the records of Slurm job %s: %s", status.job_id, error)
        return JobReport()
    usage = hook.get_job_usage(status.job_id, records)
    if usage is not None:
        log.info("%s", usage.describe())
    try:
        tails = hook.read_job_output(status.job_id, settings, records)
    except Exception as error:
        log.warning("Cannot read the output of Slurm job %s: %s", status.job_id, error)
        return JobReport(usage)
    for tail in tails:
        shown = (live_shown or {}).get(tail.stream, 0) if tail.job_id == status.job_id else 0
        log.info("%s", tail.without_shown(shown).frame())
    location = next((tail.location for tail in tails if tail.size is not None), None)
    return JobReport(usage, location, "" if status.is_success else error_excerpt(tails))
