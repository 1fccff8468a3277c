"""Submit a training job, wait for it in the triggerer, then report its outcome."""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG, task

from airflow_provider_slurmapi.operators.job import SlurmSubmitJobOperator

with DAG(
    dag_id="slurm_train",
    start_date=datetime(2026, 1, 1),
    schedule=None,
    params={"epochs": 3},
):
    train = SlurmSubmitJobOperator(
        task_id="train",
        job={
            "name": "llm-sft",
            "minimum_nodes": 2,
            "tasks_per_node": 8,
            "time_limit": 120,  # minutes
            "environment": {
                "PATH": "/usr/local/bin:/usr/bin:/bin",
                "EPOCHS": "{{ params.epochs }}",
            },
        },
        script="scripts/train.sbatch",  # a file next to the DAG, rendered with Jinja
        deferrable=True,  # wait in the triggerer, not in a worker slot
        poll_interval=2,
    )

    @task
    def report(job_id: str, ti=None) -> str:
        state = ti.xcom_pull(task_ids="train", key="job_state")
        exit_code = ti.xcom_pull(task_ids="train", key="exit_code")
        return f"job {job_id}: {state}, exit code {exit_code}"

    report(train.output)
