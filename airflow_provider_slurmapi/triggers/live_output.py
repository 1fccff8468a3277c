"""Live output from the triggerer: one listing of an output location's ``live/`` folder per
interval for every trigger whose job publishes there (a poller shared as the job-state poller is),
then one read per new piece of its own job; the reads run in threads of their own, the lines are
logged from the event loop.

The listing's names are sorted by job once, in its thread, so that each trigger looks only at its
job's names: with a thousand jobs publishing, a listing holds thousands of names. The triggers whose
jobs end together share one last listing, made after they asked.

Where a trigger is (``LiveFollower``) is kept in an Airflow Variable ``slurm_live_output.<tag>.<job>``:
saved when it stops and at most every ``SAVE_SECONDS`` while it shows lines, read when it starts
again (a triggerer restart, another triggerer), removed when its wait ends. A triggerer that died
without stopping its triggers has saved at most ``SAVE_SECONDS`` before: lines shown since may be
shown again, after a note that says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import time
import weakref
from collections.abc import Awaitable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from asgiref.sync import sync_to_async

from airflow_provider_slurmapi.client.errors import SlurmJobApiError
from airflow_provider_slurmapi.client.live_output import LiveFollower, LiveOutputSettings, Piece, listing_offset
from airflow_provider_slurmapi.hooks.live_reader import LiveOutputReader, live_folder
from airflow_provider_slurmapi.triggers.interval_poller import GATHER_SECONDS, IntervalPoller, PollerRegistry
from airflow_provider_slurmapi.version_compat import variables as _variables

if TYPE_CHECKING:
    from airflow_provider_slurmapi.hooks.object_store import ObjectStore

T = TypeVar("T")
SAVE_SECONDS = 120.0  # the longest a trigger's position goes unsaved while it shows lines
LINES_PER_SLICE = 200  # lines logged before the event loop runs other tasks again
READ_THREADS = 4  # reads of pieces at once: few, so that the event loop is not starved of the GIL
_SAVING: set[asyncio.Future[None]] = set()  # saves of stopping triggers, kept to their end
_READS: ThreadPoolExecutor | None = None
_TURNS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = weakref.WeakKeyDictionary()


def _reads() -> ThreadPoolExecutor:
    """The threads that read pieces: a thousand triggers' reads each interval do not queue on the
    event loop's default threads, which every other trigger of the triggerer uses too."""
    global _READS
    if _READS is None:
        _READS = ThreadPoolExecutor(READ_THREADS, thread_name_prefix="slurm-live-output")
    return _READS


def _logging_turn() -> asyncio.Lock:
    """Whose turn it is to log or start a read: one trigger's per turn of the event loop, so that a
    thousand reads starting or ending together are not all done in one turn (which would hold every
    other trigger)."""
    loop = asyncio.get_running_loop()
    if loop not in _TURNS:
        _TURNS[loop] = asyncio.Lock()
    return _TURNS[loop]


def _job_key(tag: str, job: str) -> tuple[str, str]:
    """What a piece and its follower share: the tag and the job ID (an array's, for its tasks)."""
    return tag, job.split("_", 1)[0]


@dataclass
class Listing:
    """One listing of a ``live/`` folder (``names``), or why it failed; ``by_job``: its pieces' names by
    ``_job_key``; ``listed_from`` and ``started``: its offset and when it began (epoch seconds)."""

    names: list[str] = field(default_factory=list)
    error: SlurmJobApiError | None = None
    by_job: dict[tuple[str, str], list[str]] = field(default_factory=dict)
    listed_from: int = 0
    started: float = 0.0

    @classmethod
    def of(cls, names: list[str], listed_from: int = 0, started: float = 0.0) -> Listing:
        """The listing of these names, each parsed once (in the listing's thread)."""
        by_job: dict[tuple[str, str], list[str]] = {}
        for name in names:
            piece = Piece.parse(name)
            if piece is not None:
                by_job.setdefault(_job_key(piece.tag, piece.job), []).append(name)
        return cls(names, by_job=by_job, listed_from=listed_from, started=started)

    def names_of(self, follower: LiveFollower) -> list[str]:
        """The names that may be ``follower``'s pieces (its job's, or its tasks')."""
        return self.by_job.get(_job_key(follower.tag, follower.job), [])


class LiveListingPoller(IntervalPoller[Listing]):
    """Lists one ``live/`` folder once per interval, from the earliest offset its triggers still need."""

    def __init__(self, key: tuple[Any, ...], spec: dict[str, Any], interval: float) -> None:
        hook_kwargs = {name: value for name, value in spec.items() if name != "live_folder"}
        super().__init__(key, hook_kwargs, interval, Listing())
        self.folder: str = spec["live_folder"]
        self.followers: dict[int, LiveFollower] = {}
        self._store: ObjectStore | None = None
        self._making_store = asyncio.Lock()
        self._last: asyncio.Future[Listing] | None = None

    async def store(self) -> ObjectStore:
        """The object store of the connection's credentials, made once (in a thread: it reads the connection)."""
        async with self._making_store:  # triggers starting together make one
            if self._store is None:
                from airflow_provider_slurmapi.hooks.slurm_job_api import SlurmJobApiHook

                hook_kwargs = self.hook_kwargs
                self._store = await sync_to_async(lambda: SlurmJobApiHook(**hook_kwargs)._object_store())()
            return self._store

    def _keeps_polling(self) -> bool:
        return bool(self.followers)

    async def _read(self) -> Listing:
        if not self.followers:  # the last trigger left while its last listing waited
            return Listing()
        since = min(follower.since for follower in list(self.followers.values()))
        store = await self.store()

        def listing() -> Listing:
            started = time.time()
            return Listing.of(store.names_from(self.folder, listing_offset(since)), since, started)

        return await asyncio.to_thread(listing)

    async def last_listing(self) -> Listing:
        """A listing begun after this call, for triggers whose jobs ended: those that ask within
        ``GATHER_SECONDS`` of each other (a tick of the state poller ends many at once) share it."""
        if self._last is None:
            self._last = asyncio.ensure_future(self._last_listing())
        return await asyncio.shield(self._last)

    async def _last_listing(self) -> Listing:
        try:
            await asyncio.sleep(GATHER_SECONDS)
        finally:
            self._last = None  # who asks from now on gets the next one
        return await self._read_or_fail()

    def _failed(self, error: SlurmJobApiError) -> Listing:
        return Listing(error=error)

    async def close(self) -> None:
        if self._last is not None:
            self._last.cancel()
        await super().close()


_LISTINGS: PollerRegistry[LiveListingPoller] = PollerRegistry(LiveListingPoller)


def _apart(function: Any) -> Any:
    """``function`` run in a thread of its own: the first Variable read of a triggerer takes
    seconds, and on the one thread every ``sync_to_async`` call shares it would hold up the token
    refreshes, and so the status reads, of every trigger."""
    return sync_to_async(function, thread_sensitive=False)


class PositionStore:
    """Where a trigger keeps its ``LiveFollower``: an Airflow Variable. A failed save or read is
    logged, never fatal (the position stays in memory)."""

    def __init__(self, follower: LiveFollower, log: logging.Logger | Any) -> None:
        self.key = f"slurm_live_output.{follower.tag}.{follower.job}"
        self.log = log

    async def load(self) -> LiveFollower | None:
        def read() -> LiveFollower | None:
            value = _variables().get(self.key, None)
            return LiveFollower.from_dict(json.loads(value)) if value else None

        try:
            return await _apart(read)()
        except Exception as error:
            self.log.warning("Cannot read the live output position %s (lines may be shown again): %s", self.key, error)
            return None

    async def save(self, follower: LiveFollower) -> None:
        description = "Position of a Slurm job's live output in its task log (airflow-provider-slurmapi)"
        state = follower.to_dict()  # a copy: the JSON is made in the thread, not on the event loop

        def write() -> None:
            _variables().set(self.key, json.dumps(state), description=description)

        try:
            await _apart(write)()
        except Exception as error:
            self.log.warning(
                "Cannot save the live output position %s (a restart may show lines again): %s", self.key, error
            )

    async def drop(self) -> None:
        with contextlib.suppress(Exception):  # nothing was saved, or the Variable cannot be reached
            await _apart(_variables().delete)(self.key)


class LiveWatch(contextlib.AbstractAsyncContextManager):
    """A trigger's live output: entering it joins the folder's shared listing and reads where an
    earlier trigger of this wait left; ``alongside`` shows the lines while another wait runs, then
    the last pieces. Never fails the trigger: a problem is logged once.

    :param spec: the trigger's ``live_output`` argument: ``within`` (the output URI), ``job``,
        ``tag`` and the ``LiveOutputSettings`` fields.
    """

    def __init__(self, spec: dict[str, Any], hook_kwargs: dict[str, Any], interval: float, log: Any) -> None:
        self.settings = LiveOutputSettings(
            True, spec.get("period", 10), spec.get("max_lines", 1000), spec.get("max_bytes", 256 * 1024)
        )
        self.within: str = spec["within"]
        self.output_folder: str | None = spec.get("output_folder")
        # a spec of an earlier version has no ``since``: the listing then starts at the folder's start
        self.follower = LiveFollower(job=str(spec["job"]), tag=str(spec["tag"]), since=int(spec.get("since", 0)))
        self.hook_kwargs, self.interval, self.log = hook_kwargs, interval, log
        self.positions = PositionStore(self.follower, log)
        self._poller: LiveListingPoller | None = None
        self._reader: LiveOutputReader | None = None
        self._saved = 0  # the follower's ``changes`` when it was saved
        self._saved_at = 0.0
        self._ended = False
        self._in_flight: asyncio.Future[None] | None = None
        self._surprised = False

    async def __aenter__(self) -> LiveWatch:
        earlier = await self.positions.load()
        if earlier is not None and (earlier.job, earlier.tag) == (self.follower.job, self.follower.tag):
            self.follower = earlier
            self._saved = earlier.changes
            self.log.info(
                "Live output of Slurm job %s goes on where an earlier trigger of this wait left it"
                " (lines it showed in its last %g s may be shown again)",
                self.follower.job,
                SAVE_SECONDS,
            )
        # the first save of each trigger falls anywhere in the period: no burst of saves together
        self._saved_at = time.monotonic() - random.uniform(0, SAVE_SECONDS)
        spec = {**self.hook_kwargs, "live_folder": live_folder(self.within)}
        self._poller = _LISTINGS.join(spec, self.interval)
        self._poller.followers[id(self)] = self.follower
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        poller, self._poller = self._poller, None
        if poller is None:
            return
        poller.followers.pop(id(self), None)
        if not poller.followers:
            await _LISTINGS.release(poller)
        if not self._ended and self.follower.changes != self._saved:  # stopped: the next trigger goes on from here
            task = asyncio.ensure_future(self.positions.save(self.follower))
            _SAVING.add(task)
            task.add_done_callback(_SAVING.discard)
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.shield(task)

    async def alongside(self, wait: Awaitable[T]) -> T:
        """``wait``'s result; meanwhile each listing's new lines are shown, and the last ones after it."""
        showing = asyncio.ensure_future(self._show_each_listing())
        try:
            result = await wait
        finally:
            showing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await showing
            if self._in_flight is not None:
                with contextlib.suppress(Exception):  # said by the loop that started it
                    await self._in_flight  # the lines of a read under way, before the last ones
        await self._show_last()
        return result

    async def _show_each_listing(self) -> None:
        assert self._poller is not None
        while True:
            listing = await self._poller.next_tick()
            if listing.error is None:
                try:
                    if await self._show(listing.names_of(self.follower)):
                        self.follower.caught_up(listing.listed_from, listing.started)
                except Exception as error:  # live output never ends the wait: the next listing reads on
                    self._surprise(error)
                await self._save_now_and_then()

    def _surprise(self, error: Exception) -> None:
        if not self._surprised:
            self._surprised = True
            self.log.warning("Live output of Slurm job %s: a read failed (tried again): %r", self.follower.job, error)

    async def _show_last(self) -> None:
        """The pieces published up to the job's end: a listing begun after it ended."""
        reader = await self._ready_reader()
        if reader is None or self._poller is None:
            return
        listing = await self._poller.last_listing()
        if listing.error is not None:
            await self._log(reader._problem(listing.error))
        else:
            try:
                await self._show(listing.names_of(self.follower))
            except Exception as error:  # the job's end is reported whatever its last read did
                self._surprise(error)
        await self._log(reader.unended_lines())
        self._ended = True
        await self.positions.drop()

    async def _show(self, names: list[str]) -> bool:
        """Read and log the new pieces among ``names`` (this job's); whether every one was taken."""
        reader = await self._ready_reader()
        if reader is None:
            return False
        if not names:
            return True
        # one trigger starts its read per turn of the loop: a listing wakes a thousand triggers at
        # once, and starting every read in one turn, while the first reads hold the GIL in their
        # threads, held the loop for hundreds of milliseconds
        async with _logging_turn():
            # pieces read are logged even if the wait stops meanwhile: the follower has taken them
            self._in_flight = asyncio.ensure_future(self._read_and_log(reader, names))
            await asyncio.sleep(0)  # the turn ends here: the next trigger waits for the next one
        await asyncio.shield(self._in_flight)
        return reader.took_all

    async def _read_and_log(self, reader: LiveOutputReader, names: list[str]) -> None:
        await self._log(await asyncio.get_running_loop().run_in_executor(_reads(), reader.collect, names))

    async def _ready_reader(self) -> LiveOutputReader | None:
        if self._reader is None and self._poller is not None:
            try:
                store = await self._poller.store()
            except Exception as error:
                self.log.warning("Cannot read the live output of Slurm job %s: %s", self.follower.job, error)
                return None
            self._reader = LiveOutputReader(store, self.within, self.settings, self.follower, self.output_folder)
        return self._reader

    async def _log(self, lines: list[tuple[int, str]]) -> None:
        if not lines:
            return
        async with _logging_turn():
            for count, (level, text) in enumerate(lines, 1):
                self.log.log(level, "%s", text)
                if count % LINES_PER_SLICE == 0:
                    await asyncio.sleep(0)  # thousands of lines do not hold the loop

    async def _save_now_and_then(self) -> None:
        now = time.monotonic()
        if self.follower.changes != self._saved and now - self._saved_at >= SAVE_SECONDS:
            self._saved, self._saved_at = self.follower.changes, now
            await self.positions.save(self.follower)


async def drop_position(spec: dict[str, Any], log: Any) -> None:
    """Remove the position a killed wait kept (``SlurmJobTrigger``'s ``live_output`` spec): no
    trigger will go on from it."""
    await PositionStore(LiveFollower(job=str(spec["job"]), tag=str(spec["tag"])), log).drop()
