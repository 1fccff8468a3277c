"""One accounting read per interval for every job-event watcher of a cluster in a triggerer.

Watchers with the same connection settings and interval share an ``EndedJobsPoller``: each
interval it asks accounting once for the jobs that ended since the earliest point any of them
still needs (``GET /slurmdb/vX/jobs/?start_time=..&end_time=..&state=..``), however many watchers
there are. A read covers at most ``CATCH_UP_WINDOW_SECONDS`` of end times while that far behind
(after an outage, or a ``since`` long ago): the feed catches up window by window.

The poller hands each watcher its share of a read (``Share``: the jobs its filter and cursor take,
``client.job_events``) a slice of watchers at a time, so that the event loop runs between slices
however many watchers there are. It keeps each watcher's cursor as it will be after its shares:
the next read starts where the watcher furthest behind will be, even while watchers are still
reporting the last read's jobs (a watcher takes what came meanwhile at once, no read is repeated
for it).

The reads of a group come at fixed moments of the wall clock, one interval apart, at a phase of the
interval of the group's own: a triggerer restarted within an interval reads no sooner than the
interval after its predecessor's last read, and the watchers that load their cursors while it
starts are all in its first read, which starts the catch-up of every one of them.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import math
import time
from dataclasses import dataclass
from typing import Any

from airflow_provider_slurmapi.client.errors import SlurmJobApiError
from airflow_provider_slurmapi.client.job_events import EndedJob, EventCursor, JobEventFilter
from airflow_provider_slurmapi.triggers.interval_poller import (
    GATHER_SECONDS,
    IntervalPoller,
    PollerError,
    PollerRegistry,
    open_client,
)

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
# How long the poller hands out shares before it lets the event loop run (a read's answer, filtered
# for a thousand watchers, takes about half a second), and the pause that lets it: a pause, not a
# bare ``sleep(0)``, so that the watchers handed to and every timer already due run before the next
# slice (a bare yield would put the next slice first).
HAND_OUT_SLICE_SECONDS = 0.005
HAND_OUT_PAUSE_SECONDS = 0.001


@dataclass(frozen=True)
class EndedJobsTick:
    """One read: the jobs that ended from ``window_start`` on, or the error that stopped it;
    ``window_end`` is the end of a closed window (all that ended by then), None for an open one."""

    window_start: int
    jobs: tuple[EndedJob, ...] = ()
    error: SlurmJobApiError | None = None
    window_end: int | None = None


@dataclass(frozen=True)
class Share:
    """What the reads since a watcher last asked give it: its cursor after them and the jobs to
    report (each read's oldest end first), or, with nothing to report, the error of the last read."""

    cursor: EventCursor
    ended: tuple[EndedJob, ...] = ()
    error: SlurmJobApiError | None = None


def read_window(window_start: int, now: int) -> tuple[int, int | None]:
    """The end to ask accounting for, and the tick's ``window_end``: a window of
    ``CATCH_UP_WINDOW_SECONDS`` while it ended long enough ago, else one left open."""
    window_end = window_start + CATCH_UP_WINDOW_SECONDS
    if window_end <= now - CLOSED_WINDOW_AGE_SECONDS:
        return window_end, window_end
    return now + OPEN_END_SECONDS, None


def next_read_in(group: str, interval: float, now: float) -> float:
    """Seconds from ``now`` to the group's next read moment at least ``GATHER_SECONDS`` away: the
    moments are ``interval`` apart, at a phase of the interval from a stable hash of the group."""
    phase = int(hashlib.sha256(group.encode()).hexdigest()[:8], 16) / 16**8 * interval
    moments = math.ceil((now + GATHER_SECONDS - phase) / interval)
    return phase + moments * interval - now


class _Watch:
    """A watcher in the poller: its filter, its cursor after every read handed to it, and the share
    it has not taken yet (``ready`` once there is one)."""

    def __init__(self, matches: JobEventFilter, cursor: EventCursor) -> None:
        self.matches = matches
        self.cursor = cursor
        self.untaken: Share | None = None
        self.ready = asyncio.Event()

    def hand(self, tick: EndedJobsTick) -> None:
        if tick.error is not None:
            if self.untaken is None or not self.untaken.ended:  # jobs still to report come first
                self.untaken = Share(self.cursor, error=tick.error)
        elif tick.window_start <= self.cursor.read_from:  # (a read that started before it joined may not)
            self.cursor, ended = self.cursor.take(tick.jobs, self.matches, tick.window_end)
            earlier = self.untaken.ended if self.untaken is not None else ()
            self.untaken = Share(self.cursor, (*earlier, *ended))
        else:
            return
        self.ready.set()

    def take(self) -> Share:
        share, self.untaken = self.untaken, None
        self.ready.clear()
        assert share is not None  # taken only once ready
        return share


class EndedJobsPoller(IntervalPoller[EndedJobsTick]):
    """Reads the jobs that ended, once per interval, for all the watchers that joined it."""

    def __init__(self, key: tuple[Any, ...], hook_kwargs: dict[str, Any], interval: float) -> None:
        super().__init__(key, hook_kwargs, interval, EndedJobsTick(window_start=0))
        self.watches: list[_Watch] = []

    def _keeps_polling(self) -> bool:
        return bool(self.watches)

    def _first_read_in(self) -> float:
        group = f"{json.dumps(self.hook_kwargs, sort_keys=True, default=str)}/{self.interval!r}"  # any process's
        return next_read_in(group, self.interval, time.time())

    async def _read(self) -> EndedJobsTick:
        window_start = min((watch.cursor.read_from for watch in self.watches), default=int(time.time()))
        ask_until, window_end = read_window(window_start, int(time.time()))
        if self.client is None:  # opened here, so that a bad connection is tried again next interval
            self.client = await open_client(self.hook_kwargs)
        jobs = await self.client.ended_jobs(window_start, ask_until)
        return EndedJobsTick(window_start, tuple(jobs), window_end=window_end)

    def _failed(self, error: SlurmJobApiError) -> EndedJobsTick:
        return EndedJobsTick(0, error=error)

    async def _hand_out(self, tick: EndedJobsTick) -> None:
        """Hand every watcher its share, letting the event loop run every ``HAND_OUT_SLICE_SECONDS``."""
        loop = asyncio.get_running_loop()
        slice_ends = loop.time() + HAND_OUT_SLICE_SECONDS
        for watch in list(self.watches):
            try:
                watch.hand(tick)
            except Exception as error:  # one watcher's share that cannot be made stops no other's
                log.warning("Cannot filter the Slurm jobs that ended for a watcher", exc_info=True)
                watch.hand(EndedJobsTick(tick.window_start, error=PollerError(f"{type(error).__name__}: {error}")))
            if loop.time() >= slice_ends:
                await asyncio.sleep(HAND_OUT_PAUSE_SECONDS)
                slice_ends = loop.time() + HAND_OUT_SLICE_SECONDS


_POLLERS = PollerRegistry(EndedJobsPoller)


def active_ended_jobs_pollers() -> list[EndedJobsPoller]:
    return _POLLERS.active()


class EndedJobsFeed(contextlib.AbstractAsyncContextManager["EndedJobsFeed"]):
    """A watcher's subscription: ``next()`` gives its share of the reads, from ``cursor`` on."""

    def __init__(self, hook_kwargs: dict[str, Any], interval: float, matches: JobEventFilter, cursor: EventCursor):
        self.poller = _POLLERS.join(hook_kwargs, interval)
        self._watch = _Watch(matches, cursor)

    async def __aenter__(self) -> EndedJobsFeed:
        self.poller.watches.append(self._watch)
        self.poller.ensure_polling()
        return self

    async def next(self) -> Share:
        """The share of the next read that covers this watcher's window, or at once what the reads
        since the last call gave it."""
        failure = await self.poller.wait_for(self._watch.ready)
        if failure is not None:
            return Share(self._watch.cursor, error=failure)
        return self._watch.take()

    async def __aexit__(self, *exc_info: Any) -> None:
        poller = self.poller
        if self._watch in poller.watches:
            poller.watches.remove(self._watch)
        if not poller.watches:
            await _POLLERS.release(poller)
