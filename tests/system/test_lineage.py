"""OpenLineage events of the submit operator and the sensor under `airflow dags test`, written by
the OpenLineage provider's file transport, against the emulator.

One run of ``test_slurm_lineage`` (tests/system/dags) submits a job that exits 0 and one that
exits 3, and watches each with a sensor: every task's COMPLETE or FAIL event must carry the
``slurmJob`` run facet naming the cluster, the job, its final state, exit code and usage.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_slurmapi.client.jobs import JobStatus
from airflow_provider_slurmapi.emulator import Emulator
from airflow_provider_slurmapi.hooks.slurm_job_api import SlurmJobApiHook
from tests.conftest import CLUSTER, PROJECT, REGION, connection_json

pytestmark = pytest.mark.system

pytest.importorskip("airflow.providers.openlineage", reason="the OpenLineage provider is not installed")

AIRFLOW = str(Path(sys.executable).with_name("airflow"))
DAG_ID = "test_slurm_lineage"
NAMESPACE = "slurm-lineage-test"


@pytest.fixture(scope="module")
def lineage_run(emulator: Emulator, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Runs the DAG once: the OpenLineage events by (job name, event type), the Slurm jobs by name."""
    home = tmp_path_factory.mktemp("airflow")
    dags = home / "dags"
    dags.mkdir()
    shutil.copy(Path(__file__).parent / "dags" / "test_slurm_lineage.py", dags)
    events_file = home / "openlineage.jsonl"
    connection = connection_json(emulator)
    env = {
        **{name: value for name, value in os.environ.items() if not name.startswith("OPENLINEAGE")},
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW_CONN_SLURM_JOB_API_DEFAULT": connection,
        # A transport is all the provider needs to be enabled (its plugin and listener load in
        # `dags test` too); the file transport appends a line per event.
        "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps(
            {"type": "file", "log_file_path": str(events_file), "append": True}
        ),
        "AIRFLOW__OPENLINEAGE__NAMESPACE": NAMESPACE,
        "AIRFLOW__OPENLINEAGE__DISABLED": "False",
    }
    subprocess.run([AIRFLOW, "db", "migrate"], env=env, check=True, capture_output=True, timeout=300)
    result = subprocess.run([AIRFLOW, "dags", "test", DAG_ID], env=env, capture_output=True, text=True, timeout=300)
    log = result.stdout + result.stderr
    assert events_file.exists(), f"no OpenLineage event written\n{log[-5000:]}"
    events = {}
    for line in events_file.read_text().splitlines():
        event = json.loads(line)
        events[(event["job"]["name"], event["eventType"])] = event
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AIRFLOW_CONN_SLURM_JOB_API_DEFAULT", connection)
        records = SlurmJobApiHook().call("GET", "/slurmdb/v0.0.42/jobs")["jobs"]
    jobs = {status.name: status for status in map(JobStatus.from_slurmdb, records)}
    return {"events": events, "jobs": jobs, "log": log}


@pytest.mark.parametrize(
    ("task_id", "event_type", "job_name", "state", "exit_code"),
    [
        ("submit_ok", "COMPLETE", "lineage-ok", "COMPLETED", 0),
        ("watch_ok", "COMPLETE", "lineage-ok", "COMPLETED", 0),
        ("submit_fail", "FAIL", "lineage-fail", "FAILED", 3),
        ("watch_fail", "FAIL", "lineage-fail", "FAILED", 3),
    ],
)
def test_end_event_carries_the_slurm_job_facet(
    lineage_run: dict[str, Any], task_id: str, event_type: str, job_name: str, state: str, exit_code: int
) -> None:
    key = (f"{DAG_ID}.{task_id}", event_type)
    assert key in lineage_run["events"], (sorted(lineage_run["events"]), lineage_run["log"][-5000:])
    event = lineage_run["events"][key]
    assert event["job"]["namespace"] == NAMESPACE
    facet = event["run"]["facets"].get("slurmJob")
    assert facet is not None, (event["run"]["facets"].keys(), lineage_run["log"][-5000:])
    job = lineage_run["jobs"][job_name]  # what the cluster's accounting says of the job
    assert (job.state, job.exit_code.return_code if job.exit_code else None) == (state, exit_code)
    assert facet["jobId"] == job.job_id
    assert (facet["projectId"], facet["region"], facet["clusterId"]) == (PROJECT, REGION, CLUSTER)
    assert (facet["state"], facet["exitCode"]) == (state, exit_code)
    assert facet["exitStatus"] == ("SUCCESS" if exit_code == 0 else "ERROR")
    usage = facet["usage"]
    assert usage["job_id"] == job.job_id
    assert usage["elapsed_seconds"] >= 1  # the script sleeps 1 s
    assert usage["cpus"] >= 1 and usage["nodes"] >= 1
    assert usage["tres"]["cpu"] == usage["cpus"]
    assert facet["_schemaURL"].startswith("https://") and facet["_producer"]


def test_start_events_carry_no_slurm_job_facet(lineage_run: dict[str, Any]) -> None:
    """Nothing is known of the job when a task starts: no facet rather than an empty one."""
    starts = {name: event for (name, kind), event in lineage_run["events"].items() if kind == "START"}
    assert {f"{DAG_ID}.{task}" for task in ("submit_ok", "watch_ok", "submit_fail", "watch_fail")} <= set(starts)
    assert all("slurmJob" not in event["run"]["facets"] for event in starts.values())
