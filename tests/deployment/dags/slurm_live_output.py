"""A deferred task whose Slurm job prints a line a second for 30 s, shown in the task log while it
runs (live output): what the live-output browser test opens in the UI."""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG

from airflow_provider_slurmapi.operators.job import SlurmSubmitJobOperator

SCRIPT = """#!/bin/bash
for i in $(seq 1 30); do echo "step $i"; sleep 1; done
"""

with DAG(dag_id="slurm_live_output", start_date=datetime(2026, 1, 1), schedule=None, catchup=False):
    SlurmSubmitJobOperator(
        task_id="train",
        job={"name": "live-train", "environment": ["PATH=/usr/bin:/bin"], "current_working_directory": "/tmp"},
        script=SCRIPT,
        deferrable=True,
        poll_interval=2,
        live_output=True,
        live_output_period=2,
    )
