"""Submit without waiting, watch the job with a sensor, and cancel a second job.

``submit`` returns as soon as Slurm accepted the job; ``watch`` waits for it to finish (deferred
to the triggerer); meanwhile ``submit_long`` starts a job that ``cancel`` then stops.
"""

from __future__ import annotations

from datetime import datetime

from airflow_provider_slurmapi.operators.job import SlurmCancelJobOperator, SlurmSubmitJobOperator
from airflow_provider_slurmapi.sensors.job import SlurmJobSensor

try:
    from airflow.sdk import DAG
except ImportError:  # Airflow 2.x
    from airflow import DAG

JOB = {
    "minimum_nodes": 1,
    "environment": ["PATH=/usr/local/bin:/usr/bin:/bin"],
    "current_working_directory": "/tmp",
    "time_limit": 30,
}

with DAG(
    dag_id="example_slurm_sensor_and_cancel",
    start_date=datetime(2026, 1, 1),
    schedule=None,
    catchup=False,
    tags=["example", "slurm"],
) as dag:
    submit = SlurmSubmitJobOperator(
        task_id="submit",
        job={**JOB, "name": "example-preprocess"},
        script="#!/bin/bash\necho preprocessing\nsleep 3\necho done\n",
        wait_for_completion=False,
    )
    watch = SlurmJobSensor(
        task_id="watch",
        job_id="{{ ti.xcom_pull(task_ids='submit') }}",
        deferrable=True,
        poke_interval=2,
        timeout=600,
    )
    submit_long = SlurmSubmitJobOperator(
        task_id="submit_long",
        job={**JOB, "name": "example-long-running"},
        script="#!/bin/bash\necho 'running for an hour'\nsleep 3600\n",
        wait_for_completion=False,
    )
    cancel = SlurmCancelJobOperator(
        task_id="cancel",
        job_id="{{ ti.xcom_pull(task_ids='submit_long') }}",
        poll_interval=1,
        timeout=120,
    )
    submit >> watch
    submit_long >> cancel
