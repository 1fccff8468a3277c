"""How an operation runs without doing I/O: it is a generator that yields a ``SlurmCall`` and
receives its ``SlurmReply`` (or has the request's error thrown into it), may yield a ``Pause``,
and finally returns its result. The sync and async clients drive the same generators, so they
differ only in how bytes travel and how they wait.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass, field
from typing import TypeAlias, TypeVar

from airflow_provider_slurmapi.client.envelope import SlurmCall, SlurmReply
from airflow_provider_slurmapi.client.errors import SlurmJobApiError
from airflow_provider_slurmapi.client.paths import SlurmPaths
from airflow_provider_slurmapi.client.retry import NO_RETRY, RetryPolicy

T = TypeVar("T")


@dataclass(frozen=True)
class Pause:
    """Yielded by an operation that must wait before its next request."""

    seconds: float


@dataclass(frozen=True)
class ApiSettings:
    """What an operation needs of its client: the paths of its API version, how a submit is retried."""

    paths: SlurmPaths = field(default_factory=SlurmPaths)
    retry: RetryPolicy = NO_RETRY


Operation: TypeAlias = Generator[SlurmCall | Pause, SlurmReply | None, T]
# What a client hands back to an operation: the reply to its request, the request's error, or
# None (to start it, and after a pause).
StepResult: TypeAlias = SlurmReply | SlurmJobApiError | None


def advance(operation: Operation[T], outcome: StepResult) -> SlurmCall | Pause:
    """The operation's next step after ``outcome``; StopIteration carries its result.

    An error is thrown into the operation, which may reconcile it (a submit) or let it out.
    """
    if isinstance(outcome, SlurmJobApiError):
        return operation.throw(outcome)
    return operation.send(outcome)


def request(call: SlurmCall) -> Operation[SlurmReply]:
    """Send one request; the driver answers a request with its reply (only a Pause gets None)."""
    reply = yield call
    if reply is None:
        raise TypeError(f"no reply to {call.method} {call.path}")
    return reply
