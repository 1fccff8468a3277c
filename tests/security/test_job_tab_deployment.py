"""The "Slurm job" tab's authorisation under Airflow's FAB auth manager, with DAG-level roles, in a real
deployment: api-server, scheduler, dag-processor and triggerer as separate processes, the connection
in Airflow's database, the emulator and the Cloud Storage stand-in.

Two DAGs (``DAG_FILES``), each with a deferred task ``long`` whose job runs until it is cancelled;
DAG A has the tasks of the attacks that need a real api-server (see ``dags/tab_a.py``): what its
tab reads of the api-server's files, a sensor's job, another's job pushed as the task's own, and a
cancel of a task with retries.
Users: ``admin`` (FAB's Admin), ``only_a`` (a role that may read DAG A, its runs, task instances and
task logs, and change its task instances) and ``both`` (the same for both DAGs). Both runs start as
the module starts; every request of the tests is about a job already submitted.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import requests

from airflow_provider_slurmapi.emulator import Emulator
from tests.deployment.airflow_services import AIRFLOW, Airflow, airflow_home, require_slurm_tab, running, wait_for
from tests.deployment.fab_auth import FAB_AUTH_MANAGER, create_dag_roles, create_users

pytestmark = pytest.mark.deployment

REPO = Path(__file__).parents[2]
DAGS = Path(__file__).parent / "dags"
DAG_FILES = [DAGS / "tab_a.py", DAGS / "tab_b.py"]
DAG_A, DAG_B = "slurm_tab_a", "slurm_tab_b"
RUN_ID = "tab-fab"
USERS = {"admin": "Admin", "only_a": "only_a", "both": "both"}  # user -> FAB role
ROLES = {"only_a": [DAG_A], "both": [DAG_A, DAG_B]}  # role -> its DAGs
TAB = "/slurm-job"
CANCEL_HEADERS = {"X-Requested-By": "slurm-job-tab"}
# every endpoint of the tab; a cancel as the tab sends it (its header, a JSON body)
ENDPOINTS: list[tuple[str, str, dict[str, Any]]] = [
    ("GET", "tab", {}),
    ("GET", "job", {}),
    ("POST", "cancel", {"json": {}, "headers": CANCEL_HEADERS}),
]


@pytest.fixture(scope="module", autouse=True)
def _requirements() -> None:
    require_slurm_tab()


@pytest.fixture(scope="module")
def airflow(
    publishing_emulator: tuple[Emulator, str], storage_host: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Airflow]:
    """The deployment under the FAB auth manager, with its users and roles and both DAGs parsed and unpaused."""
    home = airflow_home(tmp_path_factory, "airflow-slurm-tab-fab", *DAG_FILES)
    _, connection = publishing_emulator

    def prepare(deployment: Airflow) -> None:
        command = [AIRFLOW, "connections", "add", "slurm_job_api_default", "--conn-json", connection]
        result = subprocess.run(command, env=deployment.env, capture_output=True, text=True, timeout=300, check=False)
        assert result.returncode == 0, result.stdout + result.stderr
        create_users(deployment, "admin")  # FAB's own roles (Admin...) exist from then on

    components = ["api-server", "scheduler", "dag-processor", "triggerer"]
    pythonpath = os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])
    with running(
        home,
        components,
        prepare,
        users=USERS,
        AIRFLOW__CORE__AUTH_MANAGER=FAB_AUTH_MANAGER,
        STORAGE_EMULATOR_HOST=storage_host,
        PYTHONPATH=pythonpath,
    ) as deployment:
        for dag_id in (DAG_A, DAG_B):
            deployment.api_for(dag_id)  # parsed: the dag-processor has made its FAB resources (DAG:<dag_id>)
        with deployment.explained():
            create_dag_roles(deployment, ROLES)
            create_users(deployment, "only_a", "both")
        yield deployment


@pytest.fixture(scope="module")
def jobs(airflow: Airflow) -> Iterator[dict[str, str]]:
    """Each DAG's run, started by the admin, and the job ID of its ``long`` task, once submitted. At the
    end, DAG B's job is cancelled from the tab by ``both``."""
    api = airflow.api()
    for dag_id in (DAG_A, DAG_B):
        api.post(f"/api/v2/dags/{dag_id}/dagRuns", {"dag_run_id": RUN_ID, "logical_date": None})

    def job_of(dag_id: str) -> str | None:
        xcom = f"/api/v2/dags/{dag_id}/dagRuns/{RUN_ID}/taskInstances/long/xcomEntries/job_id"
        entry = api.get(xcom, params={"map_index": -1}, missing_ok=True)
        return None if entry is None else str(entry["value"]).strip('"')

    with airflow.explained():
        found = {dag_id: wait_for(partial(job_of, dag_id), 180, f"{dag_id}'s job ID") for dag_id in (DAG_A, DAG_B)}
    yield found
    cancel = as_user(airflow, "both").post(
        f"{airflow.url}{TAB}/cancel", params=ti_query(DAG_B), json={}, headers=CANCEL_HEADERS, timeout=60
    )
    assert cancel.status_code == 200, cancel.text


def ti_query(dag_id: str) -> dict[str, Any]:
    return {"dag_id": dag_id, "run_id": RUN_ID, "task_id": "long", "map_index": -1}


def as_user(airflow: Airflow, user: str | None) -> requests.Session:
    session = requests.Session()
    if user is not None:
        session.headers["Authorization"] = f"Bearer {airflow.token(user)}"
    return session


def test_a_user_of_dag_a_sees_its_job_and_may_cancel_it(airflow: Airflow, jobs: dict[str, str]) -> None:
    only_a = as_user(airflow, "only_a")
    page = only_a.get(f"{airflow.url}{TAB}/tab", params=ti_query(DAG_A), timeout=60)
    assert page.status_code == 200, page.text
    assert f"Slurm job {jobs[DAG_A]}" in page.text, page.text[:2000]
    seen = only_a.get(f"{airflow.url}{TAB}/job", params=ti_query(DAG_A), timeout=60)
    assert seen.status_code == 200, seen.text
    assert seen.json()["job"]["job_id"] == jobs[DAG_A] and seen.json()["may_cancel"] is True, seen.text


def test_a_user_of_dag_a_is_refused_dag_bs_job_and_told_nothing_of_it(airflow: Airflow, jobs: dict[str, str]) -> None:
    only_a = as_user(airflow, "only_a")
    for method, path, sent in ENDPOINTS:
        answer = only_a.request(method, f"{airflow.url}{TAB}/{path}", params=ti_query(DAG_B), timeout=60, **sent)
        assert answer.status_code == 403, (path, answer.status_code, answer.text)
        assert answer.json() == {"detail": "Forbidden"}, (path, answer.text)
        assert jobs[DAG_B] not in answer.text, (path, answer.text)


def test_a_user_of_both_dags_sees_both_jobs_and_may_cancel_dag_bs(airflow: Airflow, jobs: dict[str, str]) -> None:
    both = as_user(airflow, "both")
    for dag_id in (DAG_A, DAG_B):
        seen = both.get(f"{airflow.url}{TAB}/job", params=ti_query(dag_id), timeout=60)
        assert seen.status_code == 200, (dag_id, seen.text)
        assert seen.json()["job"]["job_id"] == jobs[dag_id], (dag_id, seen.text)
    assert seen.json()["may_cancel"] is True, seen.text  # DAG B's


def test_without_a_token_the_tab_is_not_authenticated(airflow: Airflow, jobs: dict[str, str]) -> None:
    nobody = as_user(airflow, None)
    for method, path, sent in ENDPOINTS:
        answer = nobody.request(method, f"{airflow.url}{TAB}/{path}", params=ti_query(DAG_A), timeout=60, **sent)
        assert answer.status_code == 401, (path, answer.status_code, answer.text)


# ---- what a DAG author can make DAG A's tabs name, read by a real api-server


def ti_of(airflow: Airflow, task_id: str) -> dict[str, Any]:
    return airflow.api().get(f"/api/v2/dags/{DAG_A}/dagRuns/{RUN_ID}/taskInstances/{task_id}")


def xcom_of(airflow: Airflow, task_id: str, key: str = "job_id") -> str | None:
    xcom = f"/api/v2/dags/{DAG_A}/dagRuns/{RUN_ID}/taskInstances/{task_id}/xcomEntries/{key}"
    entry = airflow.api().get(xcom, params={"map_index": -1}, missing_ok=True)
    return None if entry is None else str(entry["value"]).strip('"')


def query(task_id: str) -> dict[str, Any]:
    return {**ti_query(DAG_A), "task_id": task_id}


def test_an_output_uri_at_the_api_servers_home_shows_none_of_its_files(airflow: Airflow, jobs: dict[str, str]) -> None:
    """The task's ``output_uri`` is ``file://$AIRFLOW_HOME`` and its job's output is named
    ``airflow.cfg``: the tab showed the api-server's configuration."""
    config = (airflow.home / "airflow.cfg").read_text()
    assert "[core]" in config  # what the tab would show
    with airflow.explained():
        wait_for(lambda: ti_of(airflow, "reads_api_server_files")["state"] == "success", 180, "the task to end")
    page = as_user(airflow, "admin").get(f"{airflow.url}{TAB}/tab", params=query("reads_api_server_files"), timeout=60)
    assert page.status_code == 200 and "COMPLETED" in page.text, page.text[:3000]
    assert "[core]" not in page.text and "outside its connection&#x27;s output_uri" in page.text, page.text[-3000:]


def test_a_sensors_job_is_shown_read_only_and_never_cancelled(airflow: Airflow, jobs: dict[str, str]) -> None:
    admin = as_user(airflow, "admin")
    with airflow.explained():
        watched = wait_for(lambda: xcom_of(airflow, "watch"), 180, "the sensor's job ID")
    seen = admin.get(f"{airflow.url}{TAB}/job", params=query("watch"), timeout=60).json()
    assert (seen["job"]["job_id"], seen["ownership"], seen["may_cancel"]) == (watched, "watched", False), seen
    page = admin.get(f"{airflow.url}{TAB}/tab", params=query("watch"), timeout=60).text
    assert "read-only" in page and 'id="cancel-job"' not in page, page[:3000]
    refused = admin.post(
        f"{airflow.url}{TAB}/cancel", params=query("watch"), json={}, headers=CANCEL_HEADERS, timeout=60
    )
    assert refused.status_code == 409, refused.text
    assert admin.get(f"{airflow.url}{TAB}/job", params=query("watch"), timeout=60).json()["job"]["state"] == "RUNNING"


def test_another_jobs_id_pushed_as_the_tasks_own_is_not_shown(airflow: Airflow, jobs: dict[str, str]) -> None:
    """A renumbered cluster, or a forged XCom: the task instance names a job it did not submit."""
    admin = as_user(airflow, "admin")
    with airflow.explained():
        other = wait_for(lambda: xcom_of(airflow, "forged"), 180, "the forged job ID")
    answer = admin.get(f"{airflow.url}{TAB}/job", params=query("forged"), timeout=60)
    assert answer.status_code == 409 and "not its own" in answer.text, answer.text
    page = admin.get(f"{airflow.url}{TAB}/tab", params=query("forged"), timeout=60).text
    assert "not its own" in page and f"Slurm job {other}" not in page and 'id="cancel-job"' not in page, page[:3000]
    refused = admin.post(
        f"{airflow.url}{TAB}/cancel", params=query("forged"), json={}, headers=CANCEL_HEADERS, timeout=60
    )
    assert refused.status_code == 409, refused.text


def test_a_cancel_ends_a_task_with_retries_as_mark_failed_does(
    airflow: Airflow, jobs: dict[str, str], publishing_emulator: tuple[Emulator, str]
) -> None:
    """``long`` has ``retries=2``: the tab's cancel used to make each retry submit the job again."""
    emulator, _ = publishing_emulator
    submits = len(emulator.requests.calls("POST", r"job/submit$"))
    done = as_user(airflow, "only_a").post(
        f"{airflow.url}{TAB}/cancel", params=ti_query(DAG_A), json={}, headers=CANCEL_HEADERS, timeout=60
    )
    assert done.status_code == 200 and done.json() == {
        "message": f"Slurm job {jobs[DAG_A]} was cancelled.",
        "cancelled": True,
    }, done.text
    with airflow.explained():
        wait_for(lambda: ti_of(airflow, "long")["state"] == "failed", 60, "the long task to fail")
    time.sleep(8)  # a retry would have started: retry_delay is 1 s, the scheduler's loop about as long
    ti = ti_of(airflow, "long")
    assert (ti["state"], ti["try_number"]) == ("failed", 1), ti
    assert len(emulator.requests.calls("POST", r"job/submit$")) == submits  # no job submitted again
    seen = as_user(airflow, "admin").get(f"{airflow.url}{TAB}/job", params=ti_query(DAG_A), timeout=60).json()
    assert seen["job"]["state"] == "CANCELLED", seen
    audit = airflow.api().get("/api/v2/eventLogs", params={"event": "slurm_job_cancel", "dag_id": DAG_A})
    assert [(e["owner"], e["task_id"]) for e in audit["event_logs"]] == [("only_a", "long")], audit
