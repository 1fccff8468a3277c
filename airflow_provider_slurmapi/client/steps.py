"""How an operation runs without doing I/O: it is a generator that yields a ``SlurmCall`` and
receives its ``SlurmReply`` (or has the request's error thrown into it), may yield a ``Pause``,
and finally returns its result. The sync and async clients drive the same generators, so they
differ only in how bytes travel and how they wait.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import TypeAlias, TypeVar

from airflow_provider_slurmapi.client.envelope import SlurmCall, SlurmReply
from airflow_provider_slurmapi.client.errors import SlurmJobApiError, UnexpectedReplyError, reply_shape
from airflow_provider_slurmapi.client.paths import SlurmPaths
from airflow_provider_slurmapi.client.retry import NO_RETRY, RetryPolicy, is_repeatable

log = logging.getLogger(__name__)

T = TypeVar("T")
# What reading a reply of another shape raises (an object where a list was, a number for a text...).
PARSE_ERRORS = (AttributeError, IndexError, KeyError, TypeError, ValueError)


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

    An error is thrown into the operation, which may reconcile it (a submit) or let it out. A reply
    the operation cannot read raises ``UnexpectedReplyError``, naming the call and the reply's shape.
    """
    if isinstance(outcome, SlurmJobApiError):
        return operation.throw(outcome)
    try:
        return operation.send(outcome)
    except SlurmJobApiError:
        raise
    except PARSE_ERRORS as error:
        if not isinstance(outcome, SlurmReply):
            raise
        problem = f"{type(error).__name__}: {error}"[:200]
        raise UnexpectedReplyError(outcome.call, reply_shape(outcome.body), problem) from error


def read_again_if_unreadable(make: Callable[[], Operation[T]], retry: RetryPolicy) -> Operation[T]:
    """The operation ``make`` builds, built and run again after a pause when a reply could not be
    read, as the retry policy allows, if all it sent were requests safe to repeat (no submit)."""
    pauses = retry.operation_pauses()
    while True:
        operation, repeatable = make(), True
        outcome: StepResult = None
        try:
            while True:
                step = advance(operation, outcome)
                repeatable = repeatable and (isinstance(step, Pause) or is_repeatable(step))
                try:
                    outcome = yield step
                except SlurmJobApiError as error:  # the request's error, for the operation
                    outcome = error
        except StopIteration as done:
            result: T = done.value
            return result
        except UnexpectedReplyError as error:
            pause = next(pauses, None) if repeatable else None
            if pause is None:
                raise
            log.warning("%s; reading again in %.1f s", error, pause)
        yield Pause(pause)


def request(call: SlurmCall) -> Operation[SlurmReply]:
    """Send one request; the driver answers a request with its reply (only a Pause gets None)."""
    reply = yield call
    if reply is None:
        raise TypeError(f"no reply to {call.method} {call.path}")
    return reply
