"""The Celery executor on PostgreSQL and Redis, as Cloud Composer runs Airflow: api-server,
scheduler, dag-processor, a triggerer and two Celery workers, all on one Airflow 3 metadata
database in PostgreSQL, against the emulator. The Slurm connection is stored in that database, so
every process (the workers' submits, the triggerer's async lookups) reads it from there.

One run of twenty deferred tasks, submitted across both workers, and one worker-side wait; while
they wait, the wait's Celery worker is SIGKILLed (Airflow retries the task on the other worker, and
the retry must reattach the same Slurm job) and the scheduler is restarted. Nothing may be
resubmitted. The test prints its figures (run with ``-s`` to see them).
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from airflow_provider_slurmapi.client.submission import submission_key
from airflow_provider_slurmapi.emulator import Emulator, LoggedCall
from tests.conftest import CLUSTER, PROJECT, REGION, connection_json
from tests.deployment.airflow_services import (
    AIRFLOW,
    Airflow,
    RestApi,
    airflow_home,
    free_port,
    require_airflow_3,
    running,
    stop_process_group,
    wait_for,
)
from tests.deployment.postgres import Postgres
from tests.deployment.redis import redis_server

pytestmark = pytest.mark.deployment

DAGS = Path(__file__).parent / "dags"
FLEET, WORKER_WAIT, TASK_ID = "slurm_celery_fleet", "slurm_celery_worker_wait", "train"
FLEET_TASKS, POLL_INTERVAL = 20, 2.0  # as in dags/slurm_celery.py
WORKERS = ("worker-1", "worker-2")
HEARTBEAT_TIMEOUT = 15  # seconds without a task heartbeat before the scheduler fails the try
# The name a worker's task instances record as their hostname: both workers run on this machine.
HOSTNAME_MODULE = '"""The name of this Celery worker, for the task instances it runs."""\nimport os\n\n\ndef hostname() -> str:\n    return os.environ["WORKER_NAME"]\n'


@pytest.fixture(scope="module", autouse=True)
def _requirements() -> None:
    require_airflow_3()


@pytest.fixture(scope="module")
def redis() -> Iterator[str]:
    with redis_server() as url:
        yield url


@pytest.fixture(scope="module")
def airflow(
    postgres: Postgres, redis: str, emulator: Emulator, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Airflow]:
    started = time.monotonic()
    home = airflow_home(tmp_path_factory, "airflow-celery", DAGS / "slurm_celery.py")
    (home / "worker_name.py").write_text(HOSTNAME_MODULE)
    settings = {
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": postgres.url,
        "AIRFLOW__CORE__EXECUTOR": "CeleryExecutor",
        "AIRFLOW__CORE__PARALLELISM": "32",
        "AIRFLOW__CELERY__BROKER_URL": redis,
        "AIRFLOW__CELERY__WORKER_CONCURRENCY": "8",
        "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": str(HEARTBEAT_TIMEOUT),
        "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT_DETECTION_INTERVAL": "5",
        "AIRFLOW__CORE__HOSTNAME_CALLABLE": "worker_name.hostname",
        "PYTHONPATH": str(home),
        "WORKER_NAME": "not-a-worker",
    }
    components = ["api-server", "scheduler", "dag-processor", "triggerer"]
    with running(home, components, lambda deployment: add_connection(deployment, emulator), **settings) as deployment:
        with deployment.explained():
            for name in WORKERS:
                start_worker(deployment, name)
            wait_for(lambda: workers_ready(deployment), 120, "both Celery workers to be ready")
        setup = time.monotonic() - started
        print(f"\n== Celery deployment up in {setup:.0f} s: {len(airflow_processes(deployment))} processes")
        yield deployment


def add_connection(deployment: Airflow, emulator: Emulator) -> None:
    """The Slurm connection in the metadata database: no AIRFLOW_CONN_ variable on any process."""
    connection = json.loads(connection_json(emulator))
    result = subprocess.run(
        [AIRFLOW, "connections", "add", "slurm_job_api_default", "--conn-type", connection["conn_type"],
         "--conn-extra", json.dumps(connection["extra"])],
        env=deployment.env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert not any(name.startswith("AIRFLOW_CONN_") for name in deployment.env)


def start_worker(deployment: Airflow, name: str) -> None:
    deployment.start(
        "celery",
        "worker",
        "--celery-hostname",
        f"{name}@%h",
        name=name,
        WORKER_NAME=name,
        # each serves its task logs on a port of its own
        AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT=str(free_port()),
    )


def workers_ready(deployment: Airflow) -> bool:
    deployment.check_alive()
    return all("ready." in deployment.log_file(name).read_text(errors="replace") for name in WORKERS)


def airflow_processes(deployment: Airflow) -> list[psutil.Process]:
    found = []
    for process in deployment.processes.values():
        with contextlib.suppress(psutil.NoSuchProcess):
            parent = psutil.Process(process.pid)
            found += [parent, *parent.children(recursive=True)]
    return found


@pytest.fixture(scope="module")
def api(airflow: Airflow) -> RestApi:
    api = airflow.api_for(FLEET)
    airflow.api_for(WORKER_WAIT)
    return api


class Run:
    """One DAG run: its task instances (from PostgreSQL) and its jobs (from the emulator)."""

    def __init__(self, api: RestApi, db: Postgres, emulator: Emulator, dag_id: str, seconds: int) -> None:
        self.db, self.emulator, self.dag_id = db, emulator, dag_id
        self.started = time.time()
        created = api.post(f"/api/v2/dags/{dag_id}/dagRuns", {"logical_date": None, "conf": {"seconds": seconds}})
        self.run_id = created["dag_run_id"]

    def task_instances(self) -> dict[int, tuple[str | None, str | None, int]]:
        """map_index -> (state, hostname, try_number)."""
        rows = self.db.query(
            "SELECT map_index, state, hostname, try_number FROM task_instance WHERE dag_id = %s AND run_id = %s",
            self.dag_id,
            self.run_id,
        )
        return {index: (state, host, tries) for index, state, host, tries in rows}

    def states(self) -> dict[int, str | None]:
        return {index: ti[0] for index, ti in self.task_instances().items()}

    def jobs_per_task(self) -> dict[int, list[Any]]:
        backend: Any = self.emulator.backends[(PROJECT, REGION, CLUSTER)]
        jobs = list(backend.jobs.values())
        return {
            index: [
                job for job in jobs if submission_key(self.dag_id, TASK_ID, self.run_id, index) in job.comment.split()
            ]
            for index in self.states()
        }

    def submits(self) -> list[LoggedCall]:
        return self.emulator.requests.calls("POST", "/job/submit$", since=self.started)

    def wait_until(self, states: set[str], timeout: float, deployment: Airflow, count: int | None = None) -> None:
        def reached() -> bool:
            deployment.check_alive()
            found = self.states()
            return bool(found) and (count is None or len(found) == count) and set(found.values()) <= states

        wait_for(reached, timeout, f"{self.dag_id} tasks to be {states}")

    def wait_done(self, deployment: Airflow, timeout: float = 300) -> dict[int, str | None]:
        self.wait_until({"success", "failed"}, timeout, deployment)
        return self.states()


def poller_calls(emulator: Emulator, since: float, until: float = float("inf")) -> list[float]:
    """When the triggerer made its bulk calls (the state list, or the queue's changes while a job pends)."""
    return [call.at for call in emulator.requests.calls("GET", "/jobs/(state/?)?$", since=since) if call.at < until]


def poller_calls_per_interval(emulator: Emulator, since: float, until: float) -> int:
    """The most bulk calls the triggerer made in any one poll interval between two times."""
    calls = poller_calls(emulator, since, until)
    seen = Counter(f"{c.method} {c.path}" for c in emulator.requests.calls(since=since) if c.at < until)
    assert calls, f"no bulk call: the triggers did not share a poller; calls meanwhile: {dict(seen)}"
    return max(sum(1 for t in calls if start <= t < start + POLL_INTERVAL) for start in calls)


def kill_worker(airflow: Airflow, name: str) -> None:
    """SIGKILL a Celery worker with its pool and task processes, as when its machine dies."""
    worker = psutil.Process(airflow.processes[name].pid)
    for process in [worker, *worker.children(recursive=True)]:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.kill()
    airflow.processes.pop(name).wait(timeout=30)  # gone on purpose: not a component failure


def test_deferred_tasks_a_lost_worker_and_a_scheduler_restart(
    airflow: Airflow, api: RestApi, postgres: Postgres, emulator: Emulator
) -> None:
    """One run of each DAG, and while they wait: the worker-side wait's worker is SIGKILLed, and
    the scheduler is stopped (SIGTERM) and started again."""
    with airflow.explained():
        began = time.monotonic()
        fleet = Run(api, postgres, emulator, FLEET, seconds=35)
        waiter = Run(api, postgres, emulator, WORKER_WAIT, seconds=45)
        fleet.wait_until({"deferred"}, 180, airflow, count=FLEET_TASKS)
        submitted_on = Counter(host for _, host, _ in fleet.task_instances().values())
        waiter.wait_until({"running"}, 120, airflow)
        job = wait_for(lambda: [j for j in waiter.jobs_per_task()[-1] if j.state.value == "RUNNING"], 60, "the job")
        (_, victim, first_try) = waiter.task_instances()[-1]
        assert victim in WORKERS, victim
        watched = killed_at = time.time()
        kill_worker(airflow, victim)
        stop_process_group(airflow.processes.pop("scheduler"))
        airflow.start("scheduler")
        restarted = time.time()
        # the fleet's jobs run on: what the triggerer's poller costs meanwhile, once it polls them
        polling = wait_for(lambda: poller_calls(emulator, watched), 60, "the shared poller's first call")[0]
        time.sleep(3 * POLL_INTERVAL)
        most = poller_calls_per_interval(emulator, polling, time.time())
        retried = wait_for(
            lambda: (ti := waiter.task_instances()[-1])[2] > first_try and ti[0] == "running" and ti, 180, "the retry"
        )
        seconds_to_retry = time.time() - killed_at
        fleet_states, waiter_states = fleet.wait_done(airflow), waiter.wait_done(airflow)
        jobs = {**fleet.jobs_per_task(), -2: waiter.jobs_per_task()[-1]}
        report = {
            "fleet task states": dict(Counter(fleet_states.values())),
            "fleet tasks submitted per worker": dict(submitted_on),
            "bulk calls per interval while the fleet waited (most)": most,
            "worker killed": victim,
            "worker-side retry on": retried[1],
            "try": retried[2],
            "seconds from kill to retry running": round(seconds_to_retry, 1),
            "worker-side task state": waiter_states[-1],
            "worker-side jobs": [(j.job_id, j.state.value) for j in jobs[-2]],
            "scheduler restarted after (s)": round(restarted - fleet.started, 1),
            "submits": len(fleet.submits()),  # since the fleet started: the worker-side run's too
            "jobs per task": dict(Counter(len(found) for found in jobs.values())),
            "wall time (s)": round(time.monotonic() - began, 1),
            "processes": len(airflow_processes(airflow)),
        }
        print("\n== Celery: " + "; ".join(f"{k}: {v}" for k, v in report.items()))
        assert set(fleet_states.values()) == {"success"} and len(fleet_states) == FLEET_TASKS, fleet_states
        assert set(submitted_on) == set(WORKERS), report  # both workers took some
        assert most <= 2, most
        assert waiter_states == {-1: "success"}, waiter_states
        assert retried[1] != victim and retried[1] in WORKERS, report  # retried on the other worker
        assert report["worker-side jobs"] == [(job[0].job_id, "COMPLETED")], report  # reattached, not resubmitted
        assert all(len(found) == 1 for found in jobs.values()), report  # nothing resubmitted
        assert report["submits"] == FLEET_TASKS + 1, report
