"""Two triggerers on one PostgreSQL database, the way Cloud Composer runs Airflow.

api-server, scheduler, dag-processor and two triggerers run as separate processes against a
PostgreSQL server the test starts, with a short triggerer health-check threshold, and the
``slurm_fleet`` DAG (twelve deferred jobs) against the emulator. Three cases, each checked in the
database and in the emulator's request log:

- stall: the triggerer holding the most triggers is stopped (SIGSTOP) until the other one adopts
  them, then resumed. Airflow 3.3 then stops the triggers it lost through ``on_kill``, as for a
  user's kill; no job may be cancelled.
- a user's kill: one deferred task marked failed, one marked success and one cleared through the
  REST API: their jobs, and only theirs, are cancelled, and the cleared task runs a new job.
- kill: the same as the stall with SIGKILL; the adopting triggerer's shared poller then makes at
  most two state calls per interval for all the jobs.
- shutdown: the triggerer holding the most triggers is stopped with SIGTERM, as at a deployment's
  rollout; it must exit (the seconds it takes are reported) without cancelling any job, and the
  other triggerer adopts its triggers.

Before Airflow 3.3, triggers have no ``on_kill``: a user's kill, a reassignment and a shutdown all
reach the trigger as a bare cancel, and the same state read tells them apart.

Each case prints its figures (run with ``-s`` to see them).
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import pytest

from airflow_provider_slurmapi.client.submission import submission_key
from airflow_provider_slurmapi.emulator import Emulator, LoggedCall
from airflow_provider_slurmapi.get_provider_info import CONN_FIELDS
from airflow_provider_slurmapi.version_compat import AIRFLOW_V_3_3_PLUS
from tests.conftest import CLUSTER, PROJECT, REGION, connection_json
from tests.deployment.airflow_services import (
    Airflow,
    RestApi,
    airflow_home,
    free_port,
    require_airflow_3,
    running,
    wait_for,
)
from tests.deployment.postgres import Postgres

pytestmark = pytest.mark.deployment

DAGS = Path(__file__).parent / "dags"
DAG_ID, TASK_ID, TASKS, POLL_INTERVAL = "slurm_fleet", "train", 12, 2.0  # as in dags/slurm_fleet.py
TRIGGERERS = ("triggerer-1", "triggerer-2")
ON_KILL = "Trigger cancelled by user action, invoking on_kill"  # Airflow's line
SPARED = "is still deferred (another triggerer watches it)"  # the trigger's answer
HEALTH_CHECK_THRESHOLD = 10  # seconds without a heartbeat before a triggerer's triggers are adopted


@pytest.fixture(scope="module", autouse=True)
def _requirements() -> None:
    require_airflow_3()


@pytest.fixture(scope="module")
def airflow(postgres: Postgres, emulator: Emulator, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Airflow]:
    home = airflow_home(tmp_path_factory, "airflow-postgres", DAGS / "slurm_fleet.py")
    settings = {
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": postgres.url,
        "AIRFLOW__TRIGGERER__TRIGGERER_HEALTH_CHECK_THRESHOLD": str(HEALTH_CHECK_THRESHOLD),
        "AIRFLOW__TRIGGERER__JOB_HEARTBEAT_SEC": "2",
        "AIRFLOW__CORE__PARALLELISM": "6",
        "AIRFLOW_CONN_SLURM_JOB_API_DEFAULT": connection_json(emulator),
    }
    with running(home, ["api-server", "scheduler", "dag-processor"], **settings) as deployment:
        with deployment.explained():
            for name in TRIGGERERS:  # one at a time, to learn which TriggererJob is which process
                start_triggerer(deployment, postgres, name)
        yield deployment


def start_triggerer(deployment: Airflow, postgres: Postgres, name: str) -> None:
    known = triggerer_jobs(postgres)
    # each serves its trigger logs on a port of its own
    deployment.start("triggerer", name=name, AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT=str(free_port()))
    (job_id,) = wait_for(lambda: triggerer_jobs(postgres) - known, 120, f"{name} to register")
    TRIGGERER_JOBS[job_id] = name


TRIGGERER_JOBS: dict[int, str] = {}  # TriggererJob ID -> our name for its process


def triggerer_jobs(db: Postgres) -> set[int]:
    return {job_id for (job_id,) in db.query("SELECT id FROM job WHERE job_type = 'TriggererJob'")}


@pytest.fixture(scope="module")
def api(airflow: Airflow) -> RestApi:
    return airflow.api_for(DAG_ID)


@dataclass
class Fleet:
    """One run of ``slurm_fleet``: its tasks, triggers and jobs, read from PostgreSQL and the emulator."""

    airflow: Airflow
    api: RestApi
    db: Postgres
    emulator: Emulator
    run_id: str = ""
    started: float = 0.0
    report: dict[str, Any] = field(default_factory=dict)

    def start(self, seconds: int) -> None:
        self.started = time.time()
        run = self.api.post(f"/api/v2/dags/{DAG_ID}/dagRuns", {"logical_date": None, "conf": {"seconds": seconds}})
        self.run_id = run["dag_run_id"]

    def task_states(self) -> dict[int, str | None]:
        rows = self.db.query(
            "SELECT map_index, state FROM task_instance WHERE dag_id = %s AND run_id = %s AND task_id = %s",
            DAG_ID,
            self.run_id,
            TASK_ID,
        )
        return dict(rows)

    def triggers_per_triggerer(self) -> dict[str, int]:
        """How many of this run's deferred tasks each triggerer holds (by component name)."""
        rows = self.db.query(
            "SELECT t.triggerer_id, count(*) FROM task_instance ti JOIN trigger t ON t.id = ti.trigger_id"
            " WHERE ti.dag_id = %s AND ti.run_id = %s AND ti.state = 'deferred' GROUP BY t.triggerer_id",
            DAG_ID,
            self.run_id,
        )
        return {TRIGGERER_JOBS.get(job, "unassigned" if job is None else f"job {job}"): count for job, count in rows}

    def record_triggers(self, label: str) -> dict[str, int]:
        held = self.triggers_per_triggerer()
        self.report[label] = {name: held.get(name, 0) for name in TRIGGERERS}
        return self.report[label]

    def jobs_per_task(self) -> dict[int, list[Any]]:
        """The emulator's jobs carrying each task's submission key."""
        backend: Any = self.emulator.backends[(PROJECT, REGION, CLUSTER)]
        jobs = list(backend.jobs.values())
        return {
            index: [job for job in jobs if submission_key(DAG_ID, TASK_ID, self.run_id, index) in job.comment.split()]
            for index in range(TASKS)
        }

    def job_of(self, map_index: int) -> Any:
        (job,) = self.jobs_per_task()[map_index]
        return job

    def trigger_log_count(self, triggerer: str, line: str) -> int:
        """How many of this run's trigger logs written by ``triggerer`` hold ``line``."""
        job_id = max(job for job, name in TRIGGERER_JOBS.items() if name == triggerer)  # its newest start
        run_logs = self.airflow.home / "logs" / f"dag_id={DAG_ID}" / f"run_id={self.run_id}"
        logs = run_logs.glob(f"task_id={TASK_ID}/map_index=*/attempt=*.log.trigger.{job_id}.log")
        return sum(1 for log in logs if line in log.read_text(errors="replace"))

    def calls(self, method: str, path: str, since: float | None = None) -> list[LoggedCall]:
        return self.emulator.requests.calls(method, path, since=self.started if since is None else since)

    def wait_all_watched(self, timeout: float = 240) -> None:
        """Every task deferred, its trigger assigned and already polling its job in a triggerer."""

        def all_deferred() -> bool:
            self.airflow.check_alive()
            states = self.task_states()
            assert "failed" not in states.values(), states
            return len(states) == TASKS and set(states.values()) == {"deferred"}

        wait_for(all_deferred, timeout, f"all {TASKS} tasks to be deferred")
        wait_for(lambda: "unassigned" not in self.triggers_per_triggerer(), 60, "every trigger to be assigned")
        assigned = time.time()
        job_ids = {str(self.job_of(index).job_id) for index in range(TASKS)}
        wait_for(lambda: job_ids <= self.polled_job_ids(assigned), 60, "every trigger to poll its job")

    def polled_job_ids(self, since: float) -> set[str]:
        return {job_id for call in self.calls("GET", "/jobs/state", since) for job_id in call.query.get("job_id", [])}

    def wait_until_done(self, timeout: float = 300) -> dict[int, str | None]:
        def done() -> dict[int, str | None] | None:
            self.airflow.check_alive()
            states = self.task_states()
            return states if all(state in ("success", "failed") for state in states.values()) else None

        return wait_for(done, timeout, "every task to finish")

    def adopted_by(self, survivor: str, since: float, timeout: float = 120) -> float:
        """Wait until ``survivor`` holds every trigger of the run; the seconds it took from ``since``."""
        wait_for(lambda: self.triggers_per_triggerer() == {survivor: TASKS}, timeout, f"{survivor} to adopt all")
        return time.time() - since

    def check_every_task_succeeded_with_one_job(self) -> None:
        states = self.wait_until_done()
        self.report["task states"] = dict(Counter(states.values()))
        jobs = self.jobs_per_task()
        self.report["jobs per task"] = dict(Counter(len(found) for found in jobs.values()))
        self.report["submits"] = len(self.calls("POST", "/job/submit$"))
        deletes = self.calls("DELETE", "/job/")
        self.report["DELETEs seen"] = len(deletes)
        self.report["Slurm job states"] = dict(Counter(str(found[0].state.value) for found in jobs.values() if found))
        assert not deletes, f"jobs cancelled: {[call.path for call in deletes]}"
        assert set(states.values()) == {"success"}, states
        assert all(len(found) == 1 for found in jobs.values()), {i: len(found) for i, found in jobs.items()}
        assert self.report["submits"] == TASKS

    def print_report(self, case: str) -> None:
        print(f"\n== {case}: " + "; ".join(f"{key}: {value}" for key, value in self.report.items()))


@pytest.fixture
def fleet(airflow: Airflow, api: RestApi, postgres: Postgres, emulator: Emulator) -> Fleet:
    return Fleet(airflow, api, postgres, emulator)


def process_tree(airflow: Airflow, name: str) -> list[psutil.Process]:
    parent = psutil.Process(airflow.processes[name].pid)
    return [parent, *parent.children(recursive=True)]


@contextlib.contextmanager
def stalled(airflow: Airflow, name: str) -> Iterator[None]:
    """The triggerer and its trigger runner stopped as by a CPU-starved pod; resumed on leaving."""
    tree = process_tree(airflow, name)
    for process in tree:
        process.send_signal(signal.SIGSTOP)
    try:
        yield
    finally:
        for process in tree:
            with contextlib.suppress(psutil.NoSuchProcess):
                process.send_signal(signal.SIGCONT)


def start_watched_run(fleet: Fleet, seconds: int) -> tuple[str, str]:
    """Start a run and wait until every job is watched: the triggerer holding most of its triggers, and the other."""
    fleet.start(seconds)
    fleet.wait_all_watched()
    held = fleet.record_triggers("triggers before")
    victim = max(TRIGGERERS, key=lambda name: held[name])
    (survivor,) = (name for name in TRIGGERERS if name != victim)
    return victim, survivor


def test_stalled_triggerer_that_resumes_cancels_nothing(fleet: Fleet) -> None:
    with fleet.airflow.explained():
        victim, survivor = start_watched_run(fleet, seconds=60)
        stopped_at = time.time()
        with stalled(fleet.airflow, victim):
            fleet.report["seconds to adoption"] = round(fleet.adopted_by(survivor, stopped_at), 1)
        resumed_at = time.time()
        fleet.record_triggers("triggers after")
        fleet.report["seconds stalled"] = round(resumed_at - stopped_at, 1)
        # Airflow 3.3 stops every trigger the resumed triggerer lost through on_kill, as for a user's
        # kill; each must see its task still deferred and leave the job alone
        lost = fleet.report["triggers before"][victim]
        wait_for(lambda: fleet.trigger_log_count(victim, SPARED) == lost, 60, f"{victim} to stop its {lost} triggers")
        fleet.report["on_kill calls in the resumed triggerer"] = fleet.trigger_log_count(victim, ON_KILL)
        fleet.report["jobs it left running"] = fleet.trigger_log_count(victim, SPARED)
        # before 3.3 a trigger has no on_kill: it sees a bare cancel, and reads its task's state the same way
        assert fleet.report["on_kill calls in the resumed triggerer"] == (lost if AIRFLOW_V_3_3_PLUS else 0)
        fleet.check_every_task_succeeded_with_one_job()
        fleet.print_report("stall")


def test_a_users_mark_failed_mark_success_and_clear_cancel_their_jobs_only(fleet: Fleet) -> None:
    """Task 0 marked failed, task 1 marked success, task 2 cleared: each cancels its job, and the
    cleared task runs a job afresh; the other tasks' jobs are left alone."""
    with fleet.airflow.explained():
        fleet.start(seconds=30)
        fleet.wait_all_watched()
        fleet.record_triggers("triggers before")
        failed, succeeded, cleared = (fleet.job_of(index) for index in range(3))
        acted_at = time.time()
        task_path = f"/api/v2/dags/{DAG_ID}/dagRuns/{fleet.run_id}/taskInstances/{TASK_ID}"
        fleet.api.patch(f"{task_path}/0", {"new_state": "failed"})
        fleet.api.patch(f"{task_path}/1", {"new_state": "success"})
        fleet.api.post(
            f"/api/v2/dags/{DAG_ID}/clearTaskInstances",
            {"dry_run": False, "only_failed": False, "dag_run_id": fleet.run_id, "task_ids": [[TASK_ID, 2]]},
        )
        for job in (failed, succeeded, cleared):
            cancel = wait_for(
                lambda job=job: fleet.calls("DELETE", f"/job/{job.job_id}$"), 60, f"job {job.job_id}'s cancel"
            )
            fleet.report[f"seconds to cancel job {job.job_id}"] = round(cancel[0].at - acted_at, 1)
        states = fleet.wait_until_done()
        jobs = fleet.jobs_per_task()
        cancelled = {call.path.rsplit("/", 1)[-1] for call in fleet.calls("DELETE", "/job/")}
        fleet.report["task states"] = dict(Counter(states.values()))
        fleet.report["jobs cancelled"] = sorted(cancelled, key=int)
        fleet.report["jobs of the cleared task"] = [(job.job_id, job.state.value) for job in jobs[2]]
        fleet.report["jobs per task"] = dict(Counter(len(found) for found in jobs.values()))
        assert cancelled == {str(job.job_id) for job in (failed, succeeded, cleared)}
        for job in (failed, succeeded, cleared):
            assert wait_for(lambda job=job: job.state.value == "CANCELLED" or None, 30, f"job {job.job_id} CANCELLED")
        assert states == {0: "failed", **{index: "success" for index in range(1, TASKS)}}
        # the cleared task ran afresh: its first job cancelled, a new one that completed
        assert [job.state.value for job in jobs[2]] == ["CANCELLED", "COMPLETED"]
        others = [found[0].state.value for index, found in jobs.items() if index > 2]
        assert others == ["COMPLETED"] * (TASKS - 3)
        assert all(len(found) == 1 for index, found in jobs.items() if index != 2)
        fleet.print_report("a user's mark failed, mark success and clear")


def test_killed_triggerer_is_replaced_and_one_poller_serves_all_jobs(fleet: Fleet) -> None:
    with fleet.airflow.explained():
        victim, survivor = start_watched_run(fleet, seconds=60)
        killed_at = time.time()
        for process in process_tree(fleet.airflow, victim):
            with contextlib.suppress(psutil.NoSuchProcess):
                process.kill()
        fleet.airflow.processes.pop(victim).wait(timeout=30)  # gone on purpose: not a component failure
        fleet.report["seconds to adoption"] = round(fleet.adopted_by(survivor, killed_at), 1)
        adopted_at = time.time()
        fleet.record_triggers("triggers after")
        fleet.check_every_task_succeeded_with_one_job()
        # the survivor's one poller asks for every job's state in one call per interval
        first_full_poll = min(
            call.at
            for call in fleet.calls("GET", "/jobs/state", adopted_at)
            if len(call.query.get("job_id", [])) == TASKS
        )
        ends = [job.end_time for found in fleet.jobs_per_task().values() for job in found if job.end_time]
        state_calls = [call.at for call in fleet.calls("GET", "/jobs/state", first_full_poll) if call.at < min(ends)]
        most = max(sum(1 for t in state_calls if start <= t < start + POLL_INTERVAL) for start in state_calls)
        fleet.report["state calls per interval after adoption (most)"] = most
        fleet.report["state calls"] = f"{len(state_calls)} in {min(ends) - first_full_poll:.0f} s"
        assert most <= 2, state_calls
        fleet.print_report("kill")


def test_a_triggerer_shut_down_cancels_nothing_and_hands_its_jobs_over(fleet: Fleet) -> None:
    with fleet.airflow.explained():
        for name in TRIGGERERS:  # the kill case left one
            if name not in fleet.airflow.processes:
                start_triggerer(fleet.airflow, fleet.db, name)
        victim, survivor = start_watched_run(fleet, seconds=60)
        tree = process_tree(fleet.airflow, victim)
        process = fleet.airflow.processes.pop(victim)  # stopped on purpose: not a component failure
        stopping_at = time.time()
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=60)
            fleet.report["seconds to exit after SIGTERM"] = round(time.time() - stopping_at, 1)
        except subprocess.TimeoutExpired:  # as a pod's grace period ends: SIGKILL
            fleet.report["seconds to exit after SIGTERM"] = "over 60: SIGKILLed"
            for child in tree:
                with contextlib.suppress(psutil.NoSuchProcess):
                    child.kill()
            process.wait(timeout=30)
        fleet.report["seconds to adoption"] = round(fleet.adopted_by(survivor, stopping_at), 1)
        fleet.report["jobs the stopping triggerer left running"] = fleet.trigger_log_count(victim, SPARED)
        fleet.record_triggers("triggers after")
        fleet.check_every_task_succeeded_with_one_job()
        fleet.print_report("shutdown")


def test_the_connection_forms_fields_come_from_the_api_server(api: RestApi) -> None:
    """What the UI's connection form shows: from ``conn-fields`` on 3.2+, from the hook's widgets on 3.1."""
    hooks = api.get("/ui/connections/hook_meta")
    (ours,) = [hook for hook in hooks if hook["connection_type"] == "slurm_job_api"]
    print(f"\n== connection form: {ours['hook_name']}: {', '.join(ours['extra_fields'])}")
    assert ours["hook_name"] == "Google Cloud Slurm Job API"
    assert sorted(ours["extra_fields"]) == sorted(CONN_FIELDS)
    assert ours["extra_fields"]["project_id"]["schema"]["type"] in ("string", ["string", "null"])
