"""Deferred tasks whose Slurm jobs the "Slurm job" tab shows: ``train`` waits for its begin time
(pending, reason BeginTime, an expected start), runs, and completes; ``long`` runs until it is
cancelled from the tab; ``shard`` is mapped, a job per map index."""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG

from airflow_provider_slurmapi.operators.job import SlurmSubmitJobOperator

JOB = {"environment": ["PATH=/usr/bin:/bin"], "current_working_directory": "/tmp"}
# rendered when the task runs (native: an int), so the job waits 45 s whenever the run starts
BEGIN_IN_45_S = {"set": True, "number": "{{ macros.time.time() | int + 45 }}"}

with DAG(
    dag_id="slurm_job_tab",
    start_date=datetime(2026, 1, 1),
    schedule=None,
    catchup=False,
    render_template_as_native_obj=True,
):
    SlurmSubmitJobOperator(
        task_id="train",
        job={**JOB, "name": "tab-train", "begin_time": BEGIN_IN_45_S},
        script='#!/bin/bash\nfor i in $(seq 1 30); do echo "step $i"; sleep 1; done\n',
        deferrable=True,
        poll_interval=2,
        live_output_period=2,  # the tab shows the pieces published while it runs
    )
    SlurmSubmitJobOperator(
        task_id="long",
        job={**JOB, "name": "tab-long"},
        script="#!/bin/bash\nsleep 600\n",
        deferrable=True,
        poll_interval=2,
    )
    SlurmSubmitJobOperator.partial(
        task_id="shard", job={**JOB, "name": "tab-shard"}, deferrable=True, poll_interval=2
    ).expand(script=["#!/bin/bash\necho shard 0\n", "#!/bin/bash\necho shard 1\n"])
