"""One deferred training job, for the Airflow 2.11 deployment test.

``conf``: ``{"seconds": 40}``, how long the job runs.
"""

from __future__ import annotations

from datetime import datetime

from airflow import DAG

from airflow_provider_slurmapi.operators.job import SlurmSubmitJobOperator

with DAG(
    dag_id="slurm_airflow2",
    start_date=datetime(2026, 1, 1),
    schedule=None,
    catchup=False,
    params={"seconds": 40},
):
    SlurmSubmitJobOperator(
        task_id="train",
        job={"name": "airflow2-deferred", "environment": ["PATH=/usr/bin:/bin"], "current_working_directory": "/tmp"},
        script="#!/bin/bash\nsleep {{ params.seconds }}\n",
        deferrable=True,
        poll_interval=2,
    )
