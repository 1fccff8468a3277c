"""A requeued job's history: accounting keeps one record per run under the same ID, and only the
last one tells the outcome; an earlier one tells why the job was requeued."""

from __future__ import annotations

from typing import Any

from airflow_provider_slurmapi.client.jobs import ACTIVE_STATES, NO_STATE, JobStatus
from airflow_provider_slurmapi.client.records import accounting_record_id, number


def latest_runs(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Accounting's job records with only the last run of each job.

    A requeued job (``scontrol requeue``, a node failure or a preemption with ``requeue``) has one
    record per run under the same ID, oldest first; the earlier ones end PENDING+REQUEUED,
    NODE_FAIL or PREEMPTED with a lower ``restart_cnt``, and only the last one tells the outcome.
    """
    latest: dict[str, dict[str, Any]] = {}
    for record in records:
        key = accounting_record_id(record)
        kept = latest.get(key)
        if kept is None or (number(record.get("restart_cnt")) or 0) >= (number(kept.get("restart_cnt")) or 0):
            latest[key] = record
    return list(latest.values())


def run_that_ended(records: list[dict[str, Any]], job_id: str, restarts: int) -> str | None:
    """How the run before restart ``restarts`` of ``job_id`` ended, from accounting's records:
    ``NODE_FAIL on node1``, ``PREEMPTED on node1``, ``REQUEUED on node1`` (``scontrol requeue``);
    None while accounting has no record of its end."""
    earlier = [
        r for r in records if accounting_record_id(r) == job_id and (number(r.get("restart_cnt")) or 0) < restarts
    ]
    if not earlier:
        return None
    run = max(earlier, key=lambda r: number(r.get("restart_cnt")) or 0)
    ended = JobStatus.from_slurmdb(run)
    if "REQUEUED" in (ended.state, *ended.flags):
        cause = "REQUEUED"
    elif ended.state not in (*ACTIVE_STATES, NO_STATE):
        cause = ended.state
    else:
        return None  # accounting has not caught up: the run still reads as going on
    nodes = run.get("nodes")
    return f"{cause} on {nodes}" if nodes and nodes != "None assigned" else cause


def describe_requeue(status: JobStatus, cause: str | None) -> str:
    """The log line for a job seen requeued: ``Slurm job 12 was requeued (restart 1): NODE_FAIL on node1;
    it will run again from the start``. ``cause``: how the run that ended ended, if accounting knows."""
    line = f"Slurm job {status.job_id} was requeued (restart {status.restarts})"
    if cause:
        line += f": {cause}"
    if status.held:
        return (
            f"{line}; it is held ({status.reason}) and runs again only once released (scontrol release {status.job_id})"
        )
    return f"{line}; it {'ran' if status.is_finished else 'will run'} again from the start"
