"""One emulator per backend: ``builtin`` (our model of Slurm) and ``slurmrestd`` (a real Slurm).

Every scenario runs once on each; the replies each backend gave are recorded by scenario, so
``test_reply_shapes.py`` can compare them once both backends have run.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import requests

from airflow_provider_slurmapi.client.jobs import JobStatus
from airflow_provider_slurmapi.emulator import Emulator, EmulatorConfig
from airflow_provider_slurmapi.hooks.slurm_job_api import SlurmJobApiHook
from tests.conftest import connection_json
from tests.real_slurm import NODE, RealSlurm

BACKENDS = ("builtin", "slurmrestd")

# (method, path with job ids as {id}, Slurm HTTP status) -> the replies seen, per scenario
ReplyKey = tuple[str, str, str, int]
RECORDED: dict[str, dict[ReplyKey, list[dict[str, Any]]]] = {name: defaultdict(list) for name in BACKENDS}
# The job IDs each scenario submitted, by backend: replies listing the whole queue also show
# jobs of earlier scenarios, which only that scenario compares.
SUBMITTED: dict[str, dict[str, set[str]]] = {name: defaultdict(set) for name in BACKENDS}
SKIPPED: dict[str, str] = {}


def route_of(path: str) -> str:
    path, _, query = path.partition("?")
    route = re.sub(r"/job/\d+(_\d+)?$", "/job/{id}", path.rstrip("/"))
    keys = sorted({part.split("=")[0] for part in query.split("&") if part})
    return route + ("?" + "&".join(keys) if keys else "")


@dataclass
class Recorder:
    """A ``requests`` response hook that keeps every Slurm reply the hook receives."""

    backend: str
    scenario: str = "setup"

    def __call__(self, response: requests.Response, *args: Any, **kwargs: Any) -> None:
        if "callSlurmRestApi" not in response.url or response.status_code != 200:
            return
        sent = json.loads(response.request.body or b"{}")
        payload = response.json()
        body = payload.get("structuredBody")
        if isinstance(body, dict):
            key = (
                self.scenario,
                sent["method"].removeprefix("HTTP_METHOD_"),
                route_of(sent["path"]),
                payload["status"],
            )
            RECORDED[self.backend][key].append(body)


@dataclass
class Cluster:
    """A scenario's handle on one backend: the hook, plus what the scenario submitted."""

    backend: str
    hook: SlurmJobApiHook
    recorder: Recorder
    real: RealSlurm | None = None  # None for the built-in backend
    emulator: Emulator | None = None
    submitted: list[str] = field(default_factory=list)

    def host_path(self, path: str) -> Path:
        """Where a file a job wrote is, seen from here."""
        return self.real.host_path(path) if self.real else Path(path)

    def submit(self, script: str, **job: Any) -> str:
        desc = {"name": "scenario", "current_working_directory": "/tmp", "time_limit": 10, **job}
        job_id = self.hook.submit_job(desc, script)
        self.submitted.append(job_id)
        return job_id

    def wait(self, job_id: str, timeout: float = 240) -> JobStatus:
        return self.hook.wait_for_job(job_id, poll_interval=1, timeout=timeout)

    def wait_for_state(self, job_id: str, state: str, timeout: float = 60) -> JobStatus:
        deadline = time.monotonic() + timeout
        while True:
            status = self.hook.get_job(job_id)
            if status.state == state or status.is_finished:
                return status
            if time.monotonic() > deadline:
                raise TimeoutError(f"job {job_id} never reached {state}: {status.describe()}")
            time.sleep(0.5)

    def act(self, action: str, job_id: str) -> None:
        """What the cluster or an administrator does to a job: ``requeue``, ``requeuehold``, ``hold``,
        ``release``, ``node_fail`` (its node goes DOWN) or ``preempt`` (a job of a higher-tier
        partition needs its node). Real Slurm gets the real command; the built-in backend plays it
        through the emulator's control."""
        if self.real is None:
            assert self.emulator is not None
            self.emulator.control(job_id, action)
        elif action == "node_fail":
            self.real.fail_node()
        elif action == "preempt":  # submitted as an administrator would, so the hook records no reply of it
            cpus = str(self.node_cpus())
            self.real.admin("sbatch", "-p", "urgent", "-c", cpus, "-o", "/dev/null", "--wrap", "sleep 2")
        else:
            self.real.admin("scontrol", action, job_id)

    def start_now(self, job_id: str) -> None:
        """A requeued job waits out a begin time (real Slurm: about 121 s after the requeue; the
        built-in backend's ``requeue_delay``); an administrator can let it start at once."""
        if self.real is None:
            return
        deadline = time.monotonic() + 60
        while not self._back_to_pending(job_id) and time.monotonic() < deadline:
            time.sleep(0.5)
        self.real.admin("scontrol", "update", f"jobid={job_id}", "starttime=now")

    def _back_to_pending(self, job_id: str) -> bool:
        status = self.hook.get_job(job_id)
        return status.state == "PENDING" and not status.flags and status.restarts > 0

    def node_cpus(self) -> int:
        """All the CPUs of the node, so that a job of a higher tier must preempt a job asking for them."""
        if self.real is None:
            return len(os.sched_getaffinity(0))  # what scripts/slurm-up.sh gives the real node (nproc)
        return int(self.real.admin("sinfo", "-h", "-n", NODE, "-o", "%c").split()[0])

    def cleanup(self) -> None:
        """Cancel whatever a failed scenario left behind, so it cannot hold the node."""
        for job_id in self.submitted:
            try:
                if not self.hook.get_job(job_id).is_finished:
                    self.hook.cancel_job(job_id)
            except Exception:  # best effort: the scenario's own failure is the one to report
                pass


def _emulator_config(backend: str, request: pytest.FixtureRequest, work: Any) -> EmulatorConfig:
    common = {"key_file": work / "key.json", "state_dir": work / "jobs"}
    if backend == "builtin":
        # the real cluster's MinJobAge and scheduler delay; a minute of time limit lasts 5 s
        # requeue_delay: the begin time of a requeued job, which the scenarios skip on real Slurm
        return EmulatorConfig(
            min_job_age=10, sched_delay=2, seconds_per_minute=5, kill_wait=1, requeue_delay=2, **common
        )
    return request.getfixturevalue("real_slurm").emulator_config(**common)


@pytest.fixture(scope="session", params=["builtin", pytest.param("slurmrestd", marks=pytest.mark.real_slurm)])
def emulator_backend(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, Emulator]]:
    backend = request.param
    try:
        config = _emulator_config(backend, request, tmp_path_factory.mktemp(f"emulator-{backend}"))
    except pytest.skip.Exception as skip:
        SKIPPED[backend] = str(skip)
        raise
    with Emulator(config) as emu:
        yield backend, emu


@pytest.fixture(scope="session")
def _hooks(emulator_backend: tuple[str, Emulator]) -> Iterator[tuple[SlurmJobApiHook, Recorder]]:
    backend, emu = emulator_backend
    conn_id = f"slurm_scenarios_{backend}"
    os.environ[f"AIRFLOW_CONN_{conn_id.upper()}"] = connection_json(emu)
    hook = SlurmJobApiHook(slurm_conn_id=conn_id)
    recorder = Recorder(backend)
    hook.client.session.hooks["response"].append(recorder)
    yield hook, recorder
    os.environ.pop(f"AIRFLOW_CONN_{conn_id.upper()}", None)


@pytest.fixture
def cluster(request: pytest.FixtureRequest, emulator_backend: tuple[str, Emulator], _hooks: Any) -> Iterator[Cluster]:
    hook, recorder = _hooks
    recorder.scenario = request.node.originalname.removeprefix("test_")
    backend = emulator_backend[0]
    real = request.getfixturevalue("real_slurm") if backend == "slurmrestd" else None
    handle = Cluster(backend, hook, recorder, real, emulator_backend[1])
    yield handle
    SUBMITTED[backend][recorder.scenario].update(handle.submitted)
    recorder.scenario = "cleanup"
    handle.cleanup()


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The shape comparison needs both backends' recordings, so it runs after every scenario."""
    last = [item for item in items if item.get_closest_marker("after_scenarios")]
    items[:] = [item for item in items if item not in last] + last
