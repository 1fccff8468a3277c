"""What the triggerer's shared pollers have in common: one loop per connection settings and interval
in the running event loop, whose answers ("ticks") every trigger that joined it awaits, and the
registry that finds a trigger its poller and closes the poller when the last trigger leaves."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from airflow_provider_slurmapi.client.aio import AsyncSlurmJobApiClient

TickT = TypeVar("TickT")
PollerT = TypeVar("PollerT", bound="IntervalPoller[Any]")


class IntervalPoller(Generic[TickT]):
    """Reads once per ``interval`` for all its triggers (``_poll``, of each kind of poller) and
    hands every answer to all of them (``_publish``, ``next_tick``)."""

    def __init__(self, key: tuple[Any, ...], hook_kwargs: dict[str, Any], interval: float, first: TickT) -> None:
        self.key = key
        self.hook_kwargs = hook_kwargs
        self.interval = interval
        self.client: AsyncSlurmJobApiClient | None = None
        self._tick = first
        self._ticked = asyncio.Event()
        self._loop_task: asyncio.Task[None] | None = None

    def ensure_polling(self) -> None:
        if self._loop_task is None:
            self._loop_task = asyncio.ensure_future(self._poll())

    async def next_tick(self) -> TickT:
        ticked = self._ticked  # the event of the coming tick, even if a tick happens meanwhile
        await ticked.wait()
        return self._tick

    def _publish(self, tick: TickT) -> None:
        self._tick, ticked, self._ticked = tick, self._ticked, asyncio.Event()
        ticked.set()

    async def _poll(self) -> None:
        raise NotImplementedError

    async def close(self) -> None:
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
