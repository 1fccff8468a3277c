"""What the Celery deployment test runs: twenty deferred training jobs spread over two workers, and
one job waited for in its worker, retried once when that worker is lost.

``conf``: ``{"seconds": 40}``, how long each job runs.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG

from airflow_provider_slurmapi.operators.job import SlurmSubmitJobOperator

FLEET_TASKS = 20
POLL_INTERVAL = 2
JOB = {"environment": ["PATH=/usr/bin:/bin"], "current_working_directory": "/tmp"}
SCRIPT = "#!/bin/bash\nsleep {{ params.seconds }}\n"

with DAG(
    dag_id="slurm_celery_fleet",
    start_date=datetime(2026, 1, 1),
    schedule=None,
    catchup=False,
    params={"seconds": 40},
    max_active_tasks=FLEET_TASKS,
):
    SlurmSubmitJobOperator.partial(
        task_id="train", script=SCRIPT, deferrable=True, poll_interval=POLL_INTERVAL, timeout=3600
    ).expand(job=[{"name": f"celery-fleet-{i}", **JOB} for i in range(FLEET_TASKS)])

with DAG(
    dag_id="slurm_celery_worker_wait",
    start_date=datetime(2026, 1, 1),
    schedule=None,
    catchup=False,
    params={"seconds": 40},
):
    SlurmSubmitJobOperator(
        task_id="train",
        job={"name": "celery-worker-wait", **JOB},
        script=SCRIPT,
        deferrable=False,
        poll_interval=1,
        retries=1,
        retry_delay=timedelta(seconds=1),
    )
