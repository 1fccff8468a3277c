"""The one loop over the wait policy's verdicts, for the hook, the trigger and the sensor.

``follow`` is a generator that does no I/O: it yields what it needs next (``READ`` the job,
``Sleep``, the ``RequeueLine`` of a requeued job) and logs what each read is worth telling. Each
caller answers those its own way: the hook reads and sleeps in a worker, the trigger reads
through its reader (which waits for the next interval itself), the sensor reads once per poke.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Protocol, TypeAlias

from airflow_provider_slurmapi.client.jobs import JobStatus
from airflow_provider_slurmapi.client.wait_policy import JobWaitPolicy


class Log(Protocol):
    """What the loop needs of a logger (a ``logging.Logger``, or the Task SDK's structlog logger)."""

    def log(self, level: int, msg: str, /, *args: object) -> object: ...

    def warning(self, msg: str, /, *args: object) -> object: ...

    def info(self, msg: str, /, *args: object) -> object: ...


@dataclass(frozen=True)
class Read:
    """Read the job now; answer with its status, or None when it was found nowhere."""


@dataclass(frozen=True)
class Sleep:
    """Wait this long before the next read; answer with None."""

    seconds: float


@dataclass(frozen=True)
class RequeueLine:
    """Answer with the log line of this requeued job (``describe_requeue``)."""

    status: JobStatus


READ = Read()
WaitStep: TypeAlias = Read | Sleep | RequeueLine
Wait: TypeAlias = Generator[WaitStep, JobStatus | str | None, JobStatus]


def follow(policy: JobWaitPolicy, interval: float, log: Log, *, timeout: float | None = None) -> Wait:
    """Read after read until the job finishes; returns its final status.

    Raises what the policy raises (``JobLostError``, ``UnknownJobStateError``), and
    ``TimeoutError`` once the policy's deadline is reached (``timeout``: its seconds, for the message).
    """
    while True:
        status = yield READ
        verdict = policy.judge(status if isinstance(status, JobStatus) else None, time.time())
        if verdict.status is None:
            log.warning("Slurm job %s is in neither queue nor accounting yet; still looking", policy.job_id)
        elif verdict.requeued:  # told even when first noticed at the end
            log.warning("%s", (yield RequeueLine(verdict.status)))
        if verdict.finished and verdict.status is not None:
            return verdict.status
        if progress := verdict.progress():
            log.log(progress[0], "%s", progress[1])
        pause = policy.pause(interval, time.time())
        if pause is None:
            shown = verdict.status.describe() if verdict.status else "not found"
            raise TimeoutError(f"Slurm job {policy.job_id} did not finish within {timeout} s: {shown}")
        yield Sleep(pause)


def run_wait(
    wait: Wait,
    *,
    read: Callable[[], JobStatus | None],
    describe_requeue: Callable[[JobStatus], str],
    sleep: Callable[[float], object],
) -> JobStatus:
    """Answer ``wait``'s steps in this thread; its final status. What ``sleep`` raises ends the
    wait there (a sensor's poke that reads again at the next poke)."""
    answer: JobStatus | str | None = None
    try:
        while True:
            step = wait.send(answer)
            if isinstance(step, Read):
                answer = read()
            elif isinstance(step, RequeueLine):
                answer = describe_requeue(step.status)
            else:
                sleep(step.seconds)
                answer = None
    except StopIteration as done:
        final: JobStatus = done.value
        return final
