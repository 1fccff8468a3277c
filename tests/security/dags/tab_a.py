"""DAG A of the Slurm job tab's security deployment: ``long`` runs until its job is cancelled, and
would be retried; the other tasks are what a DAG author can make a tab name: an output location
of the task's own at the api-server's files (``reads_api_server_files``), a job submitted
elsewhere that a sensor watches (``watch``), and a task that pushes another's job as its own
(``forged``)."""

from __future__ import annotations

import os
from datetime import datetime, timedelta

from airflow.sdk import DAG, task

from airflow_provider_slurmapi.operators.job import SlurmSubmitJobOperator
from airflow_provider_slurmapi.sensors.job import SlurmJobSensor

JOB = {"environment": ["PATH=/usr/bin:/bin"], "current_working_directory": "/tmp"}
HOME = os.environ.get("AIRFLOW_HOME", "/nonexistent")  # the deployment's: the api-server's airflow.cfg is there
CLUSTER_SIDE = f"{HOME}/cluster-side"  # where the job writes the file it names airflow.cfg

with DAG(dag_id="slurm_tab_a", start_date=datetime(2026, 1, 1), schedule=None, catchup=False):
    SlurmSubmitJobOperator(
        task_id="long",
        job={**JOB, "name": "tab-long"},
        script="#!/bin/bash\nsleep 600\n",
        deferrable=True,
        poll_interval=2,
        retries=2,
        retry_delay=timedelta(seconds=1),
    )
    SlurmSubmitJobOperator(
        task_id="reads_api_server_files",
        job={**JOB, "name": "tab-cfg", "standard_output": f"{CLUSTER_SIDE}/airflow.cfg"},
        script="#!/bin/bash\necho hello\n",
        output_uri=f"file://{HOME}",
        output_cluster_path=CLUSTER_SIDE,
        output_wait=0,
        poll_interval=1,  # in a worker: a deferred job this short may race Airflow's executor events
    )

    @task
    def stranger() -> str:
        """A job of someone else's: submitted without the task run's key."""
        from airflow_provider_slurmapi.hooks.slurm_job_api import SlurmJobApiHook

        return str(SlurmJobApiHook().submit_job({**JOB, "name": "tab-stranger"}, "#!/bin/bash\nsleep 600\n"))

    @task
    def forged(job_id: str, ti=None) -> None:  # type: ignore[no-untyped-def]
        """Pushes another's job as the task's own, as the operators push theirs."""
        ti.xcom_push(key="job_id", value=job_id)
        ti.xcom_push(key="slurm_connection", value={"connection": {"slurm_conn_id": "slurm_job_api_default"}})

    others = stranger()
    forged(others)
    SlurmJobSensor(task_id="watch", job_id=others, deferrable=True, poke_interval=2)
