"""A task run submits its Slurm job once: retries reattach or adopt, lost replies are reconciled."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_slurmapi.client.operations import CLOCK_SKEW_SECONDS
from airflow_provider_slurmapi.client.submission import carries_key, submission_key
from airflow_provider_slurmapi.emulator import Emulator, ScriptedFault
from airflow_provider_slurmapi.hooks.slurm_job_api import SlurmJobApiHook
from airflow_provider_slurmapi.operators.job import SlurmSubmitJobOperator
from tests.conftest import connection_json
from tests.integration.airflow_runtime import RecordingTaskInstance
from tests.jobs import JOB

RETRIES = 2
# a failed submit is looked for this long after; the emulator's late_landing lands 2 s after its 504
SETTLE_SECONDS = 3


@pytest.fixture
def slurm_connection(emulator: Emulator, monkeypatch: pytest.MonkeyPatch) -> str:
    """The default connection, whose submits settle for SETTLE_SECONDS instead of the default 10."""
    extra = {"submit_settle_seconds": str(SETTLE_SECONDS)}
    monkeypatch.setenv("AIRFLOW_CONN_SLURM_JOB_API_DEFAULT", connection_json(emulator, **extra))
    return "slurm_job_api_default"


class TaskStateStore:
    """Airflow 3.3's ``context["task_state_store"]``: kept across the tries of one task run."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}
        self.reads: list[str] = []

    def get(self, key: str, default: Any = None) -> Any:
        self.reads.append(key)
        return self.values.get(key, default)

    def set(self, key: str, value: Any) -> None:
        self.values[key] = value


class DagRun:
    """What the operator reads of ``context["dag_run"]``: the earliest the run could start."""

    def __init__(self) -> None:
        self.run_after = datetime.now(UTC)


class TaskRun:
    """The tries of one task run: automatic retries and user clears, as Airflow numbers them."""

    def __init__(self, store: TaskStateStore | None = None) -> None:
        self.first = RecordingTaskInstance(try_number=1, retries=RETRIES)
        self.try_number, self.max_tries = 1, RETRIES
        self.store = store
        self.dag_run = DagRun()

    def context(self) -> dict[str, Any]:
        ti = RecordingTaskInstance(try_number=self.try_number, retries=self.max_tries, run_id=self.first.run_id)
        store = {"task_state_store": self.store} if self.store is not None else {}
        return {"ti": ti, "dag_run": self.dag_run, **store}

    def automatic_retry(self) -> None:
        self.try_number += 1

    def user_clear(self) -> None:
        self.max_tries = self.try_number + RETRIES  # what clearing a task does
        self.try_number += 1

    @property
    def key(self) -> str:
        return submission_key(self.first.dag_id, self.first.task_id, self.first.run_id, -1)


def operator(body: str, **kwargs: Any) -> SlurmSubmitJobOperator:
    kwargs.setdefault("job", JOB)
    return SlurmSubmitJobOperator(
        task_id="t",
        script=f"#!/bin/bash\n{body}\n",
        poll_interval=0.3,
        deferrable=False,
        retries=RETRIES,
        **kwargs,
    )


def jobs_of(emulator: Emulator, run: TaskRun) -> list[str]:
    hook = SlurmJobApiHook()
    listed = hook.call("GET", "/slurmdb/v0.0.42/jobs")["jobs"]
    return sorted({str(job["job_id"]) for job in listed if run.key in (job["comment"]["job"] or "").split()})


def wait_finished(job_id: str) -> None:
    SlurmJobApiHook().wait_for_job(job_id, poll_interval=0.3, timeout=30)


def wait_running(job_id: str) -> None:
    deadline = time.monotonic() + 30
    while SlurmJobApiHook().get_job(job_id).state != "RUNNING":
        assert time.monotonic() < deadline, f"job {job_id} never started"
        time.sleep(0.2)


def test_the_job_carries_the_task_runs_key(slurm_connection: str, emulator: Emulator) -> None:
    run = TaskRun()
    op = operator("exit 0", job={**JOB, "comment": "nightly"})
    job_id = op.execute(run.context())
    status = SlurmJobApiHook().get_job(job_id)
    assert status.comment == f"nightly {run.key}" and carries_key(status, run.key)
    assert jobs_of(emulator, run) == [job_id]


def test_a_retry_reattaches_to_the_job_still_running(slurm_connection: str, emulator: Emulator) -> None:
    run = TaskRun()
    first = operator("sleep 3", wait_for_completion=False).execute(run.context())  # then the worker dies
    run.automatic_retry()
    ctx = run.context()
    assert operator("sleep 3").execute(ctx) == first
    assert ctx["ti"].xcom["job_state"] == "COMPLETED"
    assert jobs_of(emulator, run) == [first]


def slow_to_stop(ready: Path) -> str:
    """A job that takes 2 s to stop once cancelled (Slurm shows it CANCELLED+COMPLETING meanwhile).

    It touches ``ready`` once its trap is set: a cancel before that would kill it at once.
    """
    return f"trap 'sleep 2; exit 143' TERM\ntouch {ready}\nsleep 60 &\nwait"


def wait_for_file(path: Path) -> None:
    deadline = time.monotonic() + 30
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.1)


def state_of(job_id: str) -> str:
    return SlurmJobApiHook().get_job(job_id).state


def test_a_cleared_task_cancels_the_job_still_running_and_submits_afresh(
    slurm_connection: str, emulator: Emulator, tmp_path: Path
) -> None:
    run = TaskRun()
    ready = tmp_path / "trap-set"
    first = operator(slow_to_stop(ready), wait_for_completion=False).execute(run.context())
    wait_for_file(ready)
    run.user_clear()  # the killed try's cancel has not reached Slurm yet: the new try cancels it
    ctx = run.context()
    second = operator("exit 0").execute(ctx)
    assert second != first and ctx["ti"].xcom["job_state"] == "COMPLETED"
    wait_finished(first)
    assert state_of(first) == "CANCELLED"
    assert jobs_of(emulator, run) == sorted([first, second], key=int)


def test_a_cleared_task_whose_killed_try_cancelled_its_job_submits_afresh(
    slurm_connection: str, emulator: Emulator, tmp_path: Path
) -> None:
    run = TaskRun()
    ready = tmp_path / "trap-set"
    killed = operator(slow_to_stop(ready), wait_for_completion=False)
    first = killed.execute(run.context())
    wait_for_file(ready)
    killed.on_kill()  # what clearing a running task does to its try
    assert "COMPLETING" in SlurmJobApiHook().get_job(first).flags  # not over yet when the new try starts
    run.user_clear()
    ctx = run.context()
    second = operator("exit 0").execute(ctx)  # neither reattached to the cancelled job nor failed CANCELLED
    assert second != first and ctx["ti"].xcom["job_state"] == "COMPLETED"
    assert jobs_of(emulator, run) == sorted([first, second], key=int)


def test_a_retry_adopts_a_job_that_completed(slurm_connection: str, emulator: Emulator) -> None:
    run = TaskRun()
    first = operator("exit 0", wait_for_completion=False).execute(run.context())
    wait_finished(first)  # the job ended while no attempt was watching
    run.automatic_retry()
    ctx = run.context()
    assert operator("exit 0").execute(ctx) == first
    usage = ctx["ti"].xcom.pop("usage")
    ctx["ti"].xcom.pop("slurm_connection")  # for the Slurm job tab (tests/integration/test_operators.py)
    assert ctx["ti"].xcom == {"job_id": first, "job_state": "COMPLETED", "exit_code": 0}
    assert usage["job_id"] == first and usage["cpus"] == 1 and usage["nodes"] == 1
    assert jobs_of(emulator, run) == [first]


def test_a_cleared_task_runs_its_job_again(slurm_connection: str, emulator: Emulator) -> None:
    run = TaskRun()
    first = operator("exit 0").execute(run.context())
    run.user_clear()
    second = operator("exit 0").execute(run.context())
    assert second != first
    assert jobs_of(emulator, run) == sorted([first, second])


@pytest.mark.parametrize(("policy", "clear", "adopted"), [("never", False, False), ("always", True, True)])
def test_reuse_completed_job_is_configurable(
    slurm_connection: str, emulator: Emulator, policy: str, clear: bool, adopted: bool
) -> None:
    run = TaskRun()
    first = operator("exit 0").execute(run.context())
    run.user_clear() if clear else run.automatic_retry()
    again = operator("exit 0", reuse_completed_job=policy).execute(run.context())
    assert (again == first) is adopted
    assert len(jobs_of(emulator, run)) == (1 if adopted else 2)


def test_a_failed_job_is_submitted_anew_on_retry(slurm_connection: str, emulator: Emulator) -> None:
    run = TaskRun()
    first = operator("exit 3", wait_for_completion=False).execute(run.context())
    wait_finished(first)
    run.automatic_retry()
    second = operator("exit 0").execute(run.context())
    assert second != first and len(jobs_of(emulator, run)) == 2


def wait_purged() -> None:
    hook = SlurmJobApiHook()
    deadline = time.monotonic() + 30
    while hook.call("GET", "/slurm/v0.0.42/jobs")["jobs"]:  # min_job_age: the live queue forgets it
        assert time.monotonic() < deadline
        time.sleep(0.5)


def test_a_retry_finds_a_purged_job_in_accounting(slurm_connection: str, emulator: Emulator) -> None:
    run = TaskRun()
    first = operator("exit 0", wait_for_completion=False).execute(run.context())
    wait_finished(first)
    wait_purged()
    run.automatic_retry()
    assert operator("exit 0").execute(run.context()) == first
    assert jobs_of(emulator, run) == [first]


def test_accounting_is_searched_only_from_when_the_dag_run_could_start(
    slurm_connection: str, emulator: Emulator
) -> None:
    run = TaskRun()
    first = operator("exit 0", wait_for_completion=False).execute(run.context())
    wait_finished(first)
    wait_purged()
    run.automatic_retry()
    # were the run to start only after that job ended (by more than the clocks may differ), the
    # job could not be one of its tries': accounting is not read that far back
    run.dag_run.run_after = datetime.now(UTC) + timedelta(seconds=CLOCK_SKEW_SECONDS + 60)
    asked = time.time()
    second = operator("exit 0").execute(run.context())
    assert second != first and jobs_of(emulator, run) == sorted([first, second])
    [search] = [c for c in emulator.requests.calls("GET", r"^/slurmdb/v0\.0\.42/jobs/$", asked) if c.query]
    since = int(run.dag_run.run_after.timestamp()) - CLOCK_SKEW_SECONDS
    assert search.query == {"job_name": [JOB["name"]], "start_time": [str(since)]}


def test_the_task_state_store_keeps_the_job_id_across_tries(slurm_connection: str, emulator: Emulator) -> None:
    run = TaskRun(TaskStateStore())
    first = operator("sleep 3", wait_for_completion=False).execute(run.context())
    assert run.store is not None and run.store.values == {"slurm_job_id": first}
    run.automatic_retry()
    assert operator("sleep 3").execute(run.context()) == first
    assert run.store.reads == ["slurm_job_id", "slurm_job_id"]
    assert jobs_of(emulator, run) == [first]


@pytest.mark.parametrize("fault", ["reset_after", "reset_before", "unavailable", "bad_gateway"])
def test_a_failed_submit_is_reconciled_through_the_key(slurm_connection: str, emulator: Emulator, fault: str) -> None:
    run = TaskRun()
    emulator.faults.clear()
    emulator.faults.script(ScriptedFault(fault, method="POST", path="job/submit$"))
    ctx = run.context()
    job_id = operator("exit 0").execute(ctx)
    assert emulator.faults.injected[fault] == 1
    assert jobs_of(emulator, run) == [job_id]  # one job, whether or not the first submit reached Slurm
    assert ctx["ti"].xcom["job_state"] == "COMPLETED"


def test_a_submit_that_lands_after_the_client_gave_up_makes_one_job(slurm_connection: str, emulator: Emulator) -> None:
    run = TaskRun()
    emulator.faults.clear()  # the call lands DEFAULT_LATENCY (2 s) after Google answered 504
    emulator.faults.script(ScriptedFault("late_landing", method="POST", path="job/submit$"))
    submit = operator("exit 0")
    assert submit.hook.retry.submit_settle == SETTLE_SECONDS  # read from the connection
    job_id = submit.execute(run.context())
    assert emulator.faults.injected["late_landing"] == 1
    time.sleep(3)  # past the landing, whatever the client did meanwhile
    assert jobs_of(emulator, run) == [job_id]


def test_a_submit_rejected_by_slurm_is_not_retried(slurm_connection: str, emulator: Emulator) -> None:
    run = TaskRun()
    with pytest.raises(Exception, match="partition"):
        operator("exit 0", job={**JOB, "partition": "no-such-partition"}).execute(run.context())
    assert jobs_of(emulator, run) == []
