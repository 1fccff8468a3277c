"""What a ``GET /slurmdb/V/jobs/`` query selects: its parameters parsed as slurmrestd parses them
(or refused with its errors), and slurmdbd's rules for which records a time window and states hold."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from airflow_provider_slurmapi.emulator import replies
from airflow_provider_slurmapi.emulator.builtin.job_table import parse_job_ref
from airflow_provider_slurmapi.emulator.job_model import Job

# the names ``state=`` of /slurmdb/V/jobs/ takes (v0.0.42_job_state in slurmrestd's OpenAPI spec)
_STATE_NAMES = frozenset(
    {
        "PENDING", "RUNNING", "SUSPENDED", "COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL",
        "PREEMPTED", "BOOT_FAIL", "DEADLINE", "OUT_OF_MEMORY", "LAUNCH_FAILED", "REQUEUED", "REQUEUE_HOLD",
        "SPECIAL_EXIT", "RESIZING", "CONFIGURING", "COMPLETING", "STOPPED", "RECONFIG_FAIL", "POWER_UP_NODE",
        "REVOKED", "REQUEUE_FED", "RESV_DEL_HOLD", "SIGNALING", "STAGE_OUT",
    }
)  # fmt: skip
QUERY_REJECTED = "Rejecting request. Failure parsing query parameters"


class QueryRefused(Exception):
    """A /slurmdb/V/jobs/ parameter slurmrestd cannot parse: the errors it names (before its 9000)."""

    def __init__(self, *errors: dict[str, Any]) -> None:
        super().__init__(errors)
        self.errors = list(errors)


@dataclass(frozen=True)
class _UsageWindow:
    """The [start, end] (seconds, both included) a /slurmdb/V/jobs/ query selects by."""

    start: int
    end: int

    @classmethod
    def settle(cls, start: int, end: int) -> _UsageWindow:
        # slurmdbd widens a window of one instant to the next second
        return cls(start, end + 1 if end == start else end)


def _timestamp(query: dict[str, list[str]], key: str) -> int:
    """``start_time`` or ``end_time`` in epoch seconds; 0 when absent (or 0, which means the same)."""
    text = (query.get(key) or ["0"])[0]
    if not text.isdigit():
        error = replies.error(
            9202, "Unable to convert Data type", f"Parsing of {text} for timestamp failed", f"#/{key}/"
        )
        raise QueryRefused(error)
    return int(text)


def _flag(query: dict[str, list[str]], key: str) -> bool:
    return (query.get(key) or [""])[0] == "true"


def _db_state(record: dict[str, Any]) -> str:
    """The state slurmdbd keeps for a record: a requeued run's is REQUEUED (shown [PENDING, REQUEUED])."""
    current = record["state"]["current"]
    return "REQUEUED" if "REQUEUED" in current else current[0]


def _in_state_during(state: str, record: dict[str, Any], window: _UsageWindow) -> bool:
    """Whether ``record`` counts for ``state=`` over ``window``, by slurmdbd's rule for that state.

    PENDING and RUNNING: the job was in it for part of the window (whatever its state now); any
    other state: the job is in it now and ended within the window.
    """
    t = record["time"]
    started = replies.db_started(record)
    if state == "PENDING":
        return 0 < t["eligible"] < window.end and (not started or t["start"] > window.start)
    if state == "RUNNING":
        return started and t["start"] < window.end and (not t["end"] or t["end"] > window.start)
    return _db_state(record) == state and bool(t["end"]) and window.start <= t["end"] <= window.end


def _in_usage(record: dict[str, Any], window: _UsageWindow) -> bool:
    """Without ``state``: eligible before the window ends and not ended before it starts."""
    t = record["time"]
    return 0 < t["eligible"] < window.end and (not t["end"] or t["end"] >= window.start)


@dataclass(frozen=True)
class JobsQuery:
    """What a ``GET /slurmdb/V/jobs/`` selects, as slurmrestd parses it and slurmdbd applies it.

    ``job_name``, ``users``, ``partition``, ``account`` and ``state`` may be repeated (each value
    may also be a list: an encoded comma); ``step`` repeats job IDs (like sacct -j).
    """

    names: frozenset[str]
    steps: list[tuple[int, int | None]]  # (job id, array task id or None)
    users: frozenset[str]
    partitions: frozenset[str]  # lower case: slurmdbd compares them so
    accounts: frozenset[str]  # lower case too
    states: list[str]
    state_errors: list[dict[str, Any]]
    window: _UsageWindow | None  # None: no time condition
    skip_steps: bool
    truncates: bool

    @classmethod
    def parse(cls, query: dict[str, list[str]], known_users: set[str], now: int) -> JobsQuery:
        states, state_errors = _parse_states(query.get("state") or [])
        window = _parse_window(query, bool(states), now)
        skip_steps = _flag(query, "skip_steps")
        return cls(
            names=_values(query, "job_name"),
            steps=_parse_steps(query),
            users=_parse_users(query, known_users),
            partitions=frozenset(v.lower() for v in _values(query, "partition")),
            accounts=frozenset(v.lower() for v in _values(query, "account")),
            states=states,
            state_errors=state_errors,
            window=window,
            skip_steps=skip_steps,
            # slurmdbd cuts the times only when it leaves the steps out
            truncates=window is not None and skip_steps and not _flag(query, "disable_truncate_usage_time"),
        )

    def selects(self, run: Job, record: dict[str, Any]) -> bool:
        """Whether the record of ``run`` passes every condition but ``step``."""
        if self.names and run.name not in self.names:
            return False
        if self.users and not ({run.user_name, str(run.user_id)} & self.users):
            return False
        if self.partitions and record["partition"].lower() not in self.partitions:
            return False
        if self.accounts and record["account"].lower() not in self.accounts:
            return False
        if self.window is None:
            return True
        if self.window.end < self.window.start:  # a window that ends before it starts holds nothing
            return False
        if not self.states:
            return _in_usage(record, self.window)
        return any(_in_state_during(state, record, self.window) for state in self.states)

    def trim(self, record: dict[str, Any]) -> None:
        """Leave the steps out and cut the times to the window, as asked."""
        if self.skip_steps:
            record["steps"] = []
        if self.truncates and self.window is not None:
            replies.truncate_usage(record, self.window.start, self.window.end)


def _values(query: dict[str, list[str]], key: str) -> frozenset[str]:
    """A repeated parameter's values, each split at (encoded) commas, as slurmrestd reads a CSV list."""
    return frozenset(part for value in query.get(key) or [] for part in value.split(",") if part)


def _parse_steps(query: dict[str, list[str]]) -> list[tuple[int, int | None]]:
    """``step``: job IDs (``123`` or ``123_4``), repeated; a list in one value is refused."""
    refs = [parse_job_ref(job_ref) for job_ref in query.get("step") or []]
    if None in refs:
        raise QueryRefused()
    return [ref for ref in refs if ref is not None]


def _parse_users(query: dict[str, list[str]], known_users: set[str]) -> frozenset[str]:
    """User names or numeric IDs; a name nobody has is refused."""
    users = [part for value in query.get("users") or [] for part in value.split(",")]
    for index, user in enumerate(users):
        if user and not user.isdigit() and user not in known_users:
            raise QueryRefused(
                replies.error(
                    2166,
                    "Unable to resolve user ID to user name",
                    f"Unable to resolve user: {user}",
                    f"#/users[{index}]/",
                )
            )
    # an empty value names no one: with it alone the query matches nothing
    return frozenset(users)


def _parse_states(values: list[str]) -> tuple[list[str], list[dict[str, Any]]]:
    """State names in upper case; slurmrestd reads a name it does not know as PENDING, and says so."""
    states, errors = [], []
    for index, value in enumerate(values):
        name = value.upper()
        if name not in _STATE_NAMES:
            errors.append(
                replies.error(
                    9207, "Data parser unable to parse invalid flag", f'Unknown flag "{value}"', f"#/state[{index}][0]/"
                )
            )
            name = "PENDING"
        states.append(name)
    return states, errors


def _parse_window(query: dict[str, list[str]], by_state: bool, now: int) -> _UsageWindow | None:
    """The time window, with slurmdbd's defaults.

    With ``state``: from start_time (default: now) to end_time (default: the start). Without: from
    start_time (default: the beginning) to end_time (default: now); neither: no window at all.
    """
    start, end = _timestamp(query, "start_time"), _timestamp(query, "end_time")
    if by_state:
        start = start or now
        return _UsageWindow.settle(start, end or start)
    if not start and not end:
        return None
    return _UsageWindow.settle(start, end or now)
