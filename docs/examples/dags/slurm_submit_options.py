"""SlurmSubmitJobOperator: waiting in a worker, and settings for long training runs."""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG

from airflow_provider_slurmapi.operators.job import SlurmSubmitJobOperator

# [START howto_operator_slurm_worker_mode]
EVALUATE = """#!/bin/bash
set -euo pipefail
srun --ntasks=1 sleep 1  # stand-in for: srun python evaluate.py --checkpoint latest
"""

with DAG(dag_id="slurm_submit_options", start_date=datetime(2026, 1, 1), schedule=None):
    evaluate = SlurmSubmitJobOperator(
        task_id="evaluate",
        job={"name": "llm-eval", "time_limit": 30},
        script=EVALUATE,  # the script's text, not a file name
        deferrable=False,  # poll from the worker, which keeps its slot while the job runs
        poll_interval=1,
    )
    # [END howto_operator_slurm_worker_mode]

    # [START howto_operator_slurm_long_runs]
    fine_tune = SlurmSubmitJobOperator(
        task_id="fine_tune",
        job={
            "name": "llm-fine-tune",
            "time_limit": 600,
            "environment": {"PATH": "/usr/local/bin:/usr/bin:/bin", "EPOCHS": "1"},
        },
        script="scripts/train.sbatch",
        deferrable=True,
        timeout=8 * 3600,  # fail, and cancel the job, after 8 hours of waiting
        execution_timeout=timedelta(hours=10),  # enforced while deferred, too
        retries=2,  # a retry watches the same job again instead of submitting another
        retry_delay=timedelta(minutes=1),
        reuse_completed_job="on_retry",  # the default
        cancel_on_kill=True,  # the default: marking the task failed cancels the job
    )
    # [END howto_operator_slurm_long_runs]

    evaluate >> fine_tune
