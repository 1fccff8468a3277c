"""A deferred task's log page in Airflow 3's UI, in headless Chromium, shows the lines its Slurm job
prints while the job runs (live output), in a real deployment: api-server, scheduler, dag-processor
and triggerer as separate processes, the emulator with an output mount and the Cloud Storage stand-in.

With ``SLURM_SCREENSHOT_DIR`` set, the page is saved there as ``live-output-task-log.png`` (the
documentation's picture, ``docs/_static``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_slurmapi.emulator import Emulator
from tests.browser.test_connection_form import CHROMIUM, CHROMIUM_ARGS, require_chromium
from tests.deployment.airflow_services import USER, Airflow, RestApi, airflow_home, require_airflow_3, running, wait_for

pytestmark = [pytest.mark.browser, pytest.mark.deployment]

DAG_FILE = Path(__file__).parents[1] / "deployment" / "dags" / "slurm_live_output.py"
DAG_ID, TASK_ID, RUN_ID = "slurm_live_output", "train", "live-output-1"
SCREENSHOT_NAME = "live-output-task-log.png"
VIEWPORT = {"width": 1400, "height": 900}
STDOUT_LINE = re.compile(r"\[job (\d+) stdout\] step (\d+)")


@pytest.fixture(scope="module", autouse=True)
def _requirements() -> None:
    """Checked before any other fixture starts something."""
    require_airflow_3()
    require_chromium()


@pytest.fixture(scope="module")
def airflow(
    publishing_emulator: tuple[Emulator, str], storage_host: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Airflow]:
    home = airflow_home(tmp_path_factory, "airflow-live-output", DAG_FILE)
    _, connection = publishing_emulator
    components = ["api-server", "scheduler", "dag-processor", "triggerer"]
    env = {"AIRFLOW_CONN_SLURM_JOB_API_DEFAULT": connection, "STORAGE_EMULATOR_HOST": storage_host}
    with running(home, components, **env) as deployment:
        yield deployment


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


def signed_in_page(browser: Any, airflow: Airflow) -> Any:
    """A page signed in through SimpleAuthManager's login form."""
    context = browser.new_context(viewport=VIEWPORT)
    context.set_default_timeout(30_000)
    page = context.new_page()
    page.goto(airflow.url + "/")
    page.get_by_label("Username").fill(USER)
    page.get_by_label("Password").fill(airflow.password)
    page.get_by_role("button", name="Sign in").click()
    page.get_by_role("button", name="Admin").wait_for()
    return page


def logged_job_lines(api: RestApi, ti_path: str) -> list[str]:
    """The job's stdout lines in the task's log, as the REST API gives it to the UI."""
    log = api.get(f"{ti_path}/logs/1", params={"full_content": "true"})
    events = [entry.get("event", "") for entry in log["content"] if isinstance(entry, dict)]
    return [event for event in events if STDOUT_LINE.search(event)]


def test_a_deferred_tasks_log_page_shows_the_jobs_lines_while_it_runs(airflow: Airflow, browser: Any) -> None:
    from playwright.sync_api import expect

    api = airflow.api_for(DAG_ID)
    ti_path = f"/api/v2/dags/{DAG_ID}/dagRuns/{RUN_ID}/taskInstances/{TASK_ID}"
    with airflow.explained():
        api.post(f"/api/v2/dags/{DAG_ID}/dagRuns", {"dag_run_id": RUN_ID, "logical_date": None})
        page = signed_in_page(browser, airflow)  # while the scheduler starts the task
        # two lines shown by the trigger: the task deferred, the job runs
        wait_for(lambda: len(logged_job_lines(api, ti_path)) >= 2, 120, "two of the job's lines in the task log")
        page.goto(f"{airflow.url}/dags/{DAG_ID}/runs/{RUN_ID}/tasks/{TASK_ID}")
        shown = page.get_by_text(STDOUT_LINE)
        expect(shown.nth(1)).to_be_visible()
        expect(page.get_by_text("Deferred", exact=True).first).to_be_visible()  # the task's state badge
        ti = api.get(ti_path)
        assert ti["state"] == "deferred", ti  # the lines came while the task waited in the triggerer
        assert api.get(f"/api/v2/dags/{DAG_ID}/dagRuns/{RUN_ID}")["state"] == "running"
        shots = os.environ.get("SLURM_SCREENSHOT_DIR")
        if shots:
            shown.last.scroll_into_view_if_needed()
            last = shown.last.bounding_box()  # down to the last line shown, not the empty page below
            clip = {"x": 0, "y": 0, "width": VIEWPORT["width"], "height": min(VIEWPORT["height"], last["y"] + 60)}
            page.screenshot(path=str(Path(shots) / SCREENSHOT_NAME), clip=clip)
        # the job prints for 30 s: rather than wait it out, mark the task (its trigger cancels the job)
        marked = api.patch(ti_path, {"new_state": "success"})
        assert [t["state"] for t in marked["task_instances"]] == ["success"], marked
