"""``DELETE job/{id}``: cancel a job, an array or one of its tasks, or send a running job a signal."""

from __future__ import annotations

import signal

from airflow_provider_slurmapi.emulator import replies
from airflow_provider_slurmapi.emulator.backend_api import SlurmAnswer, SlurmRequest
from airflow_provider_slurmapi.emulator.builtin.answers import bad_method
from airflow_provider_slurmapi.emulator.builtin.job_table import JobTable, parse_job_ref, state_order
from airflow_provider_slurmapi.emulator.job_model import State


def parse_signal(text: str) -> signal.Signals | None:
    """``?signal=``: a number or a name, with or without SIG; None if empty. Raises KeyError or ValueError."""
    text = text.upper().removeprefix("SIG")
    if not text:
        return None
    return signal.Signals(int(text)) if text.isdigit() else signal.Signals["SIG" + text]


def delete_job(table: JobTable, version: str, job_ref: str, request: SlurmRequest) -> SlurmAnswer:
    ref = parse_job_ref(job_ref)
    if ref is None:
        return bad_method(table.cluster, "slurmctld", version, "op_handler_job")
    try:
        sig = parse_signal((request.query.get("signal") or [""])[0])
    except (KeyError, ValueError):
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
        elif cancel:
            scheduler.cancel(job, sig or signal.SIGTERM, user)
        elif job.state is State.RUNNING and sig is not None:
            scheduler.send_signal(job, sig)
    return 200, replies.envelope("slurmctld", version, table.cluster, {"status": status})
