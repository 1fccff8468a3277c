"""Job-event watchers against the emulator: each matching job once, one accounting read per
interval for all watchers of a cluster, and a restart that resumes from the stored cursor."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from airflow_provider_slurmapi.client.job_events import EndedJob
from airflow_provider_slurmapi.emulator import Emulator
from airflow_provider_slurmapi.hooks.slurm_job_api import SlurmJobApiHook
from airflow_provider_slurmapi.version_compat import AIRFLOW_V_3_0_PLUS
from tests.jobs import JOB

pytestmark = pytest.mark.skipif(not AIRFLOW_V_3_0_PLUS, reason="asset watchers are Airflow 3 only")

INTERVAL = 5.0  # the shortest a watcher takes
ENDED_JOBS_READ = r"^/slurmdb/v0\.0\.42/jobs/$"


class AssetStateStore:
    """What Airflow 3.3 injects into a watcher trigger (``asset_state_store``), in memory."""

    def __init__(self, load_seconds: float = 0.0) -> None:
        self.values: dict[str, Any] = {}
        self.writes = 0
        self.load_seconds = load_seconds  # how long a load takes (a busy metadata database)

    async def aget(self, key: str, default: Any = None) -> Any:
        await asyncio.sleep(self.load_seconds)
        return self.values.get(key, default)

    async def aset(self, key: str, value: Any) -> None:
        self.values[key] = value
        self.writes += 1


def watcher(store: AssetStateStore | None = None, **filters: Any):
    from airflow_provider_slurmapi.triggers.job_events import SlurmJobEventTrigger

    trigger = SlurmJobEventTrigger(poll_interval=INTERVAL, **filters)
    trigger.asset_state_store = store or AssetStateStore()
    return trigger


def submit(name: str, body: str, **job: Any) -> str:
    return SlurmJobApiHook().submit_job({**JOB, "name": name, **job}, f"#!/bin/bash\n{body}\n")


async def collect(events: AsyncIterator[Any], into: list[EndedJob]) -> None:
    async for event in events:
        into.append(EndedJob.from_payload(event.payload))


async def until(check, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.2)


async def test_many_watchers_share_one_read_per_interval_and_each_gets_its_jobs_once(
    slurm_connection: str, emulator: Emulator
) -> None:
    from airflow_provider_slurmapi.triggers import ended_jobs

    before = submit("evt-before", "exit 0")  # ends before any watcher starts: never reported
    await asyncio.sleep(2)
    filters: list[dict[str, Any]] = [
        {"job_name": "evt-train-*"},
        {"states": ["FAILED"]},
        {"comment_contains": "team=vision"},
        *({"job_name": f"evt-sweep-{n}"} for n in range(17)),  # 20 watchers in all
    ]
    SWEEP_3 = filters.index({"job_name": "evt-sweep-3"})
    received: list[list[EndedJob]] = [[] for _ in filters]
    tasks = [
        asyncio.ensure_future(collect(watcher(**f).run(), into)) for f, into in zip(filters, received, strict=True)
    ]
    started = time.time()
    await asyncio.sleep(1)
    (poller,) = ended_jobs.active_ended_jobs_pollers()
    jobs = {
        "train_ok": submit("evt-train-1", "sleep 1"),
        "train_fail": submit("evt-train-2", "sleep 2; exit 3", comment="team=vision"),
        "other": submit("evt-other", "sleep 1; exit 1"),
        "sweep_3": submit("evt-sweep-3", "exit 0"),
    }
    try:
        await until(lambda: len(received[0]) >= 2 and len(received[1]) >= 2 and received[SWEEP_3], 60)
        await asyncio.sleep(2 * INTERVAL)  # and nothing more, nothing twice
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    got = [sorted(j.status.job_id for j in jobs_of) for jobs_of in received]
    assert got[0] == sorted([jobs["train_ok"], jobs["train_fail"]])
    assert got[1] == sorted([jobs["train_fail"], jobs["other"]])
    assert got[2] == [jobs["train_fail"]]
    assert got[SWEEP_3] == [jobs["sweep_3"]]
    assert all(got[n] == [] for n in range(3, 20) if n != SWEEP_3)
    assert before not in {job_id for ids in got for job_id in ids}
    failed = next(j for j in received[1] if j.status.job_id == jobs["train_fail"])
    assert (failed.status.state, failed.status.exit_code.return_code) == ("FAILED", 3)
    assert failed.usage is not None and failed.usage.cpus >= 1 and failed.user
    # one accounting read per interval for the 20 watchers, and nothing else asked of the cluster
    elapsed = time.time() - started
    reads = emulator.requests.calls("GET", ENDED_JOBS_READ, since=started)
    assert len(reads) <= elapsed / INTERVAL + 1, (len(reads), elapsed)
    assert poller not in ended_jobs.active_ended_jobs_pollers()  # the last watcher left: the poller stopped
    assert ended_jobs.active_ended_jobs_pollers() == []


async def test_a_restarted_watcher_resumes_from_its_stored_cursor(slurm_connection: str, emulator: Emulator) -> None:
    store = AssetStateStore()
    first: list[EndedJob] = []
    task = asyncio.ensure_future(collect(watcher(store, job_name="evt-restart-*").run(), first))
    await until(lambda: store.writes >= 1, 10)  # the start is saved at once
    early = submit("evt-restart-1", "exit 0")
    await until(lambda: len(first) == 1, 30)
    await asyncio.sleep(4)  # the cursor is saved a few seconds after the event
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    # while no watcher runs: these end, and must be reported once the watcher is back
    during = [submit("evt-restart-2", "exit 0"), submit("evt-restart-3", "exit 2")]
    await asyncio.sleep(3)
    second: list[EndedJob] = []
    task = asyncio.ensure_future(collect(watcher(store, job_name="evt-restart-*").run(), second))
    try:
        await until(lambda: len(second) >= 2, 30)
        await asyncio.sleep(2 * INTERVAL)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert [j.status.job_id for j in first] == [early]
    assert sorted(j.status.job_id for j in second) == sorted(during)  # not the early one again


async def test_one_read_per_interval_across_a_restart_and_one_shared_catch_up(
    slurm_connection: str, emulator: Emulator
) -> None:
    """Watchers restarted at once (a triggerer restarted within an interval) with cursors hours
    behind, the one furthest behind loading its cursor a second after the other: no second read in
    the interval, and the catch-up reads each window once, from the first read on, for both."""
    from airflow_provider_slurmapi.client.job_events import SETTLE_SECONDS, EventCursor
    from airflow_provider_slurmapi.triggers.ended_jobs import CATCH_UP_WINDOW_SECONDS

    names = ["evt-catch-a*", "evt-catch-b*"]
    stores = [AssetStateStore(), AssetStateStore(load_seconds=1.0)]
    received: list[list[EndedJob]] = [[], []]

    def start() -> list[asyncio.Future[None]]:
        return [
            asyncio.ensure_future(collect(watcher(store, job_name=name).run(), into))
            for name, store, into in zip(names, stores, received, strict=True)
        ]

    async def stop(tasks: list[asyncio.Future[None]]) -> None:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def reads(since: float) -> list[Any]:
        return emulator.requests.calls("GET", ENDED_JOBS_READ, since=since)

    started = time.time()
    tasks = start()
    await until(lambda: len(reads(started)) >= 2, 4 * INTERVAL)
    last = reads(started)[-1].at
    await until(lambda: reads(last + 0.001), 2 * INTERVAL)  # the next read came: the restart follows at once
    await stop(tasks)
    # the cursors as an outage left them: 8 and 14 hours behind
    now = int(time.time())
    for store, hours in zip(stores, (8, 14), strict=True):
        (key,) = store.values
        store.values[key] = EventCursor.starting(now - hours * 3_600).to_dict()
    restarted = time.time()
    tasks = start()
    jobs = [submit("evt-catch-a1", "exit 0"), submit("evt-catch-b1", "exit 0")]  # end while catching up
    try:
        await until(lambda: all(received), 8 * INTERVAL)
        await asyncio.sleep(2 * INTERVAL)  # nothing more, nothing twice
    finally:
        await stop(tasks)

    assert [[job.status.job_id for job in jobs_of] for jobs_of in received] == [[jobs[0]], [jobs[1]]]
    # one read per interval, from the old watchers' to the new ones' (the answers' times: a second of slack)
    times = [call.at for call in reads(started)]
    gaps = [round(after - before, 1) for before, after in zip(times, times[1:], strict=False)]
    assert all(INTERVAL - 1 <= gap <= 2 * INTERVAL - 1 for gap in gaps), gaps
    # the first read after the restart covers the watcher furthest behind, and no window is read twice
    windows = [(int(call.query["start_time"][0]), int(call.query["end_time"][0])) for call in reads(restarted)]
    behind = now - 14 * 3_600 - SETTLE_SECONDS
    assert windows[0] == (behind, behind + CATCH_UP_WINDOW_SECONDS), (windows[0], behind)
    starts = [start for start, _ in windows]
    assert starts[:3] == sorted(set(starts[:3])), windows[:3]
    assert [end <= now for _, end in windows[:3]] == [True, True, False], windows[:3]  # two closed, then open


async def test_a_bad_connection_is_retried_every_interval_without_ending_the_watch(
    emulator: Emulator, monkeypatch: pytest.MonkeyPatch, task_log
) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_SLURM_JOB_API_DEFAULT", '{"conn_type": "slurm_job_api", "extra": {}}')
    received: list[EndedJob] = []
    task = asyncio.ensure_future(collect(watcher().run(), received))
    await asyncio.sleep(INTERVAL + 1)
    assert not task.done()  # still watching
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert "Cannot read the Slurm jobs that ended; trying every interval" in task_log()
