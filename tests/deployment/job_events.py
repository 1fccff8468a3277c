"""What the job-event deployment test does outside Airflow: submit jobs straight to the emulator's
API, as a researcher's ``sbatch`` would, and read the DAG runs those jobs started."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

import requests

from airflow_provider_slurmapi.emulator import Emulator
from tests.conftest import CLUSTER, PROJECT, REGION
from tests.deployment.airflow_services import RestApi


@dataclass(frozen=True)
class OutsideJob:
    """A job submitted without Airflow, and which event DAGs it must start."""

    name: str
    seconds: int
    exit_code: int = 0
    comment: str = ""
    starts: tuple[str, ...] = ()  # the DAG IDs whose filter it matches


def submit_outside_airflow(emulator: Emulator, job: OutsideJob) -> str:
    """``POST .../job/submit`` through the emulator's callSlurmRestApi, with a token of its own."""
    url = (
        f"{emulator.url}/v1beta1/projects/{PROJECT}/locations/{REGION}/modelDevelopmentClusters/{CLUSTER}"
        ":callSlurmRestApi"
    )
    description = {
        "name": job.name,
        "comment": job.comment,
        "environment": ["PATH=/usr/bin:/bin"],
        "current_working_directory": "/tmp",
    }
    script = f"#!/bin/bash\nsleep {job.seconds}\nexit {job.exit_code}\n"
    body = {"job": description, "script": script}
    response = requests.post(
        url,
        json={"method": "HTTP_METHOD_POST", "path": "/slurm/v0.0.42/job/submit", "body": body},
        headers={"Authorization": f"Bearer {emulator.issue_token()}"},
        timeout=30,
    )
    response.raise_for_status()
    envelope = response.json()
    reply = envelope["structuredBody"] if "structuredBody" in envelope else json.loads(envelope["body"])
    assert not reply.get("errors"), reply
    return str(reply["job_id"])


def reported_jobs(api: RestApi, dag_id: str, task_id: str) -> dict[str, list[dict[str, Any]]]:
    """The ended jobs each finished run of ``dag_id`` read from its asset events (its task's XCom)."""
    runs = api.get(f"/api/v2/dags/{dag_id}/dagRuns", params={"order_by": "run_after"})["dag_runs"]
    seen: dict[str, list[dict[str, Any]]] = {}
    for run in runs:
        if run["state"] == "failed":
            raise AssertionError(f"run {run['dag_run_id']} of {dag_id} failed")
        if run["state"] != "success":
            continue
        path = f"/api/v2/dags/{dag_id}/dagRuns/{run['dag_run_id']}/taskInstances/{task_id}/xcomEntries/return_value"
        seen[run["dag_run_id"]] = api.get(path, params={"deserialize": "true"})["value"]
    return seen


def job_ids(runs: dict[str, list[dict[str, Any]]]) -> list[str]:
    """Every job ID the runs reported, repeats kept: a job reported twice shows twice."""
    return sorted((job["job_id"] for jobs in runs.values() for job in jobs), key=int)


def wait_for_jobs(api: RestApi, dag_id: str, task_id: str, wanted: set[str], timeout: float) -> dict[str, list]:
    deadline = time.monotonic() + timeout
    while True:
        runs = reported_jobs(api, dag_id, task_id)
        if wanted <= set(job_ids(runs)):
            return runs
        if time.monotonic() > deadline:
            all_runs = api.get(f"/api/v2/dags/{dag_id}/dagRuns")["dag_runs"]
            states = {run["dag_run_id"]: run["state"] for run in all_runs}
            events = api.get("/api/v2/assets/events", params={"limit": 100})["asset_events"]
            raise AssertionError(
                f"{dag_id}: runs reported {job_ids(runs)}, not all of {sorted(wanted)}; runs: {states}; "
                f"asset events: {[(e['asset_id'], e['extra']['payload']['job']['job_id']) for e in events]}"
            )
        time.sleep(1)


def reads_per_interval(times: list[float], interval: float) -> float:
    """Reads per interval from the first read to the last (0 with fewer than two)."""
    if len(times) < 2:
        return 0.0
    return (len(times) - 1) / ((times[-1] - times[0]) / interval)
