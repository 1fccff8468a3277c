"""Driving a client operation without I/O: each Slurm call it yields is answered by a function."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from airflow_provider_slurmapi.client.envelope import SlurmCall
from airflow_provider_slurmapi.client.steps import Operation, Pause, T, advance


def run_answered(operation: Operation[T], answer: Callable[[SlurmCall], Any]) -> T:
    """Run ``operation`` to its result; pauses pass at once, a raised answer propagates."""
    outcome: Any = None
    try:
        while True:
            step = advance(operation, outcome)
            outcome = None if isinstance(step, Pause) else answer(step)
    except StopIteration as done:
        return done.value
