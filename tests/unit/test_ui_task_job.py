"""The tab's reads of a job: shared by the tabs open on it for a few seconds, anew after a cancel."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_provider_slurmapi.ui import task_job
from airflow_provider_slurmapi.ui.task_job import TaskJob, forget, read_task_job
from airflow_provider_slurmapi.ui.trust import Ownership, TaskRun

RUN = TaskRun("d", "r", "t", -1)


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    made: list[str] = []

    def read(job: TaskJob, now: float) -> Any:
        made.append(job.job_id)
        return task_job.JobReading(task_job.JobHistory([], []), "c", Ownership.OWN, (), {}, None, now)

    monkeypatch.setattr(task_job, "_read", read)
    monkeypatch.setattr(task_job.time, "monotonic", lambda: 1000.0)
    monkeypatch.setattr(task_job, "_cache", {})
    return made


def test_tabs_open_on_one_job_share_a_read_for_a_few_seconds(reads: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    job = TaskJob(RUN, "7", {"slurm_conn_id": "a"}, {}, watches=False)
    other = TaskJob(RUN, "7", {"slurm_conn_id": "b"}, {}, watches=False)
    for _ in range(5):
        read_task_job(job)
    read_task_job(other)  # the same ID through another connection is another job
    assert reads == ["7", "7"]
    monkeypatch.setattr(task_job.time, "monotonic", lambda: 1000.0 + task_job.READ_CACHE_SECONDS)
    read_task_job(job)
    assert reads == ["7", "7", "7"]
    forget(job)  # a cancel: the next view reads the job anew
    read_task_job(job)
    assert reads == ["7", "7", "7", "7"]
