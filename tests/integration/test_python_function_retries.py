"""@task.slurm_python across tries: a retry that reattaches to, or adopts, an earlier try's job
returns the value that job's function returned. The emulator runs the function for real and the
task reads its outcome from the output location, as on a cluster with a shared filesystem. The
retry checks that outcome with the key of the try that submitted the job, derived again from the
nonce that try kept with the job ID in the task run's record (here Airflow 3.3's task state store)
and the deployment's secret."""

from __future__ import annotations

import asyncio
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from airflow.providers.common.compat.sdk import TaskDeferred

from airflow_provider_slurmapi.client.submission import submission_key
from airflow_provider_slurmapi.decorators.result_secret import new_result_secret
from airflow_provider_slurmapi.decorators.slurm_python import slurm_python_task
from airflow_provider_slurmapi.emulator import Emulator
from airflow_provider_slurmapi.hooks.slurm_job_api import SlurmJobApiHook
from tests.conftest import connection_json
from tests.integration.airflow_runtime import RecordingTaskInstance, first_event
from tests.jobs import JOB

try:
    from airflow.sdk import DAG
except ImportError:  # Airflow 2.x
    from airflow import DAG

RETRIES = 2


def waits_for(release: str, value: int) -> dict[str, int]:
    """Runs on the cluster: keeps its job running until the test creates ``release``."""
    import os
    import time

    while not os.path.exists(release):
        time.sleep(0.1)
    return {"value": value}


def fails_the_first_time(marker: str) -> str:
    """Runs on the cluster: raises in the first job, returns in the next."""
    import os

    if not os.path.exists(marker):
        open(marker, "w").close()
        raise RuntimeError("first job")
    return "second job"


class TaskStateStore:
    """Airflow 3.3's ``context["task_state_store"]``: kept across the tries of one task run."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)

    def set(self, key: str, value: Any) -> None:
        self.values[key] = value


class TaskRun:
    """One task run's tries, numbered as Airflow numbers automatic retries."""

    def __init__(self, map_index: int = -1) -> None:
        self.run_id, self.map_index = f"manual__{uuid.uuid4()}", map_index
        self.store = TaskStateStore()

    def context(self, try_number: int) -> dict[str, Any]:
        ti = RecordingTaskInstance(try_number=try_number, retries=RETRIES, run_id=self.run_id)
        ti.map_index = self.map_index
        return {"ti": ti, "task_state_store": self.store}

    def jobs(self) -> list[str]:
        key = submission_key("operator_tests", "t", self.run_id, self.map_index)
        listed = SlurmJobApiHook().call("GET", "/slurmdb/v0.0.42/jobs")["jobs"]
        return sorted({str(job["job_id"]) for job in listed if key in (job["comment"]["job"] or "").split()})


@pytest.fixture(autouse=True)
def result_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    """The deployment's secret, as an administrator may create it beforehand: here in the
    environment, where Airflow looks for a Variable first."""
    monkeypatch.setenv("AIRFLOW_VAR_SLURM_PYTHON_RESULT_SECRET", new_result_secret())


@pytest.fixture
def shared_output(emulator: Emulator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The connection's output location: a directory the cluster and Airflow both see."""
    extra = {"output_uri": f"file://{tmp_path}", "output_cluster_path": str(tmp_path)}
    monkeypatch.setenv("AIRFLOW_CONN_SLURM_JOB_API_DEFAULT", connection_json(emulator, **extra))
    return tmp_path


def task_try(function: Any, *args: Any, **kwargs: Any) -> Any:
    """A new operator for each try, as a worker deserializes one."""
    with DAG("operator_tests", schedule=None, start_date=datetime(2026, 1, 1)):
        kwargs.setdefault("deferrable", False)
        decorator = slurm_python_task(job=JOB, poll_interval=0.3, output_wait=5, retries=RETRIES, **kwargs)
        return decorator(function)(*args).operator


class WorkerLost(Exception):
    """The worker running a try went away while the try waited for its job."""


def lost_worker(*args: Any, **kwargs: Any) -> Any:
    raise WorkerLost


def test_a_retry_that_reattaches_returns_the_functions_value(shared_output: Path) -> None:
    run, release = TaskRun(), shared_output / "release"
    first_try = task_try(waits_for, str(release), 7)
    first_try.hook.wait_for_job = lost_worker  # try 1 submitted its job, then failed
    with pytest.raises(WorkerLost):
        first_try.execute(run.context(1))
    first = first_try.job_id
    ctx = run.context(2)
    retry = task_try(waits_for, str(release), 7)
    retry.hook.wait_for_job = released_first(retry.hook.wait_for_job, release)  # try 2 reattached, then waits
    assert retry.execute(ctx) == {"value": 7}
    assert ctx["ti"].xcom["job_id"] == first and run.jobs() == [first]


def released_first(wait: Any, release: Path) -> Any:
    """``wait``, which first lets the job end: it ran until the retry had found it and waits for it."""

    def waiting(*args: Any, **kwargs: Any) -> Any:
        release.touch()
        return wait(*args, **kwargs)

    return waiting


def test_a_deferred_retry_that_reattaches_returns_the_functions_value(shared_output: Path) -> None:
    run, release = TaskRun(), shared_output / "release"
    first = task_try(waits_for, str(release), 8, wait_for_completion=False).execute(run.context(1))
    ctx = run.context(2)
    retry = task_try(waits_for, str(release), 8, deferrable=True)
    with pytest.raises(TaskDeferred) as deferred:
        retry.execute(ctx)
    assert deferred.value.trigger.job_id == first  # reattached: the job still runs
    release.touch()
    event = asyncio.run(first_event(deferred.value.trigger))
    assert retry.execute_complete(ctx, event, **deferred.value.kwargs) == {"value": 8}
    assert run.jobs() == [first]


def test_a_mapped_retry_that_adopts_the_completed_job_returns_its_value(shared_output: Path) -> None:
    run, release = TaskRun(map_index=2), shared_output / "release"
    release.touch()
    first = task_try(waits_for, str(release), 9, wait_for_completion=False).execute(run.context(1))
    SlurmJobApiHook().wait_for_job(first, poll_interval=0.3, timeout=30)  # it ended while no try watched
    ctx = run.context(2)
    assert task_try(waits_for, str(release), 9).execute(ctx) == {"value": 9}
    assert ctx["ti"].xcom["job_id"] == first and run.jobs() == [first]


def test_a_retry_after_a_failed_job_returns_the_value_of_the_job_it_submitted(shared_output: Path) -> None:
    run, marker = TaskRun(), str(shared_output / "marker")
    with pytest.raises(Exception, match=r"fails_the_first_time\(\) raised RuntimeError: first job"):
        task_try(fails_the_first_time, marker).execute(run.context(1))
    ctx = run.context(2)
    assert task_try(fails_the_first_time, marker).execute(ctx) == "second job"
    assert ctx["ti"].xcom["job_id"] in run.jobs() and len(run.jobs()) == 2
