"""``DELETE job/{id}``: cancel a job, an array or one of its tasks, or send a running job a signal."""

from __future__ import annotations

import signal

from airflow_provider_slurmapi.emulator import replies
from airflow_provider_slurmapi.emulator.backend_api import SlurmAnswer, SlurmRequest
from airflow_provider_slurmapi.emulator.builtin.answers import bad_method
from airflow_provider_slurmapi.emulator.builtin.job_table import JobTable, parse_job_ref, state_order
from airflow_provider_slurmapi.emulator.job_model import State, parse_signal

# the flags ?flags= takes (Slurm's warn flags); only BATCH_JOB changes what the emulator does
_KILL_FLAGS = frozenset(
    {
        "BATCH_JOB", "ARRAY_TASK", "FULL_STEPS_ONLY", "FULL_JOB", "FEDERATION_REQUEUE", "HURRY", "OUT_OF_MEMORY",
        "NO_SIBLING_JOBS", "RESERVATION_JOB", "VERBOSE", "CRON_JOBS", "WARNING_SENT",
    }
)  # fmt: skip


def _query_signal(request: SlurmRequest) -> int | None:
    """``?signal=``: a number or a name, with or without SIG; None if empty. Raises ValueError."""
    text = (request.query.get("signal") or [""])[0]
    return parse_signal(text) if text.strip() else None


def _query_flags(request: SlurmRequest) -> set[str]:
    """``?flags=``, repeated or comma-separated. Raises ValueError for a flag Slurm does not know."""
    flags = {flag.strip().upper() for value in request.query.get("flags") or [] for flag in value.split(",")}
    flags.discard("")
    if not flags <= _KILL_FLAGS:
        raise ValueError(f"unknown flags {sorted(flags - _KILL_FLAGS)}")
    return flags


def delete_job(table: JobTable, version: str, job_ref: str, request: SlurmRequest) -> SlurmAnswer:
    ref = parse_job_ref(job_ref)
    if ref is None:
        return bad_method(table.cluster, "slurmctld", version, "op_handler_job")
    try:
        sig = _query_signal(request)
        batch_only = "BATCH_JOB" in _query_flags(request)
    except ValueError:
        return bad_method(table.cluster, "slurmctld", version, "op_handler_job")
    job_id, task = ref
    scheduler = table.scheduler
    jobs = [j for j in table.named(job_id, task) if scheduler.in_queue(j)]
    if not jobs:
        status = [replies.delete_status(job_ref, None, 2017, "Invalid job id specified")]
        return 200, replies.envelope("slurmctld", version, table.cluster, {"status": status})
    user = request.principal.split("@")[0]
    cancel = sig in (None, signal.SIGKILL, signal.SIGTERM)
    meta = jobs[0] if task is not None and jobs[0].is_array_meta and not jobs[0].terminal else None
    if cancel and meta is not None and task is not None and meta.pending_tasks != [task]:
        # a task not started yet just leaves the meta record, without a record of its own
        scheduler.drop_pending_task(meta, task)
        return 200, replies.envelope("slurmctld", version, table.cluster, {"status": []})
    status = []
    for job in state_order(jobs):
        if job.terminal:  # one entry per record already over; the others are cancelled
            step_id = str(job.job_id) if job.array_task_id is None else f"{job.array_job_id}_{job.array_task_id}"
            status.append(replies.delete_status(step_id, job.job_id, 2021, "Job/step already completing or completed"))
        elif batch_only and job.state is State.RUNNING:
            # scancel --batch: even KILL (the default) only signals the batch shell, as slurmctld does
            scheduler.send_signal(job, sig or signal.SIGKILL, batch_only=True)
        elif cancel:
            scheduler.cancel(job, signal.Signals(sig or signal.SIGTERM), user)
        elif job.state is State.RUNNING and sig is not None:
            scheduler.send_signal(job, sig)
    return 200, replies.envelope("slurmctld", version, table.cluster, {"status": status})
