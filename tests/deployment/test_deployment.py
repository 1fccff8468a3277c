"""A real Airflow 3 deployment: api-server, scheduler, dag-processor and triggerer as separate processes.

The example DAG is unpaused and triggered through the REST API, like a user would; its deferred task
must go through the real triggerer, against the emulator.
"""

from __future__ import annotations

import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_slurmapi.emulator import Emulator
from tests.conftest import connection_json
from tests.deployment.airflow_services import Airflow, RestApi, require_airflow_3, running

pytestmark = pytest.mark.deployment

ROOT = Path(__file__).parents[2]
DAG_ID, TASK_ID = "example_slurm_submit_job", "train"
TRIGGER = "airflow_provider_slurmapi.triggers.job.SlurmJobTrigger"
# Jobs of about 9 s: a trigger that fires within ~5 s of the deferral can meet an Airflow 3.3 race
# (apache/airflow#67287, #72716: the stale executor event of the deferring try fails the resumed task).
EPOCHS = 8


@pytest.fixture(scope="module", autouse=True)
def _requirements() -> None:
    """Checked before any other fixture starts something."""
    require_airflow_3()


@pytest.fixture(scope="module")
def airflow(emulator: Emulator, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Airflow]:
    home = tmp_path_factory.mktemp("airflow-deployment")
    shutil.copytree(ROOT / "example_dags", home / "dags")
    components = ["api-server", "scheduler", "dag-processor", "triggerer"]
    with running(home, components, AIRFLOW_CONN_SLURM_JOB_API_DEFAULT=connection_json(emulator)) as deployment:
        yield deployment


@pytest.fixture(scope="module")
def api(airflow: Airflow) -> RestApi:
    return airflow.api_for(DAG_ID)


def run_dag(airflow: Airflow, api: RestApi, conf: dict[str, Any], timeout: float = 240) -> tuple[dict, list, dict]:
    """Trigger a run; poll it to its end. Returns the run, the task's states in order, and the trigger seen."""
    run = api.post(
        f"/api/v2/dags/{DAG_ID}/dagRuns",
        # no logical date: what Airflow 3 gives a run triggered by hand
        {"logical_date": None, "conf": conf},
    )
    run_path = f"/api/v2/dags/{DAG_ID}/dagRuns/{run['dag_run_id']}"
    states: list[str | None] = []
    trigger: dict[str, Any] = {}
    deadline = time.monotonic() + timeout
    while run["state"] not in ("success", "failed"):
        assert time.monotonic() < deadline, f"run still {run['state']} after {timeout} s; task states: {states}"
        airflow.check_alive()
        ti = api.get(f"{run_path}/taskInstances/{TASK_ID}")
        if not states or states[-1] != ti["state"]:
            states.append(ti["state"])
        if ti["state"] == "deferred" and ti.get("trigger"):
            trigger = ti["trigger"]
        run = api.get(run_path)
        time.sleep(0.25)  # the task stays deferred for several seconds: polling this often cannot miss it
    return run, states, trigger


def task_log(api: RestApi, run: dict) -> list[dict[str, Any]]:
    """The task's log entries as the UI reads them: task and trigger lines merged."""
    ti_path = f"/api/v2/dags/{DAG_ID}/dagRuns/{run['dag_run_id']}/taskInstances/{TASK_ID}"
    try_number = api.get(ti_path)["try_number"]
    log = api.get(f"{ti_path}/logs/{try_number}", params={"full_content": "true"})
    return [entry for entry in log["content"] if isinstance(entry, dict)]


def text(entries: list[dict[str, Any]]) -> str:
    """One line per entry: level, logger, message, and the exception if there is one."""
    lines = []
    for e in entries:
        errors = "; ".join(f"{d.get('exc_type')}: {d.get('exc_value')}" for d in e.get("error_detail") or [])
        lines.append(f"{e.get('level', '')} [{e.get('logger', '')}] {e.get('event', '')} {errors}".rstrip())
    return "\n".join(lines)


def check_triggerer_ran_it(api: RestApi, states: list, trigger: dict) -> None:
    assert "deferred" in states, f"the task never showed as deferred; states: {states}"
    assert trigger.get("classpath") == TRIGGER, trigger
    triggerers = api.get("/api/v2/jobs", params={"job_type": "TriggererJob"})["jobs"]
    assert trigger.get("triggerer_id") in {job["id"] for job in triggerers}, (trigger, triggerers)


def check_no_state_mismatch(api: RestApi, run: dict) -> None:
    """Name the Airflow race (see EPOCHS) when it, rather than the job, decided the task's fate."""
    params = {"dag_id": DAG_ID, "run_id": run["dag_run_id"], "event": "state mismatch"}
    mismatches = [e.get("extra") for e in api.get("/api/v2/eventLogs", params=params)["event_logs"]]
    assert not mismatches, f"the scheduler failed the task on a stale executor event (Airflow race): {mismatches}"


def slurm_says(emulator: Emulator, monkeypatch: pytest.MonkeyPatch, job_id: str) -> tuple[str, int | None]:
    """The job's state and exit code as Slurm (the emulator) has them, read with the provider's hook."""
    from airflow_provider_slurmapi.hooks.slurm_job_api import SlurmJobApiHook  # imports Airflow: only here

    monkeypatch.setenv("AIRFLOW_CONN_SLURM_JOB_API_DEFAULT", connection_json(emulator))
    status = SlurmJobApiHook().get_job(job_id)
    return status.state, status.effective_exit_code.return_code if status.effective_exit_code else None


def run_to_the_end(airflow: Airflow, api: RestApi, conf: dict[str, Any], expected: str) -> tuple[list[dict], str]:
    """A run that must end ``expected`` after its task deferred to the real triggerer: its task log."""
    run, states, trigger = run_dag(airflow, api, conf)
    check_no_state_mismatch(api, run)
    assert run["state"] == expected, f"run {run['dag_run_id']} is {run['state']}; task states: {states}"
    assert states[-1] == expected, states
    check_triggerer_ran_it(api, states, trigger)
    entries = task_log(api, run)
    return entries, text(entries)


def test_deferred_run_succeeds(
    airflow: Airflow, api: RestApi, emulator: Emulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    with airflow.explained():
        entries, log = run_to_the_end(airflow, api, {"epochs": EPOCHS}, "success")
        trigger_lines = [e["event"] for e in entries if e.get("logger") == TRIGGER]
        running = [line for line in trigger_lines if re.fullmatch(r"Slurm job \d+ is RUNNING", line)]
        assert running, f"no 'Slurm job N is RUNNING' line from the trigger in the task log:\n{log}"
        job_id = running[0].split()[2]
        assert f"Slurm job {job_id} is COMPLETED; exit code 0" in trigger_lines, log
        # execute_complete ran in a worker after the trigger fired, and logged the outcome too
        assert re.search(rf"\[airflow\.task\.operators\.[\w.]+\] Slurm job {job_id} is COMPLETED; exit code 0", log), (
            log
        )
        assert slurm_says(emulator, monkeypatch, job_id) == ("COMPLETED", 0)


def test_failing_job_fails_the_task_and_the_run(
    airflow: Airflow, api: RestApi, emulator: Emulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    with airflow.explained():
        entries, log = run_to_the_end(airflow, api, {"exit_code": 3, "epochs": EPOCHS}, "failed")
        failed = r"Slurm job (\d+) is FAILED(; reason: \w+)?; exit code 3"
        found = re.search(rf"\[{re.escape(TRIGGER)}\] {failed}", log)
        assert found, log
        assert slurm_says(emulator, monkeypatch, found.group(1)) == ("FAILED", 3)
        # the task's own error, raised by execute_complete in the worker once the trigger fired
        errors = [error for e in entries for error in e.get("error_detail") or []]
        assert any(
            error.get("exc_type") == "AirflowException" and re.fullmatch(failed, str(error.get("exc_value")))
            for error in errors
        ), f"no AirflowException naming exit code 3 in the task log; errors: {errors}\n{log}"
