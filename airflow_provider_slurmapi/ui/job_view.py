"""What the Slurm job tab shows of one job: its state now and each of its runs, from the records
the live queue (``/slurm``) and accounting (``/slurmdb``) keep of it.

A requeued job keeps its ID: accounting has one record per run (``restart_cnt`` 0, 1, ...), the
live queue one record, of the current run. The live record is the fresher: it has the state now,
the reason a pending job waits for and the scheduler's expected start. No I/O here: the records are
read elsewhere, this decides what they say.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from typing import Any

from airflow_provider_slurmapi.client.arrays import lead_record
from airflow_provider_slurmapi.client.jobs import INTERRUPTION_CAUSES, NO_STATE, JobStatus
from airflow_provider_slurmapi.client.records import accounting_record_id, live_record_id, number
from airflow_provider_slurmapi.client.requeue import latest_runs
from airflow_provider_slurmapi.client.usage import JobUsage

# Slurm writes NO_VAL (0xfffffffe) or INFINITE (0xffffffff) for a time it never set: as unset as 0
_LAST_REAL_TIME = 0xFFFFFFFD
_NO_NODES = frozenset({"", "None assigned"})  # the live queue's and accounting's "no node yet"


@dataclass(frozen=True)
class Run:
    """One run of the job. Times are epoch seconds; None is unset (Slurm's 0)."""

    number: int  # restart_cnt: 0 for the first run
    submitted_or_eligible: int | None  # when this run began waiting: the submit, or the requeue
    pending_reason: str | None = None  # what this run waited for
    started: int | None = None
    ended: int | None = None
    nodes: str = ""
    end_state: str | None = None  # COMPLETED, FAILED, NODE_FAIL, PREEMPTED, REQUEUED, CANCELLED...
    exit_code: str | None = None
    end_reason: str | None = None

    @property
    def is_over(self) -> bool:
        return self.end_state is not None

    def waited_until(self, now: float) -> float | None:
        """When this run stopped waiting: its start, its end if it never started, now while it waits."""
        if self.started is not None:
            return self.started
        if self.ended is not None:
            return self.ended
        return None if self.is_over else now

    def ran_until(self, now: float) -> float | None:
        """When this run stopped running, now while it runs; None if it never started."""
        if self.started is None:
            return None
        if self.ended is not None:
            return self.ended
        return self.started if self.is_over else now


@dataclass(frozen=True)
class JobView:
    """The job as the tab shows it, at ``now``."""

    job_id: str
    cluster: str
    state: str
    summary: str  # JobStatus.describe(): the line the task log shows
    now: float
    name: str = ""
    flags: tuple[str, ...] = ()
    reason: str | None = None  # what it waits for while pending, why it ended once finished
    is_active: bool = False
    submitted: int | None = None
    held: bool = False  # pending until someone releases it
    expected_start: int | None = None  # the scheduler's estimate, only while pending and not held
    nodes: str = ""
    exit_code: str | None = None  # only once finished
    runs: tuple[Run, ...] = ()
    usage: JobUsage | None = None

    @property
    def current_run(self) -> Run | None:
        return self.runs[-1] if self.runs else None

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON."""
        return {
            **{key: value for key, value in asdict(self).items() if key not in ("flags", "runs", "usage")},
            "flags": list(self.flags),
            "runs": [asdict(run) for run in self.runs],
            "usage": self.usage.to_dict() if self.usage is not None else None,
        }


def build_job_view(
    job_id: str, cluster: str, live: list[dict[str, Any]], accounting: list[dict[str, Any]], now: float
) -> JobView:
    """The view of ``job_id`` from its live records (``GET /slurm/vX/job/{id}``: ``reply["jobs"]``,
    empty once it left the queue) and all its accounting records (``GET /slurmdb/vX/job/{id}``)."""
    live_record = _live_record(job_id, live)
    records = _accounting_records(job_id, accounting)
    latest = latest_runs(records)
    if live_record is not None:
        status = JobStatus.from_slurm(live_record)
    elif latest:
        status = JobStatus.from_slurmdb(latest[-1])
    else:
        return _unknown(job_id, cluster, now)
    runs = _runs(records, live_record)
    current = runs[-1]
    return JobView(
        job_id=job_id,
        cluster=cluster,
        name=status.name,
        state=status.state,
        flags=status.flags,
        reason=_reason(status, current),
        summary=status.describe(),
        is_active=status.is_active,
        submitted=min((run.submitted_or_eligible for run in runs if run.submitted_or_eligible), default=None),
        held=status.held,
        expected_start=status.expected_start,  # the live record's start_time, only while it means one
        nodes=current.nodes,
        exit_code=_exit_text(status),
        runs=runs,
        usage=JobUsage.from_accounting(job_id, latest),
        now=now,
    )


def _unknown(job_id: str, cluster: str, now: float) -> JobView:
    """Neither the live queue nor accounting has the job: purged, or accounting lags or is absent."""
    return JobView(
        job_id=job_id,
        cluster=cluster,
        state=NO_STATE,
        summary=f"Slurm job {job_id} is in neither the live queue nor accounting",
        now=now,  # nothing to cancel: not active
    )


# --- which records stand for the job ---------------------------------------------------------------


def _live_record(job_id: str, live: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The live record of ``job_id``; of an array or a het job asked by another ID, the one that
    speaks for it (see ``_lead``)."""
    matching = [record for record in live if live_record_id(record) == job_id]
    return matching[0] if matching else (_lead(live, JobStatus.from_slurm) if live else None)


def _accounting_records(job_id: str, accounting: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every run's record of ``job_id``; of an array or a het job asked by another ID, those of the
    record that speaks for it (see ``_lead``)."""
    matching = [record for record in accounting if accounting_record_id(record) == job_id]
    if matching or not accounting:
        return matching
    lead = accounting_record_id(_lead(latest_runs(accounting), JobStatus.from_slurmdb))
    return [record for record in accounting if accounting_record_id(record) == lead]


def _lead(records: list[dict[str, Any]], status_of: Callable[[dict[str, Any]], JobStatus]) -> dict[str, Any]:
    """The record that speaks for a whole array, as the waits decide (``arrays.lead_record``): an
    active task's while any is, else a failed one's."""
    statuses = [status_of(record) for record in records]
    lead = lead_record(statuses)
    return next(record for record, status in zip(records, statuses, strict=True) if status is lead)


# --- the runs ------------------------------------------------------------------------------------


def _runs(records: list[dict[str, Any]], live_record: dict[str, Any] | None) -> tuple[Run, ...]:
    by_number: dict[int, Run] = {}
    for record in records:
        run = _accounting_run(record)
        by_number[run.number] = run  # oldest first: a repeated restart_cnt keeps the newer record
    if live_record is not None:
        run = _live_run(live_record)
        by_number[run.number] = _merged(by_number.get(run.number), run)
    ordered = [by_number[key] for key in sorted(by_number)]
    runs: list[Run] = []
    for index, run in enumerate(ordered):
        later = ordered[index + 1] if index + 1 < len(ordered) else None
        if later is not None and not run.is_over:
            # A later run exists, so Slurm requeued this one; accounting has not written how yet.
            run = replace(run, end_state="REQUEUED", ended=run.ended or later.submitted_or_eligible)
        previous_end = runs[-1].ended if runs else None
        if previous_end and run.submitted_or_eligible and run.submitted_or_eligible < previous_end:
            # a live record caught while requeueing still carries the first submit time
            run = replace(run, submitted_or_eligible=previous_end)
        runs.append(run)
    return tuple(runs)


def _accounting_run(record: dict[str, Any]) -> Run:
    status = JobStatus.from_slurmdb(record)
    times = record.get("time")
    times = times if isinstance(times, dict) else {}
    nodes = _nodes(record.get("nodes"))
    end_state = "REQUEUED" if "REQUEUED" in (status.state, *status.flags) else _finished_state(status)
    return Run(
        number=status.restarts,
        # the submit, not ``eligible``: a BeginTime run waits from its submit until it may start
        submitted_or_eligible=_time(times.get("submission")) or _time(times.get("eligible")),
        pending_reason=status.reason,  # accounting keeps the reason the run waited for, even after it ran
        # a run cancelled while pending has no node, and its start reads NO_VAL or its end
        started=_time(times.get("start")) if nodes else None,
        ended=_time(times.get("end")) if end_state else None,
        nodes=nodes,
        end_state=end_state,
        exit_code=_exit_text(status),
        end_reason=INTERRUPTION_CAUSES.get(end_state or ""),
    )


def _live_run(record: dict[str, Any]) -> Run:
    status = JobStatus.from_slurm(record)
    pending = status.state == "PENDING"
    # a pending record, even one still COMPLETING its last run, names that run's node
    nodes = "" if pending else _nodes(record.get("nodes"))
    # while pending, start_time is the expected start; never-run records have no node
    started = _time(record.get("start_time")) if nodes else None
    end_state = _finished_state(status)
    ran = started is not None
    return Run(
        number=status.restarts,
        submitted_or_eligible=_time(record.get("submit_time")) or _time(record.get("eligible_time")),
        # the live state_reason is why it waits, and once a run that started ended, why it ended
        pending_reason=None if ran else status.reason,
        started=started,
        ended=_time(record.get("end_time")) if end_state else None,  # while active: the time limit's end
        nodes=nodes,
        end_state=end_state,
        exit_code=_exit_text(status),
        end_reason=status.reason if ran and end_state else INTERRUPTION_CAUSES.get(end_state or ""),
    )


def _merged(accounting_run: Run | None, live_run: Run) -> Run:
    """The live record's run, with what only accounting kept of it."""
    if accounting_run is None:
        return live_run
    return replace(
        live_run,
        # accounting's record of the run has its own submit; a live record caught mid-requeue does not
        submitted_or_eligible=accounting_run.submitted_or_eligible or live_run.submitted_or_eligible,
        pending_reason=live_run.pending_reason or accounting_run.pending_reason,
        exit_code=live_run.exit_code or (accounting_run.exit_code if live_run.is_over else None),
        end_reason=live_run.end_reason or (accounting_run.end_reason if live_run.is_over else None),
    )


# --- the values ---------------------------------------------------------------------------------


def _time(value: object) -> int | None:
    seconds = number(value)
    return seconds if seconds is not None and 0 < seconds <= _LAST_REAL_TIME else None


def _nodes(value: object) -> str:
    text = str(value or "")
    return "" if text in _NO_NODES else text


def _finished_state(status: JobStatus) -> str | None:
    return status.state if status.is_finished else None


def _exit_text(status: JobStatus) -> str | None:
    code = status.effective_exit_code if status.is_finished else None
    return str(code) if code is not None else None


def _reason(status: JobStatus, current: Run) -> str | None:
    if status.is_finished:
        return current.end_reason
    # a running job's reason in accounting is the one it waited for, no longer news
    return status.reason if status.state != "RUNNING" else None


# --- how the page and the timeline write times ---------------------------------------------------


def duration_text(seconds: float) -> str:
    """``45 s``, ``12 min``, ``2 h 5 min``, ``3 d 4 h``."""
    whole = max(0, round(seconds))
    if whole < 60:
        return f"{whole} s"
    minutes = whole // 60
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h" if hours else f"{days} d"


def utc_text(epoch: float, pattern: str = "%Y-%m-%d %H:%M:%S") -> str:
    return datetime.datetime.fromtimestamp(epoch, datetime.UTC).strftime(pattern)
