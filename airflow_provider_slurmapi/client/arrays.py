"""Which record of a reply stands for the job asked for: an array is read through its tasks' records
and its meta record (the tasks not started yet), and is active while any task is."""

from __future__ import annotations

from dataclasses import replace

from airflow_provider_slurmapi.client.jobs import JobStatus, RecordSource
from airflow_provider_slurmapi.client.paths import base_job_id


def _waits_in_meta_record(meta_id: str, job_id: str) -> bool:
    """Whether task ``ARRAY_TASK`` is among those of the meta record ``ARRAY_[spec]``."""
    array, _, task = job_id.partition("_")
    if not (meta_id.startswith(f"{array}_[") and meta_id.endswith("]") and task.isdigit()):
        return False
    spec = meta_id[len(array) + 2 : -1].partition("%")[0]
    try:
        for part in spec.split(","):
            first, _, rest = part.partition("-")
            last, _, step = rest.partition(":")
            if int(first) <= int(task) <= int(last or first) and (int(task) - int(first)) % int(step or 1) == 0:
                return True
    except ValueError:
        return True  # a range we cannot read: the meta record is still the best answer
    return False


def select_job(job_id: str, jobs: list[JobStatus]) -> JobStatus | None:
    """The status of ``job_id`` in a reply, or None.

    Asking for an array's ID returns all of its records: each task that started, under its own
    job ID, and while some have not, the array's meta record that stands for them (``86_[2-3]``,
    listed first by Slurm, so the array reads PENDING with the reason they wait for). The array
    counts as active while any record is, and as successful only when every task is. Asking for
    one task (``86_2``) gives its record, or the meta record while that task has not started.
    """
    if "_" in job_id:
        exact = [job for job in jobs if job.job_id == job_id]
        if exact:
            return exact[0]
        waiting = [job for job in jobs if _waits_in_meta_record(job.job_id, job_id)]
        return replace(waiting[0], job_id=job_id) if waiting else None
    if not jobs:
        return None
    if len(jobs) == 1 and jobs[0].job_id == job_id:
        return jobs[0]
    lead = lead_record(jobs)
    return replace(
        lead,
        job_id=job_id,
        extra={**lead.extra, "tasks": {job.job_id: job.state for job in jobs}},
    )


def lead_record(records: list[JobStatus]) -> JobStatus:
    """The record that speaks for a whole array: an active task's while any is, else a failed one's."""
    active = [record for record in records if record.is_active]
    failed = [record for record in records if record.is_finished and not record.is_success]
    return active[0] if active else failed[0] if failed else records[0]


def summaries(states: dict[str, list[str]]) -> dict[str, JobStatus]:
    """What a bulk state answer (``{record_id: [state, flags...]}``) says of each submitted job."""
    grouped: dict[str, list[JobStatus]] = {}
    for record, state in states.items():
        if state:
            grouped.setdefault(base_job_id(record), []).append(JobStatus(record, state[0], tuple(state[1:])))
    summary = {}
    for job_id, records in grouped.items():
        lead = lead_record(records)
        summary[job_id] = JobStatus(job_id, lead.state, lead.flags, source=RecordSource.STATE_LIST)
    return summary
