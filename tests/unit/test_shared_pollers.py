"""The shared pollers outlive whatever one read raises: an error tick the triggers take as an
outage, the next interval read as usual, a stopped loop started again, and no wait for a tick that
lasts for ever. (``HANG`` only turns a wait that would never end into a failure.)"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

import pytest

from airflow_provider_slurmapi.client.errors import UnexpectedReplyError
from airflow_provider_slurmapi.client.job_events import EventCursor, JobEventFilter
from airflow_provider_slurmapi.client.jobs import JobStatus
from airflow_provider_slurmapi.triggers import interval_poller
from airflow_provider_slurmapi.triggers.ended_jobs import EndedJobsFeed
from airflow_provider_slurmapi.triggers.job import SlurmJobTrigger
from airflow_provider_slurmapi.triggers.polling import SharedJobReader, SharedPoller

HANG = 20.0
INTERVAL = 0.05
SURPRISES = [
    KeyError("number"),
    TypeError("'int' object is not iterable"),
    ValueError("invalid literal for int() with base 10: 'soon'"),
    UnexpectedReplyError("GET /slurm/v0.0.42/jobs/state/", "{jobs: object of 1}", "jobs is not a list of objects"),
]


class ScriptedClient:
    """Answers each read with the next answer (the last repeats): a value, or an exception to raise."""

    def __init__(self, *answers: Any) -> None:
        self.answers = list(answers)

    def _next(self) -> Any:
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, BaseException):
            raise answer
        return answer

    async def job_states(self, job_ids: list[str]) -> dict[str, list[str]]:
        return self._next()

    async def ended_jobs(self, start: int, end: int) -> list[Any]:
        return self._next()

    async def get_job(self, job_id: str) -> JobStatus:
        return JobStatus(job_id, "COMPLETED")

    async def close(self) -> None:
        pass


class StuckClient(ScriptedClient):
    async def job_states(self, job_ids: list[str]) -> dict[str, list[str]]:
        await asyncio.Event().wait()  # a read that never returns
        raise AssertionError("unreachable")


@contextlib.asynccontextmanager
async def shared_poller(client: Any):
    poller = SharedPoller(("unit",), {}, INTERVAL)
    poller.client = client
    poller.watched["7"] += 1
    poller.ensure_polling()
    try:
        yield poller
    finally:
        await poller.close()


async def ticks(poller: Any, count: int) -> list[Any]:
    return [await asyncio.wait_for(poller.next_tick(), HANG) for _ in range(count)]


@pytest.mark.parametrize("surprise", SURPRISES, ids=lambda e: type(e).__name__)
async def test_a_read_that_raises_anything_is_an_error_tick_and_the_next_interval_reads_as_usual(
    surprise: Exception, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=interval_poller.__name__)
    async with shared_poller(ScriptedClient(surprise, surprise, {"7": ["RUNNING"]})) as poller:
        first, second, third = await ticks(poller, 3)
    assert first.error is not None and first.error.retryable and second.error is not None
    assert str(surprise) in str(first.error)
    assert third.error is None and third.active["7"].state == "RUNNING"
    lines = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == interval_poller.__name__]
    assert [level for level, _ in lines] == ["WARNING", "INFO"]  # once per outage, and its end
    assert str(surprise) in lines[0][1]


@pytest.mark.parametrize("surprise", SURPRISES[:2], ids=lambda e: type(e).__name__)
async def test_a_trigger_watching_through_the_poller_keeps_watching_after_a_surprise(
    surprise: Exception, task_log: Callable[[], str]
) -> None:
    # three failed ticks, then the job runs and leaves the state list: read in full
    client = ScriptedClient(surprise, surprise, surprise, {"7": ["RUNNING"]}, {})
    async with shared_poller(client) as poller:
        trigger = SlurmJobTrigger("7", poll_interval=INTERVAL)
        event = await asyncio.wait_for(trigger._poll_to_the_end(SharedJobReader(poller, client)), HANG)  # type: ignore[arg-type]
    assert event.payload["status"] == "finished" and event.payload["job"]["state"] == "COMPLETED"
    said = [line for line in task_log().splitlines() if "Slurm job 7: status" in line]
    assert len(said) == 2 and "unavailable for now" in said[0] and str(surprise) in said[0]  # once per outage
    assert "Slurm job 7: status read again, after 3 failed reads" in said[1]


async def test_a_loop_that_ended_is_started_again_by_the_next_wait(caplog: pytest.LogCaptureFixture) -> None:
    async with shared_poller(ScriptedClient({"7": ["RUNNING"]})) as poller:
        await ticks(poller, 1)
        task = poller._loop_task
        assert task is not None
        task.cancel()  # the loop ended although triggers still watch
        with contextlib.suppress(asyncio.CancelledError):
            await task
        (tick,) = await ticks(poller, 1)
    assert tick.error is None and tick.active["7"].state == "RUNNING"
    assert "had stopped (cancelled); starting it again" in caplog.text


async def test_no_wait_for_a_tick_lasts_longer_than_the_interval_and_the_grace(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(interval_poller, "TICK_WAIT_GRACE_SECONDS", 0.1, raising=False)
    async with shared_poller(StuckClient()) as poller:
        (tick,) = await ticks(poller, 1)
    assert tick.error is not None and tick.error.retryable
    assert "gave no answer for 0.15 s" in str(tick.error)


async def test_the_job_event_feed_outlives_a_surprise() -> None:
    async with EndedJobsFeed({"slurm_conn_id": "unit"}, INTERVAL, JobEventFilter.of(), EventCursor.starting(0)) as feed:
        feed.poller.client = ScriptedClient(KeyError("state"), [])  # type: ignore[assignment]
        failed = await asyncio.wait_for(feed.next(), HANG)
        after = await asyncio.wait_for(feed.next(), HANG)
    assert failed.error is not None and failed.error.retryable and "KeyError" in str(failed.error)
    assert after.error is None and after.ended == ()


async def test_the_job_event_feed_starts_a_stopped_loop_again() -> None:
    async with EndedJobsFeed({"slurm_conn_id": "unit"}, INTERVAL, JobEventFilter.of(), EventCursor.starting(0)) as feed:
        feed.poller.client = ScriptedClient([])  # type: ignore[assignment]
        await asyncio.wait_for(feed.next(), HANG)
        task = feed.poller._loop_task
        assert task is not None
        task.cancel()  # the loop ended although a watcher still reads
        with contextlib.suppress(asyncio.CancelledError):
            await task
        after = await asyncio.wait_for(feed.next(), HANG)
    assert after.error is None and after.ended == ()
