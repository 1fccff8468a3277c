"""``POST job/submit``: a job description read as slurmrestd reads it, queued on the scheduler."""

from __future__ import annotations

from typing import Any

from airflow_provider_slurmapi.emulator import replies
from airflow_provider_slurmapi.emulator.backend_api import SlurmAnswer, SlurmRequest
from airflow_provider_slurmapi.emulator.builtin.answers import slurm_error
from airflow_provider_slurmapi.emulator.builtin.job_table import JobTable
from airflow_provider_slurmapi.emulator.job_desc import SubmitError, new_job


def submit(table: JobTable, version: str, request: SlurmRequest) -> SlurmAnswer:
    scheduler = table.scheduler
    try:
        job, warnings = new_job(request.body, request.principal, scheduler.next_job_id, table.slurm_conf)
    except SubmitError as exc:
        return slurm_error(
            exc.status, exc.number, exc.error, exc.description, exc.source, "slurmctld", version, table.cluster
        )
    scheduler.submit(job)
    fields: dict[str, Any] = {"job_id": job.job_id, "step_id": "batch", "job_submit_user_msg": ""}
    if any(w["description"].startswith("Expected OpenAPI type=integer") for w in warnings):
        # real slurmrestd 24.11 submits the job but leaves job_id out of the reply in this case
        # (fixture submit_error_wrong_type.json)
        fields = {}
    return 200, replies.envelope("slurmctld", version, table.cluster, fields, warnings=warnings)
