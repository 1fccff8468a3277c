"""Requeued and held jobs watched by the trigger (shared and per-job polling) and the sensor,
against the emulator, whose control plays what real Slurm does (see tests/scenarios for both)."""

from __future__ import annotations

import asyncio
import time

import pytest

from airflow_provider_slurmapi.client.jobs import JobStatus
from airflow_provider_slurmapi.emulator import Emulator
from airflow_provider_slurmapi.hooks.slurm_job_api import SlurmJobApiHook
from airflow_provider_slurmapi.sensors.job import SlurmJobSensor
from airflow_provider_slurmapi.triggers.job import SlurmJobTrigger
from tests.integration.airflow_runtime import context, first_event
from tests.jobs import JOB

FIRST_RUN_LONG = '#!/bin/bash\nif [ "${SLURM_RESTART_COUNT:-0}" -gt 0 ]; then exit 0; fi\nsleep 300\n'


def running_job() -> str:
    hook = SlurmJobApiHook()
    job_id = hook.submit_job({**JOB, "requeue": True}, FIRST_RUN_LONG)
    deadline = time.monotonic() + 30
    while hook.get_job(job_id).state != "RUNNING":
        assert time.monotonic() < deadline, hook.get_job(job_id).describe()
        time.sleep(0.2)
    return job_id


def lines_with(log: str, text: str) -> list[str]:
    return [line for line in log.splitlines() if text in line]


@pytest.mark.parametrize("shared_polling", [True, False], ids=["shared", "per-job"])
async def test_the_trigger_follows_a_requeued_job_to_its_last_run(
    slurm_connection: str, emulator: Emulator, task_log, shared_polling: bool
) -> None:
    job_id = running_job()
    trigger = SlurmJobTrigger(
        job_id, poll_interval=0.3, hook_kwargs={"slurm_conn_id": slurm_connection}, shared_polling=shared_polling
    )
    events = trigger.run()
    watching = asyncio.ensure_future(events.__anext__())
    await asyncio.sleep(1)  # the trigger has seen the job RUNNING
    emulator.control(job_id, "node_fail")
    event = (await asyncio.wait_for(watching, 60)).payload
    await events.aclose()
    status = JobStatus.from_dict(event["job"])
    assert (status.state, status.is_success, status.restarts) == ("COMPLETED", True, 1)
    lines = lines_with(task_log(), f"Slurm job {job_id} was requeued")
    assert len(lines) == 1 and "(restart 1): NODE_FAIL on " in lines[0], lines


async def test_the_shared_trigger_reports_a_hold_at_submit_once(
    slurm_connection: str, emulator: Emulator, task_log
) -> None:
    hook = SlurmJobApiHook()
    job_id = hook.submit_job({**JOB, "hold": True}, "#!/bin/bash\ntrue\n")
    trigger = SlurmJobTrigger(
        job_id, poll_interval=0.3, hook_kwargs={"slurm_conn_id": slurm_connection}, deadline=time.time() + 3
    )
    event = await first_event(trigger, 30)
    assert event["status"] == "timeout"
    held = lines_with(task_log(), "held: it will not start until released")
    assert len(held) == 1 and "reason: JobHeldUser" in held[0], held  # once in ~10 ticks
    hook.cancel_job(job_id)


def test_the_sensor_reports_a_requeue_once(slurm_connection: str, emulator: Emulator, task_log) -> None:
    job_id = running_job()
    sensor = SlurmJobSensor(task_id="s", job_id=job_id, poke_interval=0.3, deferrable=False)
    assert sensor.poke(context()) is False
    emulator.control(job_id, "preempt")
    deadline = time.monotonic() + 60
    while not sensor.poke(context()):
        assert time.monotonic() < deadline
        time.sleep(0.3)
    lines = lines_with(task_log(), f"Slurm job {job_id} was requeued")
    assert len(lines) == 1 and "(restart 1): PREEMPTED on " in lines[0], lines
