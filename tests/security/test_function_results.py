"""Attacks on the return value of ``@task.slurm_python``: whoever can write the job output location
(a principal with ``storage.objects.create`` on the bucket, another user's job on the shared mount)
tries to choose the value the task returns as its XCom, and to make the worker read an object
whole, whatever its size.

Each attack runs a real task on the built-in emulator, whose output mount publishes the try's
folder to the Cloud Storage stand-in (``gs://``), or on a folder the cluster and Airflow share
(``file://``). The attacker writes between the job's end and the task's read: the task's wait for
its job is wrapped, so the forgery lands after the job wrote its genuine result and before the task
reads it, every time.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_slurmapi.decorators.slurm_python import slurm_python_task
from airflow_provider_slurmapi.emulator import Emulator, EmulatorConfig
from tests.conftest import connection_json
from tests.integration.airflow_runtime import RecordingTaskInstance
from tests.jobs import JOB
from tests.storage import BUCKET

try:
    from airflow.sdk import DAG
except ImportError:  # Airflow 2.x
    from airflow import DAG

PREFIX = f"gs://{BUCKET}/runs"
RETRIES = 2
MIB = 1024 * 1024


def returns(value: object) -> object:
    """Runs on the cluster: the function whose genuine return value the attacker replaces."""
    return value


@pytest.fixture(scope="module")
def mounted(tmp_path_factory: pytest.TempPathFactory, storage_host: str) -> Iterator[tuple[Emulator, Path]]:
    """An emulator whose jobs write under ``mount``, published to ``PREFIX`` in the stand-in."""
    work = tmp_path_factory.mktemp("results")
    mount = work / "cluster-mount"
    mount.mkdir()
    config = EmulatorConfig(
        min_job_age=3.0,
        key_file=work / "key.json",
        state_dir=work / "jobs",
        output_mount=f"{mount}={PREFIX}",
        storage_host=storage_host,
    )
    with Emulator(config) as emu:
        yield emu, mount


class Output:
    """The output location a task reads, and how an attacker who may write it writes there."""

    def __init__(self, scheme: str, mount: Path) -> None:
        self.scheme, self.mount = scheme, mount

    def result_of(self, job_id: str) -> str:
        """The cluster path of a job's result (the only one of that name under the mount)."""
        [path] = self.mount.glob(f"**/{job_id}.return.json")
        return str(path)

    def read(self, cluster_path: str) -> bytes:
        if self.scheme == "file":
            return Path(cluster_path).read_bytes()
        return bytes(self._blob(cluster_path).download_as_bytes())

    def write(self, cluster_path: str, data: bytes) -> None:
        """What the attacker does: replace the object Airflow reads (in the bucket, or the file on the
        shared filesystem), after the job wrote it."""
        if self.scheme == "file":
            Path(cluster_path).write_bytes(data)
        else:
            self._blob(cluster_path).upload_from_string(data)

    def _blob(self, cluster_path: str) -> Any:
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import storage

        client = storage.Client(project="attacker", credentials=AnonymousCredentials())
        relative = os.path.relpath(cluster_path, self.mount)
        return client.bucket(BUCKET).blob(f"runs/{relative}")


@pytest.fixture(params=["gs", "file"])
def output(
    request: pytest.FixtureRequest, mounted: tuple[Emulator, Path], storage_host: str, monkeypatch: pytest.MonkeyPatch
) -> Output:
    emu, mount = mounted
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", storage_host)
    uri = PREFIX if request.param == "gs" else f"file://{mount}"
    extra = {"output_uri": uri, "output_cluster_path": str(mount)}
    monkeypatch.setenv("AIRFLOW_CONN_SLURM_JOB_API_DEFAULT", connection_json(emu, **extra))
    return Output(request.param, mount)


class TaskStateStore:
    """Airflow 3.3's ``context["task_state_store"]``, kept across the tries of one task run."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)

    def set(self, key: str, value: Any) -> None:
        self.values[key] = value


class TaskRun:
    """One task run's tries: ``cleared`` makes a try the first of a new round (a user's clear)."""

    def __init__(self) -> None:
        self.run_id, self.store = f"manual__{uuid.uuid4()}", TaskStateStore()

    def context(self, try_number: int = 1, *, cleared: bool = False) -> dict[str, Any]:
        ti = RecordingTaskInstance(try_number=try_number, retries=RETRIES, run_id=self.run_id)
        if cleared:
            ti.max_tries = try_number - 1 + RETRIES
        return {"ti": ti, "task_state_store": self.store}


def task_try(function: Callable[..., Any], *args: Any) -> Any:
    """A new operator for each try, as a worker deserializes one."""
    with DAG("result_attacks", schedule=None, start_date=datetime(2026, 1, 1)):
        decorator = slurm_python_task(job=JOB, poll_interval=0.3, output_wait=5, retries=RETRIES, deferrable=False)
        return decorator(function)(*args).operator


def attacked_after_the_job(operator: Any, attack: Callable[[str], None]) -> Any:
    """``operator``, whose wait for its job ends with ``attack(job_id)``: the job has ended and its
    result is written and published; the task has not read it yet."""
    wait = operator.hook.wait_for_job

    def waiting(job_id: str, *args: Any, **kwargs: Any) -> Any:
        status = wait(job_id, *args, **kwargs)
        attack(job_id)
        return status

    operator.hook.wait_for_job = waiting
    return operator


def genuine_result(output: Output, run: TaskRun, value: Any, **context: Any) -> tuple[str, bytes]:
    """A try that ran as it should: its job's ID and the result object it left."""
    operator = task_try(returns, value)
    assert operator.execute(run.context(**context)) == value
    return operator.job_id, output.read(output.result_of(operator.job_id))


def with_job_id(data: bytes, job_id: str) -> bytes:
    """A copied result, made to name the job it is put in place of where it names one."""
    result = json.loads(data)
    if isinstance(result, dict) and "job_id" in result:
        result["job_id"] = job_id
    return json.dumps(result).encode()


def refused(error: BaseException, output: Output, job_id: str, why: str) -> None:
    """The task failed naming the object it refused, and why."""
    message = str(error)
    assert output.result_of(job_id).rsplit("/", 1)[-1] in message and why in message, message


def test_a_writer_of_the_output_location_who_replaces_the_result_does_not_choose_the_tasks_value(
    output: Output,
) -> None:
    forged = json.dumps({"return_value": "chosen by the attacker"}).encode()
    operator = task_try(returns, "computed by the job")
    attacked_after_the_job(operator, lambda job_id: output.write(output.result_of(job_id), forged))
    with pytest.raises(Exception) as failure:
        operator.execute(TaskRun().context())
    refused(failure.value, output, operator.job_id, "not signed")


def test_a_writer_who_edits_the_value_inside_a_genuine_result_does_not_choose_the_tasks_value(
    output: Output,
) -> None:
    def edit(job_id: str) -> None:
        path = output.result_of(job_id)
        result = json.loads(output.read(path))
        if "outcome" in result:  # keeps the signature of what the job wrote
            result["outcome"] = json.dumps({"return_value": "chosen by the attacker"})
        else:
            result["return_value"] = "chosen by the attacker"
        output.write(path, json.dumps(result).encode())

    operator = attacked_after_the_job(task_try(returns, "computed by the job"), edit)
    with pytest.raises(Exception) as failure:
        operator.execute(TaskRun().context())
    refused(failure.value, output, operator.job_id, "its signature does not match")


def test_a_genuine_result_of_an_earlier_dag_run_replayed_in_place_of_this_jobs_is_refused(output: Output) -> None:
    _, earlier = genuine_result(output, TaskRun(), "the earlier run's value")
    operator = task_try(returns, "this run's value")
    attacked_after_the_job(
        operator, lambda job_id: output.write(output.result_of(job_id), with_job_id(earlier, job_id))
    )
    with pytest.raises(Exception) as failure:
        operator.execute(TaskRun().context())
    refused(failure.value, output, operator.job_id, "its signature does not match")


def test_a_genuine_result_of_another_job_moved_unchanged_into_this_jobs_place_is_refused(output: Output) -> None:
    other_job, other = genuine_result(output, TaskRun(), "the other job's value")
    operator = task_try(returns, "this job's value")
    attacked_after_the_job(operator, lambda job_id: output.write(output.result_of(job_id), other))
    with pytest.raises(Exception) as failure:
        operator.execute(TaskRun().context())
    refused(failure.value, output, operator.job_id, f"written by Slurm job {other_job}")


def test_the_result_of_the_task_runs_earlier_try_copied_into_a_later_tries_place_is_refused(output: Output) -> None:
    run = TaskRun()
    _, first = genuine_result(output, run, "try 1's value")
    operator = task_try(returns, "try 2's value")  # a user cleared the task: try 2 runs its own job
    attacked_after_the_job(operator, lambda job_id: output.write(output.result_of(job_id), with_job_id(first, job_id)))
    with pytest.raises(Exception) as failure:
        operator.execute(run.context(2, cleared=True))
    refused(failure.value, output, operator.job_id, "its signature does not match")


def test_an_oversized_result_is_refused_by_its_size_without_being_read(output: Output) -> None:
    huge = b'{"return_value": "' + b"x" * (16 * MIB) + b'"}'  # past the 16 MiB cap

    def bloat(job_id: str) -> None:
        output.write(output.result_of(job_id), huge)

    operator = attacked_after_the_job(task_try(returns, "computed by the job"), bloat)
    with pytest.raises(Exception) as failure:
        operator.execute(TaskRun().context())
    refused(failure.value, output, operator.job_id, f"{len(huge):,} bytes")
    assert "16,777,216" in str(failure.value)  # the cap it passes
