"""The job ID record of a task run without a task state store: written, read, kept, forgotten."""

from __future__ import annotations

import contextlib
import json

import pytest
from airflow.providers.common.compat.sdk import TaskDeferred

from airflow_provider_slurmapi.operators import job_record
from airflow_provider_slurmapi.operators.job_record import JobIdRecord
from tests.unit.task_fakes import FakeStore, FakeTI, FakeVariables

KEY = "airflow-key=0123456789abcdef01234567"
NAME = "slurm_job_id.0123456789abcdef01234567"
WORKERS_VARIABLES = job_record._variables  # before the unit tests' fixture replaces it with a dict


def record(try_number: int = 1) -> JobIdRecord:
    return JobIdRecord({"ti": FakeTI(try_number=try_number, max_tries=2)}, KEY)


def test_the_job_id_is_kept_in_a_variable_named_from_the_key(variables: FakeVariables) -> None:
    first = record()
    assert first.read() is None
    first.write("42")
    assert variables.values == {NAME: "42"} and "dag.task in run1" in str(variables.descriptions[NAME])
    assert record(try_number=2).read() == "42"


def test_a_first_try_reads_nothing_and_a_try_that_runs_the_job_afresh_deletes_the_earlier_rounds_record(
    variables: FakeVariables,
) -> None:
    variables.broken = True
    assert record(try_number=1).read() is None  # not even asked
    variables.broken = False
    variables.values[NAME] = "42"
    assert record(try_number=3).read(afresh=True) is None
    assert variables.values == {}  # a failed submit of this round cannot leave the old job as its record


def test_a_recorded_value_that_is_no_job_id_is_not_a_lead(
    variables: FakeVariables, caplog: pytest.LogCaptureFixture
) -> None:
    variables.values[NAME] = "42; rm -rf"
    assert record(try_number=2).read() is None
    assert "not a Slurm job ID" in caplog.text


def test_the_variables_are_those_a_worker_of_this_airflow_reaches() -> None:
    try:
        from airflow.sdk import Variable  # Airflow 3: through the task runner's supervisor
    except ImportError:
        from airflow.models import Variable  # type: ignore[no-redef]  # Airflow 2.11: the metadata database
    assert WORKERS_VARIABLES() is Variable


def test_a_failed_variable_write_or_read_is_logged_not_raised(
    variables: FakeVariables, caplog: pytest.LogCaptureFixture
) -> None:
    variables.broken = True
    broken = record(try_number=2)
    assert broken.read() is None
    broken.write("42")
    broken.forget()
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 3 and all("metadata database unreachable" in w for w in warnings)
    assert "Cannot record Slurm job 42 in Airflow Variable" in warnings[1]


@pytest.mark.parametrize(
    ("try_number", "ending", "kept"),
    [
        (1, None, False),  # succeeded
        (1, RuntimeError("job failed"), True),  # failed, will be retried
        (3, RuntimeError("job failed"), False),  # failed on its last try (retries=2)
        (1, TaskDeferred(trigger=None, method_name="execute_complete"), True),  # goes on in the triggerer
    ],
)
def test_the_record_is_deleted_when_the_task_run_is_over(
    variables: FakeVariables, try_number: int, ending: BaseException | None, kept: bool
) -> None:
    with pytest.raises(type(ending)) if ending else contextlib.nullcontext():
        with record(try_number).kept_until_over(retries=2) as kept_record:
            kept_record.write("42")
            if ending:
                raise ending
    assert (NAME in variables.values) is kept


def test_a_resumed_try_deletes_the_record_it_did_not_write(variables: FakeVariables) -> None:
    variables.values[NAME] = "42"
    with record(try_number=2).kept_until_over(retries=2):
        pass  # execute_complete, in a new worker after the deferral
    assert variables.values == {}


def test_the_task_state_store_is_used_where_airflow_has_one(variables: FakeVariables) -> None:
    store = FakeStore()
    kept = JobIdRecord({"ti": FakeTI(try_number=2, max_tries=2), "task_state_store": store}, KEY)
    kept.write("42")
    with kept.kept_until_over(retries=2):
        assert kept.read() == "42" == kept.read(afresh=True)  # Airflow keeps it; the next submit replaces it
    assert store.values == {"slurm_job_id": "42"} and store.deletes == [] and variables.values == {}


NONCE = "ab" * 16


def test_a_result_nonce_is_kept_with_its_job_id_in_one_value_and_an_old_plain_id_still_reads(
    variables: FakeVariables,
) -> None:
    record().write("42", NONCE)
    assert json.loads(variables.values[NAME]) == {"job_id": "42", "result_nonce": NONCE}
    resumed = record(try_number=1)  # execute_complete of the same try: read even on try 1
    assert resumed.result_nonce_of("42") == NONCE and resumed.result_nonce_of("43") is None
    retry = record(try_number=2)
    assert retry.read() == "42" and retry.result_nonce_of("42") == NONCE
    variables.values[NAME] = "42"  # as earlier versions wrote it
    old = record(try_number=2)
    assert old.read() == "42" and old.result_nonce_of("42") is None


def test_the_task_state_store_keeps_the_nonce_with_the_job_id(variables: FakeVariables) -> None:
    store = FakeStore()
    JobIdRecord({"ti": FakeTI(), "task_state_store": store}, KEY).write("42", NONCE)
    assert store.values == {"slurm_job_id": {"job_id": "42", "result_nonce": NONCE}}
    retry = JobIdRecord({"ti": FakeTI(try_number=2, max_tries=2), "task_state_store": store}, KEY)
    assert retry.read() == "42" and retry.result_nonce_of("42") == NONCE


def test_a_record_that_kept_a_result_key_still_names_its_job_but_gives_nothing_to_check_it_with(
    variables: FakeVariables,
) -> None:
    """As an earlier release wrote it: its job's result is refused, and a clear runs the job afresh."""
    variables.values[NAME] = json.dumps({"job_id": "42", "result_key": "cd" * 32})
    old = record(try_number=2)
    assert old.read() == "42" and old.result_nonce_of("42") is None
