"""Triggers of one cluster share one poller: one state call per interval for all their jobs."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from airflow_provider_slurmapi.client.jobs import JobStatus
from airflow_provider_slurmapi.emulator import Emulator, EmulatorConfig
from airflow_provider_slurmapi.hooks.slurm_job_api import SlurmJobApiHook
from airflow_provider_slurmapi.triggers import polling
from airflow_provider_slurmapi.triggers.job import SlurmJobTrigger
from tests.conftest import connection_json
from tests.integration.airflow_runtime import first_event
from tests.jobs import JOB

INTERVAL = 0.5
# the shared poller's reads: the state list and the live queue
BULK_READ = r"^/slurm/v0\.0\.42/jobs/(state/)?$"


def tick_counter(poller: polling.SharedPoller) -> list[int]:
    """``[n]``: the ticks the poller gives its triggers from now on."""
    count, hand_out = [0], poller._hand_out

    async def counting(tick: polling.Tick) -> None:
        count[0] += 1
        await hand_out(tick)

    poller._hand_out = counting  # type: ignore[method-assign]
    return count


@pytest.fixture
def no_query_emulator(tmp_path: Path) -> Iterator[Emulator]:
    config = EmulatorConfig(key_file=tmp_path / "key.json", state_dir=tmp_path / "jobs", query_strings=False)
    with Emulator(config) as emu:
        yield emu


def submit_many(bodies: list[str]) -> list[str]:
    hook = SlurmJobApiHook()
    return [hook.submit_job(JOB, f"#!/bin/bash\n{body}\n") for body in bodies]


async def watch_all(job_ids: list[str], **kwargs: object) -> list[dict]:
    triggers = [
        SlurmJobTrigger(
            job_id, poll_interval=INTERVAL, hook_kwargs={"slurm_conn_id": "slurm_job_api_default"}, **kwargs
        )
        for job_id in job_ids
    ]
    return await asyncio.wait_for(asyncio.gather(*(first_event(t, 90) for t in triggers)), 90)


async def test_many_triggers_make_one_state_call_per_interval(slurm_connection: str, emulator: Emulator) -> None:
    job_ids = submit_many([f"sleep {1 + n % 4}; exit {n % 3}" for n in range(30)])
    calls_before, started = emulator.faults.calls, time.time()
    watching = asyncio.ensure_future(watch_all(job_ids))
    await asyncio.sleep(0.1)
    (poller,) = polling.active_pollers()  # one poller for all 30 triggers
    events = await watching
    calls = emulator.faults.calls - calls_before
    bulk = len(emulator.requests.calls("GET", BULK_READ, since=started))
    by_id = {event["job"]["job_id"]: JobStatus.from_dict(event["job"]) for event in events}
    assert [by_id[j].exit_code.return_code for j in job_ids] == [n % 3 for n in range(30)]  # full final status
    assert all(by_id[j].source == "slurm" for j in job_ids)
    # the bulk calls (state, and the queue's changes while some job pends), plus per trigger one
    # full read at its end (and one token fetch): none for a job seen pending
    assert bulk >= 4
    assert calls <= bulk + len(job_ids) + 2, (calls, bulk)
    assert polling.active_pollers() == []  # the last trigger left: the poller stopped
    assert poller.client is not None and poller.client._session is None  # and closed its session


async def test_per_job_polling_is_still_available(slurm_connection: str, emulator: Emulator) -> None:
    job_ids = submit_many(["sleep 2"] * 5)
    since = time.time()
    events = await watch_all(job_ids, shared_polling=False)
    assert {event["status"] for event in events} == {"finished"}
    assert polling.active_pollers() == []
    # each trigger read its own job, and nothing read the queue for all of them (how often each read
    # depends on how soon the triggers start on a loaded machine, not on the mode)
    reads = [call.path for call in emulator.requests.calls("GET", since=since)]
    assert not emulator.requests.calls("GET", BULK_READ, since=since), reads
    assert all(f"/slurm/v0.0.42/job/{job_id}" in reads for job_id in job_ids), reads


async def test_a_cancelled_trigger_leaves_the_poller_and_the_rest_go_on(
    slurm_connection: str, emulator: Emulator
) -> None:
    short, long = submit_many(["sleep 1", "sleep 120"])
    leaving = SlurmJobTrigger(long, poll_interval=INTERVAL, hook_kwargs={"slurm_conn_id": slurm_connection})
    events = leaving.run()
    waiting = asyncio.ensure_future(events.__anext__())
    (event,) = await watch_all([short])
    assert event["status"] == "finished"
    (poller,) = polling.active_pollers()
    assert set(poller.watched) == {long}
    waiting.cancel()  # the triggerer stops this trigger
    with pytest.raises(asyncio.CancelledError):
        await waiting
    await events.aclose()
    assert polling.active_pollers() == []
    assert SlurmJobApiHook().get_job(long).state == "RUNNING"  # stopping a trigger never cancels
    SlurmJobApiHook().cancel_job(long)


async def test_a_job_missing_from_the_answer_is_read_by_itself(slurm_connection: str, emulator: Emulator) -> None:
    (job_id,) = submit_many(["true"])
    SlurmJobApiHook().wait_for_job(job_id, poll_interval=0.3, timeout=30)
    await asyncio.sleep(3.5)  # min_job_age: the live queue, and so the state answer, forgot it
    (event,) = await watch_all([job_id])
    assert JobStatus.from_dict(event["job"]).source == "slurmdb"


async def test_refused_query_strings_fall_back_to_per_job_polling(
    no_query_emulator: Emulator, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_SLURM_JOB_API_DEFAULT", connection_json(no_query_emulator))
    job_ids = submit_many(["sleep 1", "exit 4", "sleep 2"])
    with caplog.at_level(logging.WARNING, logger=polling.__name__):
        events = await watch_all(job_ids)
    assert [JobStatus.from_dict(e["job"]).exit_code.return_code for e in events] == [0, 4, 0]
    fallbacks = [r for r in caplog.records if "by itself from now on" in r.getMessage()]
    assert len(fallbacks) == 1  # said once, not once per trigger


async def test_a_trigger_joining_after_the_fallback_reads_its_job_at_once(
    no_query_emulator: Emulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once the API refused the bulk query, a trigger that starts later reads its job at once,
    not one interval later (the interval here is 60 s)."""
    monkeypatch.setenv("AIRFLOW_CONN_SLURM_JOB_API_DEFAULT", connection_json(no_query_emulator))
    long, done = submit_many(["sleep 120", "exit 0"])
    hook_kwargs = {"slurm_conn_id": "slurm_job_api_default"}
    first = SlurmJobTrigger(long, poll_interval=60, hook_kwargs=hook_kwargs).run()
    watching = asyncio.ensure_future(first.__anext__())
    try:
        while not any(p.unsupported for p in polling.active_pollers()):
            await asyncio.sleep(0.1)
        SlurmJobApiHook().wait_for_job(done, poll_interval=0.3, timeout=30)
        late = SlurmJobTrigger(done, poll_interval=60, hook_kwargs=hook_kwargs).run()
        try:
            event = (await asyncio.wait_for(late.__anext__(), 20)).payload
        finally:
            await late.aclose()
        assert JobStatus.from_dict(event["job"]).state == "COMPLETED"
    finally:
        watching.cancel()
        with pytest.raises(asyncio.CancelledError):
            await watching
        await first.aclose()
        SlurmJobApiHook().cancel_job(long)


async def test_a_hold_and_a_release_of_a_job_seen_pending_show_at_the_next_tick(
    slurm_connection: str, emulator: Emulator, task_log
) -> None:
    hook = SlurmJobApiHook()
    later = {"set": True, "number": int(time.time()) + 3600}
    job_id, running = (
        hook.submit_job({**JOB, "begin_time": later}, "#!/bin/bash\ntrue\n"),
        hook.submit_job(JOB, "#!/bin/bash\nsleep 120\n"),
    )
    hook_kwargs = {"slurm_conn_id": slurm_connection}
    triggers = [SlurmJobTrigger(j, poll_interval=INTERVAL, hook_kwargs=hook_kwargs).run() for j in (job_id, running)]
    watching = [asyncio.ensure_future(t.__anext__()) for t in triggers]

    async def ticks_until(text: str) -> int:
        """Ticks of the poller until the trigger's log shows ``text`` about job_id (not the emulator's)."""
        start, log = ticks[0], ""
        while not [line for line in log.splitlines() if f"Slurm job {job_id} " in line and text in line]:
            assert ticks[0] - start < 20, log
            await asyncio.sleep(INTERVAL / 5)
            log += task_log()
        return ticks[0] - start

    try:
        await asyncio.sleep(0.1)
        (poller,) = polling.active_pollers()
        ticks = tick_counter(poller)
        await ticks_until("reason: BeginTime")  # seen pending
        calls_before, ticks_before = emulator.faults.calls, ticks[0]
        emulator.control(job_id, "hold")
        assert await ticks_until("held: it will not start until released") <= 2  # the tick under way, then ours
        emulator.control(job_id, "release")
        assert await ticks_until("PENDING") <= 2
        emulator.control(job_id, "hold")  # held again: said again
        assert await ticks_until("held: it will not start until released") <= 2
        # the state of both jobs and the queue's changes each tick, and no read of either job
        assert emulator.faults.calls - calls_before <= 2 * (ticks[0] - ticks_before + 1)
    finally:
        for waiting in watching:
            waiting.cancel()
        await asyncio.gather(*watching, return_exceptions=True)
        for trigger in triggers:
            await trigger.aclose()
        for j in (job_id, running):
            hook.cancel_job(j)
