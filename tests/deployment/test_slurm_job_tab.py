"""The "Slurm job" tab of Airflow 3.1+'s task instance page, in a real deployment: api-server,
scheduler, dag-processor and triggerer as separate processes, the connection in Airflow's database,
the emulator with an output mount and the Cloud Storage stand-in.

Users: ``admin`` (admin), ``viewer`` (SimpleAuthManager's viewer: may read, not change) and
``outsider`` (a user whom the auth manager refuses this DAG, see ``dag_scoped_auth``).

The first test reads the tab's endpoints as each user (it runs on 3.1, 3.2 and 3.3); the second
opens the tab in headless Chromium and, with ``SLURM_SCREENSHOT_DIR`` set, saves the pictures of
the documentation there (``slurm-job-tab-pending.png``, ``-running.png``, ``-completed.png``).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from airflow_provider_slurmapi.emulator import Emulator
from tests.deployment.airflow_services import (
    AIRFLOW,
    Airflow,
    RestApi,
    airflow_home,
    require_slurm_tab,
    running,
    wait_for,
)

pytestmark = pytest.mark.deployment

REPO = Path(__file__).parents[2]
DAG_FILE = Path(__file__).parent / "dags" / "slurm_job_tab.py"
DAG_ID = "slurm_job_tab"
USERS = {"admin": "admin", "viewer": "viewer", "outsider": "op"}
TAB = "/slurm-job"
VIEWPORT = {"width": 1400, "height": 1000}


@pytest.fixture(scope="module", autouse=True)
def _requirements() -> None:
    require_slurm_tab()


@pytest.fixture(scope="module")
def airflow(
    publishing_emulator: tuple[Emulator, str], storage_host: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Airflow]:
    home = airflow_home(tmp_path_factory, "airflow-slurm-tab", DAG_FILE)
    _, connection = publishing_emulator

    def add_connection(deployment: Airflow) -> None:  # in the database, where deployments keep them
        command = [AIRFLOW, "connections", "add", "slurm_job_api_default", "--conn-json", connection]
        result = subprocess.run(command, env=deployment.env, capture_output=True, text=True, timeout=300, check=False)
        assert result.returncode == 0, result.stdout + result.stderr

    env = {
        "STORAGE_EMULATOR_HOST": storage_host,
        "AIRFLOW__CORE__AUTH_MANAGER": "tests.deployment.dag_scoped_auth.DagScopedAuthManager",
        "SLURM_DAG_SCOPES": json.dumps({"outsider": ["another_dag"]}),
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    components = ["api-server", "scheduler", "dag-processor", "triggerer"]
    with running(home, components, add_connection, users=USERS, **env) as deployment:
        yield deployment


def start_run(airflow: Airflow, run_id: str) -> RestApi:
    api = airflow.api_for(DAG_ID)
    api.post(f"/api/v2/dags/{DAG_ID}/dagRuns", {"dag_run_id": run_id, "logical_date": None})
    return api


def job_of(api: RestApi, run_id: str, task_id: str, map_index: int = -1) -> str | None:
    """The job ID the task instance pushed (XCom ``job_id``), or None before."""
    ti = f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances/{task_id}"
    entry = api.get(f"{ti}/xcomEntries/job_id", params={"map_index": map_index}, missing_ok=True)
    return None if entry is None else str(entry["value"]).strip('"')


def ti_query(run_id: str, task_id: str, map_index: int = -1) -> dict[str, Any]:
    return {"dag_id": DAG_ID, "run_id": run_id, "task_id": task_id, "map_index": map_index}


def as_user(airflow: Airflow, user: str | None) -> requests.Session:
    session = requests.Session()
    if user is not None:
        session.headers["Authorization"] = f"Bearer {airflow.token(user)}"
    return session


def test_the_tab_follows_the_api_servers_authorisation(airflow: Airflow) -> None:
    run_id = "tab-api"
    api = start_run(airflow, run_id)
    with airflow.explained():
        plugins = api.get("/api/v2/plugins")["plugins"]
        views = [v for p in plugins if p["name"] == "slurm_job_tab" for v in p["external_views"]]
        assert [(v["name"], v["destination"]) for v in views] == [("Slurm job", "task_instance")], plugins
        long_job = wait_for(lambda: job_of(api, run_id, "long"), 120, "the long task's job ID")
        shards = [wait_for(lambda i=i: job_of(api, run_id, "shard", i), 120, f"shard {i}'s job") for i in (0, 1)]
        admin, viewer, outsider, nobody = (as_user(airflow, u) for u in ("admin", "viewer", "outsider", None))
        url = airflow.url + TAB

        seen = admin.get(f"{url}/job", params=ti_query(run_id, "long"), timeout=60)
        assert seen.status_code == 200, seen.text
        assert seen.json()["job"]["job_id"] == long_job and seen.json()["may_cancel"] is True
        # nothing of the connection reaches the browser: no key file, no endpoint, no connection extras
        connection = json.loads(api.get("/api/v2/connections/slurm_job_api_default")["extra"])
        assert connection["key_path"] and connection["endpoint"]
        for kept in ("slurm_job_api_default", connection["key_path"], connection["endpoint"], "key_path"):
            assert kept not in seen.text
        # each map index shows its own job
        mapped = [admin.get(f"{url}/job", params=ti_query(run_id, "shard", i), timeout=60).json() for i in (0, 1)]
        assert [m["job"]["job_id"] for m in mapped] == shards and shards[0] != shards[1]

        # the viewer sees the job but may not cancel it: no button, and a refused cancel
        page = viewer.get(f"{url}/tab", params=ti_query(run_id, "long"), timeout=60)
        assert page.status_code == 200 and f"Slurm job {long_job}" in page.text and 'id="cancel-job"' not in page.text
        assert viewer.get(f"{url}/job", params=ti_query(run_id, "long"), timeout=60).json()["may_cancel"] is False
        refused = viewer.post(f"{url}/cancel", params=ti_query(run_id, "long"), json={}, timeout=60,
                              headers={"X-Requested-By": "slurm-job-tab"})  # fmt: skip
        assert refused.status_code == 403, refused.text

        # the outsider may not read this DAG: refused everywhere, and told nothing of its jobs
        for method, path in (("GET", "tab"), ("GET", "job"), ("POST", "cancel")):
            answer = outsider.request(method, f"{url}/{path}", params=ti_query(run_id, "long"), timeout=60,
                                      headers={"X-Requested-By": "slurm-job-tab"})  # fmt: skip
            assert answer.status_code == 403, (path, answer.status_code, answer.text)
            assert answer.json() == {"detail": "Forbidden"}, answer.text  # nothing of the job
        # without a token: not authenticated
        assert nobody.get(f"{url}/tab", params=ti_query(run_id, "long"), timeout=60).status_code == 401
        # the UI's iframe sends the api-server's cookie, not a header
        token = airflow.token("admin")
        page = requests.get(f"{url}/tab", params=ti_query(run_id, "long"), cookies={"_token": token}, timeout=60)
        assert page.status_code == 200 and 'id="cancel-job"' in page.text, page.text[:2000]
        assert "frame-ancestors 'self'" in page.headers["Content-Security-Policy"]

        # a cancel needs the tab's header (no form of another site can send it), then cancels like on_kill
        bare = admin.post(f"{url}/cancel", params=ti_query(run_id, "long"), json={}, timeout=60)
        assert bare.status_code == 400, bare.text
        done = admin.post(f"{url}/cancel", params=ti_query(run_id, "long"), json={}, timeout=60,
                          headers={"X-Requested-By": "slurm-job-tab"})  # fmt: skip
        assert done.status_code == 200 and done.json()["cancelled"] is True, done.text
        ti = f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances/long"
        wait_for(lambda: api.get(ti)["state"] == "failed", 120, "the long task to fail with its cancelled job")
        job = admin.get(f"{url}/job", params=ti_query(run_id, "long"), timeout=60).json()["job"]
        assert job["state"] == "CANCELLED", job
        audit = api.get("/api/v2/eventLogs", params={"event": "slurm_job_cancel", "dag_id": DAG_ID})
        assert [(e["owner"], e["task_id"]) for e in audit["event_logs"]] == [("admin", "long")], audit


# ---- in a browser (Airflow 3.3's UI)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from tests.browser.test_connection_form import CHROMIUM, CHROMIUM_ARGS, require_chromium

    require_chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


def signed_in(browser: Any, airflow: Airflow, user: str) -> Any:
    """A page signed in through SimpleAuthManager's login form."""
    context = browser.new_context(viewport=VIEWPORT)
    context.set_default_timeout(30_000)
    page = context.new_page()
    page.goto(airflow.url + "/")
    page.get_by_label("Username").fill(user)
    page.get_by_label("Password").fill(airflow.passwords[user])
    page.get_by_role("button", name="Sign in").click()
    page.get_by_role("button", name="Admin").or_(page.get_by_role("button", name="Browse")).first.wait_for()
    return page


def tab_page_url(airflow: Airflow, run_id: str, task_id: str) -> str:
    return f"{airflow.url}/dags/{DAG_ID}/runs/{run_id}/tasks/{task_id}/plugin/slurm-job"


def shows(frame: Any, text: str, timeout: float = 90) -> None:
    """Wait until the tab shows ``text`` (as written, visible), refreshing it as a user would."""

    from playwright.sync_api import Error

    def visible() -> bool:
        try:  # the frame may be between two loads (its own refresh): look again
            if frame.get_by_text(re.compile(re.escape(text))).filter(visible=True).count():
                return True
            frame.get_by_role("button", name="Refresh").click(timeout=5_000)
        except Error:
            pass
        return False

    wait_for(visible, timeout, f"the tab to show {text!r}", interval=2)


def screenshot(page: Any, name: str) -> None:
    shots = os.environ.get("SLURM_SCREENSHOT_DIR")
    if shots:
        page.screenshot(path=str(Path(shots) / name))


def test_the_tab_shows_the_job_pending_running_completed_and_cancels_it(airflow: Airflow, browser: Any) -> None:
    run_id = "tab-browser"
    api = start_run(airflow, run_id)
    with airflow.explained():
        page = signed_in(browser, airflow, "admin")
        train = wait_for(lambda: job_of(api, run_id, "train"), 120, "the train task's job ID")
        page.goto(tab_page_url(airflow, run_id, "train"))
        frame = page.frame_locator("iframe").first
        frame.get_by_text(f"Slurm job {train}").first.wait_for()
        # pending for its begin time, with the scheduler's expected start
        shows(frame, "BeginTime")
        shows(frame, "Expected start")
        assert frame.get_by_text("PENDING", exact=True).count(), "the state badge"
        assert frame.locator("svg").count(), "the timeline"
        screenshot(page, "slurm-job-tab-pending.png")
        shows(frame, "RUNNING")
        shows(frame, "published while the job runs (live output)", timeout=25)  # its last lines so far
        shows(frame, "step ")
        screenshot(page, "slurm-job-tab-running.png")
        shows(frame, "COMPLETED")
        shows(frame, "step 30")  # the output excerpt, read from the bucket
        screenshot(page, "slurm-job-tab-completed.png")

        # the cancel button cancels the long task's job, and the task fails for it
        long_job = wait_for(lambda: job_of(api, run_id, "long"), 120, "the long task's job ID")
        page.goto(tab_page_url(airflow, run_id, "long"))
        frame = page.frame_locator("iframe").first
        shows(frame, "RUNNING")
        frame.get_by_role("button", name=f"Cancel Slurm job {long_job}").click()
        frame.get_by_role("button", name=f"Yes, cancel job {long_job}").click()
        result = frame.locator("#cancel-result")
        answer = wait_for(lambda: (result.text_content() or "").replace("Cancelling…", ""), 30, "the cancel's answer")
        assert answer == f"Slurm job {long_job} was cancelled.", answer
        shows(frame, "CANCELLED")
        ti = f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances/long"
        wait_for(lambda: api.get(ti)["state"] == "failed", 120, "the long task to fail with its cancelled job")

        # the viewer sees the tab without a cancel button; the outsider is refused the tab itself
        viewer = signed_in(browser, airflow, "viewer")
        viewer.goto(tab_page_url(airflow, run_id, "train"))
        viewer_frame = viewer.frame_locator("iframe").first
        viewer_frame.get_by_text(f"Slurm job {train}").first.wait_for()
        assert viewer_frame.get_by_role("button", name=f"Cancel Slurm job {train}").count() == 0
        outsider = signed_in(browser, airflow, "outsider")
        query = "&".join(f"{k}={v}" for k, v in ti_query(run_id, "long").items())
        answer = outsider.goto(f"{airflow.url}{TAB}/tab?{query}")
        assert answer is not None and answer.status == 403, answer
        assert json.loads(answer.text()) == {"detail": "Forbidden"}  # nothing of the job
        assert f"Slurm job {long_job}" not in outsider.content()
