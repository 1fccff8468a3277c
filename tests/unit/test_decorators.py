"""Unit tests of @task.slurm and @task.slurm_python with the operators' fake hook."""

from __future__ import annotations

import inspect
import json
from datetime import datetime
from typing import Any

import pytest
from airflow.providers.common.compat.sdk import AirflowException, TaskDeferred

from airflow_provider_slurmapi.client.errors import InvalidRequestError
from airflow_provider_slurmapi.client.jobs import RecordSource
from airflow_provider_slurmapi.client.operations import JobRecords
from airflow_provider_slurmapi.client.output import OutputSettings
from airflow_provider_slurmapi.client.python_function import (
    RESULT_KEY_VARIABLE,
    RemoteFunctionError,
    result_key,
    result_signature,
)
from airflow_provider_slurmapi.client.submission import Outcome, Submission, submission_key
from airflow_provider_slurmapi.decorators import slurm_python
from airflow_provider_slurmapi.decorators.result_secret import RESULT_SECRET_VARIABLE
from airflow_provider_slurmapi.decorators.slurm import slurm_task
from airflow_provider_slurmapi.decorators.slurm_python import slurm_python_task
from airflow_provider_slurmapi.operators.job import SlurmSubmitJobOperator
from airflow_provider_slurmapi.operators.job_record import JobIdRecord
from tests.unit.task_fakes import FakeStore, FakeTI, FakeVariables, ctx, status
from tests.unit.test_operators import FakeHook

try:
    from airflow.sdk import DAG, task
except ImportError:  # Airflow 2.x
    from airflow import DAG
    from airflow.decorators import task

SETTINGS = OutputSettings(uri="gs://bucket/airflow", cluster_path="/mnt/out")
RESULT = "gs://bucket/airflow/dag/run1/task/try-1/42.return.json"
SECRET = "s" + "5e" * 32  # the deployment's, as an administrator created it
NONCE = "0f" * 16  # the nonce each try draws, made known here
KEY = result_key(SECRET, NONCE)  # the key each try's job signs its result with
ANOTHER_SECRET = "s" + "5f" * 32


@pytest.fixture(autouse=True)
def known_key(monkeypatch: pytest.MonkeyPatch, variables: FakeVariables) -> None:
    monkeypatch.setattr(slurm_python, "new_result_nonce", lambda: NONCE)
    variables.values[RESULT_SECRET_VARIABLE] = SECRET


def signed(outcome: dict[str, Any], job_id: str = "42", key: str = KEY) -> bytes:
    """A result as the runner of ``job_id``'s job writes it, given its try's ``key``."""
    text = json.dumps(outcome)
    return json.dumps({"job_id": job_id, "outcome": text, "mac": result_signature(key, job_id, text)}).encode()


def operator(decorator: Any, function: Any, *args: Any, hook: FakeHook | None = None, **kwargs: Any) -> Any:
    with DAG("dag", schedule=None, start_date=datetime(2026, 1, 1)):
        op = decorator(function)(*args, **kwargs).operator
    op.hook = hook or FakeHook(settings=SETTINGS)
    return op


def test_both_decorators_are_offered_by_airflows_task() -> None:
    assert task.slurm.__name__ == "slurm_task" and task.slurm_python.__name__ == "slurm_python_task"


@pytest.mark.parametrize("decorator", [slurm_task, slurm_python_task])
def test_the_decorators_arguments_are_the_operators(decorator: Any) -> None:
    """The arguments an editor shows are the operator's, so they cannot drift apart."""
    named = [name for name in inspect.signature(decorator).parameters if name not in ("python_callable", "kwargs")]
    accepted = {name for cls in SlurmSubmitJobOperator.__mro__ for name in inspect.signature(cls.__init__).parameters}
    assert set(named) - accepted - {"multiple_outputs", "python", "max_result_bytes"} == set()


@pytest.mark.parametrize("decorator", [slurm_task, slurm_python_task])
def test_the_named_arguments_left_as_none_take_the_operators_defaults(decorator: Any) -> None:
    """@task.slurm's named arguments, which @task.slurm_python takes through its keyword arguments."""
    op = operator(decorator(job={}, deferrable=False, poll_interval=None, slurm_conn_id=None), train, 1.0)
    assert (op.poll_interval, op.slurm_conn_id) == (30.0, "slurm_job_api_default")


def test_slurm_task_submits_the_script_its_function_returns_as_it_is() -> None:
    def build(epochs: int, ti: Any = None) -> str:
        return f"#!/bin/bash\necho {ti.task_id} for {epochs} epochs: {{{{ not rendered }}}}\n"

    hook = FakeHook()
    op = operator(slurm_task(job={"partition": "a3"}, deferrable=False, wait_for_completion=False), build, 3, hook=hook)
    assert op.execute(ctx()) == "42"
    [(args, _)] = hook.named("submit_once")
    assert args[1] == "#!/bin/bash\necho task for 3 epochs: {{ not rendered }}\n"  # the context's values, by name


@pytest.mark.parametrize("returned", [None, 3, "  \n"])
def test_a_function_that_returns_no_script_is_refused_before_anything_is_sent(returned: Any) -> None:
    def build() -> Any:
        return returned

    hook = FakeHook()
    op = operator(slurm_task(job={}, deferrable=False), build, hook=hook)
    with pytest.raises(InvalidRequestError, match=r"^build\(\) return value: a @task.slurm function must return"):
        op.execute(ctx())
    assert hook.calls == []


def train(learning_rate: float, epochs: int = 1) -> dict[str, float]:
    return {"loss": learning_rate * epochs}


def test_slurm_python_submits_the_function_and_returns_its_value() -> None:
    hook = FakeHook(settings=SETTINGS)
    hook.objects[RESULT] = signed({"return_value": {"loss": 0.5}})
    op = operator(slurm_python_task(job={}, deferrable=False, python="/opt/venv/bin/python"), train, 0.25, epochs=2)
    op.hook = hook
    assert op.execute(ctx()) == {"loss": 0.5}
    [(args, _)] = hook.named("submit_once")
    script = args[1]
    assert "@task.slurm_python: train() from" in script and "exec /opt/venv/bin/python - <<" in script
    assert args[0]["standard_output"] == "/mnt/out/dag/run1/task/try-1/%j.out"  # the result is written beside it
    # the key is in the job's environment (Slurm's default PATH kept), never in the script
    environment = args[0]["environment"]
    assert environment[-1] == f"{RESULT_KEY_VARIABLE}={KEY}" and environment[0].startswith("PATH=")
    assert KEY not in script


def test_a_result_larger_than_the_cap_fails_the_task_unread() -> None:
    hook = FakeHook(settings=SETTINGS)
    hook.objects[RESULT] = signed({"return_value": "x" * 100})
    op = operator(slurm_python_task(job={}, deferrable=False, max_result_bytes=64), train, 0.25, hook=hook)
    with pytest.raises(AirflowException, match=rf"{RESULT} is \d+ bytes, more than the 64 bytes Airflow reads of it"):
        op.execute(ctx())
    assert [kwargs["max_bytes"] for _, kwargs in hook.named("read_object")] == [64]


def test_a_max_result_bytes_that_is_no_positive_whole_number_is_refused_naming_it() -> None:
    with pytest.raises(InvalidRequestError, match="^max_result_bytes"):
        operator(slurm_python_task(job={}, max_result_bytes=0), train, 1.0)


def test_an_exception_on_the_cluster_fails_the_task_with_it() -> None:
    hook = FakeHook(settings=SETTINGS, waited=status("FAILED", 1))
    error = {"type": "ValueError", "message": "diverged", "traceback": 'Traceback...\n  File "dag.py", line 9'}
    hook.objects[RESULT] = signed({"error": error})
    op = operator(slurm_python_task(job={}, deferrable=False), train, 1.0, hook=hook)
    with pytest.raises(
        RemoteFunctionError, match=r"^train\(\) raised ValueError: diverged \(Slurm job 42\)$"
    ) as raised:
        op.execute(ctx())
    assert isinstance(raised.value.__cause__, AirflowException) and "exit code 1" in str(raised.value.__cause__)
    assert raised.value.traceback == error["traceback"]


def test_a_job_that_completed_without_a_return_value_fails_the_task() -> None:
    op = operator(slurm_python_task(job={}, deferrable=False, output_wait=0), train, 1.0)
    with pytest.raises(AirflowException, match=r"Slurm job 42 completed but train\(\) left no return value"):
        op.execute(ctx())


def test_without_an_output_location_nothing_is_sent_and_the_settings_are_named() -> None:
    hook = FakeHook()  # no output_uri, no output_cluster_path
    op = operator(slurm_python_task(job={}, deferrable=False), train, 1.0, hook=hook)
    with pytest.raises(InvalidRequestError, match="^output_uri: .*set output_uri and output_cluster_path"):
        op.execute(ctx())
    assert hook.named("submit_once") == []


def test_arguments_that_are_not_json_are_refused_before_anything_is_sent() -> None:
    hook = FakeHook(settings=SETTINGS)
    op = operator(slurm_python_task(job={}, deferrable=False), train, {1, 2}, hook=hook)
    with pytest.raises(InvalidRequestError, match=r"^op_args\[0\]: is a set"):
        op.execute(ctx())
    assert hook.named("submit_once") == []


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"python": "venv/bin/python"}, "^python: must be an absolute path"),
        ({"job": {"array": "0-3"}}, r"^job.array: @task.slurm_python runs one call per job: map the task with .expand"),
    ],
)
def test_a_bad_interpreter_or_an_array_job_is_refused_when_the_dag_is_parsed(
    arguments: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidRequestError, match=message):
        operator(slurm_python_task(**{"job": {}, **arguments}), train, 1.0)


class RecordedHook(FakeHook):
    """The fake hook whose job record names the job's stdout, as accounting does."""

    def __init__(self, stdout: str, **kwargs: Any) -> None:
        super().__init__(settings=SETTINGS, **kwargs)
        self.stdout = stdout

    def job_records(self, job_id: str) -> JobRecords:
        self._record("job_records", job_id)
        return JobRecords(RecordSource.ACCOUNTING, [{"job_id": int(job_id), "stdout_expanded": self.stdout}])


RECORD = JobIdRecord(ctx(), submission_key("dag", "task", "run1", -1)).variable  # the task run's Variable


def recorded_by_try_1(variables: FakeVariables, entry: str | dict[str, str]) -> None:
    """What try 1 recorded of the job it submitted."""
    variables.values[RECORD] = entry if isinstance(entry, str) else json.dumps(entry)


EARLIER_NONCE = "1a" * 16  # try 1's


@pytest.mark.parametrize("outcome", [Outcome.REATTACHED, Outcome.ADOPTED])
def test_a_retry_reads_the_value_in_the_folder_of_the_try_that_submitted_the_job(
    outcome: Outcome, variables: FakeVariables
) -> None:
    recorded_by_try_1(variables, {"job_id": "42", "result_nonce": EARLIER_NONCE})
    hook = RecordedHook("/mnt/out/dag/run1/task/try-1/42.out", submission=Submission("42", outcome, status()))
    earlier_key = result_key(SECRET, EARLIER_NONCE)  # try 1's key, derived again from its nonce
    hook.objects[RESULT] = signed({"return_value": {"loss": 0.5}}, key=earlier_key)  # try 1's folder, try 1's key
    op = operator(slurm_python_task(job={}, deferrable=False, retries=2), train, 0.25, hook=hook)
    assert op.execute(ctx(FakeTI(try_number=2, max_tries=2))) == {"loss": 0.5}
    assert [args[0] for args, _ in hook.named("read_object")] == [RESULT]


@pytest.mark.parametrize(
    "recorded",
    [
        "42",
        {"job_id": "41", "result_nonce": EARLIER_NONCE},
        {"job_id": "42", "result_key": result_key(SECRET, EARLIER_NONCE)},
    ],
    ids=["no nonce", "another job's", "an earlier release's key"],
)
def test_a_retry_whose_record_has_no_nonce_for_the_job_it_took_fails_naming_the_object(
    recorded: str | dict[str, str], variables: FakeVariables
) -> None:
    recorded_by_try_1(variables, recorded)
    hook = RecordedHook("/mnt/out/dag/run1/task/try-1/42.out", submission=Submission("42", Outcome.ADOPTED, status()))
    hook.objects[RESULT] = signed({"return_value": {"loss": 0.5}}, key=result_key(SECRET, EARLIER_NONCE))
    op = operator(slurm_python_task(job={}, deferrable=False, retries=2), train, 0.25, hook=hook)
    with pytest.raises(
        AirflowException, match=rf"{RESULT} is refused: the key of the try that submitted Slurm job 42"
    ) as refused:
        op.execute(ctx(FakeTI(try_number=2, max_tries=2)))
    assert str(refused.value).endswith("clear the task to run the job afresh")


@pytest.mark.parametrize("kept_in", ["Variable", "task state store"])
def test_only_the_nonce_is_recorded_with_the_job_id_and_the_key_needs_the_secret(
    kept_in: str, variables: FakeVariables
) -> None:
    hook = FakeHook(settings=SETTINGS, waited=status("FAILED", 1))  # the try fails: the record stays
    store = FakeStore() if kept_in == "task state store" else None
    op = operator(slurm_python_task(job={}, deferrable=False, retries=2), train, 0.25, hook=hook)
    with pytest.raises(AirflowException):
        op.execute(ctx(FakeTI(max_tries=2), store))
    [(args, _)] = hook.named("submit_once")
    assert args[0]["environment"][-1] == f"{RESULT_KEY_VARIABLE}={KEY}"  # what the job signs with
    written = store.values["slurm_job_id"] if store else json.loads(variables.values[RECORD])
    assert written == {"job_id": "42", "result_nonce": NONCE} and KEY not in json.dumps(written)
    assert result_key(ANOTHER_SECRET, NONCE) != KEY  # what is written gives the key only with this secret


def test_the_first_try_creates_the_secret_its_key_is_derived_from(variables: FakeVariables) -> None:
    del variables.values[RESULT_SECRET_VARIABLE]  # no administrator created it
    hook = FakeHook(settings=SETTINGS)
    op = operator(slurm_python_task(job={}, wait_for_completion=False), train, 0.25, hook=hook)
    assert op.execute(ctx()) == "42"
    created = variables.values[RESULT_SECRET_VARIABLE]
    [(args, _)] = hook.named("submit_once")
    assert created != SECRET and args[0]["environment"][-1] == f"{RESULT_KEY_VARIABLE}={result_key(created, NONCE)}"


def test_a_try_resumed_after_its_deferral_checks_the_result_with_the_key_its_nonce_gives() -> None:
    from airflow_provider_slurmapi.triggers.events import finished_event

    store = FakeStore()
    first = operator(slurm_python_task(job={}, deferrable=True, retries=2), train, 0.25)
    with pytest.raises(TaskDeferred):
        first.execute(ctx(FakeTI(max_tries=2), store))
    resumed = operator(slurm_python_task(job={}, deferrable=True, retries=2), train, 0.25)  # a new worker
    resumed.hook.objects[RESULT] = signed({"return_value": {"loss": 0.5}})
    context = ctx(FakeTI(max_tries=2), store)
    assert resumed.execute_complete(context, finished_event(status()), deferred_in_try=1) == {"loss": 0.5}


@pytest.mark.parametrize(
    "stdout",
    [
        "/mnt/out/dag/run1/other/try-1/42.out",  # another task's
        "/mnt/out/dag/run1/task/try-1/../../other/try-1/42.out",
        "/mnt/out/dag/run1/task/42.out",  # the task run's folder, no try's
        "/mnt/out/dag/run1/task/try-1/deeper/42.out",
        "/tmp/slurm-42.out",
    ],
)
def test_a_job_whose_record_names_output_in_no_try_folder_of_the_task_run_is_refused(stdout: str) -> None:
    hook = RecordedHook(stdout, submission=Submission("42", Outcome.REATTACHED))
    op = operator(slurm_python_task(job={}, deferrable=False), train, 0.25, hook=hook)
    with pytest.raises(AirflowException, match=r"no try folder of this task run \(/mnt/out/dag/run1/task/try-N/\)"):
        op.execute(ctx(FakeTI(try_number=2)))
    assert hook.named("read_object") == []


def test_a_task_with_its_own_output_paths_reads_the_value_in_its_own_try_folder() -> None:
    """Its own paths say nothing of the try that submitted the job (a retry reads its own try's folder)."""
    hook = RecordedHook("/mnt/out/logs/42.out")
    own = "gs://bucket/airflow/dag/run1/task/try-2/42.return.json"
    hook.objects[own] = signed({"return_value": 3})
    job = {"standard_output": "/mnt/out/logs/%j.out"}
    op = operator(slurm_python_task(job=job, deferrable=False), train, 0.25, hook=hook)
    assert op.execute(ctx(FakeTI(try_number=2))) == 3
