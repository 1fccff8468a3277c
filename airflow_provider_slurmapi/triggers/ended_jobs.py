"""One accounting read per interval for every job-event watcher of a cluster in a triggerer.

Watchers with the same connection settings and interval share an ``EndedJobsPoller``: each
interval it asks accounting once for the jobs that ended since the earliest point any of them
still needs (``GET /slurmdb/vX/jobs/?start_time=..&end_time=..&state=..``), however many watchers
there are, and hands the answer to all; each applies its own filter and cursor
(``client.job_events``). A read covers at most ``CATCH_UP_WINDOW_SECONDS`` of end times while
that far behind (after an outage, or a ``since`` long ago): the feed catches up window by window.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass
from typing import Any

from airflow_provider_slurmapi.client.job_events import EndedJob
from airflow_provider_slurmapi.triggers.interval_poller import IntervalPoller, PollerRegistry
from airflow_provider_slurmapi.triggers.polling import GATHER_SECONDS, open_client

log = logging.getLogger(__name__)

# The window's end is left open (a job cannot end in the future): the cluster's clock decides.
OPEN_END_SECONDS = 86_400
# The most end times one read asks for once behind: after an outage the feed catches up one window
# per interval, so that no answer grows with the outage.
CATCH_UP_WINDOW_SECONDS = 6 * 3_600
# A window is closed (its end asked for, and taken as read in full) only if it ended this long ago
# by the triggerer's clock: every job that ended in it is in accounting, whatever the cluster's
# clock says. The window that comes nearer now is left open.
CLOSED_WINDOW_AGE_SECONDS = 3_600


@dataclass(frozen=True)
class EndedJobsTick:
    """One read: the jobs that ended from ``window_start`` on, or the error that stopped it;
    ``window_end`` is the end of a closed window (all that ended by then), None for an open one."""

    window_start: int
    jobs: tuple[EndedJob, ...] = ()
    error: Exception | None = None
    window_end: int | None = None


def read_window(window_start: int, now: int) -> tuple[int, int | None]:
    """The end to ask accounting for, and the tick's ``window_end``: a window of
    ``CATCH_UP_WINDOW_SECONDS`` while it ended long enough ago, else one left open."""
    window_end = window_start + CATCH_UP_WINDOW_SECONDS
    if window_end <= now - CLOSED_WINDOW_AGE_SECONDS:
        return window_end, window_end
    return now + OPEN_END_SECONDS, None


@dataclass(eq=False)
class _Watch:
    """A watcher's place in the poller: the start of the window it needs next."""

    read_from: int


class EndedJobsPoller(IntervalPoller[EndedJobsTick]):
    """Reads the jobs that ended, once per interval, for all the watchers that joined it."""

    def __init__(self, key: tuple[Any, ...], hook_kwargs: dict[str, Any], interval: float) -> None:
        super().__init__(key, hook_kwargs, interval, EndedJobsTick(window_start=0))
        self.watches: list[_Watch] = []
        self.calls = 0  # accounting reads made, for tests and benchmarks

    async def _poll(self) -> None:
        await asyncio.sleep(GATHER_SECONDS)  # watchers started together join the first read
        loop = asyncio.get_running_loop()
        while self.watches:
            started = loop.time()
            self._publish(await self._read())
            await asyncio.sleep(max(0.0, self.interval - (loop.time() - started)))

    async def _read(self) -> EndedJobsTick:
        window_start = min(watch.read_from for watch in self.watches)
        ask_until, window_end = read_window(window_start, int(time.time()))
        try:
            if self.client is None:  # opened here, so that a bad connection is tried again next interval
                self.client = await open_client(self.hook_kwargs)
            jobs = await self.client.ended_jobs(window_start, ask_until)
        except Exception as error:  # the client already retried what was transient; watchers keep watching
            return EndedJobsTick(window_start, error=error)
        self.calls += 1
        return EndedJobsTick(window_start, tuple(jobs), window_end=window_end)


_POLLERS = PollerRegistry(EndedJobsPoller)


def active_ended_jobs_pollers() -> list[EndedJobsPoller]:
    return _POLLERS.active()


class EndedJobsFeed(contextlib.AbstractAsyncContextManager["EndedJobsFeed"]):
    """A watcher's subscription: ``next(read_from)`` gives the next read that covers its window."""

    def __init__(self, hook_kwargs: dict[str, Any], interval: float) -> None:
        self.poller = _POLLERS.join(hook_kwargs, interval)
        self._watch = _Watch(read_from=0)

    async def __aenter__(self) -> EndedJobsFeed:
        return self

    async def next(self, read_from: int) -> EndedJobsTick:
        """The first read, from now on, whose window starts at ``read_from`` or earlier."""
        self._watch.read_from = read_from
        if self._watch not in self.poller.watches:
            self.poller.watches.append(self._watch)
        self.poller.ensure_polling()
        while True:
            tick = await self.poller.next_tick()
            if tick.error is not None or tick.window_start <= read_from:
                return tick  # (a read started before this watcher joined may not cover it)

    async def __aexit__(self, *exc_info: Any) -> None:
        poller = self.poller
        if self._watch in poller.watches:
            poller.watches.remove(self._watch)
        if not poller.watches:
            await _POLLERS.release(poller)
