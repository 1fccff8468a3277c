"""Two DAGs started by jobs that end on the cluster, whoever submitted them: what the job-event
deployment test runs. Each run's task reads the ended jobs from its triggering asset events and
returns them (job ID, name, state, exit code, CPUs used), for the test to read as XCom."""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG, Asset, AssetWatcher, task

from airflow_provider_slurmapi.triggers.job_events import SlurmJobEventTrigger

POLL_INTERVAL = 5

vision_runs = Asset(
    "slurm_vision_training_runs",
    watchers=[
        AssetWatcher(
            name="vision_training_runs",
            trigger=SlurmJobEventTrigger(
                job_name="evt-train-*", comment_contains="team=vision", poll_interval=POLL_INTERVAL
            ),
        )
    ],
)
failures = Asset(
    "slurm_job_failures",
    watchers=[
        AssetWatcher(
            name="job_failures",
            trigger=SlurmJobEventTrigger(job_name="evt-*", states=["FAILED"], poll_interval=POLL_INTERVAL),
        )
    ],
)


def ended_jobs_of(asset: Asset, triggering_asset_events) -> list[dict]:
    from airflow_provider_slurmapi.client.job_events import EndedJob

    jobs = []
    for event in triggering_asset_events[asset]:
        job = EndedJob.from_payload(event.extra["payload"])
        print(f"{job.status.describe()} (name {job.status.name!r}, user {job.user}); usage: {job.usage}")
        code = job.status.effective_exit_code
        jobs.append(
            {
                "job_id": job.status.job_id,
                "name": job.status.name,
                "state": job.status.state,
                "exit_code": code.return_code if code else None,
                "cpus": job.usage.cpus if job.usage else None,
            }
        )
    return jobs


with DAG(dag_id="slurm_vision_runs_ended", start_date=datetime(2026, 1, 1), schedule=[vision_runs], catchup=False):

    @task
    def read_payload(triggering_asset_events=None) -> list[dict]:
        return ended_jobs_of(vision_runs, triggering_asset_events)

    read_payload()

with DAG(dag_id="slurm_job_failed", start_date=datetime(2026, 1, 1), schedule=[failures], catchup=False):

    @task
    def read_failure(triggering_asset_events=None) -> list[dict]:
        return ended_jobs_of(failures, triggering_asset_events)

    read_failure()
