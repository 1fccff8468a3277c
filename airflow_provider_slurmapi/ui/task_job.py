"""A task instance's Slurm job, as its task left it in XCom, and what the tab reads of it.

The job and the connection come from the task instance's XComs (``job_id``, and ``slurm_connection``
which our operators push with it), never from the request: a user reaches only the jobs of task
instances the api-server let them see. Reads are shared for ``READ_CACHE_SECONDS``, so many open
tabs on one job make one read of Slurm between them.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from airflow_provider_slurmapi.client.jobs import JobStatus, RecordSource
from airflow_provider_slurmapi.client.operations import JobHistory, JobRecords
from airflow_provider_slurmapi.client.records import number
from airflow_provider_slurmapi.client.requeue import latest_runs
from airflow_provider_slurmapi.ui.live_tail import live_tails

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from airflow_provider_slurmapi.client.output import OutputTail
    from airflow_provider_slurmapi.hooks.slurm_job_api import SlurmJobApiHook

JOB_ID_XCOM = "job_id"
CONNECTION_XCOM = "slurm_connection"  # {"connection": the hook's arguments, "output": output overrides}
OUTPUT_LINK_XCOM = "slurm_output_console_url"
READ_CACHE_SECONDS = 5.0
TAB_TAIL_LINES, TAB_TAIL_BYTES = 200, 64 * 1024  # the tab shows more than a log excerpt, never waits


@dataclass(frozen=True)
class TaskJob:
    """The job a task instance submitted or watched, and how to reach it."""

    job_id: str
    connection: dict[str, Any]  # SlurmJobApiHook's arguments (no secrets: a connection ID and names)
    output: dict[str, Any]  # the task's OutputSettings overrides (uri, cluster_path)
    output_link: str | None = None
    live_tag: str | None = None  # the try's folder tag, in the names of its live output pieces

    def cache_key(self) -> str:
        return json.dumps([self.job_id, self.connection, self.output], sort_keys=True, default=str)


def find_task_job(session: Session, dag_id: str, run_id: str, task_id: str, map_index: int) -> TaskJob | None:
    """The task instance's job from its XComs; None when it has not submitted or watched one."""
    from airflow.models.xcom import XComModel

    query = XComModel.get_many(run_id=run_id, dag_ids=dag_id, task_ids=task_id, map_indexes=map_index)
    query = query.where(XComModel.key.in_((JOB_ID_XCOM, CONNECTION_XCOM, OUTPUT_LINK_XCOM)))
    rows: list[Any] = list(session.scalars(query))
    values = {row.key: XComModel.deserialize_value(row) for row in rows}
    job_id, access = values.get(JOB_ID_XCOM), values.get(CONNECTION_XCOM)
    # other operators push a job_id too: only ours push slurm_connection with it
    if not isinstance(job_id, (str, int)) or isinstance(job_id, bool) or not isinstance(access, dict):
        return None
    link = values.get(OUTPUT_LINK_XCOM)
    return TaskJob(
        job_id=str(job_id),
        connection=dict(access.get("connection") or {}),
        output=dict(access.get("output") or {}),
        output_link=link if isinstance(link, str) and link.startswith("https://") else None,
        live_tag=str(access["live_tag"]) if access.get("live_tag") else None,
    )


@dataclass(frozen=True)
class JobReading:
    """One read of a job for the tab: its history, the cluster, and its output's tails."""

    history: JobHistory
    cluster: str
    output: tuple[OutputTail, ...]
    live: dict[str, str]  # while the job runs with live output: each stream's last published lines
    output_problem: str | None  # why no output is shown at all
    read_at: float


_cache: dict[str, JobReading] = {}
_cache_lock = threading.Lock()


def read_task_job(task_job: TaskJob) -> JobReading:
    """The job read now, or by another tab less than ``READ_CACHE_SECONDS`` ago."""
    key, now = task_job.cache_key(), time.monotonic()
    with _cache_lock:
        cached = _cache.get(key)
        if cached is not None and now - cached.read_at < READ_CACHE_SECONDS:
            return cached
        for stale in [k for k, v in _cache.items() if now - v.read_at >= READ_CACHE_SECONDS]:
            del _cache[stale]
    reading = _read(task_job, now)
    with _cache_lock:
        _cache[key] = reading
    return reading


def forget(task_job: TaskJob) -> None:
    """Drop the job's shared read (after a cancel: the next view reads it anew)."""
    with _cache_lock:
        _cache.pop(task_job.cache_key(), None)


def hook_for(task_job: TaskJob) -> SlurmJobApiHook:
    from airflow_provider_slurmapi.hooks.slurm_job_api import SlurmJobApiHook

    return SlurmJobApiHook(**task_job.connection)


def _read(task_job: TaskJob, now: float) -> JobReading:
    hook = hook_for(task_job)
    history = hook.job_history(task_job.job_id)
    settings = hook.resolve_output_settings(**task_job.output)
    tails: list[OutputTail] = []
    live: dict[str, str] = {}
    problem = None
    if not settings.readable:
        problem = "Airflow cannot read this job's output: the task and its connection set no output_uri."
    elif history.live and all(JobStatus.from_slurm(record).state == "PENDING" for record in history.live):
        problem = "The job has not started: it has no output yet."
    else:
        live = _live(hook, task_job, history, str(settings.uri))
        if not live:  # ended, or no live output: the files themselves
            records = JobRecords(RecordSource.ACCOUNTING, latest_runs(history.accounting))
            if history.live:
                records = JobRecords(RecordSource.LIVE, history.live)
            settings = replace(settings, tail_lines=TAB_TAIL_LINES, tail_bytes=TAB_TAIL_BYTES, wait=0)
            tails = hook.read_job_output(task_job.job_id, settings=settings, records=records)
    return JobReading(history, hook.cluster.cluster_id, tuple(tails), live, problem, now)


def _live(hook: SlurmJobApiHook, task_job: TaskJob, history: JobHistory, within: str) -> dict[str, str]:
    """A running job's last published lines, when its task turned live output on."""
    running = [record for record in history.live if JobStatus.from_slurm(record).state == "RUNNING"]
    if not running or not task_job.live_tag:
        return {}
    started = min(number(record.get("start_time")) or 0 for record in running)
    return live_tails(hook._object_store(), within, task_job.job_id, task_job.live_tag, started)
