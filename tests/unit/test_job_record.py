"""The job ID record of a task run without a task state store: written, read, kept, forgotten."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
from airflow.providers.common.compat.sdk import TaskDeferred

from airflow_provider_slurmapi.operators import job_record
from airflow_provider_slurmapi.operators.job_record import JobIdRecord
from tests.integration.airflow_runtime import RecordingTaskInstance

KEY = "airflow-key=0123456789abcdef01234567"
NAME = "slurm_job_id.0123456789abcdef01234567"


class Variables:
    """Airflow's Variable, as a dict; ``broken`` makes every call fail as an unreachable database."""

    def __init__(self, broken: bool = False, **values: str) -> None:
        self.values, self.broken, self.descriptions = dict(values), broken, {}

    def _check(self) -> None:
        if self.broken:
            raise ConnectionError("metadata database unreachable")

    def get(self, key: str, default: Any) -> Any:
        self._check()
        return self.values.get(key, default)

    def set(self, key: str, value: str, description: str) -> None:
        self._check()
        self.values[key], self.descriptions[key] = value, description

    def delete(self, key: str) -> None:
        self._check()
        self.values.pop(key, None)


def record(monkeypatch: pytest.MonkeyPatch, variables: Variables, try_number: int = 1) -> JobIdRecord:
    monkeypatch.setattr(job_record, "_variables", lambda: variables)
    return JobIdRecord({"ti": RecordingTaskInstance(try_number=try_number, retries=2)}, KEY)


def test_the_job_id_is_kept_in_a_variable_named_from_the_key(monkeypatch: pytest.MonkeyPatch) -> None:
    variables = Variables()
    first = record(monkeypatch, variables)
    assert first.read() is None
    first.write("42")
    assert variables.values == {NAME: "42"} and "operator_tests.t" in variables.descriptions[NAME]
    assert record(monkeypatch, variables, try_number=2).read() == "42"


def test_a_failed_variable_write_or_read_is_logged_not_raised(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    broken = record(monkeypatch, Variables(broken=True), try_number=2)
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
    monkeypatch: pytest.MonkeyPatch, try_number: int, ending: BaseException | None, kept: bool
) -> None:
    variables = Variables()
    with pytest.raises(type(ending)) if ending else contextlib.nullcontext():
        with record(monkeypatch, variables, try_number).kept_until_over(retries=2) as kept_record:
            kept_record.write("42")
            if ending:
                raise ending
    assert (NAME in variables.values) is kept


def test_a_resumed_try_deletes_the_record_it_did_not_write(monkeypatch: pytest.MonkeyPatch) -> None:
    variables = Variables(**{NAME: "42"})
    with record(monkeypatch, variables, try_number=2).kept_until_over(retries=2):
        pass  # execute_complete, in a new worker after the deferral
    assert variables.values == {}


def test_the_task_state_store_is_used_where_airflow_has_one(monkeypatch: pytest.MonkeyPatch) -> None:
    variables, store = Variables(), {}
    monkeypatch.setattr(job_record, "_variables", lambda: variables)
    kept = JobIdRecord({"ti": RecordingTaskInstance(try_number=2), "task_state_store": _Store(store)}, KEY)
    kept.write("42")
    with kept.kept_until_over(retries=2):
        assert kept.read() == "42"
    assert store == {"slurm_job_id": "42"} and variables.values == {}


class _Store:
    def __init__(self, values: dict[str, Any]) -> None:
        self.values = values

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)

    def set(self, key: str, value: Any) -> None:
        self.values[key] = value
