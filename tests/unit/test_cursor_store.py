"""When a job-event watcher writes its cursor: after what it reports, and otherwise once the idle-save
period and a delay of its own passed since its last save, so that many watchers never write at once."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from airflow_provider_slurmapi.client.job_events import EventCursor
from airflow_provider_slurmapi.triggers import cursor_store
from airflow_provider_slurmapi.triggers.cursor_store import IDLE_SAVE_SECONDS, CursorStore

START = 1_800_000_000
INTERVAL = 10
WATCHERS = 300


class Memory:
    """An asset state store in memory that notes each write."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}
        self.writes: list[int] = []

    async def aget(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)

    async def aset(self, key: str, value: Any) -> None:
        self.values[key] = value
        self.writes.append(value["high_water"])


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    now = [float(START)]
    monkeypatch.setattr(cursor_store.time, "time", lambda: now[0])
    return now


async def test_watchers_that_saved_together_spread_their_idle_saves(clock: list[float]) -> None:
    memories = [Memory() for _ in range(WATCHERS)]
    stores = [CursorStore(f"slurm_job_events.{n:016x}", memory) for n, memory in enumerate(memories)]
    for store in stores:  # all started together: their first saves come at once
        await store.save(EventCursor.starting(START))
    steps = 4 * IDLE_SAVE_SECONDS // INTERVAL
    for step in range(1, steps + 1):  # a busy cluster: every cursor moves at every interval
        clock[0] = START + step * INTERVAL
        for store in stores:
            await store.save_idle(EventCursor(since=START, high_water=int(clock[0])))
    for memory in memories:  # each at most once per IDLE_SAVE_SECONDS, and at the latest after twice that
        gaps = [b - a for a, b in zip(memory.writes, memory.writes[1:], strict=False)]
        assert all(IDLE_SAVE_SECONDS <= gap <= 2 * IDLE_SAVE_SECONDS + INTERVAL for gap in gaps), memory.writes
        assert len(memory.writes) >= 3
    idle = Counter(write for memory in memories for write in memory.writes[1:])
    assert max(idle.values()) <= WATCHERS / 10, idle.most_common(3)  # spread: never a tenth of them at once


async def test_a_watcher_that_reports_often_makes_no_idle_save(clock: list[float]) -> None:
    memory = Memory()
    store = CursorStore("slurm_job_events.0123456789abcdef", memory)
    await store.save(EventCursor.starting(START))
    for step in range(1, 4 * IDLE_SAVE_SECONDS // INTERVAL):
        clock[0] = START + step * INTERVAL
        cursor = EventCursor(since=START, high_water=int(clock[0]))
        if step % 30 == 0:  # a report every five minutes
            await store.save(cursor)
        else:
            await store.save_idle(cursor)
    assert len(memory.writes) == 1 + (4 * IDLE_SAVE_SECONDS // INTERVAL - 1) // 30  # the reports' only


async def test_an_unmoved_cursor_is_not_saved_and_a_report_starts_the_wait_again(clock: list[float]) -> None:
    memory = Memory()
    store = CursorStore("slurm_job_events.0123456789abcdef", memory)
    assert await store.load() is None
    cursor = EventCursor.starting(START)
    await store.save(cursor)  # the first start
    clock[0] += 3 * IDLE_SAVE_SECONDS
    await store.save_idle(cursor)
    assert memory.writes == [START]  # nothing moved: nothing written
    await store.save(EventCursor(since=START, high_water=START + 5))  # after a report
    clock[0] += IDLE_SAVE_SECONDS - 1
    await store.save_idle(EventCursor(since=START, high_water=START + 6))
    assert memory.writes == [START, START + 5]  # too soon after the report's save
    clock[0] += IDLE_SAVE_SECONDS + 1
    await store.save_idle(EventCursor(since=START, high_water=START + 7))
    assert memory.writes == [START, START + 5, START + 7]
