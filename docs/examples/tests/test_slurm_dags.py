"""Tests of DAGs that use the Slurm Job API, against the emulator: no cluster, no Google account."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from airflow_provider_slurmapi.client.submission import submission_key
from airflow_provider_slurmapi.emulator import Emulator, EmulatorConfig, ScriptedFault
from airflow_provider_slurmapi.hooks.slurm_job_api import SlurmJobApiHook

try:
    from airflow.dag_processing.dagbag import DagBag  # Airflow 3
except ImportError:
    from airflow.models.dagbag import DagBag  # Airflow 2.11

DAGS = Path(__file__).parents[1] / "dags"


@pytest.fixture(scope="module")
def emulator(tmp_path_factory):
    work = tmp_path_factory.mktemp("slurm")
    config = EmulatorConfig(key_file=work / "key.json", state_dir=work / "jobs", sched_delay=0.2)
    with Emulator(config) as emu:  # on a free port; leaving the block kills every job still running
        yield emu


@pytest.fixture(autouse=True)
def slurm_connection(emulator, monkeypatch):
    extra = {
        "project_id": "test-project",  # the emulator's default cluster
        "region": "us-central1",
        "cluster_id": "test-cluster",
        "endpoint": emulator.url,
        "key_path": str(emulator.key_file),  # a service account key whose token endpoint is the emulator
    }
    connection = json.dumps({"conn_type": "slurm_job_api", "extra": extra})
    monkeypatch.setenv("AIRFLOW_CONN_SLURM_JOB_API_DEFAULT", connection)
    emulator.faults.clear()


@pytest.fixture
def dagbag():
    # parsed for each test: dag.test() leaves a run's conf in the tasks' params
    return DagBag(dag_folder=str(DAGS))


def test_training_run_succeeds(dagbag):
    run = dagbag.get_dag("slurm_train").test()
    assert run.state == "success"


def test_a_failing_job_fails_the_task(dagbag):
    run = dagbag.get_dag("slurm_train").test(run_conf={"epochs": "three"})  # the script exits 2
    assert run.state == "failed"


def test_a_lost_submit_reply_creates_no_second_job(dagbag, emulator):
    # Slurm creates the job, then the connection drops before the reply arrives.
    emulator.faults.script(ScriptedFault("reset_after", method="POST", path="job/submit$"))
    run = dagbag.get_dag("slurm_train").test()
    assert run.state == "success"
    assert emulator.faults.injected["reset_after"] == 1
    key = submission_key("slurm_train", "train", run.run_id)  # what the operator put in the comment
    jobs = [job for job in SlurmJobApiHook().list_jobs() if key in job.comment.split()]
    assert [job.state for job in jobs] == ["COMPLETED"]
