"""The plugin that adds the "Slurm job" tab to every task instance of Airflow 3.1+'s UI.

Airflow imports plugins in every component (the scheduler, the dag-processor, the workers), but
only the api-server reads ``fastapi_apps``: the app, and FastAPI with it, is built on that first
read, so this module costs the others nothing. On Airflow 2 and 3.0 the plugin adds nothing.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from airflow.plugins_manager import AirflowPlugin

from airflow_provider_slurmapi.version_compat import get_base_airflow_version_tuple

URL_PREFIX = "/slurm-job"  # where the api-server mounts the tab's app
TAB_ENABLED = get_base_airflow_version_tuple() >= (3, 1, 0)  # external views with task instance pages


def _base_path() -> str:
    """The path Airflow is served under (``[api] base_url``), which the tab's address needs."""
    from airflow.configuration import conf

    return urlsplit(conf.get("api", "base_url", fallback="") or "").path.rstrip("/")


class _AppsOnFirstRead:
    """``fastapi_apps``, built when Airflow first reads it (the api-server, ``airflow plugins``)."""

    def __init__(self) -> None:
        self._apps: list[dict[str, Any]] | None = None

    def __get__(self, instance: object, owner: type) -> list[dict[str, Any]]:
        if self._apps is None:
            self._apps = []
            if TAB_ENABLED:
                from airflow_provider_slurmapi.ui.app import create_app

                self._apps.append({"app": create_app(), "url_prefix": URL_PREFIX, "name": "Slurm job tab"})
        return self._apps


def _views() -> list[dict[str, Any]]:
    if not TAB_ENABLED:
        return []
    query = "dag_id={DAG_ID}&run_id={RUN_ID}&task_id={TASK_ID}&map_index={MAP_INDEX}"
    return [
        {
            "name": "Slurm job",
            "href": f"{_base_path()}{URL_PREFIX}/tab?{query}",
            "destination": "task_instance",
            "url_route": "slurm-job",
        }
    ]


class SlurmJobTabPlugin(AirflowPlugin):
    """A "Slurm job" tab on task instance pages: the job's timeline, why it waits, what it used,
    its output, and a cancel button for those who may change the task instance."""

    name = "slurm_job_tab"
    external_views = _views()
    fastapi_apps = _AppsOnFirstRead()
