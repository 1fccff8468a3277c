"""The one wait policy for a Slurm job, used by the hook's wait, the trigger and the sensor.

It decides what each read means: keep waiting, finished, lost (missing from both the live queue
and accounting for ``lost_grace`` s, since accounting can lag), or a state this provider does not
know that lasted as long; when the deadline is reached; and what is worth telling the user: a
change of state, reason or expected start (one line each), a requeue (once each), a hold (when
first seen, then every ``HELD_REPORT_SECONDS``).

A requeued job is never finished: Slurm puts it back to PENDING (at most briefly with COMPLETING)
with a higher ``restart_cnt``, and runs it again from the start. It does no I/O and reads no clock:
each caller reads the job and sleeps its own way. Times are epoch seconds, so a sensor that is
rescheduled between reads can keep ``astray_since`` and carry the policy on.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from airflow_provider_slurmapi.client.errors import JobLostError, UnknownJobStateError
from airflow_provider_slurmapi.client.jobs import JobStatus, RecordSource

LOST_JOB_GRACE = 300.0  # seconds a job may be missing from both queue and accounting (accounting lags)
HELD_REPORT_SECONDS = 600.0  # a held job is reported when first seen, then at most this often
# Slurm's scheduler computes a pending job's expected start again at each pass: only a move of at
# least this much from the one last told is worth a line.
EXPECTED_START_MOVE_SECONDS = 60


@dataclass(frozen=True)
class Verdict:
    """What one read means. ``status`` is None when the job was found nowhere."""

    status: JobStatus | None
    finished: bool = False
    changed: bool = False  # state, reason or expected start differs from the last line's: worth a log line
    requeued: bool = False  # Slurm requeued the job since the last read that said so
    report_held: bool = False  # the job is held, and the user has not been told for a while

    def progress(self) -> tuple[int, str] | None:
        """What this read of a job still waited for is worth a log line: (level, line), or None."""
        if self.status is None or not (self.report_held or self.changed):
            return None
        return (logging.WARNING if self.report_held else logging.INFO), self.status.describe()


@dataclass
class JobWaitPolicy:
    """The wait for one job, read after read."""

    job_id: str
    lost_grace: float = LOST_JOB_GRACE
    deadline: float | None = None  # epoch seconds
    # epoch time of the first of the reads in a row that found the job nowhere or in an unknown state
    astray_since: float | None = None
    restarts: int = 0  # requeues already reported
    held_reported_at: float | None = None  # epoch time the hold was last reported
    told: tuple[str, str | None, int | None] | None = None  # the state, reason and expected start last logged

    def __post_init__(self) -> None:
        if isinstance(self.told, list):  # carried over as JSON (a sensor's task state store)
            self.told = (self.told[0], self.told[1], self.told[2])

    def judge(self, status: JobStatus | None, now: float) -> Verdict:
        """The verdict on a read (``None``: found nowhere). Raises ``JobLostError`` or
        ``UnknownJobStateError`` once such reads have lasted ``lost_grace`` seconds."""
        if status is None:
            if self._astray_too_long(now):
                raise JobLostError(self.job_id, self.lost_grace)
            return Verdict(None)
        if status.is_known_state:
            self.astray_since = None
        elif self._astray_too_long(now):
            raise UnknownJobStateError(status.job_id, status.state, self.lost_grace)
        changed = self._changed(status)
        requeued = status.restarts > self.restarts
        self.restarts = max(self.restarts, status.restarts)
        report_held = status.held and (
            self.held_reported_at is None or now - self.held_reported_at >= HELD_REPORT_SECONDS
        )
        if report_held:
            self.held_reported_at = now
        elif not status.held and status.source != RecordSource.STATE_LIST:
            self.held_reported_at = None  # released: a new hold is reported when seen
        return Verdict(status, finished=status.is_finished, changed=changed, requeued=requeued, report_held=report_held)

    def carry_over(self) -> dict[str, Any]:
        """What a new policy needs to carry this wait on (a sensor rescheduled between reads): plain JSON."""
        return {
            "astray_since": self.astray_since,
            "restarts": self.restarts,
            "held_reported_at": self.held_reported_at,
            "told": list(self.told) if self.told else None,
        }

    def time_left(self, now: float) -> float | None:
        """Seconds until the deadline (0 once reached), or None without one."""
        return None if self.deadline is None else max(0.0, self.deadline - now)

    def pause(self, interval: float, now: float) -> float | None:
        """Seconds to sleep before the next read, or None when the deadline is reached."""
        left = self.time_left(now)
        if left is None:
            return interval
        return min(interval, left) if left > 0 else None

    def _changed(self, status: JobStatus) -> bool:
        """Whether the read tells what the last line did not; if so, it is now the last told."""
        told = self.told
        if told is not None and status.state == told[0]:
            if status.source == RecordSource.STATE_LIST:
                return False  # the bulk state list has no reason or expected start: the last ones read still hold
            if status.reason == told[1] and not _moved(told[2], status.expected_start):
                return False
        self.told = (status.state, status.reason, status.expected_start)
        return True

    def _astray_too_long(self, now: float) -> bool:
        self.astray_since = now if self.astray_since is None else self.astray_since
        return now - self.astray_since >= self.lost_grace


def _moved(told: int | None, expected: int | None) -> bool:
    """Whether an expected start differs from the one told: it appeared, went, or moved by a minute or more."""
    if told is None or expected is None:
        return told != expected
    return abs(expected - told) >= EXPECTED_START_MOVE_SECONDS
