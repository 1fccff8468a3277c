"""How a trigger reads its job's status: by itself, or through one poller shared by every trigger
that watches a job of the same cluster, with the same credentials, in one triggerer process.

A shared poller makes at most two calls per interval, however many jobs its triggers watch:

- while no watched job pends, the state of every watched job
  (``GET /slurm/vX/jobs/state/?job_id=1&job_id=2...``), small;
- while some watched job pends, the live queue's changes instead (``GET /slurm/vX/jobs/?update_time=T``,
  T the ``last_update`` of its previous answer), which also tell what the state list does not: a
  hold, its reason, a release, a requeue's restart count. slurmctld answers all or nothing: no jobs
  when nothing changed since T (the records kept from before still hold), else the whole queue, whose
  watched records the poller keeps. Accounting would answer for our jobs only, but it does not record
  a hold placed on a pending job. The interval a job starts pending in, both are read. A whole queue
  costs about 5 KB a job: after an answer of B bytes the queue is read again only after
  B / ``QUEUE_BYTES_PER_INTERVAL`` intervals (the state list in between), so that a busy queue of
  thousands of jobs, which changes every interval, costs at most that many bytes per interval on
  average; a hold or release is then seen at the next queue read;
- when jobs were seen requeued, one accounting read for all of them (by job ID), for the cause
  their log line names, at the next interval.

A trigger reads its job's full status by itself only when the answer says the job finished or does
not list it (a job that left the live queue is then read from accounting). If the API refuses the
state query, every trigger falls back to reading its job by itself, and the poller says so once in
the log; if the queue read fails, pending jobs are read in full by their triggers, at most
``FULL_READS_PER_TICK`` per tick, as their holds and requeues ask.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from airflow_provider_slurmapi.client.aio import AsyncSlurmJobApiClient
from airflow_provider_slurmapi.client.arrays import select_job, summaries
from airflow_provider_slurmapi.client.errors import BulkStateQueryUnsupported, SlurmJobApiError
from airflow_provider_slurmapi.client.jobs import JobStatus
from airflow_provider_slurmapi.client.paths import base_job_id
from airflow_provider_slurmapi.client.requeue import describe_requeue
from airflow_provider_slurmapi.client.wait_policy import HELD_REPORT_SECONDS
from airflow_provider_slurmapi.triggers.interval_poller import IntervalPoller, PollerRegistry, open_client

log = logging.getLogger(__name__)

# Full reads of pending jobs the poller allows per tick when the queue read failed: a triggerer
# that starts with a thousand pending jobs reads them over a few intervals, not in one burst.
FULL_READS_PER_TICK = 50
# Requeued jobs whose cause one accounting read asks for (a path of about 12 KB); more wait a tick.
REQUEUE_CAUSES_PER_TICK = 500
# The live queue's bytes the poller reads per interval, on average: a busy queue of 6,000 jobs
# (30 MB) is read every 30 intervals, a queue of 200 jobs or fewer at every interval.
QUEUE_BYTES_PER_INTERVAL = 1_000_000


class JobReader:
    """Reads one job's status every ``interval`` seconds, by itself."""

    def __init__(self, client: AsyncSlurmJobApiClient, interval: float, *, read_now: bool = True) -> None:
        self.client = client
        self.interval = interval
        self._read_now = read_now

    async def describe_requeue(self, status: JobStatus) -> str:
        return await self.client.describe_requeue(status)

    async def next_status(self, job_id: str) -> JobStatus:
        """The job's status: at once the first time (unless ``read_now`` is False), then after each interval."""
        if not self._read_now:
            await asyncio.sleep(self.interval)
        self._read_now = False
        return await self.client.get_job(job_id)


@dataclass
class Tick:
    """One answer of the shared poller: the jobs it saw still active, read once for all triggers.

    A job not among them (finished, left the live queue, or an array task or het component listed
    under another ID) is read by its trigger in full.
    """

    active: dict[str, JobStatus] = field(default_factory=dict)
    full: dict[str, JobStatus] = field(default_factory=dict)  # those whose full status the queue gave
    error: SlurmJobApiError | None = None


@dataclass(frozen=True)
class KeptQueue:
    """The watched jobs' records in the last queue answer that listed jobs, and its ``last_update``."""

    stamp: int | None = None
    covers: frozenset[str] = frozenset()  # the jobs watched then: their records are here, if they had any
    records: dict[str, list[JobStatus]] = field(default_factory=dict)

    @classmethod
    def of(cls, stamp: int, jobs: list[JobStatus], watched: set[str]) -> KeptQueue:
        covers = frozenset(base_job_id(job_id) for job_id in watched)
        records: dict[str, list[JobStatus]] = {}
        for record in jobs:
            if base_job_id(record.job_id) in covers:
                records.setdefault(base_job_id(record.job_id), []).append(record)
        return cls(stamp, covers, records)

    def status(self, job_id: str) -> JobStatus | None:
        """The job's full status in the queue (None: not in it)."""
        return select_job(job_id, self.records.get(base_job_id(job_id), []))


class SharedPoller(IntervalPoller[Tick]):
    """At most two calls per interval for all the jobs its triggers watch (see the module's doc)."""

    def __init__(self, key: tuple[Any, ...], hook_kwargs: dict[str, Any], interval: float) -> None:
        super().__init__(key, hook_kwargs, interval, Tick())
        self.watched: Counter[str] = Counter()
        self.unsupported = False
        self._ready = asyncio.Lock()
        self._full_reads_left = FULL_READS_PER_TICK
        self._kept = KeptQueue()
        self._from_queue = False  # some watched job pended at the last tick: read the queue's changes
        self._reads = 0  # reads of the poller so far (ticks and failed ones)
        self._next_queue_read = 0  # the read from which on the queue may be read again
        self._requeued: list[tuple[JobStatus, asyncio.Future[str]]] = []  # log lines asked for

    async def start(self) -> AsyncSlurmJobApiClient:
        async with self._ready:
            if self.client is None:
                self.client = await open_client(self.hook_kwargs)
            self.ensure_polling()
            return self.client

    def grant_full_read(self) -> bool:
        """Whether a trigger may read its pending job in full this tick (see ``FULL_READS_PER_TICK``)."""
        if self._full_reads_left <= 0:
            return False
        self._full_reads_left -= 1
        return True

    async def requeue_line(self, status: JobStatus) -> str:
        """The log line of a job seen requeued, its cause read at the next tick with the others'."""
        line: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._requeued.append((status, line))
        return await line

    def _keeps_polling(self) -> bool:
        return bool(self.watched) and self.client is not None and not self.unsupported

    async def _read(self) -> Tick:
        try:
            return await self._read_tick()
        except BulkStateQueryUnsupported as error:
            log.warning("Polling each Slurm job by itself from now on: %s", error)
            self.unsupported = True
            return Tick()

    def _failed(self, error: SlurmJobApiError) -> Tick:
        return Tick(error=error)

    async def _hand_out(self, tick: Tick) -> None:
        self._full_reads_left = FULL_READS_PER_TICK
        await super()._hand_out(tick)

    async def _read_tick(self) -> Tick:
        """The next answer to the triggers, and whether the one after is read from the queue."""
        tick = Tick()
        self._reads += 1
        await self._read_requeue_causes()  # first: the triggers it answers then wait for this tick
        await self._read_states(tick)
        self._from_queue = any(status.state == "PENDING" for status in tick.active.values())
        return tick

    async def _read_states(self, tick: Tick) -> None:
        """Fill ``tick``: from the queue's changes while a watched job pends (when the queue is due),
        else from the state list, and then, if it shows a job newly pending, from the queue's changes
        for the pending ones."""
        assert self.client is not None
        queue_due = self._reads >= self._next_queue_read
        if self._from_queue and queue_due:
            kept = await self._read_queue()
            if kept is not None:
                records = {job_id: kept.status(job_id) for job_id in self.watched}
                tick.full = {job_id: s for job_id, s in records.items() if s is not None and s.is_active}
                tick.active = dict(tick.full)
                return
        statuses = summaries(await self.client.job_states(sorted(self.watched)))
        tick.active = {job_id: status for job_id, status in statuses.items() if status.is_active}
        pending = [job_id for job_id, status in tick.active.items() if status.state == "PENDING"]
        if pending and not self._from_queue and queue_due:  # (when it was, the queue read just failed)
            kept = await self._read_queue()
            if kept is not None:
                found = {job_id: kept.status(job_id) for job_id in pending}
                tick.full = {job_id: status for job_id, status in found.items() if status is not None}

    async def _read_queue(self) -> KeptQueue | None:
        """The watched jobs' records after the queue's changes since the last answer that listed
        jobs (the whole queue if a job is watched since); None if the read fails."""
        assert self.client is not None
        kept = self._kept
        covered = all(base_job_id(job_id) in kept.covers for job_id in self.watched)
        try:
            changes = await self.client.queue_changes(kept.stamp if covered else None, list(self.watched))
        except SlurmJobApiError as error:
            log.warning("Reading pending Slurm jobs by themselves this interval: %s", error)
            return None
        self._next_queue_read = self._reads + math.ceil(changes.size / QUEUE_BYTES_PER_INTERVAL)
        if changes.jobs is not None:
            kept = self._kept = KeptQueue.of(changes.last_update, changes.jobs, set(self.watched))
        return kept

    async def _read_requeue_causes(self) -> None:
        """Answer the requeue lines asked for since the last tick, with one accounting read."""
        asked = self._requeued[:REQUEUE_CAUSES_PER_TICK]
        if not asked or self.client is None:
            return
        del self._requeued[: len(asked)]
        lines: dict[str, str] = {}
        try:
            lines = await self.client.requeue_lines([status for status, _ in asked])
        finally:  # a log line never fails a wait: without the read, one without the cause
            for status, line in asked:
                if not line.done():  # its trigger may have stopped meanwhile
                    line.set_result(lines.get(status.job_id) or describe_requeue(status, None))


_POLLERS = PollerRegistry(SharedPoller)


def active_pollers() -> list[SharedPoller]:
    return _POLLERS.active()


class SharedJobReader:
    """Reads one job's status from its cluster's shared poller."""

    def __init__(self, poller: SharedPoller, client: AsyncSlurmJobApiClient) -> None:
        self.poller = poller
        self.client = client
        self._alone: JobReader | None = None
        self._has_read = False
        self._last_state: str | None = None  # the state the last tick gave, if it listed the job
        self._owes_full_read = False  # a pending job's hold or requeue is still to be read
        self._held_since_read: float | None = None  # monotonic time of the last full read that found it held

    async def next_status(self, job_id: str) -> JobStatus:
        """The job's status at the poller's next tick: its summary while the job is active, else
        its full status (or accounting's). Once the API refused the bulk query, read by itself."""
        if self.poller.unsupported:
            # a reader that has read already waits an interval first; one that joined late reads now
            self._alone = self._alone or JobReader(self.client, self.poller.interval, read_now=not self._has_read)
            return await self._alone.next_status(job_id)
        tick = await self.poller.next_tick()
        if tick.error is not None:
            raise tick.error
        self._has_read = True
        summary = tick.active.get(job_id)
        if summary is None:
            return await self.client.get_job(job_id)
        detail = tick.full.get(job_id)
        if detail is not None:
            self._last_state, self._owes_full_read = detail.state, False
            return detail
        self._owes_full_read |= self._worth_reading_in_full(summary)
        self._last_state = summary.state
        if not (self._owes_full_read and self.poller.grant_full_read()):
            return summary
        self._owes_full_read = False
        status = await self.client.get_job(job_id)
        self._held_since_read = time.monotonic() if status.held else None
        return status

    async def describe_requeue(self, status: JobStatus) -> str:
        """The requeue's log line, read with the other requeued jobs' at the poller's next tick."""
        if self.poller.unsupported:
            return await self.client.describe_requeue(status)
        return await self.poller.requeue_line(status)

    def _worth_reading_in_full(self, summary: JobStatus) -> bool:
        """Pending when first seen or again (a requeue), or held when last read a while ago."""
        if summary.state != "PENDING":
            return False
        held_at = self._held_since_read
        recheck = held_at is not None and time.monotonic() - held_at >= HELD_REPORT_SECONDS
        return self._last_state != "PENDING" or recheck


class WatchedJob(contextlib.AbstractAsyncContextManager):
    """A trigger's watch of ``job_id``: entering it gives the reader (shared or its own), leaving it
    closes the reader's session or leaves the shared poller.

    A class, not an async generator: when an event loop shuts down it closes every async generator
    at once, and one nested in the trigger's own would be closed twice.
    """

    def __init__(self, job_id: str, hook_kwargs: dict[str, Any], interval: float, *, shared: bool) -> None:
        self.job_id, self.hook_kwargs, self.interval, self.shared = job_id, hook_kwargs, interval, shared
        self._client: AsyncSlurmJobApiClient | None = None
        self._poller: SharedPoller | None = None

    async def __aenter__(self) -> JobReader | SharedJobReader:
        if not self.shared:
            self._client = await open_client(self.hook_kwargs)
            return JobReader(self._client, self.interval)
        poller = self._poller = _POLLERS.join(self.hook_kwargs, self.interval)
        poller.watched[self.job_id] += 1
        try:
            return SharedJobReader(poller, await poller.start())
        except BaseException:
            await self._leave(poller)
            raise

    async def __aexit__(self, *exc_info: Any) -> None:
        if self._client is not None:
            await self._client.close()
        if self._poller is not None:
            await self._leave(self._poller)

    async def _leave(self, poller: SharedPoller) -> None:
        poller.watched[self.job_id] -= 1
        if poller.watched[self.job_id] <= 0:
            del poller.watched[self.job_id]
        if not poller.watched:
            await _POLLERS.release(poller)
