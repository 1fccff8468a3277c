"""Submit a Slurm training job and wait for it in the triggerer (deferrable mode).

Run it offline against the emulator: see the README ("Run the example").
Trigger with a config to try other outcomes, e.g. ``{"exit_code": 3}`` makes the job fail.
"""

from __future__ import annotations

from datetime import datetime

from airflow_provider_slurmapi.operators.job import SlurmSubmitJobOperator

try:
    from airflow.sdk import DAG
except ImportError:  # Airflow 2.x
    from airflow import DAG

with DAG(
    dag_id="example_slurm_submit_job",
    start_date=datetime(2026, 1, 1),
    schedule=None,
    catchup=False,
    params={"epochs": 3, "seconds_per_epoch": 1, "exit_code": 0},
    tags=["example", "slurm"],
) as dag:
    train = SlurmSubmitJobOperator(
        task_id="train",
        slurm_conn_id="slurm_job_api_default",
        job={
            "name": "example-train",
            "minimum_nodes": 1,
            "tasks_per_node": 1,
            "time_limit": {"set": True, "number": 30},
            "environment": ["PATH=/usr/local/bin:/usr/bin:/bin", "EPOCHS={{ params.epochs }}"],
            "current_working_directory": "/tmp",
        },
        script="scripts/train.sbatch",  # rendered with Jinja, like any template file next to the DAG
        deferrable=True,
        poll_interval=2,
        timeout=3600,
    )
