"""Two DAGs that start when jobs end on the cluster, whoever submitted them (Airflow 3.1+)."""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG, Asset, AssetWatcher, task

from airflow_provider_slurmapi.client.job_events import EndedJob
from airflow_provider_slurmapi.triggers.job_events import SlurmJobEventTrigger

# [START howto_job_event_watchers]
# Each completed run of the vision team's sweeps (job names "sft-*", their comment says the team)
finished_sweeps = Asset(
    "vision_sweeps_completed",
    watchers=[
        AssetWatcher(
            name="vision_sweeps_completed",
            trigger=SlurmJobEventTrigger(
                job_name="sft-*", comment_contains="team=vision", states=["COMPLETED"], poll_interval=60
            ),
        )
    ],
)
# Every job of the a3 partition that failed, ran out of time or memory, whoever ran it
failed_gpu_jobs = Asset(
    "a3_jobs_failed",
    watchers=[
        AssetWatcher(
            name="a3_jobs_failed",
            trigger=SlurmJobEventTrigger(partition="a3", states=["FAILED", "TIMEOUT", "OUT_OF_MEMORY"]),
        )
    ],
)
# [END howto_job_event_watchers]

# [START howto_job_event_payload]
with DAG(dag_id="slurm_job_events", start_date=datetime(2026, 1, 1), schedule=[finished_sweeps], catchup=False):

    @task
    def evaluate_checkpoints(triggering_asset_events=None) -> list[str]:
        """One run may carry several jobs: those that ended in the same interval."""
        evaluated = []
        for event in (triggering_asset_events or {}).get(finished_sweeps, []):
            job = EndedJob.from_payload(event.extra["payload"])
            gpu_hours = job.usage.gpu_hours if job.usage else None
            print(f"evaluating {job.status.name} (job {job.status.job_id} of {job.user}, {gpu_hours} GPU-hours)")
            evaluated.append(job.status.job_id)
        return evaluated

    evaluate_checkpoints()
# [END howto_job_event_payload]

with DAG(dag_id="slurm_job_failures", start_date=datetime(2026, 1, 1), schedule=[failed_gpu_jobs], catchup=False):

    @task
    def page_the_owner(triggering_asset_events=None) -> list[str]:
        pages = []
        for event in (triggering_asset_events or {}).get(failed_gpu_jobs, []):
            job = EndedJob.from_payload(event.extra["payload"])
            pages.append(f"{job.user}: {job.status.describe()}")  # e.g. "...is FAILED; exit code 3"
        return pages

    page_the_owner()
