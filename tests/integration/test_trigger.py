"""SlurmJobTrigger run in an event loop against the emulator, as the triggerer runs it."""

from __future__ import annotations

import asyncio
import json
import time
import types
from collections.abc import Iterator

import pytest

from airflow_provider_slurmapi.client.jobs import JobStatus
from airflow_provider_slurmapi.emulator import Emulator
from airflow_provider_slurmapi.hooks.slurm_job_api import SlurmJobApiHook
from airflow_provider_slurmapi.triggers.job import SlurmJobTrigger
from tests.integration.airflow_runtime import first_event
from tests.jobs import JOB


def submit(connection: str, body: str) -> str:
    return SlurmJobApiHook(connection).submit_job(JOB, f"#!/bin/bash\n{body}\n")


def test_serialize_round_trip_is_json() -> None:
    trigger = SlurmJobTrigger("12_3", poll_interval=5, deadline=123.0, hook_kwargs={"slurm_conn_id": "x"})
    path, kwargs = trigger.serialize()
    assert path == "airflow_provider_slurmapi.triggers.job.SlurmJobTrigger"
    again = SlurmJobTrigger(**json.loads(json.dumps(kwargs)))
    assert again.serialize() == (path, kwargs)


async def test_emits_final_status_of_a_completed_job(slurm_connection: str) -> None:
    job_id = submit(slurm_connection, "sleep 1; exit 0")
    event = await first_event(
        SlurmJobTrigger(job_id, poll_interval=0.3, hook_kwargs={"slurm_conn_id": slurm_connection})
    )
    status = JobStatus.from_dict(event["job"])
    assert (event["status"], status.job_id, status.state, status.is_success) == ("finished", job_id, "COMPLETED", True)


async def test_emits_failure_with_exit_code(slurm_connection: str) -> None:
    job_id = submit(slurm_connection, "exit 3")
    event = await first_event(
        SlurmJobTrigger(job_id, poll_interval=0.3, hook_kwargs={"slurm_conn_id": slurm_connection})
    )
    status = JobStatus.from_dict(event["job"])
    assert status.state == "FAILED" and status.exit_code.return_code == 3


async def test_falls_back_to_accounting_after_the_job_left_the_queue(slurm_connection: str) -> None:
    job_id = submit(slurm_connection, "exit 0")
    await asyncio.sleep(5)  # emulator min_job_age is 3 s
    event = await first_event(
        SlurmJobTrigger(job_id, poll_interval=0.3, hook_kwargs={"slurm_conn_id": slurm_connection})
    )
    status = JobStatus.from_dict(event["job"])
    assert (status.source, status.state) == ("slurmdb", "COMPLETED")


async def test_deadline_ends_the_wait(slurm_connection: str) -> None:
    job_id = submit(slurm_connection, "sleep 60")
    started = time.monotonic()
    trigger = SlurmJobTrigger(
        job_id, poll_interval=10, deadline=time.time() + 1.5, hook_kwargs={"slurm_conn_id": slurm_connection}
    )
    event = await first_event(trigger)
    assert event["status"] == "timeout" and job_id in event["message"]
    assert time.monotonic() - started < 5  # it slept only until the deadline, not a whole interval
    assert "cancelled" not in event["message"]  # cancel_on_kill=False: the job is left alone
    hook = SlurmJobApiHook(slurm_connection)
    assert hook.get_job(job_id).state == "RUNNING"
    hook.cancel_job(job_id)


async def test_deadline_cancels_the_job(slurm_connection: str) -> None:
    job_id = submit(slurm_connection, "sleep 60")
    trigger = SlurmJobTrigger(
        job_id,
        poll_interval=10,
        deadline=time.time() + 1.5,
        cancel_on_kill=True,
        hook_kwargs={"slurm_conn_id": slurm_connection},
    )
    event = await first_event(trigger)
    assert event["status"] == "timeout" and event["message"].endswith("it was cancelled")
    status = SlurmJobApiHook(slurm_connection).wait_for_job(job_id, poll_interval=0.3, timeout=30)
    assert status.state == "CANCELLED"


async def test_unknown_cluster_is_an_error_event(slurm_connection: str) -> None:
    trigger = SlurmJobTrigger(
        "1", poll_interval=0.3, hook_kwargs={"slurm_conn_id": slurm_connection, "cluster_id": "nope"}
    )
    event = await first_event(trigger)
    assert event["status"] == "error" and "NOT_FOUND" in event["message"]


async def test_many_triggers_share_one_loop(slurm_connection: str) -> None:
    """Triggers never block the loop: ten jobs of 1 s finish together in about 1 s, not 10."""
    job_ids = [submit(slurm_connection, "sleep 1") for _ in range(10)]
    started = time.monotonic()
    events = await asyncio.gather(
        *(
            first_event(SlurmJobTrigger(j, poll_interval=0.3, hook_kwargs={"slurm_conn_id": slurm_connection}))
            for j in job_ids
        )
    )
    assert {JobStatus.from_dict(e["job"]).state for e in events} == {"COMPLETED"}
    assert time.monotonic() - started < 8


@pytest.fixture
def token_lifetime(emulator: Emulator, request: pytest.FixtureRequest) -> Iterator[float]:
    """The emulator issues tokens that live ``request.param`` seconds during the test."""
    original = emulator.tokens.lifetime
    emulator.tokens.lifetime = request.param
    yield request.param
    emulator.tokens.lifetime = original


@pytest.mark.parametrize("token_lifetime", [2], indirect=True)
async def test_wait_survives_token_expiry(slurm_connection: str, token_lifetime: float, emulator: Emulator) -> None:
    """Tokens that live 2 s, a job of 6 s: the trigger gets new tokens and sees the end."""
    issued_before = emulator.tokens.issued
    job_id = submit(slurm_connection, "sleep 6")
    event = await first_event(SlurmJobTrigger(job_id, poll_interval=1, hook_kwargs={"slurm_conn_id": slurm_connection}))
    assert JobStatus.from_dict(event["job"]).state == "COMPLETED"
    assert emulator.tokens.issued - issued_before >= 2  # the first token expired during the wait


async def test_a_job_missing_everywhere_is_lost_after_the_grace_window(slurm_connection: str) -> None:
    started = time.monotonic()
    event = await first_event(
        SlurmJobTrigger("424243", poll_interval=0.3, lost_grace=2, hook_kwargs={"slurm_conn_id": slurm_connection})
    )
    assert time.monotonic() - started >= 2  # it kept looking before giving up
    assert event["status"] == "error"
    assert event["message"].startswith("Slurm job 424243 is lost: for 2 s neither the live queue nor accounting")
    assert "not assumed to have completed" in event["message"]


async def watch_then_stop(trigger: SlurmJobTrigger) -> None:
    """Run the trigger for a moment, then cancel it as the triggerer does (the job is still running)."""
    events = trigger.run()
    task = asyncio.ensure_future(events.__anext__())
    await asyncio.sleep(1.5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):  # the trigger lets the cancellation through
        await task
    await events.aclose()


def task_state_reads(monkeypatch: pytest.MonkeyPatch, task_state: str | None) -> None:
    """The trigger reads its task's state as ``task_state`` (None: the read fails), on every Airflow."""
    from airflow_provider_slurmapi.triggers import job as trigger_module

    async def task_state_of(ti: object) -> str:
        if task_state is None:
            raise RuntimeError("API server unreachable")
        return task_state

    monkeypatch.setattr(trigger_module, "_task_state_v3", task_state_of)
    monkeypatch.setattr(trigger_module, "_task_state_v2", task_state_of)


async def test_killing_the_deferred_task_cancels_its_job(
    slurm_connection: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    task_state_reads(monkeypatch, "failed")  # a user marked the task failed
    job_id = submit(slurm_connection, "sleep 120")
    trigger = SlurmJobTrigger(
        job_id, poll_interval=0.3, cancel_on_kill=True, hook_kwargs={"slurm_conn_id": slurm_connection}
    )
    trigger.task_instance = types.SimpleNamespace(dag_id="d", task_id="t", run_id="r", map_index=-1)
    await watch_then_stop(trigger)
    await trigger.on_kill()  # what Airflow 3.3 calls when a user marks, clears or fails the task
    status = SlurmJobApiHook(slurm_connection).wait_for_job(job_id, poll_interval=0.3, timeout=30)
    assert status.state == "CANCELLED"


async def test_a_triggerer_restart_never_cancels_the_job(slurm_connection: str) -> None:
    job_id = submit(slurm_connection, "sleep 120")
    hook = SlurmJobApiHook(slurm_connection)
    for cancel_on_kill in (True, False):
        await watch_then_stop(
            SlurmJobTrigger(
                job_id,
                poll_interval=0.3,
                cancel_on_kill=cancel_on_kill,
                hook_kwargs={"slurm_conn_id": slurm_connection},
            )
        )
        assert hook.get_job(job_id).state == "RUNNING"  # only on_kill cancels; stopping the trigger does not
    await SlurmJobTrigger(job_id, cancel_on_kill=False, hook_kwargs={"slurm_conn_id": slurm_connection}).on_kill()
    assert hook.get_job(job_id).state == "RUNNING"  # cancel_on_kill=False: a kill leaves the job alone
    hook.cancel_job(job_id)


@pytest.mark.parametrize(
    ("task_state", "cancelled"),
    [("success", True), ("failed", True), ("deferred", False), (None, False)],  # None: unreadable
)
async def test_before_airflow_3_3_a_stopped_trigger_cancels_only_if_the_task_left_deferred(
    slurm_connection: str, monkeypatch: pytest.MonkeyPatch, task_state: str | None, cancelled: bool
) -> None:
    # Airflow < 3.3 has no trigger on_kill: a user's kill and a triggerer stop both cancel the
    # trigger, and only the task's state (no longer DEFERRED after a kill) tells them apart. A
    # state that cannot be read never cancels a job.
    from airflow_provider_slurmapi.triggers import job as trigger_module

    monkeypatch.setattr(trigger_module, "AIRFLOW_V_3_3_PLUS", False)
    task_state_reads(monkeypatch, task_state)
    job_id = submit(slurm_connection, "sleep 120")
    trigger = SlurmJobTrigger(
        job_id, poll_interval=0.3, cancel_on_kill=True, hook_kwargs={"slurm_conn_id": slurm_connection}
    )
    trigger.task_instance = types.SimpleNamespace(dag_id="d", task_id="t", run_id="r", map_index=-1)
    await watch_then_stop(trigger)
    hook = SlurmJobApiHook(slurm_connection)
    state = hook.wait_for_job(job_id, poll_interval=0.3, timeout=30).state if cancelled else hook.get_job(job_id).state
    assert state == ("CANCELLED" if cancelled else "RUNNING")
    hook.cancel_job(job_id)
