"""What the triggerer's shared pollers have in common: one loop per connection settings and interval
in the running event loop, whose answers ("ticks") every trigger that joined it awaits, and the
registry that finds a trigger its poller and closes the poller when the last trigger leaves.

The loop outlives any failure of one read: the read's exception (whatever it is) becomes an error
tick, which the triggers take as a transient outage, and the next interval reads as usual. A loop
that ended anyway is started again by the next trigger that waits for it, and no trigger waits
longer than ``interval + TICK_WAIT_GRACE_SECONDS`` for a tick.

A kind of poller may choose when its first read comes (``_first_read_in``; by default
``GATHER_SECONDS`` after the first trigger) and how a tick reaches its triggers (``_hand_out``).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import logging
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from airflow_provider_slurmapi.client.aio import AsyncSlurmJobApiClient
from airflow_provider_slurmapi.client.errors import SlurmJobApiError

log = logging.getLogger(__name__)

TickT = TypeVar("TickT")
PollerT = TypeVar("PollerT", bound="IntervalPoller[Any]")

# Triggers started together (a triggerer starting up) join the poller's first read.
GATHER_SECONDS = 0.2
# How much longer than its interval a trigger waits for a tick before it counts the tick as failed
# (and has a stopped loop started again): enough for a read the client retries through the default
# retry budget (two minutes), with a per-request timeout to spare.
TICK_WAIT_GRACE_SECONDS = 300.0
# Triggers a tick wakes per turn of the event loop. Each does its share of work when woken (about
# 0.1 ms): a thousand woken at once would hold the loop, and every other trigger of the triggerer
# (other providers' too) would wait meanwhile; between two turns the loop runs whatever is due.
WAKE_PER_TURN = 50


async def open_client(hook_kwargs: dict[str, Any]) -> AsyncSlurmJobApiClient:
    """A client for the connection arguments, through the async hook. The hook's module is imported
    in a thread: the first time, with the Google libraries under it, it takes a third of a second
    or more, which the event loop would otherwise stand still for."""
    await asyncio.to_thread(importlib.import_module, "airflow_provider_slurmapi.hooks.slurm_job_api")
    from airflow_provider_slurmapi.hooks.slurm_job_api import SlurmJobApiAsyncHook

    return await SlurmJobApiAsyncHook(**hook_kwargs).get_client()


class PollerError(SlurmJobApiError):
    """The shared read failed for a reason the client does not name (a bug), or gave no answer in
    time: its triggers keep watching, as through an outage."""

    retryable = True


class IntervalPoller(Generic[TickT]):
    """Reads once per ``interval`` for all its triggers (``_read``, of each kind of poller) and
    hands every answer to all of them (``_hand_out``, ``next_tick``); a failed read is answered by
    ``_failed`` (an error tick)."""

    def __init__(self, key: tuple[Any, ...], hook_kwargs: dict[str, Any], interval: float, first: TickT) -> None:
        self.key = key
        self.hook_kwargs = hook_kwargs
        self.interval = interval
        self.client: AsyncSlurmJobApiClient | None = None
        self._tick = first
        self._waiting: list[asyncio.Event] = []  # one per trigger waiting for the next tick
        self._loop_task: asyncio.Task[None] | None = None
        self._failing = False  # the last read failed: its outage was logged
        self._closed = False

    def ensure_polling(self) -> None:
        """Start the loop, or start it again if it ended although triggers still wait on it."""
        task = self._loop_task
        if self._closed or task is not None and (not task.done() or not self._keeps_polling()):
            return
        if task is not None:
            error = None if task.cancelled() else task.exception()
            ended = "cancelled" if task.cancelled() else repr(error) if error else "returned"
            log.warning("Shared Slurm poller (every %g s) had stopped (%s); starting it again", self.interval, ended)
        self._loop_task = asyncio.ensure_future(self._poll())

    async def next_tick(self) -> TickT:
        """The next tick, or an error tick once ``interval + TICK_WAIT_GRACE_SECONDS`` passed without one."""
        ticked = asyncio.Event()
        self._waiting.append(ticked)  # woken by the coming tick, even if one is handed out meanwhile
        failure = await self.wait_for(ticked)
        if failure is not None:
            with contextlib.suppress(ValueError):
                self._waiting.remove(ticked)
            return self._failed(failure)
        return self._tick

    async def wait_for(self, ticked: asyncio.Event) -> PollerError | None:
        """Wait until a tick sets ``ticked``: None then, or the error once ``interval +
        TICK_WAIT_GRACE_SECONDS`` passed without it (and the loop is started again if it stopped)."""
        self.ensure_polling()
        try:
            async with asyncio.timeout(self.interval + TICK_WAIT_GRACE_SECONDS):
                await ticked.wait()
        except TimeoutError:
            self.ensure_polling()
            waited = self.interval + TICK_WAIT_GRACE_SECONDS
            return PollerError(f"the shared Slurm read gave no answer for {waited:g} s")
        return None

    async def _poll(self) -> None:
        await asyncio.sleep(self._first_read_in())
        loop = asyncio.get_running_loop()
        while self._keeps_polling():
            started = loop.time()
            await self._hand_out(await self._read_or_fail())
            await asyncio.sleep(max(0.0, self.interval - (loop.time() - started)))

    def _first_read_in(self) -> float:
        """Seconds from the loop's start to its first read: triggers started together join it."""
        return GATHER_SECONDS

    async def _hand_out(self, tick: TickT) -> None:
        """Give the tick to the triggers waiting for it (``next_tick``), ``WAKE_PER_TURN`` per turn of the loop."""
        self._tick, waiting, self._waiting = tick, self._waiting, []
        for start in range(0, len(waiting), WAKE_PER_TURN):
            if start:
                await asyncio.sleep(0)  # the triggers woken run, then whatever else is due
            for ticked in waiting[start : start + WAKE_PER_TURN]:
                ticked.set()

    async def _read_or_fail(self) -> TickT:
        """The read's tick, or an error tick whatever the read raised (logged once per outage)."""
        try:
            tick = await self._read()
        except Exception as error:  # not CancelledError: closing the poller stops the loop
            failure = error if isinstance(error, SlurmJobApiError) else PollerError(f"{type(error).__name__}: {error}")
            if not self._failing:
                log.warning(
                    "Shared Slurm read (every %g s) failed; its triggers keep watching, and it reads again "
                    "every interval: %s",
                    self.interval,
                    failure,
                    exc_info=not isinstance(error, SlurmJobApiError),  # a bug: where it is
                )
            self._failing = True
            return self._failed(failure)
        if self._failing:
            log.info("Shared Slurm read (every %g s) answers again", self.interval)
        self._failing = False
        return tick

    def _keeps_polling(self) -> bool:
        """Whether the loop has triggers to read for."""
        raise NotImplementedError

    async def _read(self) -> TickT:
        raise NotImplementedError

    def _failed(self, error: SlurmJobApiError) -> TickT:
        """The tick that tells the triggers this read failed."""
        raise NotImplementedError

    async def close(self) -> None:
        self._closed = True
        if self._loop_task is not None:
            self._loop_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._loop_task
        if self.client is not None:
            await self.client.close()


class PollerRegistry(Generic[PollerT]):
    """The pollers of one kind in the running event loop (the triggerer's), by connection settings
    and interval."""

    def __init__(self, make: Callable[[tuple[Any, ...], dict[str, Any], float], PollerT]) -> None:
        self._make = make
        self._pollers: dict[tuple[Any, ...], PollerT] = {}

    def join(self, hook_kwargs: dict[str, Any], interval: float) -> PollerT:
        """The poller for these settings, made if there is none."""
        key = (id(asyncio.get_running_loop()), json.dumps(hook_kwargs, sort_keys=True, default=str), interval)
        poller = self._pollers.get(key)
        if poller is None:
            poller = self._pollers[key] = self._make(key, hook_kwargs, interval)
        return poller

    async def release(self, poller: PollerT) -> None:
        """The poller's last trigger left: stop polling and close its session."""
        if self._pollers.get(poller.key) is poller:
            del self._pollers[poller.key]
            await poller.close()

    def active(self) -> list[PollerT]:
        return list(self._pollers.values())
