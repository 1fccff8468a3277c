"""An event trigger for Airflow's asset watchers: one event for each job that ends on the cluster
and matches a filter, whoever submitted it (Airflow 3 only)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime
from typing import Any

from airflow_provider_slurmapi.client.errors import InvalidRequestError
from airflow_provider_slurmapi.client.job_events import EventCursor, JobEventFilter
from airflow_provider_slurmapi.operators.base import CONNECTION_ARGUMENTS, connection_kwargs
from airflow_provider_slurmapi.triggers.cursor_store import CursorStore
from airflow_provider_slurmapi.triggers.ended_jobs import EndedJobsFeed

try:
    from airflow.triggers.base import BaseEventTrigger, TriggerEvent
except ImportError as error:  # Airflow 2: no asset watchers
    from airflow import __version__

    raise ImportError(
        f"SlurmJobEventTrigger needs Airflow 3.1 or later (asset watchers, AssetWatcher); this is Airflow {__version__}"
    ) from error

# Seconds after an event before the next one and before the cursor is saved past it. The triggerer
# writes a trigger's events at its next loop (about every second): a cursor saved earlier, then a
# restart, would lose the event (a restart within these seconds repeats it instead). And the
# scheduler must have queued the asset's DAG run before the next event comes, for a run of its own:
# Airflow 3.3.2 and older can even leave an event that arrives while it creates the run unconsumed
# until a later one (apache/airflow#56050). The events of one read take at most one interval (then
# closer together, Airflow may batch them), and the last is always followed by the full pause.
EVENT_SPACING_SECONDS = 3.0
MIN_POLL_INTERVAL = 5.0
# The connection arguments that name a watcher's cursor (the cluster, and whose view of it); the
# others (API version, retries) leave it. Changing this renames every watcher's cursor.
CURSOR_CONNECTION = ("slurm_conn_id", "project_id", "region", "cluster_id", "impersonation_chain")


def _epoch(since: datetime | str | float | None) -> int | None:
    """``since`` as epoch seconds: an aware datetime or ISO 8601 text (UTC if it names no zone), or a number."""
    if since is None:
        return None
    if isinstance(since, str):
        try:
            since = datetime.fromisoformat(since)
        except ValueError:
            raise InvalidRequestError(
                "since", f"{since!r} is not an ISO 8601 time (2026-12-01T08:00:00+00:00)"
            ) from None
    if isinstance(since, datetime):
        return int((since if since.tzinfo else since.replace(tzinfo=UTC)).timestamp())
    if isinstance(since, (int, float)) and not isinstance(since, bool) and since >= 0:
        return int(since)
    raise InvalidRequestError("since", f"{since!r} is not a datetime, ISO 8601 text or epoch seconds")


class SlurmJobEventTrigger(BaseEventTrigger):
    """Fires once for each job that ends on the cluster and matches the filter, including jobs
    submitted outside Airflow (``sbatch``, notebooks, other tools). For ``AssetWatcher``:

    .. code-block:: python

        Asset("slurm-training-runs", watchers=[AssetWatcher(
            name="training_runs", trigger=SlurmJobEventTrigger(job_name="train-*", states=["COMPLETED"]))])

    The event's payload is ``EndedJob.to_payload()``: ``job`` (the final ``JobStatus`` as
    ``SlurmJobTrigger``'s event carries it), ``usage`` (``JobUsage``, or None), and ``cluster``,
    ``user``, ``account``, ``partition``, ``submit_time``, ``start_time``, ``end_time``;
    ``EndedJob.from_payload`` reads it back.

    Edge-triggered: a job is reported once, when it ends; jobs that ended before the watcher first
    started (or before ``since``) are not. The cursor is kept in the asset state store (Airflow
    3.3) or an Airflow Variable (3.1, 3.2), so a triggerer restart resumes where it stopped; jobs
    reported in the last seconds before a restart may be reported again (Airflow's delivery is at
    least once). The jobs of one read are reported 3 s apart (closer when they would take more than
    an interval), so that each starts a DAG run of its own. Watchers of one cluster share one
    accounting read per interval.

    All filters are optional; given ones must all match. Each of ``job_name`` (globs), ``user``,
    ``partition`` and ``account`` takes one value or a list (any may match).

    :param job_name: job name or glob (``train-*``), or a list of them.
    :param user: the Unix user who submitted the job, or a list.
    :param partition: partition, or a list.
    :param account: Slurm account, or a list.
    :param comment_contains: a substring of the job's comment.
    :param states: end states to report (default all: BOOT_FAIL, CANCELLED, COMPLETED, DEADLINE,
        FAILED, NODE_FAIL, OUT_OF_MEMORY, PREEMPTED, TIMEOUT).
    :param since: report jobs that ended from this time on (a datetime, ISO 8601 text or epoch
        seconds) instead of from the watcher's first start.
    :param poll_interval: seconds between two reads of accounting (at least 5).
    :param connection: the connection and cluster arguments of the operators
        (:class:`~airflow_provider_slurmapi.operators.base.SlurmBaseOperator`): ``slurm_conn_id``,
        ``project_id``, ``region``, ``cluster_id``, ``api_version``, ``impersonation_chain``,
        ``retry_attempts``, ``retry_max_seconds``.
    """

    def __init__(
        self,
        *,
        job_name: str | Sequence[str] | None = None,
        user: str | Sequence[str] | None = None,
        partition: str | Sequence[str] | None = None,
        account: str | Sequence[str] | None = None,
        comment_contains: str | None = None,
        states: str | Sequence[str] | None = None,
        since: datetime | str | float | None = None,
        poll_interval: float = 60.0,
        **connection: Any,
    ) -> None:
        super().__init__()
        unknown = sorted(set(connection) - set(CONNECTION_ARGUMENTS))
        if unknown:
            raise TypeError(f"SlurmJobEventTrigger got an unexpected keyword argument {unknown[0]!r}")
        self.filter = JobEventFilter.of(
            job_name=job_name,
            user=user,
            partition=partition,
            account=account,
            comment_contains=comment_contains,
            states=states,
        )
        self.since = _epoch(since)
        if isinstance(poll_interval, bool) or not isinstance(poll_interval, (int, float)):
            raise InvalidRequestError("poll_interval", f"{poll_interval!r} is not a number of seconds")
        if poll_interval < MIN_POLL_INTERVAL:
            raise InvalidRequestError("poll_interval", f"{poll_interval} s is less than {MIN_POLL_INTERVAL:g} s")
        self.poll_interval = float(poll_interval)
        self.hook_kwargs = connection_kwargs(connection)
        conn_id = self.hook_kwargs["slurm_conn_id"]
        if not isinstance(conn_id, str) or not conn_id:
            raise InvalidRequestError("slurm_conn_id", f"{conn_id!r} is not a connection ID")
        chain = self.hook_kwargs["impersonation_chain"]  # one form, a list or None: equal watchers serialise alike
        self.hook_kwargs["impersonation_chain"] = ([chain] if isinstance(chain, str) else chain) or None

    def serialize(self) -> tuple[str, dict[str, Any]]:
        # Deterministic: Airflow tells watcher triggers apart by these kwargs.
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {**self.filter.to_dict(), "since": self.since, "poll_interval": self.poll_interval, **self.hook_kwargs},
        )

    @property
    def cursor_key(self) -> str:
        """The cursor's name: the same cluster, filter and ``since`` keep it, whatever the interval."""
        connection = {name: self.hook_kwargs[name] for name in CURSOR_CONNECTION}
        identity = {"filter": self.filter.to_dict(), "since": self.since, "connection": connection}
        digest = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:16]
        return f"slurm_job_events.{digest}"

    async def run(self) -> AsyncIterator[TriggerEvent]:
        store = CursorStore(self.cursor_key, getattr(self, "asset_state_store", None))
        cursor = await store.load()
        if cursor is None:
            cursor = EventCursor.starting(self.since if self.since is not None else int(time.time()))
            await store.save(cursor)  # a restart keeps this start, so no job ending meanwhile is skipped
            self.log.info("Reporting Slurm jobs that end from %s on; cursor in %s", _utc(cursor.since), store.where)
        else:
            self.log.info(
                "Resuming after Slurm jobs that ended by %s; cursor in %s", _utc(cursor.high_water), store.where
            )
        failing = False
        async with EndedJobsFeed(self.hook_kwargs, self.poll_interval, self.filter, cursor) as feed:
            while True:
                share = await feed.next()
                if share.error is not None:
                    if not failing:  # once per outage, not at every interval
                        self.log.warning(
                            "Cannot read the Slurm jobs that ended; trying every interval: %s", share.error
                        )
                    failing = True
                    continue
                if failing:
                    self.log.info("Reading the Slurm jobs that ended again")
                failing = False
                ended = share.ended
                pause = min(EVENT_SPACING_SECONDS, self.poll_interval / max(1, len(ended)))
                for n, job in enumerate(ended, start=1):
                    # any cluster user chooses a job's name: arguments, never the format; escaped, cut at 200
                    self.log.info("%s (name %.200r, user %.64r)", job.status.describe(), job.status.name, job.user)
                    yield TriggerEvent(job.to_payload())
                    if n == len(ended):
                        await asyncio.sleep(EVENT_SPACING_SECONDS)
                    else:
                        await asyncio.sleep(pause)
                        if pause == EVENT_SPACING_SECONDS:  # Airflow has written the events so far
                            await store.save(cursor.with_reported(ended[:n]))
                if ended:
                    await store.save(share.cursor)
                else:
                    await store.save_idle(share.cursor)
                cursor = share.cursor


def _utc(epoch: int) -> str:
    return datetime.fromtimestamp(epoch, tz=UTC).isoformat()
