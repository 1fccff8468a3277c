"""Twelve deferred training jobs at once: what the multi-triggerer deployment test runs.

``conf``: ``{"seconds": 60}``, how long each job runs.
"""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG

from airflow_provider_slurmapi.operators.job import SlurmSubmitJobOperator

TASKS = 12
POLL_INTERVAL = 2

with DAG(
    dag_id="slurm_fleet",
    start_date=datetime(2026, 1, 1),
    schedule=None,
    catchup=False,
    params={"seconds": 60},
    max_active_tasks=TASKS,
) as dag:
    SlurmSubmitJobOperator.partial(
        task_id="train",
        script="#!/bin/bash\nsleep {{ params.seconds }}\n",
        deferrable=True,
        poll_interval=POLL_INTERVAL,
        timeout=3600,
    ).expand(
        job=[
            {"name": f"fleet-{i}", "environment": ["PATH=/usr/bin:/bin"], "current_working_directory": "/tmp"}
            for i in range(TASKS)
        ]
    )
