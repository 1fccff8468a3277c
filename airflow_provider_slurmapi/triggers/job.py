"""A trigger that watches one Slurm job from Airflow's triggerer until it finishes."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_provider_slurmapi.client.jobs import LOST_JOB_GRACE


class SlurmJobTrigger(BaseTrigger):
    """Polls a Slurm job until it finishes and emits one event carrying its final status.

    The event is ``{"status": "finished", "job_id", "job": JobStatus.to_dict()}``, or
    ``{"status": "timeout" | "error", "job_id", "message"}``. A job that left the live queue is read
    from accounting (/slurmdb). Transient API failures are retried with backoff by the client.

    :param job_id: the Slurm job to watch.
    :param deadline: absolute wall-clock time (epoch seconds) after which the trigger gives up.
    :param poll_interval: seconds between two status reads.
    :param hook_kwargs: ``SlurmJobApiAsyncHook`` arguments (connection ID and cluster overrides).
    :param cancel_on_kill: cancel the job when a user kills the deferred task (mark failed or
        success, clear). Airflow 3.3+ calls ``on_kill`` only for such user actions, never when the
        triggerer stops or hands the trigger to another triggerer.
    :param lost_grace: seconds a job may be missing from both the live queue and accounting (which
        can lag) before it is declared lost, which fails the task.
    """

    def __init__(
        self,
        job_id: str,
        *,
        poll_interval: float = 30.0,
        deadline: float | None = None,
        hook_kwargs: dict[str, Any] | None = None,
        lost_grace: float = LOST_JOB_GRACE,
        cancel_on_kill: bool = False,
    ) -> None:
        super().__init__()
        self.lost_grace = lost_grace
        self.cancel_on_kill = cancel_on_kill
        self.job_id = str(job_id)
        self.poll_interval = poll_interval
        self.deadline = deadline
        self.hook_kwargs = dict(hook_kwargs or {})

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "job_id": self.job_id,
                "poll_interval": self.poll_interval,
                "deadline": self.deadline,
                "hook_kwargs": self.hook_kwargs,
                "lost_grace": self.lost_grace,
                "cancel_on_kill": self.cancel_on_kill,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from airflow_provider_slurmapi.client.errors import JobLostError, JobNotFoundError, SlurmJobApiError
        from airflow_provider_slurmapi.client.jobs import MissingJobWatch
        from airflow_provider_slurmapi.hooks.slurm_job_api import SlurmJobApiAsyncHook

        try:
            client = await SlurmJobApiAsyncHook(**self.hook_kwargs).get_client()
        except Exception as error:  # bad connection or credentials: the task must say why
            yield self._event("error", message=f"cannot reach the Slurm Job API: {error}")
            return
        last_state = None
        missing = MissingJobWatch(self.lost_grace)
        async with client:
            while True:
                try:
                    status = await client.get_job(self.job_id)
                except JobNotFoundError:
                    try:
                        missing.missing(self.job_id, time.monotonic())
                    except JobLostError as lost:
                        yield self._event("error", message=str(lost))
                        return
                    self.log.warning("Slurm job %s is in neither queue nor accounting yet; still looking", self.job_id)
                except SlurmJobApiError as error:
                    if not error.retryable:
                        yield self._event("error", message=str(error))
                        return
                    # The client already retried with backoff: keep watching, never lose the job.
                    self.log.warning("Slurm job %s: status unavailable for now: %s", self.job_id, error)
                else:
                    missing.found()
                    if status.is_finished:
                        self.log.info("%s", status.describe())
                        yield self._event("finished", job=status.to_dict())
                        return
                    if (status.state, status.reason) != last_state:
                        self.log.info("%s", status.describe())
                        last_state = (status.state, status.reason)
                remaining = None if self.deadline is None else self.deadline - time.time()
                if remaining is not None and remaining <= 0:
                    yield self._event("timeout", message=f"Slurm job {self.job_id} did not finish before the deadline")
                    return
                await asyncio.sleep(self.poll_interval if remaining is None else min(self.poll_interval, remaining))

    async def on_kill(self) -> None:
        """The user killed the deferred task: cancel its job (a triggerer restart does not come here)."""
        if not self.cancel_on_kill:
            return
        from airflow_provider_slurmapi.hooks.slurm_job_api import SlurmJobApiAsyncHook

        client = await SlurmJobApiAsyncHook(**self.hook_kwargs).get_client()
        async with client:
            active = await client.cancel_job(self.job_id)
        self.log.info("Task killed: %s Slurm job %s", "cancelled" if active else "nothing to cancel for", self.job_id)

    def _event(self, status: str, **payload: Any) -> TriggerEvent:
        return TriggerEvent({"status": status, "job_id": self.job_id, **payload})
