"""Attacks on the return value of ``@task.slurm_python``: whoever can write the job output location
(a principal with ``storage.objects.create`` on the bucket, another user's job on the shared mount)
tries to choose the value the task returns as its XCom, and to make the worker read an object
whole, whatever its size.

Each attack runs a real task on the built-in emulator, whose output mount publishes the try's
folder to the Cloud Storage stand-in (``gs://``), or on a folder the cluster and Airflow share
(``file://``). The attacker writes between the job's end and the task's read: the task's wait for
its job is wrapped, so the forgery lands after the job wrote its genuine result and before the task
reads it, every time.

The attacker may also read what Airflow shows those who may read the task instance or the Variables:
the task run's record (Airflow 3.3's task state store, through the REST API; a Variable on older
Airflow) and the Variables as the REST API shows them. Variables are a dict here (there is no
metadata database): the record, where this Airflow keeps it in one, and the deployment's secret.
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

from airflow_provider_slurmapi.client.python_function import RESULT_KEY_VARIABLE, result_signature
from airflow_provider_slurmapi.decorators.result_secret import RESULT_SECRET_VARIABLE
from airflow_provider_slurmapi.decorators.slurm_python import slurm_python_task
from airflow_provider_slurmapi.emulator import Emulator, EmulatorConfig
from airflow_provider_slurmapi.operators.job_record import STATE_STORE_KEY, VARIABLE_PREFIX
from airflow_provider_slurmapi.version_compat import AIRFLOW_V_3_3_PLUS
from tests.conftest import connection_json
from tests.integration.airflow_runtime import RecordingTaskInstance
from tests.jobs import JOB
from tests.storage import BUCKET
from tests.unit.task_fakes import FakeVariables, fake_variables

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


def waits_for(release: str, value: object) -> object:
    """Runs on the cluster: keeps its job running until the test creates ``release``."""
    import os
    import time

    while not os.path.exists(release):
        time.sleep(0.1)
    return value


@pytest.fixture(autouse=True)
def variables(monkeypatch: pytest.MonkeyPatch) -> FakeVariables:
    """Airflow's Variables: the deployment's secret, and the task run's record below Airflow 3.3."""
    return fake_variables(monkeypatch)


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
    """One task run's tries: ``cleared`` makes a try the first of a new round (a user's clear). Its
    record is where this Airflow keeps it: the task state store on 3.3+, else a Variable."""

    def __init__(self) -> None:
        self.run_id, self.store = f"manual__{uuid.uuid4()}", TaskStateStore()

    def context(self, try_number: int = 1, *, cleared: bool = False) -> dict[str, Any]:
        ti = RecordingTaskInstance(try_number=try_number, retries=RETRIES, run_id=self.run_id)
        if cleared:
            ti.max_tries = try_number - 1 + RETRIES
        return {"ti": ti, "task_state_store": self.store} if AIRFLOW_V_3_3_PLUS else {"ti": ti}

    def record(self, variables: FakeVariables) -> Any:
        """The record as whoever may read the task instance (the task state store, through the REST
        API) or the Variables reads it: unmasked."""
        if AIRFLOW_V_3_3_PLUS:
            return self.store.values[STATE_STORE_KEY]
        [name] = [name for name in variables.values if name.startswith(VARIABLE_PREFIX)]
        return json.loads(variables.values[name])


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


class WorkerLost(Exception):
    """The worker running a try went away while the try waited for its job."""


def lost_worker(*args: Any, **kwargs: Any) -> Any:
    raise WorkerLost


def released_first(wait: Callable[..., Any], release: Path) -> Callable[..., Any]:
    """``wait``, which first lets the job end: it ran until the retry had found it."""

    def waiting(*args: Any, **kwargs: Any) -> Any:
        release.touch()
        return wait(*args, **kwargs)

    return waiting


def key_in_the_environment_of(operator: Any) -> str:
    """The key the try gave its job (in the job's environment, which only the job's owner and the
    cluster's administrators see)."""
    return dict(item.split("=", 1) for item in operator.job["environment"])[RESULT_KEY_VARIABLE]


def signed_with(key: str, job_id: str, value: object) -> bytes:
    """A result for ``job_id`` signed as its runner would sign it, had it been given ``key``."""
    outcome = json.dumps({"return_value": value})
    return json.dumps({"job_id": job_id, "outcome": outcome, "mac": result_signature(key, job_id, outcome)}).encode()


def test_a_reader_of_the_task_runs_record_finds_no_key_and_signs_no_result_with_what_it_holds(
    output: Output, variables: FakeVariables, tmp_path: Path
) -> None:
    run, release = TaskRun(), tmp_path / "release"
    first_try = task_try(waits_for, str(release), "computed by the job")
    first_try.hook.wait_for_job = lost_worker  # try 1 submitted and recorded its job, then was lost
    with pytest.raises(WorkerLost):
        first_try.execute(run.context(1))
    job_id, key = first_try.job_id, key_in_the_environment_of(first_try)
    record = run.record(variables)
    assert key not in json.dumps(record)
    [held] = [value for value in record.values() if value != job_id]  # what the record holds beside the ID
    forged = signed_with(held, job_id, "chosen by the attacker")
    retry = task_try(waits_for, str(release), "computed by the job")
    retry.hook.wait_for_job = released_first(retry.hook.wait_for_job, release)  # reattached, then waits
    attacked_after_the_job(retry, lambda ended: output.write(output.result_of(ended), forged))
    with pytest.raises(Exception) as failure:
        retry.execute(run.context(2))
    assert retry.job_id == job_id  # the retry took try 1's job, and checked its result with try 1's key
    refused(failure.value, output, job_id, "its signature does not match")


def test_a_reader_of_the_variables_sees_the_secret_the_keys_come_from_masked(
    output: Output, variables: FakeVariables
) -> None:
    datamodels = pytest.importorskip(
        "airflow.api_fastapi.core_api.datamodels.variables", reason="Airflow 2.11's REST API does not mask Variables"
    )
    genuine_result(output, TaskRun(), "a value")  # the first task creates the deployment's secret
    secret = variables.values[RESULT_SECRET_VARIABLE]
    fields = {"key": RESULT_SECRET_VARIABLE, "value": secret, "description": None, "is_encrypted": True}
    if "team_name" in datamodels.VariableResponse.model_fields:  # where Variables belong to teams
        fields["team_name"] = None
    assert datamodels.VariableResponse.model_validate(fields).val == "***"  # as the REST API and the UI show it
