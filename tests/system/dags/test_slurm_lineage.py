"""The DAG of the lineage system test: a job that exits 0 and one that exits 3, each submitted by
the operator and then watched by a sensor, all in one run."""

from __future__ import annotations

from datetime import datetime

from airflow_provider_slurmapi.operators.job import SlurmSubmitJobOperator
from airflow_provider_slurmapi.sensors.job import SlurmJobSensor

try:
    from airflow.sdk import DAG
except ImportError:  # Airflow 2.x
    from airflow import DAG

ENVIRONMENT = {"environment": ["PATH=/usr/bin:/bin"], "current_working_directory": "/tmp"}

with DAG(dag_id="test_slurm_lineage", start_date=datetime(2026, 1, 1), schedule=None):
    for name, exit_code in (("ok", 0), ("fail", 3)):
        submit = SlurmSubmitJobOperator(
            task_id=f"submit_{name}",
            job={"name": f"lineage-{name}", **ENVIRONMENT},
            script=f"#!/bin/bash\necho hi\nsleep 1\nexit {exit_code}\n",
            deferrable=False,
            poll_interval=1,
        )
        watch = SlurmJobSensor(
            task_id=f"watch_{name}",
            # pushed right after the submit, so there even when the submit task fails
            job_id=f"{{{{ ti.xcom_pull(task_ids='submit_{name}', key='job_id') }}}}",
            deferrable=False,
            poke_interval=1,
            timeout=60,
            trigger_rule="all_done",
        )
        submit >> watch
