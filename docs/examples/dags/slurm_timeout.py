"""A job that does not finish in time is cancelled and the task fails."""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG

from airflow_provider_slurmapi.operators.job import SlurmSubmitJobOperator

with DAG(dag_id="slurm_timeout", start_date=datetime(2026, 1, 1), schedule=None):
    # [START howto_operator_slurm_timeout]
    wait_for_dataset = SlurmSubmitJobOperator(
        task_id="wait_for_dataset",
        job={"name": "stage-check", "environment": {"DATASET": "/shared/datasets/corpus-v7"}},
        script='#!/bin/bash\nuntil [ -e "$DATASET/_READY" ]; do sleep 2; done\n',
        deferrable=True,
        poll_interval=1,
        timeout=6,  # seconds; the job is cancelled when they run out
    )
    # [END howto_operator_slurm_timeout]
