"""A first DAG on Cloud Composer: check the cluster with the environment's own identity, then run
one job on eight H100 GPUs of a node and show what it printed.

The connection slurm_job_api_default names the cluster and where job output goes (output_uri,
output_cluster_path); it holds no credentials, so the API is called as the environment's service
account.
"""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG, task

from airflow_provider_slurmapi.operators.job import SlurmSubmitJobOperator

GPU_SCRIPT = """#!/bin/bash
echo "job $SLURM_JOB_ID: CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES"
echo "GPUs visible: $(echo "$CUDA_VISIBLE_DEVICES" | awk -F, '{print NF}')"
if command -v nvidia-smi > /dev/null; then nvidia-smi -L; else echo "no nvidia-smi on this node"; fi
"""

with DAG(dag_id="slurm_first_gpu_job", start_date=datetime(2026, 1, 1), schedule=None):

    @task
    def check_cluster() -> str:
        from airflow_provider_slurmapi.hooks.slurm_job_api import SlurmJobApiHook

        report = SlurmJobApiHook().check_cluster()  # submits one probe job of a few seconds
        print(report.text())  # each finding: what was found, what follows, how to fix it
        if not report.ok:
            raise RuntimeError(f"the cluster cannot run the job yet: {report.summary()}")
        return report.summary()

    gpu_job = SlurmSubmitJobOperator(
        task_id="gpu_job",
        job={
            "name": "first-gpu-job",
            "partition": "a3",  # a partition whose nodes have GPUs (the check lists them)
            "tres_per_node": "gres/gpu:h100:8",  # eight H100 GPUs on the node
            "time_limit": 10,  # minutes
        },
        script=GPU_SCRIPT,
        deferrable=True,  # wait in the triggerer, not in a worker slot
        poll_interval=5,
        # output_uri and output_cluster_path come from the connection
    )

    check_cluster() >> gpu_job
