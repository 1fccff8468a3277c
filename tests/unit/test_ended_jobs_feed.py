"""The job-event poller hands out a read's shares a slice of watchers at a time, keeps each
watcher's cursor as it will be after its shares, and reads at the group's own moments."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from airflow_provider_slurmapi.client.job_events import EndedJob, EventCursor, JobEventFilter
from airflow_provider_slurmapi.client.jobs import JobStatus
from airflow_provider_slurmapi.triggers import ended_jobs
from airflow_provider_slurmapi.triggers.ended_jobs import EndedJobsFeed, EndedJobsPoller, EndedJobsTick, next_read_in
from airflow_provider_slurmapi.triggers.interval_poller import GATHER_SECONDS

NOW = 1_800_000_000
HANG = 20.0
INTERVAL = 0.05


def ended(job_id: int, end: int) -> EndedJob:
    return EndedJob(JobStatus(str(job_id), "COMPLETED", name=f"job-{job_id}"), None, "c", "u", "a", "p", end, end, end)


class Accounting:
    """Answers each read with the jobs that ended in its window, and notes the windows asked for."""

    def __init__(self, jobs: list[EndedJob]) -> None:
        self.jobs = jobs
        self.windows: list[int] = []

    async def ended_jobs(self, start_time: int, end_time: int) -> list[EndedJob]:
        self.windows.append(start_time)
        return [job for job in self.jobs if start_time <= job.end_time <= end_time]

    async def close(self) -> None:
        return None


async def test_timers_due_run_between_the_watchers_a_read_is_handed_to(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ended_jobs, "HAND_OUT_SLICE_SECONDS", 0.0)  # a slice of one watcher
    seen: list[str] = []

    class NotedWatch(ended_jobs._Watch):
        def hand(self, tick: EndedJobsTick) -> None:
            seen.append(f"watcher {self.matches.job_name}")
            super().hand(tick)

    async def timer_due() -> None:
        while True:
            seen.append("timer")
            await asyncio.sleep(0.0001)

    poller = EndedJobsPoller(("unit",), {}, 60.0)
    poller.watches = [NotedWatch(JobEventFilter.of(job_name=f"job-{n}"), EventCursor.starting(NOW)) for n in range(5)]
    timers = asyncio.ensure_future(timer_due())
    await poller._hand_out(EndedJobsTick(NOW - 60, tuple(ended(n, NOW + n) for n in range(5))))
    timers.cancel()
    handed = [n for n, what in enumerate(seen) if what.startswith("watcher")]
    assert len(handed) == 5
    assert all("timer" in seen[a:b] for a, b in zip(handed, handed[1:], strict=False)), seen  # timers due ran
    shares = [watch.take() for watch in poller.watches]
    assert [[job.status.job_id for job in share.ended] for share in shares] == [["0"], ["1"], ["2"], ["3"], ["4"]]


async def test_a_watcher_still_reporting_gets_what_came_meanwhile_and_no_window_is_read_twice(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    accounting = Accounting([ended(1, NOW + 1), ended(2, NOW + 200), ended(3, NOW + 400)])
    monkeypatch.setattr(ended_jobs.time, "time", lambda: NOW + 1_000)

    async def open_client(hook_kwargs: dict[str, Any]) -> Accounting:
        return accounting

    monkeypatch.setattr(ended_jobs, "open_client", open_client)
    cursor = EventCursor.starting(NOW)
    async with (
        EndedJobsFeed({"slurm_conn_id": "unit"}, INTERVAL, JobEventFilter.of(), cursor) as busy,
        EndedJobsFeed({"slurm_conn_id": "unit"}, INTERVAL, JobEventFilter.of(job_name="none"), cursor) as idle,
    ):
        first = await asyncio.wait_for(busy.next(), HANG)
        accounting.jobs.append(ended(4, NOW + 600))
        for _ in range(3):  # reads come while the busy watcher reports its first share
            await asyncio.wait_for(idle.next(), HANG)
        assert busy._watch.ready.is_set()  # what came meanwhile waits for it: it does not wait for a read
        meanwhile = await busy.next()
    assert [job.status.job_id for job in first.ended] == ["1", "2", "3"]
    assert [job.status.job_id for job in meanwhile.ended] == ["4"]
    assert meanwhile.cursor.high_water == NOW + 600
    # each read from where the watchers will be after what they were handed: no window twice
    assert accounting.windows[:3] == [NOW - 60, NOW + 400 - 60, NOW + 600 - 60], accounting.windows


def test_a_groups_reads_come_at_moments_of_its_own_one_interval_apart() -> None:
    group, interval = '{"slurm_conn_id": "a"}/60.0', 60.0
    moments = set()
    for now in (NOW, NOW + 7.5, NOW + 59.9, NOW + 3_600.25):  # a triggerer started at any time, or restarted
        wait = next_read_in(group, interval, now)
        assert GATHER_SECONDS <= wait <= interval + GATHER_SECONDS
        moments.add(round((now + wait) % interval, 6))
    assert len(moments) == 1
    others = {round((NOW + next_read_in(f'{{"slurm_conn_id": "{n}"}}/60.0', interval, NOW)) % interval) for n in "bcd"}
    assert len(others | moments) > 1  # groups spread over the interval


async def test_a_watcher_whose_share_cannot_be_made_gets_an_error_and_the_others_their_jobs() -> None:
    class Broken(ended_jobs._Watch):
        def hand(self, tick: EndedJobsTick) -> None:
            if tick.error is None:
                raise ValueError("a filter that cannot read this job")
            super().hand(tick)

    poller = EndedJobsPoller(("unit",), {}, 60.0)
    broken = Broken(JobEventFilter.of(job_name="job-1"), EventCursor.starting(NOW))
    fine = ended_jobs._Watch(JobEventFilter.of(job_name="job-1"), EventCursor.starting(NOW))
    poller.watches = [broken, fine]
    await poller._hand_out(EndedJobsTick(NOW - 60, (ended(1, NOW + 1),)))
    assert broken.take().error is not None
    assert [job.status.job_id for job in fine.take().ended] == ["1"]
