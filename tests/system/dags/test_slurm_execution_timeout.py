"""DAGs of the execution_timeout system test: a task whose ``execution_timeout`` passes while its
job runs (the job would sleep for ten minutes), waiting in the worker or deferred to the triggerer."""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow_provider_slurmapi.operators.job import SlurmSubmitJobOperator

try:
    from airflow.sdk import DAG
except ImportError:  # Airflow 2.x
    from airflow import DAG

EXECUTION_TIMEOUT = 20  # seconds
JOB_SECONDS = 600
MODES = {"test_slurm_execution_timeout_in_worker": False, "test_slurm_execution_timeout_deferred": True}

for dag_id, deferrable in MODES.items():
    with DAG(dag_id=dag_id, start_date=datetime(2026, 1, 1), schedule=None):
        SlurmSubmitJobOperator(
            task_id="train",
            job={"name": dag_id, "environment": ["PATH=/usr/bin:/bin"], "current_working_directory": "/tmp"},
            script=f"#!/bin/bash\necho training in job $SLURM_JOB_ID\nsleep {JOB_SECONDS}\n",
            deferrable=deferrable,
            poll_interval=2,
            execution_timeout=timedelta(seconds=EXECUTION_TIMEOUT),
        )
