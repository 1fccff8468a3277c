"""Compare JSON replies by shape: the same keys and the same JSON value types, recursively; and
the job fields whose values the emulator must give as real Slurm does."""

from __future__ import annotations

from typing import Any

# What state a live job (/slurm) is in, and why
JOB_STATE_FIELDS = (
    "job_state",
    "state_reason",
    "state_description",
    "exit_code",
    "derived_exit_code",
    "flags",
    "hold",
    "priority",  # deterministic here: one user, no priority plugin (1, or 0 when held)
)
# Flags telling which of slurmctld's schedulers (main or backfill) got to a job first: timing
SCHEDULER_FLAGS = frozenset(
    {"BACKFILL_ATTEMPTED", "SCHEDULING_ATTEMPTED", "STARTED_ON_BACKFILL", "STARTED_ON_SCHEDULE", "STARTED_ON_SUBMIT"}
)


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    return type(value).__name__


def shape_diff(actual: Any, expected: Any, where: str = "$") -> list[str]:
    """Differences in keys and value types, recursively; list items are checked against the first
    expected item (when the fixture's list is empty there is nothing to compare)."""
    if _kind(actual) != _kind(expected):
        return [f"{where}: {_kind(actual)} != {_kind(expected)}"]
    problems: list[str] = []
    if isinstance(expected, dict):
        for key in sorted(set(expected) - set(actual)):
            problems.append(f"{where}.{key}: missing")
        for key in sorted(set(actual) - set(expected)):
            problems.append(f"{where}.{key}: unexpected")
        for key in sorted(set(actual) & set(expected)):
            problems += shape_diff(actual[key], expected[key], f"{where}.{key}")
    elif isinstance(expected, list) and expected:
        # an item must look like one of the captured items (a list may mix running and pending jobs)
        for index, item in enumerate(actual):
            candidates = [shape_diff(item, e, f"{where}[{index}]") for e in expected]
            if all(candidates):
                problems += candidates[0]
    return problems
