"""The job-event feed after a long outage: one bounded accounting read per interval, window by
window, and every watcher still gets each matching job once, in the order the jobs ended."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from airflow_provider_slurmapi.client.job_events import SETTLE_SECONDS, EndedJob, EventCursor
from airflow_provider_slurmapi.client.jobs import JobStatus
from airflow_provider_slurmapi.version_compat import AIRFLOW_V_3_0_PLUS

pytestmark = pytest.mark.skipif(not AIRFLOW_V_3_0_PLUS, reason="asset watchers are Airflow 3 only")

NOW = 1_800_000_000
HOUR = 3_600
INTERVAL = 60.0
OUTAGE = 3 * 24 * HOUR


def ended(job_id: int, end: int, name: str) -> EndedJob:
    return EndedJob(JobStatus(str(job_id), "COMPLETED", name=name), None, "c", "u", "a", "p", end - 9, end - 5, end)


class Accounting:
    """slurmdbd's answer to ``ended_jobs(start, end)``: the jobs that ended in [start, end], by job ID."""

    def __init__(self, jobs: list[EndedJob]) -> None:
        self.jobs = jobs
        self.windows: list[tuple[int, int]] = []

    async def ended_jobs(self, start_time: int, end_time: int) -> list[EndedJob]:
        self.windows.append((start_time, end_time))
        return [job for job in self.jobs if start_time <= job.end_time <= end_time]

    async def close(self) -> None:
        return None


class Store:
    def __init__(self, cursor: EventCursor | None) -> None:
        self.value = cursor.to_dict() if cursor else None

    async def aget(self, key: str, default: Any = None) -> Any:
        return self.value

    async def aset(self, key: str, value: Any) -> None:
        self.value = value


async def test_after_a_long_outage_the_feed_catches_up_window_by_window_each_job_once_in_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from airflow_provider_slurmapi.triggers import ended_jobs
    from airflow_provider_slurmapi.triggers.job_events import SlurmJobEventTrigger

    down = NOW - OUTAGE
    first_window_end = down - SETTLE_SECONDS + ended_jobs.CATCH_UP_WINDOW_SECONDS
    quiet = range(down + 30 * HOUR, down + 40 * HOUR)  # longer than a window: nothing ends
    # jobs ended all through the outage, every 50 minutes but in a quiet stretch; two in one second,
    # one at a window's end and one in the next window's first seconds (read twice)
    every_50_minutes = [end for end in range(down + 1, NOW - 120, 50 * 60) if end not in quiet]
    ends = sorted({*every_50_minutes, down + HOUR, down + HOUR + 1, first_window_end, first_window_end - 30})
    jobs = [ended(n, end, "train-a" if n % 3 else "eval-b") for n, end in enumerate(ends, start=100)]
    accounting = Accounting(jobs)

    async def open_client(hook_kwargs: dict[str, Any]) -> Accounting:
        return accounting

    real_sleep = asyncio.sleep
    poller_pauses: list[float] = []

    async def sleep(seconds: float) -> None:  # time passes at once; the poller's pauses are counted
        if seconds >= INTERVAL - 1:
            poller_pauses.append(seconds)
        await real_sleep(0)

    monkeypatch.setattr(ended_jobs, "open_client", open_client)
    monkeypatch.setattr(time, "time", lambda: NOW)
    monkeypatch.setattr(asyncio, "sleep", sleep)

    def watch(cursor: EventCursor | None, **filters: Any) -> SlurmJobEventTrigger:
        trigger = SlurmJobEventTrigger(poll_interval=INTERVAL, **filters)
        trigger.asset_state_store = Store(cursor)
        return trigger

    day_ago = EventCursor.starting(NOW - 86_400 - 1)
    watchers = {
        "all": (watch(EventCursor.starting(down)), jobs),
        "train since a day": (
            watch(day_ago, job_name="train-*"),
            [j for j in jobs if j.end_time >= day_ago.since and j.status.name.startswith("train-")],
        ),
        "new": (watch(None, job_name="eval-*"), []),  # starts now: nothing from the outage
    }
    received: dict[str, list[str]] = {name: [] for name in watchers}

    async def collect(name: str, trigger: SlurmJobEventTrigger) -> None:
        async for event in trigger.run():
            received[name].append(event.payload["job"]["job_id"])

    tasks = [asyncio.ensure_future(collect(name, trigger)) for name, (trigger, _) in watchers.items()]
    try:
        async with asyncio.timeout(10):
            while not accounting.windows or accounting.windows[-1][1] <= NOW:  # until the open read
                await real_sleep(0.01)
            await real_sleep(0.2)  # and a little more: nothing more, nothing twice
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    for name, (_, expected) in watchers.items():
        assert received[name] == [j.status.job_id for j in expected], name
    # the reads of the outage ask for at most CATCH_UP_WINDOW_SECONDS of end times each, each from
    # just before where the one before ended, each once (also while watchers still report the last
    # one's jobs); then the reads are left open (their end in the future).
    windows = accounting.windows
    closed = [(start, end) for start, end in windows if end <= NOW]
    assert closed, windows[:3]
    assert len(set(closed)) == len(closed), closed
    assert windows[: len(closed)] == closed
    assert all(end - start == ended_jobs.CATCH_UP_WINDOW_SECONDS for start, end in closed)
    assert closed[0][0] == down - SETTLE_SECONDS
    assert all(after[0] == before[1] - SETTLE_SECONDS for before, after in zip(closed, closed[1:], strict=False))
    first_open = windows[len(closed)]
    assert first_open[0] == closed[-1][1] - SETTLE_SECONDS
    assert first_open[0] >= NOW - ended_jobs.CATCH_UP_WINDOW_SECONDS - ended_jobs.CLOSED_WINDOW_AGE_SECONDS
    # one read per interval: a full pause of the poller before each read after the first
    assert len(accounting.windows) <= len(poller_pauses) + 1
