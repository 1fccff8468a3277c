"""DAGs used only by the system tests: the worker-waiting mode, the /slurmdb read-back, a
rescheduling sensor whose job is lost, a job whose node fails, retried by Airflow, and a batch
script too large for the request."""

from __future__ import annotations

import os
from datetime import datetime, timedelta

from airflow_provider_slurmapi.operators.job import SlurmSubmitJobOperator
from airflow_provider_slurmapi.sensors.job import SlurmJobSensor

try:
    from airflow.sdk import DAG, task
except ImportError:  # Airflow 2.x
    from airflow import DAG
    from airflow.decorators import task

JOB = {"name": "system-test", "environment": ["PATH=/usr/bin:/bin"], "current_working_directory": "/tmp"}

with DAG(
    dag_id="test_slurm_worker_wait",
    start_date=datetime(2026, 1, 1),
    schedule=None,
    params={"exit_code": 0},
):
    SlurmSubmitJobOperator(
        task_id="train",
        job=JOB,
        script="#!/bin/bash\necho waiting in the worker\nsleep 1\nexit {{ params.exit_code }}\n",
        deferrable=False,
        poll_interval=0.5,
    )

with DAG(dag_id="test_slurm_accounting_readback", start_date=datetime(2026, 1, 1), schedule=None):
    # The job ends after 1 s and leaves the live queue MinJobAge later; the trigger's second read
    # comes after that (SLURM_TEST_READBACK_POLL), so it finds the job only in accounting.
    SlurmSubmitJobOperator(
        task_id="train",
        job=JOB,
        script="#!/bin/bash\nsleep 1\n",
        deferrable=True,
        poll_interval=int(os.environ.get("SLURM_TEST_READBACK_POLL", "5")),
    )

with DAG(dag_id="test_slurm_lost_job_reschedule", start_date=datetime(2026, 1, 1), schedule=None):
    # A job that exists nowhere: each poke is a new sensor instance, so only the time kept across
    # reschedules can end the wait after lost_grace; without it, only the sensor's timeout would.
    SlurmJobSensor(
        task_id="watch",
        job_id="999999",
        mode="reschedule",
        poke_interval=2,
        lost_grace=8,
        timeout=240,
    )

with DAG(dag_id="test_slurm_interrupted_retry", start_date=datetime(2026, 1, 1), schedule=None):
    # The test fails the node under the first try's job (submitted with requeue false, so Slurm
    # ends it NODE_FAIL): the task fails, and Airflow's retry submits a new job, which completes.
    SlurmSubmitJobOperator(
        task_id="train",
        job={**JOB, "name": "interrupted-retry", "requeue": False},
        script="#!/bin/bash\necho training in job $SLURM_JOB_ID\nsleep 6\necho done\n",
        deferrable=True,
        poll_interval=1,
        retries=1,
        retry_delay=timedelta(seconds=0),
    )

# A batch script of about 3 MB (past the request's 1 MB): staged under the output location and run
# through a wrapper. Its data lines are in a heredoc; the job prints their length and checksum.
STAGED_LINES = 46_875  # of 64 characters: 3,046,874 characters of data in all

with DAG(dag_id="test_slurm_staged_script", start_date=datetime(2026, 1, 1), schedule=None):

    @task.slurm(job={"name": "staged", "current_working_directory": "/tmp"}, deferrable=False, poll_interval=1)
    def big_script() -> str:
        data = "\n".join(f"{line:016x}" * 4 for line in range(STAGED_LINES))
        return (
            "#!/bin/bash\n#SBATCH --comment=staged\n"
            f"data=$(cat <<'DATA'\n{data}\nDATA\n)\n"
            'echo "staged script ran: $(printf %s "$data" | wc -c) characters of data,'
            ' sha256 $(printf %s "$data" | sha256sum | cut -c1-16)"\n'
        )

    big_script()
