"""Run a sweep in the background, ask it to checkpoint, then stop it."""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG

from airflow_provider_slurmapi.operators.job import SlurmCancelJobOperator, SlurmSubmitJobOperator

# A stand-in for "srun python sweep.py", which writes a checkpoint on SIGUSR1 and goes on.
# (The emulator signals the batch script too; Slurm signals only the steps.)
SWEEP = """#!/bin/bash
trap 'echo "checkpoint requested"' USR1
while true; do sleep 1; done
"""

with DAG(dag_id="slurm_cancel", start_date=datetime(2026, 1, 1), schedule=None):
    sweep = SlurmSubmitJobOperator(
        task_id="sweep",
        job={"name": "hparam-sweep", "time_limit": 240},
        script=SWEEP,
        wait_for_completion=False,  # runs in the background while the DAG goes on
    )
    evaluate = SlurmSubmitJobOperator(
        task_id="evaluate",
        job={"name": "sweep-eval"},
        script="#!/bin/bash\nsrun sleep 2\n",
        poll_interval=1,
    )
    checkpoint = SlurmCancelJobOperator(
        task_id="checkpoint",
        job_id=sweep.output,  # the job ID, from XCom
        signal="USR1",  # delivered to the job's steps; the job keeps running
        wait_for_completion=False,
    )
    stop = SlurmCancelJobOperator(
        task_id="stop",
        job_id=sweep.output,
        poll_interval=1,
        timeout=300,  # fail if the job has not stopped 5 minutes after the cancel
    )

    sweep >> evaluate >> checkpoint >> stop
