"""Airflow 2.11 as separate processes (webserver, scheduler, triggerer), against the emulator:
marking a deferred task failed through the REST API cancels its job through the real 2.11
triggerer, and a triggerer restart does not.

Airflow 2 has no ``on_kill`` for triggers: a stopped trigger is cancelled both when a user killed
its task and when its triggerer shuts down, and reads its task's state in the metadata database to
tell the two apart.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from airflow_provider_slurmapi.emulator import Emulator
from airflow_provider_slurmapi.get_provider_info import CONN_FIELDS
from tests.conftest import CLUSTER, PROJECT, REGION, connection_json
from tests.deployment.airflow_services import (
    USER,
    Airflow,
    Airflow2,
    RestApi,
    airflow_home,
    require_airflow_2,
    running,
    stop_process_group,
    wait_for,
)

pytestmark = pytest.mark.deployment

DAG_ID, TASK_ID = "slurm_airflow2", "train"


@pytest.fixture(scope="module", autouse=True)
def _requirements() -> None:
    require_airflow_2()


@pytest.fixture(scope="module")
def airflow(emulator: Emulator, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Airflow]:
    home = airflow_home(tmp_path_factory, "airflow2-deployment", Path(__file__).parent / "dags" / "slurm_airflow2.py")
    components = ["webserver", "scheduler", "triggerer"]
    connection = connection_json(emulator)
    with running(home, components, kind=Airflow2, AIRFLOW_CONN_SLURM_JOB_API_DEFAULT=connection) as deployment:
        yield deployment


@pytest.fixture(scope="module")
def api(airflow: Airflow) -> RestApi:
    return airflow.api_for(DAG_ID)


class DeferredRun:
    def __init__(self, airflow: Airflow, api: RestApi, emulator: Emulator, seconds: int) -> None:
        self.airflow, self.api, self.emulator = airflow, api, emulator
        self.started = time.time()
        run = api.post(f"/api/v1/dags/{DAG_ID}/dagRuns", {"conf": {"seconds": seconds}})
        self.path = f"/api/v1/dags/{DAG_ID}/dagRuns/{run['dag_run_id']}/taskInstances/{TASK_ID}"

    def state(self) -> str | None:
        self.airflow.check_alive()
        return self.api.get(self.path)["state"]

    def job_id(self) -> str:
        """The job, once the triggerer polls it."""
        backend: Any = self.emulator.backends[(PROJECT, REGION, CLUSTER)]

        def submitted() -> list[Any]:
            return [job for job in backend.jobs.values() if job.submit_time >= int(self.started)]

        (job,) = wait_for(submitted, 120, "the submit")
        job_id = str(job.job_id)
        wait_for(lambda: self.state() == "deferred" or None, 120, "the task to be deferred")
        polled = self.emulator.requests.calls
        wait_for(lambda: polled("GET", f"/job/{job_id}$|/jobs/state", since=time.time() - 1), 60, "the trigger to poll")
        return job_id

    def deletes(self) -> list:
        return self.emulator.requests.calls("DELETE", "/job/", since=self.started)


def test_a_triggerer_restart_leaves_the_job_running(airflow: Airflow, api: RestApi, emulator: Emulator) -> None:
    with airflow.explained():
        run = DeferredRun(airflow, api, emulator, seconds=20)
        job_id = run.job_id()
        stop_process_group(airflow.processes.pop("triggerer"))  # SIGTERM: its triggers are cancelled
        airflow.start("triggerer")
        state = wait_for(lambda: (s := run.state()) in ("success", "failed") and s, 180, "the task to finish")
        print(f"\n== Airflow 2.11, triggerer restart: job {job_id}, task {state}, DELETEs {len(run.deletes())}")
        assert run.deletes() == []
        assert state == "success"
        # the stopped trigger read its task still deferred, in the task's trigger log
        spared = f"is still deferred (another triggerer watches it): Slurm job {job_id} runs on"
        logs = (airflow.home / "logs").rglob("*.log.trigger.*.log")
        assert any(spared in log.read_text(errors="replace") for log in logs)


def test_marking_a_deferred_task_failed_cancels_its_job(airflow: Airflow, api: RestApi, emulator: Emulator) -> None:
    with airflow.explained():
        run = DeferredRun(airflow, api, emulator, seconds=60)
        job_id = run.job_id()
        marked = time.time()
        api.patch(run.path, {"new_state": "failed", "dry_run": False})  # Airflow 2 defaults to a dry run
        cancel = wait_for(lambda: emulator.requests.calls("DELETE", f"/job/{job_id}$", since=marked), 60, "the cancel")
        print(f"\n== Airflow 2.11, mark failed: job {job_id} cancelled {cancel[0].at - marked:.1f} s after the mark")
        assert [call.path.rsplit("/", 1)[-1] for call in run.deletes()] == [job_id]
        assert run.state() == "failed"


def test_the_connection_forms_fields_come_from_the_webserver(airflow: Airflow) -> None:
    """Airflow 2.11's connection form, as its webserver serves it to a logged-in user."""
    browser = requests.Session()
    login = browser.get(f"{airflow.url}/login/", timeout=30).text
    csrf = re.search(r'id="csrf_token"[^>]*value="([^"]+)"', login)
    assert csrf, login[:2000]
    form = {"username": USER, "password": airflow.password, "csrf_token": csrf[1]}
    browser.post(f"{airflow.url}/login/", data=form, timeout=30).raise_for_status()
    page = browser.get(f"{airflow.url}/connection/add", timeout=30)
    page.raise_for_status()
    shown = re.findall(r'id="extra__slurm_job_api__(\w+)"', page.text)
    print(f"\n== connection form (Airflow 2.11 webserver): {', '.join(shown)}")
    assert "Google Cloud Slurm Job API" in page.text
    assert sorted(shown) == sorted(CONN_FIELDS), page.text[:2000]
