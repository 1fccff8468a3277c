"""Replies of a shape the parser does not expect (the emulator's ``unexpected_reply`` fault): the
shared poller and the job-event feed go on, their triggers see an outage, worker waits read again."""

from __future__ import annotations

import asyncio
import logging

import pytest

from airflow_provider_slurmapi.client.jobs import JobStatus
from airflow_provider_slurmapi.emulator import Emulator, ScriptedFault
from airflow_provider_slurmapi.hooks.slurm_job_api import SlurmJobApiHook
from airflow_provider_slurmapi.triggers import interval_poller, polling
from airflow_provider_slurmapi.triggers.job import SlurmJobTrigger
from airflow_provider_slurmapi.version_compat import AIRFLOW_V_3_0_PLUS
from tests.conftest import connection_json
from tests.integration.airflow_runtime import first_event
from tests.integration.test_job_events import ENDED_JOBS_READ, collect, submit, until, watcher
from tests.jobs import JOB

HANG = 60  # a wait that has not ended by then would never end (today's failure), not a measured time


@pytest.fixture
def single_try_connection(emulator: Emulator, monkeypatch: pytest.MonkeyPatch) -> str:
    """The default connection with one attempt per request: every fault reaches the poller."""
    monkeypatch.setenv("AIRFLOW_CONN_SLURM_JOB_API_DEFAULT", connection_json(emulator, retry_attempts=1))
    return "slurm_job_api_default"


async def test_triggers_of_the_shared_poller_outlive_unexpected_state_replies(
    single_try_connection: str, emulator: Emulator, caplog: pytest.LogCaptureFixture
) -> None:
    hook = SlurmJobApiHook()
    job_ids = [hook.submit_job(JOB, f"#!/bin/bash\nsleep 2; exit {code}\n") for code in (0, 3)]
    emulator.faults.clear()
    emulator.faults.script(ScriptedFault("unexpected_reply", method="GET", path="jobs/state", times=2))
    triggers = [
        SlurmJobTrigger(job_id, poll_interval=0.5, hook_kwargs={"slurm_conn_id": single_try_connection})
        for job_id in job_ids
    ]
    with caplog.at_level(logging.WARNING, logger=interval_poller.__name__):
        events = await asyncio.wait_for(asyncio.gather(*(first_event(t, HANG) for t in triggers)), HANG)
    assert emulator.faults.injected == {"unexpected_reply": 2}
    assert [JobStatus.from_dict(e["job"]).exit_code.return_code for e in events] == [0, 3]
    (warning,) = [r.getMessage() for r in caplog.records if r.name == interval_poller.__name__]  # once
    assert "GET /slurm/v0.0.42/jobs/state/" in warning and "jobs: object of" in warning
    assert polling.active_pollers() == []


def test_a_worker_wait_reads_again_after_an_unexpected_reply(slurm_connection: str, emulator: Emulator) -> None:
    hook = SlurmJobApiHook()
    job_id = hook.submit_job(JOB, "#!/bin/bash\nexit 0\n")
    emulator.faults.clear()
    emulator.faults.script(ScriptedFault("unexpected_reply", method="GET", path=f"/job/{job_id}$"))
    final = hook.wait_for_job(job_id, poll_interval=0.3, timeout=30)
    assert final.state == "COMPLETED" and emulator.faults.injected == {"unexpected_reply": 1}


@pytest.mark.skipif(not AIRFLOW_V_3_0_PLUS, reason="asset watchers are Airflow 3 only")
async def test_a_job_event_watcher_reports_the_job_after_unexpected_replies_and_says_why_once(
    single_try_connection: str, emulator: Emulator, task_log
) -> None:
    emulator.faults.clear()
    emulator.faults.script(ScriptedFault("unexpected_reply", method="GET", path=ENDED_JOBS_READ, times=2))
    received: list = []
    task = asyncio.ensure_future(collect(watcher(job_name="odd-reply-*").run(), received))
    try:
        job_id = submit("odd-reply-1", "exit 0")
        await until(lambda: len(received) == 1, HANG)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert [job.status.job_id for job in received] == [job_id]
    assert emulator.faults.injected == {"unexpected_reply": 2}
    log = task_log()
    assert log.count("Cannot read the Slurm jobs that ended; trying every interval") == 1
    assert "a reply this provider cannot read (jobs is not a list of objects)" in log
