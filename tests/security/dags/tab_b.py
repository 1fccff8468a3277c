"""DAG B of the Slurm job tab's authorisation under the FAB auth manager: ``long`` runs until its
job is cancelled."""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG

from airflow_provider_slurmapi.operators.job import SlurmSubmitJobOperator

with DAG(dag_id="slurm_tab_b", start_date=datetime(2026, 1, 1), schedule=None, catchup=False):
    SlurmSubmitJobOperator(
        task_id="long",
        job={"environment": ["PATH=/usr/bin:/bin"], "current_working_directory": "/tmp", "name": "tab-long"},
        script="#!/bin/bash\nsleep 600\n",
        deferrable=True,
        poll_interval=2,
    )
