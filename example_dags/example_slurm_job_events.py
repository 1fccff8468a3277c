"""Evaluate every training run that completes on the cluster, whoever submitted it (Airflow 3.1+).

Researchers start training jobs with ``sbatch`` or from notebooks; this DAG runs when one named
``train-*`` ends COMPLETED, and its task reads which job it was, its exit code and what it used.
A DAG run may carry several jobs (those that ended in the same interval): handle each of them.
See docs/job-events.md ("React to jobs you did not submit").
"""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG, Asset, AssetWatcher, task

from airflow_provider_slurmapi.triggers.job_events import SlurmJobEventTrigger

training_runs = Asset(
    "slurm_training_runs_completed",
    watchers=[
        AssetWatcher(
            name="slurm_training_runs_completed",
            trigger=SlurmJobEventTrigger(
                slurm_conn_id="slurm_job_api_default",
                job_name="train-*",
                states=["COMPLETED"],
                poll_interval=30,
            ),
        )
    ],
)

with DAG(
    dag_id="example_slurm_job_events",
    start_date=datetime(2026, 1, 1),
    schedule=[training_runs],
    catchup=False,
    tags=["example", "slurm"],
):

    @task
    def evaluate(triggering_asset_events=None) -> list[str]:
        from airflow_provider_slurmapi.client.job_events import EndedJob

        evaluated = []
        for event in (triggering_asset_events or {}).get(training_runs, []):
            job = EndedJob.from_payload(event.extra["payload"])
            gpu_hours = job.usage.gpu_hours if job.usage else "unknown"
            print(f"evaluating job {job.status.job_id} ({job.status.name}) of {job.user}: {gpu_hours} GPU-hours")
            evaluated.append(job.status.job_id)
        return evaluated

    evaluate()
