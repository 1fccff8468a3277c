"""Attacks on the Slurm job tab through what a task writes: its XComs name the job, the connection
and the output location the api-server reads. Each attack reads the tab the way the api-server does
(``ui.task_job.read_task_job``, real jobs on the emulator, files on disk); the deployment cases
(authorisation, the cancel) run against a real api-server in ``test_job_tab_deployment``.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_slurmapi.client.output import OutputSettings
from airflow_provider_slurmapi.emulator import Emulator
from airflow_provider_slurmapi.hooks.slurm_job_api import SlurmJobApiHook
from airflow_provider_slurmapi.ui import task_job
from airflow_provider_slurmapi.ui.task_job import JobReading, Refused, TaskJob, hook_for, read_task_job
from airflow_provider_slurmapi.ui.trust import Ownership, TaskRun, output_link, output_settings, uri_inside
from airflow_provider_slurmapi.version_compat import get_base_airflow_version_tuple
from tests.conftest import connection_json
from tests.jobs import JOB

RUN = TaskRun("tab_dag", "manual__1", "train", -1)
SECRET = "API-SERVER-SECRET-7d2e"


@pytest.fixture
def shared(emulator: Emulator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The connection's output folder (``file://``), which the nodes and Airflow both mount; a second
    connection of our type with a folder of its own; and a connection of another type."""
    root, other = tmp_path / "shared", tmp_path / "other-team"
    root.mkdir()
    other.mkdir()
    extra = {"output_uri": f"file://{root}", "output_cluster_path": str(root)}
    monkeypatch.setenv("AIRFLOW_CONN_SLURM_JOB_API_DEFAULT", connection_json(emulator, **extra))
    extra = {"output_uri": f"file://{other}", "output_cluster_path": str(other)}
    monkeypatch.setenv("AIRFLOW_CONN_OTHER_TEAM", connection_json(emulator, **extra))
    monkeypatch.setenv("AIRFLOW_CONN_A_DATABASE", json.dumps({"conn_type": "postgres", "host": "db"}))
    monkeypatch.setattr(task_job, "_cache", {})
    return root


@pytest.fixture
def api_server_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """What the api-server's user can read that no DAG author may: its configuration, its environment."""
    home = tmp_path / "api-server-home"
    home.mkdir()
    (home / "airflow.cfg").write_text(f"[core]\nfernet_key = {SECRET}\n")
    return home


def submitted(body: str, *, key: str | None = RUN.key, **job: Any) -> str:
    """A job run to its end on the emulator: with ``key``, the task run's own (its comment carries it)."""
    hook = SlurmJobApiHook()
    job_id = str(hook.submit_job({**JOB, **job}, f"#!/bin/bash\n{body}\n", key=key))
    hook.wait_for_job(job_id, poll_interval=0.2, timeout=60)
    return job_id


def tab_of(job_id: str, conn_id: str = "slurm_job_api_default", watches: bool = False, **xcom: Any) -> JobReading:
    """The tab's read of the task instance whose XComs name ``job_id`` and ``xcom`` (the connection
    arguments and the output overrides the task pushed)."""
    output = {"uri": xcom.pop("output_uri", None), "cluster_path": xcom.pop("output_cluster_path", None)}
    return read_task_job(TaskJob(RUN, job_id, {"slurm_conn_id": conn_id, **xcom}, output, watches=watches))


def shown(reading: JobReading) -> str:
    return "\n".join([tail.text for tail in reading.output] + list(reading.live.values()))


def try_folder(root: Path, try_number: int = 1) -> Path:
    settings = OutputSettings(uri=f"file://{root}", cluster_path=str(root))
    folder = Path(settings.per_try_folder(RUN.dag_id, RUN.run_id, RUN.task_id, RUN.map_index, try_number))
    folder.mkdir(parents=True)
    return folder


# ---- 1. what the api-server reads is what the connection names


def test_an_output_uri_pointing_at_the_api_servers_files_reads_none_of_them(
    shared: Path, api_server_files: Path, tmp_path: Path
) -> None:
    """A DAG author sets ``output_uri=file://<the api-server's home>`` and a job whose output is
    named ``airflow.cfg``: the tab read the api-server's configuration (up to 64 KiB)."""
    cluster = tmp_path / "c"
    cluster.mkdir()
    job_id = submitted("echo hi", standard_output=f"{cluster}/airflow.cfg")
    reading = tab_of(job_id, output_uri=f"file://{api_server_files}", output_cluster_path=str(cluster))
    assert reading.ownership is Ownership.OWN
    assert SECRET not in shown(reading) and "[core]" not in shown(reading)
    assert "outside its connection's output_uri" in str(reading.output_problem)


def test_an_output_uri_under_proc_reads_no_process_environment(shared: Path, tmp_path: Path) -> None:
    """``output_uri=file:///proc`` and a job output named ``<pid>/environ``: the tab showed another
    process's environment (the JWT secret, the Fernet key, the database URL)."""
    with subprocess.Popen(["sleep", "60"], env={"AIRFLOW__API_AUTH__JWT_SECRET": SECRET}) as process:
        try:
            cluster = tmp_path / "c"
            (cluster / str(process.pid)).mkdir(parents=True)
            job_id = submitted("echo hi", standard_output=f"{cluster}/{process.pid}/environ")
            reading = tab_of(job_id, output_uri="file:///proc", output_cluster_path=str(cluster))
            assert SECRET not in shown(reading) and "AIRFLOW__" not in shown(reading)
        finally:
            process.kill()


def test_a_job_output_outside_the_task_runs_folders_is_not_read(shared: Path) -> None:
    """Inside the connection's folder, but not the task run's: another task's, another team's files."""
    (shared / "another_dag").mkdir()
    (shared / "another_dag" / "out.txt").write_text(f"{SECRET}\n")
    job_id = submitted("true", standard_output=f"{shared}/another_dag/out.txt", open_mode=["APPEND"])
    reading = tab_of(job_id)
    assert reading.ownership is Ownership.OWN and SECRET not in shown(reading)
    assert [tail.problem for tail in reading.output] == ["not read: it is outside this task's output folders"]


def test_the_task_runs_own_output_is_shown(shared: Path) -> None:
    """The defence leaves the tab what it is for: the task run's own output."""
    folder = try_folder(shared)
    job_id = submitted(
        "echo step 1; echo oops >&2", standard_output=f"{folder}/%j.out", standard_error=f"{folder}/%j.err"
    )
    reading = tab_of(job_id)
    assert "step 1" in shown(reading) and "oops" in shown(reading)


def test_a_task_output_uri_inside_the_connections_is_kept(shared: Path) -> None:
    inner = OutputSettings(uri=f"file://{shared}", cluster_path="/c")
    settings, problem = output_settings(inner, {"uri": f"file://{shared}/team-a", "cluster_path": "/c/team-a"})
    assert (settings.uri, settings.cluster_path, problem) == (f"file://{shared}/team-a", "/c/team-a", None)


@pytest.mark.parametrize(
    ("uri", "inside"),
    [
        ("gs://bucket/out", True),
        ("gs://bucket/out/team-a", True),
        ("gs://bucket/output", False),  # a sibling that shares the prefix's text
        ("gs://other-bucket/out", False),  # another bucket the connection's identity reaches
        ("gs://bucket/out/../secrets", False),
        ("file:///bucket/out", False),
    ],
)
def test_only_a_location_inside_the_connections_output_uri_is_read(uri: str, inside: bool) -> None:
    assert uri_inside(uri, "gs://bucket/out") is inside


def test_a_second_connection_named_by_the_xcom_shows_no_job_the_task_did_not_submit(shared: Path) -> None:
    """A task pushes a ``slurm_connection`` naming another team's connection and one of its jobs:
    the tab read that connection's bucket. The job is not the task run's, so nothing is read."""
    other_folder = Path(json.loads(os.environ["AIRFLOW_CONN_OTHER_TEAM"])["extra"]["output_cluster_path"])
    (other_folder / "secret.out").write_text(f"{SECRET}\n")
    job_id = submitted("true", key=None, standard_output=f"{other_folder}/secret.out", open_mode=["APPEND"])
    reading = tab_of(job_id, conn_id="other_team")
    assert reading.ownership is Ownership.STRANGER and reading.output == () and not reading.live


@pytest.mark.parametrize("conn_id", ["a_database", "no_such_connection", ""])
def test_a_connection_of_another_type_or_none_is_refused(shared: Path, conn_id: str) -> None:
    with pytest.raises(Refused, match="slurm_job_api or google_cloud_platform"):
        tab_of("1", conn_id=conn_id)


def test_credentials_and_endpoint_are_the_connections_own(shared: Path) -> None:
    """An impersonation chain (or any other hook argument) the XCom names is not used."""
    job = TaskJob(
        RUN,
        "1",
        {
            "slurm_conn_id": "slurm_job_api_default",
            "impersonation_chain": "owner@victim.iam.gserviceaccount.com",
            "retry_attempts": 20,
            "region": "europe-west4",
        },  # fmt: skip
        {},
        watches=False,
    )
    hook = hook_for(job)
    assert hook.impersonation_chain is None and hook.retry.max_attempts != 20
    assert hook.cluster.region == "europe-west4"  # where, not who: a google_cloud_platform connection has none


@pytest.mark.parametrize(
    ("link", "shown"),
    [
        ("https://console.cloud.google.com/storage/browser/_details/bucket/out/d/r/t/try-1/7.out", True),
        ("https://console.cloud.google.com/storage/browser/_details/other-bucket/secrets.txt", False),
        ("https://evil.example/storage/browser/_details/bucket/out/login", False),  # a page of the task's choosing
    ],
)
def test_the_output_link_a_task_pushed_is_shown_only_into_the_connections_output(link: str, shown: bool) -> None:
    settings = OutputSettings(uri="gs://bucket/out", cluster_path="/c")
    assert output_link(link, Ownership.OWN, settings) == (link if shown else None)
    assert output_link(link, Ownership.WATCHED, settings) is None


# ---- 2. the job shown is the task's own


def test_a_renumbered_clusters_job_is_not_shown_in_an_old_task_instances_tab(shared: Path) -> None:
    """The cluster was rebuilt and counts job IDs from 1 again: the old task instance's XCom now
    names a stranger's job, which the tab showed and offered to cancel."""
    folder = try_folder(shared)
    stranger = submitted("echo private", key=None, standard_output=f"{folder}/%j.out", comment="someone else's")
    reading = tab_of(stranger)
    assert reading.ownership is Ownership.STRANGER and reading.output == ()


def test_a_sensors_job_is_shown_read_only_with_output_only_inside_the_connections_folder(
    shared: Path, tmp_path: Path
) -> None:
    """A sensor watches another user's job: shown, never cancellable; its output only where the
    connection reads output."""
    inside = submitted("echo watched", key=None, standard_output=f"{shared}/elsewhere/%j.out")
    assert tab_of(inside, watches=True).ownership is Ownership.WATCHED
    assert "watched" in shown(tab_of(inside, watches=True))
    outside = tmp_path / "home-of-another"
    outside.mkdir()
    (outside / "private.out").write_text(f"{SECRET}\n")
    job_id = submitted("true", key=None, standard_output=f"{outside}/private.out", open_mode=["APPEND"])
    reading = tab_of(job_id, watches=True)
    assert reading.ownership is Ownership.WATCHED and SECRET not in shown(reading)


# ---- 4. the DAG's authorisation, asked of the auth manager on every request


@pytest.mark.skipif(get_base_airflow_version_tuple() < (3, 1), reason="the tab is served by Airflow 3.1+")
def test_every_endpoint_asks_the_auth_manager_about_the_tasks_own_dag(monkeypatch: pytest.MonkeyPatch) -> None:
    """Airflow's ``requires_access_dag`` read the DAG from the path only in the 3.1 releases before
    3.1.8, and asked about DAGs in general: a user limited to DAG A read and cancelled DAG B's jobs."""
    from airflow.api_fastapi.core_api.security import get_user
    from fastapi.testclient import TestClient

    from airflow_provider_slurmapi.ui import app as tab_app

    asked: list[tuple[str, Any, str | None]] = []

    class OnlyDagA:
        def is_authorized_dag(self, *, method: str, access_entity: Any, details: Any, user: Any) -> bool:
            asked.append((method, access_entity, details and details.id))
            return details is not None and details.id == "dag_a"

    class User:
        def get_name(self) -> str:
            return "only_a"

    monkeypatch.setattr(tab_app, "get_auth_manager", OnlyDagA)
    monkeypatch.setattr(tab_app, "_team_of", lambda dag_id: None)  # no database here
    monkeypatch.setattr(tab_app.TaskInstanceRef, "task_job", lambda self: None)  # no job: only the check counts
    app = tab_app.create_app()
    app.dependency_overrides[get_user] = User
    client = TestClient(app)
    headers = {"X-Requested-By": "slurm-job-tab"}
    for method, path in (("GET", "/tab"), ("GET", "/job"), ("POST", "/cancel")):
        asked.clear()
        query = {"dag_id": "dag_b", "run_id": "r", "task_id": "t"}
        refused = client.request(method, path, params=query, headers=headers)
        assert (refused.status_code, refused.json()) == (403, {"detail": "Forbidden"}), path
        assert [dag for _, _, dag in asked] == ["dag_b"], asked
        allowed = client.request(method, path, params={**query, "dag_id": "dag_a"}, headers=headers)
        assert allowed.status_code in (200, 404), (path, allowed.text)  # past the check: the task has no job


@pytest.fixture(autouse=True)
def _no_shared_reads() -> Iterator[None]:
    yield
    task_job._cache.clear()
