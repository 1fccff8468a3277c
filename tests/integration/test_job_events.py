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

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}
        self.writes = 0

    async def aget(self, key: str, default: Any = None) -> Any:
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
    assert poller.calls == len(reads) <= elapsed / INTERVAL + 1, (poller.calls, len(reads), elapsed)
    assert ended_jobs.active_ended_jobs_pollers() == []  # the last watcher left: the poller stopped


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
