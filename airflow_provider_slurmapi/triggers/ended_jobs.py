"""One accounting read per interval for every job-event watcher of a cluster in a triggerer.

Watchers with the same connection settings and interval share an ``EndedJobsPoller``: each
interval it asks accounting once for the jobs that ended since the earliest point any of them
still needs (``GET /slurmdb/vX/jobs/?start_time=..&end_time=..&state=..``), however many watchers
there are and however many jobs ended, and hands the answer to all; each applies its own filter
and cursor (``client.job_events``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from dataclasses import dataclass
from typing import Any

from airflow_provider_slurmapi.client.aio import AsyncSlurmJobApiClient
from airflow_provider_slurmapi.client.job_events import EndedJob
from airflow_provider_slurmapi.triggers.polling import GATHER_SECONDS, open_client

log = logging.getLogger(__name__)

# The window's end is left open (a job cannot end in the future): the cluster's clock decides.
OPEN_END_SECONDS = 86_400


@dataclass(frozen=True)
class EndedJobsTick:
    """One read: the jobs that ended from ``window_start`` on, or the error that stopped it."""

    window_start: int
    jobs: tuple[EndedJob, ...] = ()
    error: Exception | None = None


@dataclass(eq=False)
class _Watch:
    """A watcher's place in the poller: the start of the window it needs next."""

    read_from: int


class EndedJobsPoller:
    """Reads the jobs that ended, once per interval, for all the watchers that joined it."""

    def __init__(self, key: tuple[Any, ...], hook_kwargs: dict[str, Any], interval: float) -> None:
        self.key = key
        self.hook_kwargs = hook_kwargs
        self.interval = interval
        self.watches: list[_Watch] = []
        self.calls = 0  # accounting reads made, for tests and benchmarks
        self.client: AsyncSlurmJobApiClient | None = None
        self._tick = EndedJobsTick(window_start=0)
        self._ticked = asyncio.Event()
        self._loop_task: asyncio.Task[None] | None = None

    def ensure_polling(self) -> None:
        if self._loop_task is None or self._loop_task.done():
            self._loop_task = asyncio.ensure_future(self._poll())

    async def next_tick(self) -> EndedJobsTick:
        ticked = self._ticked  # the event of the coming tick, even if a tick happens meanwhile
        await ticked.wait()
        return self._tick

    async def _poll(self) -> None:
        await asyncio.sleep(GATHER_SECONDS)  # watchers started together join the first read
        loop = asyncio.get_running_loop()
        while self.watches:
            started = loop.time()
            tick = await self._read()
            self._tick, ticked, self._ticked = tick, self._ticked, asyncio.Event()
            ticked.set()
            await asyncio.sleep(max(0.0, self.interval - (loop.time() - started)))

    async def _read(self) -> EndedJobsTick:
        window_start = min(watch.read_from for watch in self.watches)
        try:
            if self.client is None:  # opened here, so that a bad connection is tried again next interval
                self.client = await open_client(self.hook_kwargs)
            jobs = await self.client.ended_jobs(window_start, int(time.time()) + OPEN_END_SECONDS)
        except Exception as error:  # the client already retried what was transient; watchers keep watching
            return EndedJobsTick(window_start, error=error)
        self.calls += 1
        return EndedJobsTick(window_start, tuple(jobs))

    async def close(self) -> None:
        if self._loop_task is not None:
            self._loop_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._loop_task
        if self.client is not None:
            await self.client.close()


# The pollers of the running event loop (the triggerer's), by connection settings and interval.
_POLLERS: dict[tuple[Any, ...], EndedJobsPoller] = {}


def active_ended_jobs_pollers() -> list[EndedJobsPoller]:
    return list(_POLLERS.values())


class EndedJobsFeed(contextlib.AbstractAsyncContextManager["EndedJobsFeed"]):
    """A watcher's subscription: ``next(read_from)`` gives the next read that covers its window."""

    def __init__(self, hook_kwargs: dict[str, Any], interval: float) -> None:
        key = (id(asyncio.get_running_loop()), json.dumps(hook_kwargs, sort_keys=True, default=str), interval)
        poller = _POLLERS.get(key)
        if poller is None:
            poller = _POLLERS[key] = EndedJobsPoller(key, hook_kwargs, interval)
        self.poller = poller
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
        if not poller.watches and _POLLERS.get(poller.key) is poller:
            del _POLLERS[poller.key]  # the last watcher left: stop reading and close the session
            await poller.close()
