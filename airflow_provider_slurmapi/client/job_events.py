"""Jobs that ended on a cluster, whoever submitted them: which ones a watcher reports, and the
cursor that makes each reported once (no Airflow import).

Accounting answers "which jobs ended between A and B" in one call (``ended_jobs``). A watcher
keeps a cursor: the time it first started (``since``; nothing that ended before is reported), the
latest end time it has seen (``high_water``), and the jobs it reported within ``SETTLE_SECONDS``
of it. Each read starts ``SETTLE_SECONDS`` before the high water, so a record that reaches
accounting a little late is still read, and the reported list keeps it from being reported twice.
A read of a closed window (one of the catch-up after an outage) moves the high water to the
window's end, whether or not a job ended near it.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from functools import cached_property
from typing import Any

from airflow_provider_slurmapi.client.errors import InvalidRequestError
from airflow_provider_slurmapi.client.jobs import JobStatus
from airflow_provider_slurmapi.client.records import number
from airflow_provider_slurmapi.client.usage import JobUsage

# The end states accounting can be asked for (``state=`` of /slurmdb/vX/jobs/), as its records name them.
END_STATES = (
    "BOOT_FAIL",
    "CANCELLED",
    "COMPLETED",
    "DEADLINE",
    "FAILED",
    "NODE_FAIL",
    "OUT_OF_MEMORY",
    "PREEMPTED",
    "TIMEOUT",
)
# How far before the latest end time seen each read starts again: slurmctld sends a job's end to
# slurmdbd a moment after it happens, so a job that ended just before another can arrive after it.
SETTLE_SECONDS = 60


def _names(field_name: str, value: str | Sequence[str] | None) -> list[str]:
    """A filter value as a sorted list of non-empty strings (one string is a list of one)."""
    if value is None:
        return []
    values = [value] if isinstance(value, str) else value
    if not isinstance(values, (list, tuple)) or not all(isinstance(v, str) and v.strip() for v in values):
        raise InvalidRequestError(field_name, f"{value!r} is not a non-empty string or a list of them")
    return sorted({v.strip() for v in values})


@dataclass(frozen=True)
class JobEventFilter:
    """Which ended jobs a watcher reports: all of the given conditions hold (none given: every job).

    Each of ``job_name`` (globs: ``train-*``), ``user``, ``partition`` and ``account`` is one value
    or a list of values, any of which may match; ``comment_contains`` is a substring of the job's
    comment; ``states`` the end states to report (default all of ``END_STATES``).
    """

    job_name: list[str] = field(default_factory=list)
    user: list[str] = field(default_factory=list)
    partition: list[str] = field(default_factory=list)
    account: list[str] = field(default_factory=list)
    comment_contains: str | None = None
    states: list[str] = field(default_factory=lambda: list(END_STATES))

    @classmethod
    def of(
        cls,
        *,
        job_name: str | Sequence[str] | None = None,
        user: str | Sequence[str] | None = None,
        partition: str | Sequence[str] | None = None,
        account: str | Sequence[str] | None = None,
        comment_contains: str | None = None,
        states: str | Sequence[str] | None = None,
    ) -> JobEventFilter:
        """The filter, checked and in one canonical form (sorted lists): equal filters serialise alike."""
        if comment_contains is not None and (not isinstance(comment_contains, str) or not comment_contains):
            raise InvalidRequestError("comment_contains", f"{comment_contains!r} is not a non-empty string")
        chosen = [s.upper() for s in _names("states", states)] if states is not None else list(END_STATES)
        unknown = sorted(set(chosen) - set(END_STATES))
        if unknown or not chosen:
            raise InvalidRequestError(
                "states", f"{unknown or states!r}: expected one or more of {', '.join(END_STATES)}"
            )
        return cls(
            job_name=_names("job_name", job_name),
            user=_names("user", user),
            partition=_names("partition", partition),
            account=_names("account", account),
            comment_contains=comment_contains,
            states=sorted(set(chosen)),
        )

    def matches(self, job: EndedJob) -> bool:
        status = job.status
        return (
            status.state in self.states
            and (self._name_pattern is None or self._name_pattern.match(status.name) is not None)
            and (not self.user or job.user in self.user)
            and (not self.partition or job.partition in self.partition)
            and (not self.account or job.account in self.account)
            and (self.comment_contains is None or self.comment_contains in status.comment)
        )

    @cached_property
    def _name_pattern(self) -> re.Pattern[str] | None:
        """The name globs as one pattern, compiled once: it matches where ``fnmatchcase`` of any glob does."""
        return re.compile("|".join(fnmatch.translate(glob) for glob in self.job_name)) if self.job_name else None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class EndedJob:
    """A job that ended, as accounting recorded it: the payload of a watcher's event."""

    status: JobStatus
    usage: JobUsage | None
    cluster: str
    user: str
    account: str
    partition: str
    submit_time: int | None
    start_time: int | None
    end_time: int

    @classmethod
    def from_slurmdb(cls, record: dict[str, Any]) -> EndedJob:
        status = JobStatus.from_slurmdb(record)
        times = record.get("time")
        times = times if isinstance(times, dict) else {}
        return cls(
            status=status,
            usage=JobUsage.from_accounting(status.job_id, [record]),
            cluster=str(record.get("cluster") or ""),
            user=str(record.get("user") or ""),
            account=str(record.get("account") or ""),
            partition=str(record.get("partition") or ""),
            submit_time=number(times.get("submission")),
            start_time=number(times.get("start")),
            end_time=number(times.get("end")) or 0,
        )

    @cached_property
    def key(self) -> str:
        """What tells one end from another: a job requeued and ended again is a new end."""
        return f"{self.status.job_id}@{self.end_time}"

    def to_payload(self) -> dict[str, Any]:
        """The event's payload: ``job`` is the final status as ``SlurmJobTrigger``'s event carries it."""
        return {
            "status": "finished",
            "job": self.status.to_dict(),
            "usage": self.usage.to_dict() if self.usage is not None else None,
            "cluster": self.cluster,
            "user": self.user,
            "account": self.account,
            "partition": self.partition,
            "submit_time": self.submit_time,
            "start_time": self.start_time,
            "end_time": self.end_time,
        }

    @classmethod
    def from_payload(cls, payload: dict[str, Any]) -> EndedJob:
        """The job an asset event's payload names (``triggering_asset_events[...][i].extra["payload"]``)."""
        usage = payload.get("usage")
        return cls(
            status=JobStatus.from_dict(payload["job"]),
            usage=JobUsage(**usage) if usage else None,
            cluster=payload.get("cluster", ""),
            user=payload.get("user", ""),
            account=payload.get("account", ""),
            partition=payload.get("partition", ""),
            submit_time=payload.get("submit_time"),
            start_time=payload.get("start_time"),
            end_time=payload["end_time"],
        )


@dataclass(frozen=True)
class EventCursor:
    """Where a watcher stands: see the module's doc. Plain JSON as ``to_dict`` gives it."""

    since: int
    high_water: int
    reported: dict[str, int] = field(default_factory=dict)  # job key -> end time, within the settle window

    @classmethod
    def starting(cls, since: int) -> EventCursor:
        return cls(since=since, high_water=since)

    @property
    def read_from(self) -> int:
        """The start of the next read's window."""
        return max(0, self.high_water - SETTLE_SECONDS)

    def take(
        self, jobs: Iterable[EndedJob], matches: JobEventFilter, window_end: int | None = None
    ) -> tuple[EventCursor, list[EndedJob]]:
        """The cursor after ``jobs`` (a read from ``read_from`` on), and those to report, oldest end first.

        ``window_end``: the read held every job that ended by then (a closed window, read long after
        it ended), so the cursor moves there; None (an open window): only as far as the jobs' ends.
        """
        # a shared read may start earlier than this cursor's window: what ended before it was seen
        floor = max(self.since, self.read_from)
        jobs = [job for job in jobs if job.end_time >= floor]
        new = sorted(
            (job for job in jobs if job.key not in self.reported and matches.matches(job)),
            key=lambda j: (j.end_time, j.key),
        )
        high_water = max([self.high_water, *(job.end_time for job in jobs), window_end or 0])
        reported = {**self.reported, **{job.key: job.end_time for job in new}}
        kept = {key: end for key, end in reported.items() if end >= high_water - SETTLE_SECONDS}
        return replace(self, high_water=high_water, reported=kept), new

    def with_reported(self, jobs: Iterable[EndedJob]) -> EventCursor:
        """This cursor with ``jobs`` reported (saved while the rest of a read is still being reported)."""
        return replace(self, reported={**self.reported, **{job.key: job.end_time for job in jobs}})

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Any) -> EventCursor | None:
        """The stored cursor, or None when ``data`` is not one (nothing stored, or another shape)."""
        try:
            return cls(
                since=int(data["since"]),
                high_water=int(data["high_water"]),
                reported={str(k): int(v) for k, v in dict(data.get("reported") or {}).items()},
            )
        except (TypeError, KeyError, ValueError, AttributeError):
            return None
