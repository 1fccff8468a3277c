"""SlurmJobApiHook in tasks of your own."""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG, task

from airflow_provider_slurmapi.operators.job import SlurmSubmitJobOperator

with DAG(dag_id="slurm_hook", start_date=datetime(2026, 1, 1), schedule=None):
    train = SlurmSubmitJobOperator(
        task_id="train",
        job={"name": "hook-demo"},
        script="#!/bin/bash\nsrun sleep 1\n",
        poll_interval=1,
    )

    # [START howto_hook_slurm_job_api]
    @task
    def job_summary(job_id: str) -> dict:
        from airflow_provider_slurmapi.hooks.slurm_job_api import SlurmJobApiHook

        hook = SlurmJobApiHook()  # connection slurm_job_api_default
        status = hook.get_job(job_id)  # the live queue, or accounting once the job has left it
        exit_code = status.effective_exit_code
        return {
            "state": status.state,
            "reason": status.reason,
            "exit_code": exit_code.return_code if exit_code else None,
            "source": status.source,  # "slurm" (live queue) or "slurmdb" (accounting)
        }

    @task
    def pending_jobs() -> int:
        from airflow_provider_slurmapi.hooks.slurm_job_api import SlurmJobApiHook

        hook = SlurmJobApiHook()
        reply = hook.call("GET", f"/slurm/{hook.api_version}/jobs/")  # any Slurm REST call
        return sum(1 for job in reply["jobs"] if "PENDING" in job["job_state"])

    # [END howto_hook_slurm_job_api]

    job_summary(train.output) >> pending_jobs()
