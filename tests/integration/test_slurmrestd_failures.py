"""Waits ride out slurmrestd's own failures (slurmctld or slurmdbd unreachable during a failover, a
500 of a read) as they ride out Google's 503: the worker's within the retry budget, the deferred
ones through the shared poller's failed ticks."""

from __future__ import annotations

import asyncio
import time

import pytest

from airflow_provider_slurmapi.client.jobs import JobStatus
from airflow_provider_slurmapi.emulator import Emulator, ScriptedFault
from airflow_provider_slurmapi.hooks.slurm_job_api import SlurmJobApiHook
from airflow_provider_slurmapi.triggers import polling
from airflow_provider_slurmapi.triggers.job import SlurmJobTrigger
from tests.conftest import connection_json
from tests.integration.airflow_runtime import first_event
from tests.jobs import JOB

LIVE_JOB = r"^/slurm/v0\.0\.42/job/\d+$"
ACCOUNTING_JOB = r"^/slurmdb/v0\.0\.42/job/\d+$"


@pytest.fixture(autouse=True)
def no_faults(emulator: Emulator):
    emulator.faults.clear()
    yield
    emulator.faults.clear()


@pytest.mark.parametrize("kind", ["slurmctld_unreachable", "slurm_internal"])
def test_a_worker_wait_rides_out_a_failing_slurmrestd(slurm_connection: str, emulator: Emulator, kind: str) -> None:
    hook = SlurmJobApiHook(slurm_connection)
    job_id = hook.submit_job(JOB, "#!/bin/bash\nsleep 1\n")
    emulator.faults.script(ScriptedFault(kind, method="GET", path=LIVE_JOB, times=2))
    status = hook.wait_for_job(job_id, poll_interval=0.3, timeout=30)
    assert (status.state, status.job_id) == ("COMPLETED", job_id)
    assert emulator.faults.injected[kind] == 2


def test_an_accounting_read_rides_out_slurmdbd_unreachable(slurm_connection: str, emulator: Emulator) -> None:
    hook = SlurmJobApiHook(slurm_connection)
    job_id = hook.submit_job(JOB, "#!/bin/bash\ntrue\n")
    hook.wait_for_job(job_id, poll_interval=0.3, timeout=30)
    deadline = time.monotonic() + 30
    while hook.get_job(job_id).source != "slurmdb":  # min_job_age: the live queue forgot it
        assert time.monotonic() < deadline, "the job never left the live queue"
        time.sleep(0.3)
    emulator.faults.script(ScriptedFault("slurmctld_unreachable", method="GET", path=ACCOUNTING_JOB, times=2))
    status = hook.wait_for_job(job_id, poll_interval=0.3, timeout=30)
    assert (status.state, status.source) == ("COMPLETED", "slurmdb")
    assert emulator.faults.injected["slurmctld_unreachable"] == 2


@pytest.mark.parametrize("kind", ["slurmctld_unreachable", "slurm_internal"])
async def test_deferred_tasks_ride_out_the_shared_pollers_failed_ticks(
    emulator: Emulator, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    # no retries in the client: each faulted state call is a failed tick of the shared poller
    monkeypatch.setenv("AIRFLOW_CONN_SLURM_JOB_API_DEFAULT", connection_json(emulator, retry_attempts="1"))
    hook = SlurmJobApiHook()
    job_ids = [
        hook.submit_job(JOB, f"#!/bin/bash\nsleep {seconds}\nexit {code}\n") for seconds, code in [(2, 0), (3, 4)]
    ]
    emulator.faults.script(ScriptedFault(kind, method="GET", path="jobs/state", times=3))
    triggers = [
        SlurmJobTrigger(job_id, poll_interval=0.3, hook_kwargs={"slurm_conn_id": "slurm_job_api_default"})
        for job_id in job_ids
    ]
    events = await asyncio.wait_for(asyncio.gather(*(first_event(t, 60) for t in triggers)), 60)
    assert [event["status"] for event in events] == ["finished", "finished"], events
    assert [JobStatus.from_dict(e["job"]).exit_code.return_code for e in events] == [0, 4]
    assert emulator.faults.injected[kind] == 3
    assert polling.active_pollers() == []
