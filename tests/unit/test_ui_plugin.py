"""The Slurm job tab's plugin: what Airflow loads, on each version, and what it costs those that do
not serve it."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib.metadata import entry_points

import pytest

from airflow_provider_slurmapi.ui.plugin import TAB_ENABLED, URL_PREFIX, SlurmJobTabPlugin
from airflow_provider_slurmapi.version_compat import get_base_airflow_version_tuple


def test_airflow_finds_the_plugin_through_its_entry_point() -> None:
    [entry] = [e for e in entry_points(group="airflow.plugins") if e.name == "slurm_job_tab"]
    assert entry.load() is SlurmJobTabPlugin


def test_the_tab_is_a_task_instance_view_from_airflow_3_1_and_nothing_before() -> None:
    assert TAB_ENABLED == (get_base_airflow_version_tuple() >= (3, 1, 0))
    if not TAB_ENABLED:  # Airflow 2.11 and 3.0: the plugin loads and adds nothing
        assert SlurmJobTabPlugin.external_views == [] and SlurmJobTabPlugin.fastapi_apps == []
        return
    [view] = SlurmJobTabPlugin.external_views
    assert view["destination"] == "task_instance" and view["name"] == "Slurm job"
    assert view["href"].startswith(f"{URL_PREFIX}/tab?dag_id={{DAG_ID}}&run_id={{RUN_ID}}&task_id={{TASK_ID}}")
    [app] = SlurmJobTabPlugin.fastapi_apps
    assert app["url_prefix"] == URL_PREFIX
    assert {route.path for route in app["app"].routes} >= {"/tab", "/job", "/cancel"}


def test_loading_the_plugin_imports_nothing_but_its_own_small_module() -> None:
    """Every Airflow component imports the plugin (the dag-processor, the workers): the FastAPI app
    and the hook are imported only when the api-server reads ``fastapi_apps``."""
    code = (
        "import sys, json\n"
        "import airflow.plugins_manager\n"
        "before = set(sys.modules)\n"
        "from airflow_provider_slurmapi.ui.plugin import SlurmJobTabPlugin\n"
        "SlurmJobTabPlugin.external_views\n"
        "print(json.dumps(sorted(set(sys.modules) - before)))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    added = json.loads(result.stdout.strip().splitlines()[-1])
    assert added and all(name.startswith("airflow_provider_slurmapi") for name in added), added
    assert not [name for name in added if name.endswith((".app", ".task_job", ".page", "slurm_job_api"))], added


@pytest.mark.skipif(not TAB_ENABLED, reason="the tab's app is served by Airflow 3.1+'s api-server")
def test_each_endpoint_asks_for_a_session_before_anything_else() -> None:
    """Served without the api-server's auth manager, the app still parses its requests and refuses
    each one as unauthenticated (never a 500, never a job)."""
    from fastapi.testclient import TestClient

    from airflow_provider_slurmapi.ui.app import create_app

    client = TestClient(create_app())
    query = {"dag_id": "d", "run_id": "r", "task_id": "t", "map_index": "{MAP_INDEX}"}
    for method, path in (("GET", "/tab"), ("GET", "/job"), ("POST", "/cancel")):
        answer = client.request(method, path, params=query)
        assert answer.status_code == 401, (path, answer.status_code, answer.text)
