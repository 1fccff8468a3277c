"""How transient failures (UNAVAILABLE, 429, 5xx, connection errors) are retried.

Requests that are safe to repeat (reads and cancels) are retried here, by tenacity. A submit is
never resent blindly, since a lost reply may hide a job that Slurm already created, or is still
creating: the submit operation waits until a submit still under way would have landed, looks for
the job by its key, and sends it again only if Slurm has none, paced and bounded by the same
policy (``resubmit_pauses``).
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import tenacity

from airflow_provider_slurmapi.client.envelope import SlurmCall
from airflow_provider_slurmapi.client.errors import SlurmJobApiError
from airflow_provider_slurmapi.client.numbers import checked_number


def is_transient(error: BaseException) -> bool:
    return isinstance(error, SlurmJobApiError) and error.retryable


def is_repeatable(request: SlurmCall) -> bool:
    return request.method in ("GET", "DELETE")


# How long a submit that failed on the client's side may still be creating its job on the cluster:
# slurmrestd's call to slurmctld fails after slurmctld's MessageTimeout (10 s by default), so a
# submit still under way lands within it. A submit is looked for by its key only after this long.
SUBMIT_SETTLE_SECONDS = 10.0

# The connection's retry settings: (lowest, highest) allowed; the connection form says the same.
RETRY_ATTEMPTS_RANGE = (1, 20)
RETRY_MAX_SECONDS_RANGE = (0, 3600)


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff with jitter, bounded in attempts and in total time."""

    max_attempts: int = 5
    initial_wait: float = 1.0
    max_wait: float = 30.0
    max_elapsed: float = 120.0
    submit_settle: float = SUBMIT_SETTLE_SECONDS

    @classmethod
    def from_settings(cls, attempts: object = None, max_seconds: object = None) -> RetryPolicy:
        """The policy set on a connection or an operator (text or numbers); None keeps the default."""
        defaults = cls()
        return cls(
            max_attempts=defaults.max_attempts
            if attempts in (None, "")
            else int(_setting("retry_attempts", attempts, RETRY_ATTEMPTS_RANGE, whole=True)),
            max_elapsed=defaults.max_elapsed
            if max_seconds in (None, "")
            else _setting("retry_max_seconds", max_seconds, RETRY_MAX_SECONDS_RANGE, whole=False),
        )

    def pause(self, attempt: int) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1, 2...), with full jitter."""
        return random.uniform(0, min(self.max_wait, self.initial_wait * 2 ** (attempt - 1)))

    def resubmit_pauses(self) -> Iterator[float]:
        """The pause before each new attempt of a request its caller reconciles (a submit), as
        many as ``max_attempts`` allows, ending when the next one would pass ``max_elapsed``: at
        least ``submit_settle``, so that the failed attempt has landed before it is looked for."""
        started = time.monotonic()
        for attempt in range(1, self.max_attempts):
            pause = max(self.submit_settle, self.pause(attempt))
            if time.monotonic() - started + pause > self.max_elapsed:
                return
            yield pause

    def _arguments(self) -> dict[str, Any]:
        import tenacity  # here, not at the top: the connection form reads this module's bounds

        return {
            "retry": tenacity.retry_if_exception(is_transient),
            "wait": tenacity.wait_random_exponential(multiplier=self.initial_wait, max=self.max_wait),
            "stop": tenacity.stop_after_attempt(self.max_attempts) | tenacity.stop_after_delay(self.max_elapsed),
            "reraise": True,
        }

    def retrying(self, request: SlurmCall) -> tenacity.Retrying:
        import tenacity

        if not is_repeatable(request):
            return tenacity.Retrying(stop=tenacity.stop_after_attempt(1), reraise=True)
        return tenacity.Retrying(**self._arguments())

    def async_retrying(self, request: SlurmCall) -> tenacity.AsyncRetrying:
        import tenacity

        if not is_repeatable(request):
            return tenacity.AsyncRetrying(stop=tenacity.stop_after_attempt(1), reraise=True)
        return tenacity.AsyncRetrying(**self._arguments())


NO_RETRY = RetryPolicy(max_attempts=1)


def _setting(field: str, value: object, bounds: tuple[float, float], *, whole: bool) -> float:
    return checked_number(field, value, low=bounds[0], high=bounds[1], whole=whole, from_text=True)
