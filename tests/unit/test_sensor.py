"""Unit tests of SlurmJobSensor, with a fake hook that answers each read with the next scripted status."""

from __future__ import annotations

import time
from typing import Any

import pytest
from airflow.providers.common.compat.sdk import (
    AirflowException,
    AirflowSensorTimeout,
    BaseSensorOperator,
    TaskDeferred,
)

from airflow_provider_slurmapi.client.errors import JobLostError, UnknownJobStateError
from airflow_provider_slurmapi.client.jobs import JobStatus, RecordSource
from airflow_provider_slurmapi.client.operations import JobRecords
from airflow_provider_slurmapi.client.output import OutputSettings
from airflow_provider_slurmapi.operators.base import CONNECTION_TEMPLATE_FIELDS
from airflow_provider_slurmapi.sensors.job import WAIT_STATE_KEY, SlurmJobSensor
from airflow_provider_slurmapi.triggers.events import ended_event, finished_event
from tests.unit.task_fakes import FakeStore, FakeTI, ctx, status


class FakeHook:
    """Each ``find_job`` answers with the next of ``reads`` (the last one repeats)."""

    def __init__(self, *reads: JobStatus | None) -> None:
        self.reads = list(reads)
        self.found: list[str] = []
        self.requeues: list[JobStatus] = []
        self.settings_asked = 0

    def find_job(self, job_id: str) -> JobStatus | None:
        self.found.append(job_id)
        return self.reads.pop(0) if len(self.reads) > 1 else self.reads[0]

    def describe_requeue(self, status: JobStatus) -> str:
        self.requeues.append(status)
        return f"Slurm job {status.job_id} was requeued (restart {status.restarts})"

    def job_records(self, job_id: str) -> JobRecords:
        return JobRecords(RecordSource.LIVE, [])

    def get_job_usage(self, job_id: str, records: JobRecords | None = None) -> None:
        return None

    def read_job_output(self, *args: Any) -> list[Any]:
        return []

    def resolve_output_settings(self, **overrides: Any) -> OutputSettings:
        self.settings_asked += 1
        return OutputSettings()


def sensor(hook: FakeHook, **kwargs: Any) -> SlurmJobSensor:
    arguments: dict[str, Any] = {"task_id": "wait", "job_id": 42, "poke_interval": 0.01, "deferrable": False}
    op = SlurmJobSensor(**{**arguments, **kwargs})
    op.hook = hook  # type: ignore[misc]
    return op


def test_sensor_is_a_base_sensor_operator_with_connection_template_fields() -> None:
    op = SlurmJobSensor(task_id="wait", job_id=1)
    assert isinstance(op, BaseSensorOperator)
    assert {"job_id", *CONNECTION_TEMPLATE_FIELDS} <= set(SlurmJobSensor.template_fields)


def test_poke_false_while_running_then_true_when_completed() -> None:
    hook = FakeHook(status("PENDING"), status("RUNNING"), status("COMPLETED"))
    op = sensor(hook)
    context = ctx()
    assert [op.poke(context) for _ in range(3)] == [False, False, True]
    assert hook.found == ["42", "42", "42"]  # one read per poke
    assert op.final_status is not None and op.final_status.state == "COMPLETED"


def test_poke_fails_naming_the_reason() -> None:
    op = sensor(FakeHook(status("FAILED", code=2, reason="NonZeroExitCode")))
    with pytest.raises(AirflowException, match=r"is FAILED; reason: NonZeroExitCode; exit code 2"):
        op.poke(ctx())


def test_poke_fails_for_a_completed_job_with_a_nonzero_exit_code() -> None:
    op = sensor(FakeHook(status("COMPLETED", code=1)))
    with pytest.raises(AirflowException, match="exit code 1"):
        op.poke(ctx())


def test_missing_job_carried_between_pokes_until_lost() -> None:
    op = sensor(FakeHook(None), lost_grace=0.05)
    context = ctx()
    assert op.poke(context) is False
    assert op._carried is not None and op._carried["astray_since"] is not None
    first_seen = op._carried["astray_since"]
    time.sleep(0.1)
    with pytest.raises(JobLostError):
        op.poke(context)  # a fresh wait would start the grace anew from this read
    assert op._carried is None
    assert first_seen < time.time() - 0.05


def test_found_again_clears_the_missing_time() -> None:
    op = sensor(FakeHook(None, status("RUNNING")), lost_grace=60)
    context = ctx()
    assert op.poke(context) is False
    assert op._carried["astray_since"] is not None
    assert op.poke(context) is False
    assert op._carried["astray_since"] is None


def test_requeue_reported_once_across_pokes() -> None:
    hook = FakeHook(status("PENDING", restarts=1), status("RUNNING", restarts=1), status("COMPLETED", restarts=1))
    op = sensor(hook)
    context = ctx()
    assert [op.poke(context) for _ in range(3)] == [False, False, True]
    assert [s.restarts for s in hook.requeues] == [1]
    assert op._carried["restarts"] == 1


def test_unknown_state_outlasting_lost_grace_fails() -> None:
    op = sensor(FakeHook(status("FROBNICATING")), lost_grace=0.05)
    context = ctx()
    assert op.poke(context) is False
    time.sleep(0.1)
    with pytest.raises(UnknownJobStateError):
        op.poke(context)


def test_wait_state_kept_in_the_task_state_store() -> None:
    store = FakeStore()
    assert sensor(FakeHook(None), lost_grace=0.05).poke(ctx(store=store)) is False
    saved = store.values[WAIT_STATE_KEY]
    assert saved["astray_since"] is not None and saved["restarts"] == 0
    time.sleep(0.1)
    # a rescheduled poke is a new task instance: only the store carries the wait
    with pytest.raises(JobLostError):
        sensor(FakeHook(None), lost_grace=0.05).poke(ctx(store=store))
    assert WAIT_STATE_KEY not in store.values
    assert store.deletes == [WAIT_STATE_KEY]


def test_store_read_when_nothing_carried_and_left_alone_when_unchanged() -> None:
    told = ["RUNNING", None, None]
    carried = {"astray_since": None, "restarts": 2, "held_reported_at": None, "told": told}
    store = FakeStore(**{WAIT_STATE_KEY: dict(carried)})
    hook = FakeHook(status("RUNNING", restarts=2))
    assert sensor(hook).poke(ctx(store=store)) is False
    assert hook.requeues == []  # restart 2 was reported by an earlier poke
    assert store.sets == []


def test_store_updated_when_the_wait_state_changes() -> None:
    store = FakeStore(**{WAIT_STATE_KEY: {"astray_since": None, "restarts": 0, "held_reported_at": None}})
    hook = FakeHook(status("PENDING", restarts=1))
    assert sensor(hook).poke(ctx(store=store)) is False
    assert len(hook.requeues) == 1
    told = ["PENDING", None, None]
    assert store.sets == [
        (WAIT_STATE_KEY, {"astray_since": None, "restarts": 1, "held_reported_at": None, "told": told})
    ]


def test_store_value_that_is_not_a_dict_is_ignored() -> None:
    store = FakeStore(**{WAIT_STATE_KEY: "garbage"})
    assert sensor(FakeHook(status("RUNNING"))).poke(ctx(store=store)) is False
    told = ["RUNNING", None, None]
    assert store.values[WAIT_STATE_KEY] == {"astray_since": None, "restarts": 0, "held_reported_at": None, "told": told}


@pytest.mark.parametrize("kept_in", ["sensor", "task state store"])
def test_one_log_line_per_change_across_pokes(kept_in: str, task_log) -> None:
    hook = FakeHook(status("PENDING", reason="Resources"), status("PENDING", reason="Resources"), status("RUNNING"))
    store = FakeStore() if kept_in == "task state store" else None
    op = sensor(hook)
    for _ in range(3):
        if store is not None:
            op = sensor(hook)  # a rescheduled poke is a new task instance
        assert op.poke(ctx(store=store)) is False
    lines = [line for line in task_log().splitlines() if "Slurm job 42 is" in line]
    assert len(lines) == 2 and "PENDING; reason: Resources" in lines[0] and "RUNNING" in lines[1]


def test_reschedule_without_a_store_waits_out_a_missing_job_in_one_poke() -> None:
    hook = FakeHook(None)
    op = sensor(hook, mode="reschedule", lost_grace=0.05, poke_interval=0.01)
    with pytest.raises(JobLostError):
        op.poke(ctx())
    assert len(hook.found) > 1  # read again within the poke, nothing kept across reschedules


def test_reschedule_with_a_store_does_not_sleep_in_the_poke() -> None:
    hook = FakeHook(None)
    op = sensor(hook, mode="reschedule", lost_grace=60, poke_interval=0.01)
    assert op.poke(ctx(store=FakeStore())) is False
    assert hook.found == ["42"]


def test_execute_deferrable_defers_while_running() -> None:
    hook = FakeHook(status("RUNNING"))
    op = sensor(hook, deferrable=True, poke_interval=7, timeout=100, lost_grace=33, cluster_id="c9")
    before = time.time()
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(ctx(FakeTI(try_number=2)))
    _, kwargs = deferred.value.trigger.serialize()
    assert (kwargs["job_id"], kwargs["poll_interval"], kwargs["lost_grace"], kwargs["cancel_on_kill"]) == (
        "42",
        7,
        33,
        False,
    )
    assert kwargs["hook_kwargs"]["cluster_id"] == "c9"
    assert kwargs["deadline"] == pytest.approx(before + 100, abs=2)
    assert deferred.value.kwargs == {"deferred_in_try": 2}
    assert hook.settings_asked == 1  # the output settings are checked before the first read


def test_execute_deferrable_returns_when_already_finished() -> None:
    hook = FakeHook(status("COMPLETED"))
    op = sensor(hook, deferrable=True)
    assert op.execute(ctx()) is None
    assert op.final_status.state == "COMPLETED"


def test_execute_complete_finished_event() -> None:
    op = sensor(FakeHook(status("RUNNING")))
    assert op.execute_complete(ctx(), finished_event(status("COMPLETED")), deferred_in_try=1) is None
    assert op.final_status.state == "COMPLETED"


def test_execute_complete_failed_job() -> None:
    op = sensor(FakeHook(status("RUNNING")))
    with pytest.raises(AirflowException, match="is TIMEOUT"):
        op.execute_complete(ctx(), finished_event(status("TIMEOUT", reason="TimeLimit")), deferred_in_try=1)


def test_execute_complete_timeout_event_is_a_sensor_timeout() -> None:
    from airflow_provider_slurmapi.triggers.events import EventStatus

    op = sensor(FakeHook(status("RUNNING")), timeout=60)
    event = ended_event(EventStatus.TIMEOUT, "42", "Slurm job 42 did not finish in time")
    with pytest.raises(AirflowSensorTimeout, match=r"did not finish in time \(sensor timeout 60"):
        op.execute_complete(ctx(), event, deferred_in_try=1)


def test_execute_complete_error_event_fails_with_its_message() -> None:
    from airflow_provider_slurmapi.triggers.events import EventStatus

    op = sensor(FakeHook(status("RUNNING")))
    event = ended_event(EventStatus.ERROR, "42", "Slurm job 42 was not found for 300 s")
    with pytest.raises(AirflowException, match="not found for 300 s") as raised:
        op.execute_complete(ctx(), event, deferred_in_try=1)
    assert not isinstance(raised.value, AirflowSensorTimeout)


def test_execute_complete_with_a_stale_deferral_starts_over() -> None:
    hook = FakeHook(status("RUNNING"))
    op = sensor(hook, deferrable=True)
    # the event of try 1 (a failed job) reaches try 2: it is ignored, and the wait starts again
    with pytest.raises(TaskDeferred) as deferred:
        op.execute_complete(ctx(FakeTI(try_number=2)), finished_event(status("FAILED", code=1)), deferred_in_try=1)
    assert deferred.value.kwargs == {"deferred_in_try": 2}
    assert hook.found == ["42"]
