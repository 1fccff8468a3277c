"""The one retry policy for transient failures (UNAVAILABLE, 429, 5xx, connection errors).

Only requests that are safe to repeat are retried: reads and cancels. A submit is never resent
blindly, since a lost reply may hide a job that Slurm already created.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import tenacity

from airflow_provider_slurmapi.client.envelope import SlurmRequest
from airflow_provider_slurmapi.client.errors import InvalidRequestError, SlurmJobApiError


def is_transient(error: BaseException) -> bool:
    return isinstance(error, SlurmJobApiError) and error.retryable


def is_repeatable(request: SlurmRequest) -> bool:
    return request.method in ("GET", "DELETE")


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff with jitter, bounded in attempts and in total time."""

    max_attempts: int = 5
    initial_wait: float = 1.0
    max_wait: float = 30.0
    max_elapsed: float = 120.0

    @classmethod
    def from_settings(cls, attempts: object = None, max_seconds: object = None) -> RetryPolicy:
        """The policy set on a connection or an operator (text or numbers); None keeps the default."""
        defaults = cls()
        return cls(
            max_attempts=_bounded("retry_attempts", attempts, defaults.max_attempts, 1, 20, whole=True),
            max_elapsed=_bounded("retry_max_seconds", max_seconds, defaults.max_elapsed, 0, 3600, whole=False),
        )

    def pause(self, attempt: int) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1, 2...), with full jitter."""
        return random.uniform(0, min(self.max_wait, self.initial_wait * 2 ** (attempt - 1)))

    def _arguments(self) -> dict:
        return {
            "retry": tenacity.retry_if_exception(is_transient),
            "wait": tenacity.wait_random_exponential(multiplier=self.initial_wait, max=self.max_wait),
            "stop": tenacity.stop_after_attempt(self.max_attempts) | tenacity.stop_after_delay(self.max_elapsed),
            "reraise": True,
        }

    def retrying(self, request: SlurmRequest) -> tenacity.Retrying:
        if not is_repeatable(request):
            return tenacity.Retrying(stop=tenacity.stop_after_attempt(1), reraise=True)
        return tenacity.Retrying(**self._arguments())

    def async_retrying(self, request: SlurmRequest) -> tenacity.AsyncRetrying:
        if not is_repeatable(request):
            return tenacity.AsyncRetrying(stop=tenacity.stop_after_attempt(1), reraise=True)
        return tenacity.AsyncRetrying(**self._arguments())


NO_RETRY = RetryPolicy(max_attempts=1)


def _bounded(field: str, value: object, default: float, low: float, high: float, *, whole: bool) -> Any:
    if value is None or value == "":
        return default
    kind = "a whole number" if whole else "a number of seconds"
    try:
        number = int(str(value)) if whole else float(str(value))
    except ValueError:
        number = None
    if number is None or isinstance(value, bool) or not low <= number <= high:
        raise InvalidRequestError(field, f"{value!r} is not allowed; expected {kind} from {low:g} to {high:g}")
    return number
