"""slurmctld's answers about its queue: one job (``job/{id}``), the job list (``jobs``) and the
bulk states (``jobs/state``)."""

from __future__ import annotations

import datetime
from typing import Any

from airflow_provider_slurmapi.emulator import replies
from airflow_provider_slurmapi.emulator.backend_api import SlurmAnswer, SlurmRequest
from airflow_provider_slurmapi.emulator.builtin.answers import bad_method, slurm_error, unparsable_query
from airflow_provider_slurmapi.emulator.builtin.job_table import JobTable, parse_job_ref, state_order
from airflow_provider_slurmapi.emulator.job_model import Job, epoch_seconds


def get_job(table: JobTable, version: str, job_ref: str, principal: str) -> SlurmAnswer:
    ref = parse_job_ref(job_ref)
    if ref is None:
        return bad_method(table.cluster, "slurmctld", version, "op_handler_job")
    # real slurmrestd ignores a task suffix here: 123_4 answers like 123 (the whole array)
    jobs = [j for j in table.records(ref[0]) if table.scheduler.in_queue(j) and table.visible(j, principal)]
    fields: dict[str, Any] = {
        "jobs": [replies.slurm_job(j, table.cluster) for j in jobs],
        "last_backfill": replies.number(0),
        "last_update": replies.number(table.scheduler.last_change if jobs else 0),
    }
    if not jobs:
        return slurm_error(
            404,
            2017,
            "Invalid job id specified",
            f"Unable to query JobId={job_ref}",
            "_handle_job_get",
            "slurmctld",
            version,
            table.cluster,
            **fields,
        )
    return 200, replies.envelope("slurmctld", version, table.cluster, fields)


def list_jobs(table: JobTable, version: str, request: SlurmRequest) -> SlurmAnswer:
    warnings = []
    jobs = [j for j in table.queue() if table.visible(j, request.principal)]
    last_update = epoch_seconds()  # when the answer was made, as slurmctld stamps it
    since = (request.query.get("update_time") or [""])[0]
    if since.isdigit() and table.scheduler.last_change < int(since):
        # all or nothing, like real slurmctld, which counts a change in the second asked for
        # as a change (a job changed in the same second as the last answer is not missed)
        stamp = datetime.datetime.fromtimestamp(int(since)).strftime("%Y-%m-%dT%H:%M:%S")
        warnings.append(replies.warning(f"No job changes since update_time[{since}]={stamp}", "op_handler_jobs"))
        jobs, last_update = [], 0
    fields = {
        "jobs": [replies.slurm_job(j, table.cluster) for j in jobs],
        "last_backfill": replies.number(0),
        "last_update": replies.number(last_update),
    }
    return 200, replies.envelope("slurmctld", version, table.cluster, fields, warnings=warnings)


def jobs_state(table: JobTable, version: str, request: SlurmRequest) -> SlurmAnswer:
    raw_ids = [part.partition("=")[2] for part in request.raw_query.split("&") if part.partition("=")[0] == "job_id"]
    if any("," in raw for raw in raw_ids):
        return unparsable_query(table.cluster, "slurmctld", version, "op_handler_jobs_state")
    refs = request.query.get("job_id", [])
    if refs:
        selected: dict[int, Job] = {}
        for raw in refs:
            ref = parse_job_ref(raw)
            if ref is None:
                return bad_method(table.cluster, "slurmctld", version, "op_handler_jobs_state")
            # a task's record; for a task not started yet, the whole meta record
            found = table.named(*ref)
            # in the order asked for, like real slurmctld
            selected.update((j.job_id, j) for j in state_order(found) if table.scheduler.in_queue(j))
        jobs = list(selected.values())
    else:
        jobs = table.queue()
    entries = [{"job_id": name, "state": replies.state_list(j)} for j in jobs for name in j.state_ids]
    return 200, replies.envelope("slurmctld", version, table.cluster, {"jobs": entries})
