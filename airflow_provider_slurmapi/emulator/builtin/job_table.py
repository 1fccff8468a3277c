"""One cluster's job records as slurmctld and slurmdbd find them: by the ID a call names, in the
order they list them, and only those the caller may see."""

from __future__ import annotations

import re
from dataclasses import dataclass

from airflow_provider_slurmapi.emulator.job_desc import user_name
from airflow_provider_slurmapi.emulator.job_model import Job
from airflow_provider_slurmapi.emulator.scheduler import Scheduler
from airflow_provider_slurmapi.emulator.slurm_conf import SlurmConf

_JOB_ID = re.compile(r"^(\d+)(?:_(\d+))?$")


def parse_job_ref(job_ref: str) -> tuple[int, int | None] | None:
    """``123`` or ``123_4`` as (job id, task id or None); None if malformed."""
    match = _JOB_ID.match(job_ref)
    if not match:
        return None
    return int(match.group(1)), None if match.group(2) is None else int(match.group(2))


def state_order(jobs: list[Job]) -> list[Job]:
    """The order of jobs/state and DELETE statuses: newest first, a pending meta record last."""
    return sorted(jobs, key=lambda j: (j.is_array_meta, -j.array_seq))


@dataclass(frozen=True)
class JobTable:
    """The jobs of ``cluster``, kept by its scheduler, and who may see them (``slurm_conf``)."""

    cluster: str
    scheduler: Scheduler
    slurm_conf: SlurmConf

    @property
    def jobs(self) -> dict[int, Job]:
        return self.scheduler.jobs

    def visible(self, job: Job, principal: str) -> bool:
        """With ``PrivateData=jobs``, slurmctld and slurmdbd show a user only its own jobs: another's
        reads as no job at all. (jobs/state shows every job: slurmctld does not filter it.)"""
        return not self.slurm_conf.private_data or job.user_name == user_name(principal)

    def user_names(self, principal: str) -> set[str]:
        """The user names accounting can resolve: the caller's and those of every job's owner."""
        return {user_name(principal), *(j.user_name for j in self.jobs.values())}

    def queue(self) -> list[Job]:
        """The records slurmctld still shows, in the order of its job list."""
        return [j for j in sorted(self.jobs.values(), key=lambda j: j.list_seq) if self.scheduler.in_queue(j)]

    def records(self, job_id: int) -> list[Job]:
        """The job, or, for an array's id, every record of the array.

        In slurmctld's order: the record with the array's own id first (the meta record while
        tasks are pending, afterwards the last task to start), then the others, newest first.
        """
        job = self.jobs.get(job_id)
        if job is None or job.array_job_id != job_id:
            return [job] if job is not None else []
        others = [j for j in self.jobs.values() if j.array_job_id == job_id and j is not job]
        return [job, *sorted(others, key=lambda j: j.array_seq, reverse=True)]

    def accounted(self, job_id: int, task: int | None) -> list[Job]:
        """The records accounting keeps for ``job_id`` (or one started task of its array), by ID."""
        jobs = self.records(job_id)
        if task is not None:  # only a task that started has a row of its own
            jobs = [j for j in jobs if j.array_job_id == job_id and j.array_task_id == task]
        return sorted(jobs, key=lambda j: j.job_id)

    def task_record(self, array_id: int, task: int) -> Job | None:
        """The record that holds task ``task`` of array ``array_id``: its own, or the meta record."""
        for job in self.jobs.values():
            if job.array_job_id == array_id and (job.array_task_id == task or task in job.pending_tasks):
                return job
        return None

    def named(self, job_id: int, task: int | None) -> list[Job]:
        """The records ``job_id`` names (see records), or the one holding task ``task`` of the array."""
        if task is None:
            return self.records(job_id)
        record = self.task_record(job_id, task)
        return [record] if record is not None else []
