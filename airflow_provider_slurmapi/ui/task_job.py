"""A task instance's Slurm job, as its task left it in XCom, and what the tab reads of it.

The job ID and the connection's ID come from the task instance's XComs (``job_id``, and
``slurm_connection`` which our operators push with it), never from the request; what is read with
them is decided by ``ui.trust``: the connection's own credentials and output location, the task's
own job, the task run's own output folders. Reads are shared for ``READ_CACHE_SECONDS``, so many
open tabs on one job make one read of Slurm between them.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from airflow_provider_slurmapi.client.jobs import JobStatus, RecordSource
from airflow_provider_slurmapi.client.operations import JobHistory, JobRecords
from airflow_provider_slurmapi.client.output import OutputSettings, output_files
from airflow_provider_slurmapi.client.records import number
from airflow_provider_slurmapi.client.requeue import latest_runs
from airflow_provider_slurmapi.ui.live_tail import live_tails
from airflow_provider_slurmapi.ui.trust import (
    SENSOR_OPERATORS,
    Ownership,
    Refused,
    TaskRun,
    hook_arguments,
    live_tag_folder,
    output_link,
    output_settings,
    ownership,
    readable_file,
)

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from airflow_provider_slurmapi.client.output import OutputTail
    from airflow_provider_slurmapi.hooks.slurm_job_api import SlurmJobApiHook

log = logging.getLogger(__name__)

JOB_ID_XCOM = "job_id"
CONNECTION_XCOM = "slurm_connection"  # {"connection": the hook's arguments, "output": output overrides}
OUTPUT_LINK_XCOM = "slurm_output_console_url"
READ_CACHE_SECONDS = 5.0
TAB_TAIL_LINES, TAB_TAIL_BYTES = 200, 64 * 1024  # the tab shows more than a log excerpt, never waits


@dataclass(frozen=True)
class TaskJob:
    """The job a task instance submitted or watched, as its XComs name it."""

    run: TaskRun
    job_id: str
    connection: dict[str, Any]  # the task's connection arguments, as it pushed them (see ui.trust)
    output: dict[str, Any]  # the task's OutputSettings overrides (uri, cluster_path)
    watches: bool  # the task instance is a sensor: it watches a job submitted elsewhere
    output_link: str | None = None

    def cache_key(self) -> str:
        return json.dumps([self.run, self.job_id, self.connection, self.output], sort_keys=True, default=str)


def find_task_job(session: Session, run: TaskRun) -> TaskJob | None:
    """The task instance's job from its XComs; None when it has not submitted or watched one."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.models.xcom import XComModel
    from sqlalchemy import select

    query = XComModel.get_many(run_id=run.run_id, dag_ids=run.dag_id, task_ids=run.task_id, map_indexes=run.map_index)
    query = query.where(XComModel.key.in_((JOB_ID_XCOM, CONNECTION_XCOM, OUTPUT_LINK_XCOM)))
    rows: list[Any] = list(session.scalars(query))
    values = {row.key: XComModel.deserialize_value(row) for row in rows}
    job_id, access = values.get(JOB_ID_XCOM), values.get(CONNECTION_XCOM)
    # other operators push a job_id too: only ours push slurm_connection with it
    if not isinstance(job_id, (str, int)) or isinstance(job_id, bool) or not isinstance(access, dict):
        return None
    operator = session.scalar(
        select(TaskInstance.operator).where(
            TaskInstance.dag_id == run.dag_id,
            TaskInstance.run_id == run.run_id,
            TaskInstance.task_id == run.task_id,
            TaskInstance.map_index == run.map_index,
        )
    )
    link = values.get(OUTPUT_LINK_XCOM)
    connection, output = access.get("connection"), access.get("output")
    return TaskJob(
        run=run,
        job_id=str(job_id),
        connection=dict(connection) if isinstance(connection, dict) else {},
        output=dict(output) if isinstance(output, dict) else {},
        watches=operator in SENSOR_OPERATORS,
        output_link=link if isinstance(link, str) and link.startswith("https://") else None,
    )


@dataclass(frozen=True)
class JobReading:
    """One read of a job for the tab: its history, the cluster, whose job it is, and its output's tails."""

    history: JobHistory
    cluster: str
    ownership: Ownership
    output: tuple[OutputTail, ...]
    live: dict[str, str]  # while the job runs with live output: each stream's last published lines
    output_problem: str | None  # why no output, or not all of it, is shown
    read_at: float
    output_link: str | None = None  # the Cloud console page of the task's own output (ui.trust)


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
    """The hook of the task's connection, as ``ui.trust`` allows it; ``Refused`` otherwise."""
    from airflow_provider_slurmapi.hooks.slurm_job_api import SlurmJobApiHook

    conn_id = task_job.connection.get("slurm_conn_id")
    conn_type = _connection_type(conn_id) if isinstance(conn_id, str) and conn_id else None
    if conn_type is None:
        log.warning("The Slurm job tab found no connection %r for %s", conn_id, task_job.run)
    return SlurmJobApiHook(**hook_arguments(task_job.connection, conn_type))


def _connection_type(conn_id: str) -> str | None:
    from airflow.providers.common.compat.sdk import BaseHook

    try:
        return BaseHook.get_connection(conn_id).conn_type
    except Exception:  # AirflowNotFoundException, or a secrets backend that cannot answer
        return None


def _read(task_job: TaskJob, now: float) -> JobReading:
    hook = hook_for(task_job)
    history = hook.job_history(task_job.job_id)
    settings, problem = output_settings(hook.resolve_output_settings(), task_job.output)
    whose = ownership(history.live, history.accounting, task_job.run, settings, watches=task_job.watches)
    tails: list[OutputTail] = []
    live: dict[str, str] = {}
    if whose is Ownership.STRANGER:
        pass  # nothing of another's job is read
    elif not settings.readable:
        problem = problem or "Airflow cannot read this job's output: its connection sets no output_uri."
    elif history.live and all(JobStatus.from_slurm(record).state == "PENDING" for record in history.live):
        problem = "The job has not started: it has no output yet."
    else:
        if whose is Ownership.OWN:
            live = _live(hook, task_job, history, settings)
        if not live:  # ended, or no live output: the files themselves
            tails = _tails(hook, task_job, history, settings, whose)
    link = output_link(task_job.output_link, whose, settings)
    return JobReading(history, hook.cluster.cluster_id, whose, tuple(tails), live, problem, now, link)


def _tails(
    hook: SlurmJobApiHook, task_job: TaskJob, history: JobHistory, settings: OutputSettings, whose: Ownership
) -> list[OutputTail]:
    """The ends of the output files the tab may read (``ui.trust.readable_file``); the others named."""
    from airflow_provider_slurmapi.client.output import OutputTail
    from airflow_provider_slurmapi.hooks.output_reader import OutputReader

    records = JobRecords(RecordSource.ACCOUNTING, latest_runs(history.accounting))
    if history.live:
        records = JobRecords(RecordSource.LIVE, history.live)
    settings = replace(settings, tail_lines=TAB_TAIL_LINES, tail_bytes=TAB_TAIL_BYTES, wait=0)
    files = output_files(records.records, source=records.source)
    allowed = [file for file in files if readable_file(file, whose, task_job.run, settings)]
    refused = [
        OutputTail(
            file.job_id, file.stream, file.cluster_path, problem="not read: it is outside this task's output folders"
        )
        for file in files
        if file not in allowed
    ]
    return OutputReader(settings, gcs_hook=hook._gcs_hook, principal=hook._principal).tails(allowed) + refused


def _live(hook: SlurmJobApiHook, task_job: TaskJob, history: JobHistory, settings: OutputSettings) -> dict[str, str]:
    """A running own job's last published lines, under the tag of the try folder it writes to."""
    from airflow_provider_slurmapi.client.live_output import folder_tag

    running = [record for record in history.live if JobStatus.from_slurm(record).state == "RUNNING"]
    folder = live_tag_folder(running, task_job.run, settings)
    if folder is None:
        return {}
    started = min(number(record.get("start_time")) or 0 for record in running)
    return live_tails(hook._object_store(), str(settings.uri), task_job.job_id, folder_tag(folder), started)


__all__ = ["JobReading", "Refused", "TaskJob", "find_task_job", "forget", "hook_for", "read_task_job"]
