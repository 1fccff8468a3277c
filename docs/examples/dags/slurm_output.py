"""Job output and usage: the end of the job's output in the task log, what the job used in XCom,
and both read through the hook in a task of your own.

The connection holds output_uri and output_cluster_path: where Airflow reads the job's output, and
where the cluster's nodes see that same place.
"""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG, task

from airflow_provider_slurmapi.operators.job import SlurmSubmitJobOperator

with DAG(
    dag_id="slurm_output",
    start_date=datetime(2026, 1, 1),
    schedule=None,
    params={"epochs": 3},
):
    # [START howto_operator_slurm_output]
    train = SlurmSubmitJobOperator(
        task_id="train",
        job={
            "name": "llm-sft",
            "environment": {"PATH": "/usr/local/bin:/usr/bin:/bin", "EPOCHS": "{{ params.epochs }}"},
        },
        script="scripts/train.sbatch",
        deferrable=True,
        poll_interval=2,
        # output_uri and output_cluster_path come from the connection; these set what the log shows
        output_tail_lines=20,  # the last 20 lines of stdout and the last 20 of stderr
        output_wait=60,  # seconds to wait for the files to appear in the bucket once the job ended
    )
    # [END howto_operator_slurm_output]

    # [START howto_operator_slurm_usage]
    @task
    def report_usage(ti=None) -> str:
        usage = ti.xcom_pull(task_ids="train", key="usage")  # None without accounting
        if usage is None:
            return "usage unknown"
        return (
            f"job {usage['job_id']}: {usage['elapsed_seconds']} s on {usage['nodes']} node(s), "
            f"{usage['cpus']} CPU(s), {usage['gpus']} GPU(s), {usage['gpu_hours']} GPU-hours"
        )

    # [END howto_operator_slurm_usage]

    # [START howto_hook_slurm_output]
    @task
    def last_epoch(job_id: str) -> dict:
        from airflow_provider_slurmapi.hooks.slurm_job_api import SlurmJobApiHook

        hook = SlurmJobApiHook()  # its connection names output_uri and output_cluster_path
        usage = hook.get_job_usage(job_id)  # a JobUsage, or None without accounting
        tails = hook.read_job_output(job_id, tail_lines=5, wait=10)  # one OutputTail per file
        stdout = next(tail for tail in tails if tail.stream in ("stdout", "stdout+stderr"))
        if not stdout.text:
            raise ValueError(f"no output to check: {stdout.problem}")
        return {
            "last_line": stdout.text.splitlines()[-1],
            "location": stdout.location,  # gs://... of the whole file
            "bytes": stdout.size,
            "cpus": usage.cpus if usage else None,
        }

    # [END howto_hook_slurm_output]

    train >> report_usage()
    last_epoch(train.output)
