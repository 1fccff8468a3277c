"""A task's ``execution_timeout`` passing while its job runs, under `airflow dags test` (a real
Airflow), against the emulator: the task fails and its Slurm job ends CANCELLED, waiting in the
worker (Airflow's timeout kills the task; its ``on_kill`` cancels the job) and deferred (the
trigger carries the deadline and cancels the job itself).

Each case prints how long after the timeout the cancel reached the cluster and the job ended (run
with ``-s`` to see it).
"""

from __future__ import annotations

import os
import re
import shutil
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import pytest

from airflow_provider_slurmapi.emulator import Emulator, EmulatorConfig
from airflow_provider_slurmapi.hooks.slurm_job_api import SlurmJobApiHook
from tests.conftest import connection_json
from tests.system.dags.test_slurm_execution_timeout import EXECUTION_TIMEOUT, JOB_SECONDS, MODES

pytestmark = pytest.mark.system

AIRFLOW = str(Path(sys.executable).with_name("airflow"))
DAG_FILE = Path(__file__).parent / "dags" / "test_slurm_execution_timeout.py"
T = TypeVar("T")


@pytest.fixture(scope="module", params=["builtin", pytest.param("slurmrestd", marks=pytest.mark.real_slurm)])
def emulator(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Emulator]:
    """The built-in backend, then a real Slurm 24.11 behind the emulator's slurmrestd backend."""
    work = tmp_path_factory.mktemp("emulator")
    common: dict[str, Any] = {"key_file": work / "key.json", "state_dir": work / "jobs"}
    if request.param == "builtin":
        config = EmulatorConfig(min_job_age=1.0, **common)
    else:
        config = request.getfixturevalue("real_slurm").emulator_config(**common)
    with Emulator(config) as emu:
        yield emu


@pytest.fixture(scope="module")
def airflow_env(emulator: Emulator, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """An Airflow home whose DAG folder holds these DAGs alone, with its own SQLite database."""
    home = tmp_path_factory.mktemp("airflow")
    (home / "dags").mkdir()
    shutil.copy(DAG_FILE, home / "dags")
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(home / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
        "AIRFLOW_CONN_SLURM_JOB_API_DEFAULT": connection_json(emulator),
    }
    subprocess.run([AIRFLOW, "db", "migrate"], env=env, check=True, capture_output=True, timeout=300)
    return env


def wait_for(check: Callable[[], T | None], timeout: float, what: str) -> T:
    deadline = time.monotonic() + timeout
    while not (result := check()):
        assert time.monotonic() < deadline, f"timed out after {timeout:.0f} s waiting for {what}"
        time.sleep(0.5)
    return result


def task_instance(env: dict[str, str], dag_id: str) -> tuple[str, float | None]:
    """The state and start (epoch seconds) of the DAG's one task instance, from its database;
    Airflow 2's `dags test` records no start."""
    database = Path(env["AIRFLOW_HOME"]) / "airflow.db"
    with sqlite3.connect(database) as db:
        rows = db.execute("SELECT state, start_date FROM task_instance WHERE dag_id = ?", (dag_id,))
        ((state, start),) = rows.fetchall()
    if start is None:
        return state, None
    when = datetime.fromisoformat(start)
    return state, (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp()


# 2026-12-07T02:10:14.360905Z [error    ] Process timed out  (Airflow 3)
# [2026-12-07T02:12:09.933+0000] {timeout.py:68} ERROR - Process timed out, PID: 26041  (Airflow 2)
LOGGED_AT = r"^\[?(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d{4}))\]? .*"


def logged_at(log: str, text: str) -> float | None:
    """When the first log line holding ``text`` was written (epoch seconds), or None."""
    found = re.search(LOGGED_AT + re.escape(text), log, re.M)
    return datetime.fromisoformat(found.group(1)).timestamp() if found else None


def accounted(hook: SlurmJobApiHook, job_id: str) -> dict[str, Any] | None:
    """The job's accounting record once it tells how the job ended, else None."""
    jobs = hook.call("GET", f"/slurmdb/v0.0.42/job/{job_id}").get("jobs") or []
    if not jobs or jobs[-1]["state"]["current"][0] in ("PENDING", "RUNNING") or not jobs[-1]["time"]["end"]:
        return None
    return jobs[-1]


@pytest.mark.parametrize("dag_id", sorted(MODES))
def test_execution_timeout_fails_the_task_and_cancels_its_running_job(
    airflow_env: dict[str, str], emulator: Emulator, monkeypatch: pytest.MonkeyPatch, dag_id: str
) -> None:
    deferrable = MODES[dag_id]
    started = time.time()
    result = subprocess.run(
        [AIRFLOW, "dags", "test", dag_id], env=airflow_env, capture_output=True, text=True, timeout=300
    )
    log = result.stdout + result.stderr
    # Airflow 3 ends a failed run with "DagRun failed"; Airflow 2.11's `dags test` lets the task's
    # AirflowTaskTimeout (a BaseException) out after marking it failed
    assert result.returncode == 1, log[-5000:]
    submitted = re.search(r"Slurm job (\d+) on cluster \S+: submitted", log)
    assert submitted, log[-5000:]
    job_id = submitted.group(1)
    state, task_start = task_instance(airflow_env, dag_id)
    assert state == "failed", state

    if deferrable:
        # the trigger ends the wait at the deadline it carries (the task's start + execution_timeout;
        # with no start, as in Airflow 2.11's `dags test`, the deferral + execution_timeout), cancelling the job first
        assert f"Slurm job {job_id} did not finish before the task's deadline; it was cancelled" in log, log[-5000:]
        counted_from = task_start or logged_at(log, f"Slurm job {job_id} on cluster")
        assert counted_from, log[-5000:]
        timed_out_at, reference = counted_from + EXECUTION_TIMEOUT, "the trigger's deadline"
    else:
        # Airflow's timeout interrupts the wait in the worker, then calls the operator's on_kill
        timed_out = logged_at(log, "Process timed out")
        assert timed_out and "AirflowTaskTimeout" in log, log[-5000:]
        assert f"Task killed: cancelling Slurm job {job_id}" in log, log[-5000:]
        timed_out_at, reference = timed_out, "Airflow's timeout"

    cancels = emulator.requests.calls("DELETE", rf"/job/{job_id}$", since=started)
    assert cancels, f"Slurm job {job_id} was never cancelled\n{log[-5000:]}"
    monkeypatch.setenv("AIRFLOW_CONN_SLURM_JOB_API_DEFAULT", airflow_env["AIRFLOW_CONN_SLURM_JOB_API_DEFAULT"])
    record = wait_for(lambda: accounted(SlurmJobApiHook(), job_id), 120, f"Slurm job {job_id} to end in accounting")
    assert record["state"]["current"][0] == "CANCELLED", record["state"]
    start, end = record["time"]["start"], record["time"]["end"]
    assert 0 < start <= timed_out_at and end - start < JOB_SECONDS, record["time"]  # it ran, and was stopped
    ran = end - start
    print(
        f"\n== {dag_id} on {emulator.config.backend}: execution_timeout {EXECUTION_TIMEOUT} s; "
        f"the cancel reached the cluster {cancels[0].at - timed_out_at:+.1f} s after {reference} "
        f"({len(cancels)} DELETE); Slurm ended the job CANCELLED "
        f"{end - int(timed_out_at):+d} s after it (in whole seconds), after {ran} s of running"
    )
