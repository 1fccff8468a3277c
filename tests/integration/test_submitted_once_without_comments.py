"""Submitted once when accounting keeps no job comments (no ``AccountingStoreFlags=job_comment``)
and there is no task state store (Airflow 2.11, 3.1, 3.2): the worker dies after its job completed,
the job leaves the live queue, and the retry must still take that job rather than run it again.

Each try runs in a worker process of its own (``worker_try``) with Airflow's real Variables, in a
metadata database of this module's own.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from airflow_provider_slurmapi.emulator import Emulator, EmulatorConfig
from airflow_provider_slurmapi.emulator.job_model import Job, State
from tests.conftest import CLUSTER, PROJECT, REGION, connection_json
from tests.integration.worker_try import OUTCOME

ROOT = Path(__file__).parents[2]
AIRFLOW = str(Path(sys.executable).with_name("airflow"))
RETRIES = 1
T = TypeVar("T")


@pytest.fixture(scope="module")
def emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Emulator]:
    """Slurm whose accounting keeps no comments, and whose live queue forgets a job 1 s after it ends."""
    work = tmp_path_factory.mktemp("emulator")
    config = EmulatorConfig(job_comments=False, min_job_age=1.0, key_file=work / "key.json", state_dir=work / "jobs")
    with Emulator(config) as emu:
        yield emu


@pytest.fixture(scope="module")
def worker_env(emulator: Emulator, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    home = tmp_path_factory.mktemp("airflow")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW_CONN_SLURM_JOB_API_DEFAULT": connection_json(emulator),
    }
    subprocess.run([AIRFLOW, "db", "migrate"], env=env, check=True, capture_output=True, timeout=300)
    return env


def wait_for(check: Callable[[], T | None], what: str, timeout: float = 60) -> T:
    deadline = time.monotonic() + timeout
    while not (found := check()):
        assert time.monotonic() < deadline, f"no {what} within {timeout} s"
        time.sleep(0.2)
    return found


class TaskRun:
    """The tries of one task run, each in a new worker process."""

    def __init__(self, env: dict[str, str], emulator: Emulator, release: Path) -> None:
        self.env, self.run_id, self.release = env, f"manual__{uuid.uuid4()}", release
        self.backend: Any = emulator.backends[(PROJECT, REGION, CLUSTER)]
        self.started = int(time.time())

    def start_try(self, try_number: int, poll_interval: float) -> subprocess.Popen[str]:
        spec = {
            "script": f"#!/bin/bash\nuntil [ -e {self.release} ]; do sleep 0.1; done\n",  # ends when told
            "poll_interval": poll_interval,
            "retries": RETRIES,
            "try_number": try_number,
            "run_id": self.run_id,
        }
        command = [sys.executable, "-m", "tests.integration.worker_try", json.dumps(spec)]
        return subprocess.Popen(command, env=self.env, cwd=ROOT, stdout=subprocess.PIPE, text=True)

    def jobs(self) -> list[Job]:
        """The jobs this task run submitted, as Slurm itself has them."""
        return [job for job in list(self.backend.jobs.values()) if job.submit_time >= self.started]


def outcome(worker: subprocess.Popen[str]) -> dict[str, Any]:
    out, _ = worker.communicate(timeout=120)
    lines = [line for line in out.splitlines() if line.startswith(OUTCOME + " ")]
    assert lines, f"the try printed no outcome (exit {worker.returncode}):\n{out}"
    return json.loads(lines[-1].removeprefix(OUTCOME + " "))


def test_a_retry_after_the_worker_died_adopts_the_completed_job(
    worker_env: dict[str, str], emulator: Emulator, tmp_path: Path
) -> None:
    run = TaskRun(worker_env, emulator, tmp_path / "release")
    first_try = run.start_try(1, poll_interval=120)  # still waiting, long after its job ends
    try:
        (job,) = wait_for(run.jobs, "job submitted")
        wait_for(lambda: emulator.requests.calls("GET", f"/job/{job.job_id}$"), "status read by the first try")
        run.release.touch()  # the job ends while the first try sleeps until its next read
        wait_for(lambda: job.state is State.COMPLETED, "completed job")
    finally:
        first_try.send_signal(signal.SIGKILL)  # the worker dies before the task records success
        first_try.wait(timeout=30)
    assert first_try.returncode == -signal.SIGKILL  # it had not finished
    # the live queue forgets the job; accounting has it, without the key in its comment
    wait_for(lambda: not run.backend.scheduler.in_queue(job), "purge from the live queue")

    retry = outcome(run.start_try(2, poll_interval=0.5))

    print(f"\n== worker killed after job {job.job_id} completed; the retry: {retry}")
    assert [j.job_id for j in run.jobs()] == [job.job_id]  # one job for the task run
    assert retry["job_id"] == str(job.job_id)
    assert retry["xcom"]["job_state"] == "COMPLETED"
    assert retry["recorded"] == {}  # the task run is over: its record is deleted
