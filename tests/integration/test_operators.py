"""Operators and sensor driven directly (outside a DAG run) against the emulator."""

from __future__ import annotations

import datetime
import threading
import time
from typing import Any

import pytest
from airflow.providers.common.compat.sdk import AirflowException, AirflowSensorTimeout, TaskDeferred

from airflow_provider_slurmapi.client.errors import InvalidRequestError
from airflow_provider_slurmapi.hooks.slurm_job_api import SlurmJobApiHook
from airflow_provider_slurmapi.operators.job import SlurmCancelJobOperator, SlurmSubmitJobOperator
from airflow_provider_slurmapi.sensors.job import SlurmJobSensor
from airflow_provider_slurmapi.triggers.job import SlurmJobTrigger
from tests.integration.airflow_runtime import context
from tests.jobs import JOB


def submit_op(body: str, **kwargs: Any) -> SlurmSubmitJobOperator:
    return SlurmSubmitJobOperator(
        task_id="t", job=JOB, script=f"#!/bin/bash\n{body}\n", poll_interval=0.3, deferrable=False, **kwargs
    )


def wait_until_running(job_id: str) -> None:
    hook = SlurmJobApiHook()
    deadline = time.monotonic() + 20
    while hook.get_job(job_id).state != "RUNNING":
        assert time.monotonic() < deadline
        time.sleep(0.2)


def test_worker_wait_success_pushes_state_and_exit_code(slurm_connection: str) -> None:
    ctx = context()
    job_id = submit_op("exit 0").execute(ctx)
    usage = ctx["ti"].xcom.pop("usage")
    connection = ctx["ti"].xcom.pop("slurm_connection")["connection"]  # for the Slurm job tab
    assert connection["slurm_conn_id"] == slurm_connection
    assert ctx["ti"].xcom == {"job_id": job_id, "job_state": "COMPLETED", "exit_code": 0}
    assert usage["job_id"] == job_id and usage["cpus"] == 1 and usage["nodes"] == 1


def test_worker_wait_failure_names_state_and_exit_code(slurm_connection: str) -> None:
    ctx = context()
    with pytest.raises(AirflowException, match=r"is FAILED.*exit code 3"):
        submit_op("exit 3").execute(ctx)
    assert ctx["ti"].xcom["job_state"] == "FAILED" and ctx["ti"].xcom["exit_code"] == 3


def test_timeout_cancels_the_job(slurm_connection: str) -> None:
    op = submit_op("sleep 60", timeout=2)
    with pytest.raises(AirflowException, match="did not finish within 2"):
        op.execute(context())
    assert SlurmJobApiHook().wait_for_job(op.job_id, poll_interval=0.3, timeout=20).state == "CANCELLED"


def test_on_kill_cancels_the_job(slurm_connection: str) -> None:
    op = submit_op("sleep 60")

    def kill_once_running() -> None:  # what Airflow does when a user kills the task
        deadline = time.monotonic() + 20
        while op.job_id is None and time.monotonic() < deadline:
            time.sleep(0.1)
        wait_until_running(op.job_id)
        op.on_kill()

    killer = threading.Thread(target=kill_once_running)
    killer.start()
    with pytest.raises(AirflowException, match="is CANCELLED"):
        op.execute(context())
    killer.join(timeout=30)


def test_bad_job_description_is_refused_before_submitting(slurm_connection: str) -> None:
    before = {job.job_id for job in SlurmJobApiHook().list_jobs()}
    op = SlurmSubmitJobOperator(task_id="t", job={"minimum_nodes": "abc"}, script="#!/bin/bash\n", deferrable=False)
    with pytest.raises(InvalidRequestError, match="job.minimum_nodes"):
        op.execute(context())
    # no new job (an earlier test's job may leave the live queue meanwhile)
    assert {job.job_id for job in SlurmJobApiHook().list_jobs()} <= before


def test_deferrable_hands_the_wait_to_the_trigger(slurm_connection: str) -> None:
    op = SlurmSubmitJobOperator(
        task_id="t", job=JOB, script="#!/bin/bash\nexit 3\n", deferrable=True, poll_interval=7, timeout=60,
        cluster_id="test-cluster",
    )  # fmt: skip
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(context())
    trigger = deferred.value.trigger
    assert isinstance(trigger, SlurmJobTrigger)
    assert (trigger.job_id, trigger.poll_interval) == (op.job_id, 7)
    assert trigger.deadline == pytest.approx(time.time() + 60, abs=5)
    assert trigger.hook_kwargs["cluster_id"] == "test-cluster"
    assert trigger.cancel_on_kill is True  # killing the deferred task cancels the job
    assert trigger.shared_polling is True
    final = SlurmJobApiHook().wait_for_job(op.job_id, poll_interval=0.3, timeout=20)
    event = {"status": "finished", "job": final.to_dict()}
    with pytest.raises(AirflowException, match="exit code 3"):
        op.execute_complete(context(), event)


def test_a_retry_resumed_with_an_earlier_trys_event_starts_over(slurm_connection: str) -> None:
    """Airflow 3.0 and 3.1.0 resume a retry in execute_complete with the failed try's event
    (apache/airflow#56704): the retry must not fail on that event, but submit as execute would."""
    op = SlurmSubmitJobOperator(
        task_id="t", job=JOB, script="#!/bin/bash\nexit 3\n", deferrable=True, poll_interval=0.3, retries=1
    )
    first = context(try_number=1, retries=1)
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(first)
    assert deferred.value.kwargs == {"deferred_in_try": 1}
    first_job = op.job_id
    final = SlurmJobApiHook().wait_for_job(first_job, poll_interval=0.3, timeout=20)
    stale_event = {"status": "finished", "job": final.to_dict()}
    with pytest.raises(AirflowException, match="exit code 3"):  # the try that deferred fails on it
        op.execute_complete(first, stale_event, **deferred.value.kwargs)
    retry = context(try_number=2, retries=1, run_id=first["ti"].run_id)
    with pytest.raises(TaskDeferred) as again:
        op.execute_complete(retry, stale_event, **deferred.value.kwargs)
    assert again.value.kwargs == {"deferred_in_try": 2}
    assert op.job_id != first_job  # the earlier job failed: a new one, watched by a new deferral
    SlurmJobApiHook().cancel_job(op.job_id)


def test_trigger_timeout_event_fails_the_task_as_a_timeout(slurm_connection: str) -> None:
    op = submit_op("exit 0", wait_for_completion=False)
    message = "Slurm job 1 did not finish before the task's deadline; it was cancelled"
    with pytest.raises(AirflowException, match="deadline; it was cancelled"):
        op.execute_complete(context(), {"status": "timeout", "job_id": "1", "message": message})


def test_execution_timeout_becomes_the_triggers_deadline(slurm_connection: str) -> None:
    op = SlurmSubmitJobOperator(
        task_id="t", job=JOB, script="#!/bin/bash\nsleep 30\n", deferrable=True, timeout=3600,
        execution_timeout=datetime.timedelta(seconds=90),
    )  # fmt: skip
    ctx = context()
    ctx["ti"].start_date = datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=60)
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(ctx)
    assert deferred.value.trigger.deadline == pytest.approx(time.time() + 30, abs=3)  # started 60 s ago
    SlurmJobApiHook().cancel_job(op.job_id)


def test_sensor_pokes_until_success_and_fails_on_failure(slurm_connection: str) -> None:
    hook = SlurmJobApiHook()
    ok = hook.submit_job(JOB, "#!/bin/bash\nsleep 1\n")
    sensor = SlurmJobSensor(task_id="s", job_id=ok, poke_interval=0.3, deferrable=False)
    assert sensor.poke(context()) is False
    hook.wait_for_job(ok, poll_interval=0.3, timeout=20)
    assert sensor.poke(context()) is True
    bad = hook.submit_job(JOB, "#!/bin/bash\nexit 4\n")
    hook.wait_for_job(bad, poll_interval=0.3, timeout=20)
    with pytest.raises(AirflowException, match="exit code 4"):
        SlurmJobSensor(task_id="s", job_id=bad, deferrable=False).poke(context())


def test_deferrable_sensor_timeout_is_a_sensor_timeout(slurm_connection: str) -> None:
    sensor = SlurmJobSensor(task_id="s", job_id="1", deferrable=True, timeout=5)
    with pytest.raises(AirflowSensorTimeout):
        sensor.execute_complete(context(), {"status": "timeout", "job_id": "1", "message": "late"})


def test_cancel_operator(slurm_connection: str) -> None:
    hook = SlurmJobApiHook()
    running = hook.submit_job(JOB, "#!/bin/bash\nsleep 60\n")
    wait_until_running(running)
    assert SlurmCancelJobOperator(task_id="c", job_id=running, poll_interval=0.3).execute(context()) == "CANCELLED"
    done = hook.submit_job(JOB, "#!/bin/bash\nexit 0\n")
    hook.wait_for_job(done, poll_interval=0.3, timeout=20)
    assert SlurmCancelJobOperator(task_id="c", job_id=done, poll_interval=0.3).execute(context()) == "COMPLETED"
    with pytest.raises(InvalidRequestError, match="job_id"):
        SlurmCancelJobOperator(task_id="c", job_id="1;rm").execute(context())


def test_poking_sensor_waits_out_a_missing_job_then_fails(slurm_connection: str) -> None:
    from airflow_provider_slurmapi.client.errors import JobLostError

    sensor = SlurmJobSensor(task_id="s", job_id="99999", poke_interval=0.3, deferrable=False, lost_grace=1.0)
    assert sensor.poke(context()) is False  # not in the queue nor in accounting: maybe not yet
    time.sleep(1.1)
    with pytest.raises(JobLostError, match="99999"):
        sensor.poke(context())
