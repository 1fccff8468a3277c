"""A trigger that watches one Slurm job from Airflow's triggerer until it finishes."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_provider_slurmapi.client.errors import (
    JobLostError,
    JobNotFoundError,
    SlurmJobApiError,
    UnknownJobStateError,
)
from airflow_provider_slurmapi.client.jobs import JobStatus
from airflow_provider_slurmapi.client.wait_policy import LOST_JOB_GRACE, JobWaitPolicy
from airflow_provider_slurmapi.client.waiting import Read, RequeueLine, follow
from airflow_provider_slurmapi.triggers.events import EventStatus, ended_event, finished_event
from airflow_provider_slurmapi.triggers.polling import JobReader, SharedJobReader, WatchedJob, open_client
from airflow_provider_slurmapi.version_compat import AIRFLOW_V_3_0_PLUS, AIRFLOW_V_3_3_PLUS

# Stopping triggers' checks and cancels still running, kept here so that they run to the end.
_STOPPING: set[asyncio.Future[None]] = set()


class SlurmJobTrigger(BaseTrigger):
    """Polls a Slurm job until it finishes and emits one event carrying its final status.

    The event names the job once: ``{"status": "finished", "job": JobStatus.to_dict()}`` (the
    final status, its ``job_id`` inside), or ``{"status": "timeout" | "error", "job_id", "message"}``. A job that left the live queue is read
    from accounting (/slurmdb). Transient API failures are retried with backoff by the client.

    :param job_id: the Slurm job to watch.
    :param deadline: absolute wall-clock time (epoch seconds) after which the trigger gives up,
        cancelling the job when ``cancel_on_kill``.
    :param poll_interval: seconds between two status reads.
    :param hook_kwargs: ``SlurmJobApiAsyncHook`` arguments (connection ID and cluster overrides).
    :param cancel_on_kill: cancel the job at the deadline and when a user kills the deferred task
        (mark failed or success, clear). A stopped trigger (``on_kill`` on Airflow 3.3+, the
        cancellation itself on older Airflow) cancels the job only after reading that its task
        instance is no longer DEFERRED: Airflow also stops a trigger when its triggerer shuts down,
        and, on 3.3, calls ``on_kill`` when a triggerer that stalled past the health-check
        threshold finds its triggers adopted by another triggerer, whose trigger still watches the
        job. A state that cannot be read never cancels a job.
    :param shared_polling: read the job's state through one poller shared by all triggers of the
        same cluster and credentials in this triggerer (one API call per interval for all of them);
        False reads it with a call of its own every interval.
    :param lost_grace: seconds a job may be missing from both the live queue and accounting (which
        can lag), or stay in a state this provider does not know, before the task fails.
    :param live_output: log the lines the job publishes while it runs (``triggers/live_output``):
        ``within`` (the output URI), ``job``, ``tag``, ``period``, ``max_lines``, ``max_bytes``;
        the finished event then tells the bytes of each stream shown (``live_shown``).
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
        shared_polling: bool = True,
        live_output: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        self.live_output = dict(live_output) if live_output else None
        self.shared_polling = shared_polling
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
                "shared_polling": self.shared_polling,
                "live_output": self.live_output,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        # The watch is a plain coroutine: a loop shutting down closes all its async generators at
        # once, and one nested in this generator would be closed twice.
        try:
            event = await self._watch()
        except asyncio.CancelledError:
            if not AIRFLOW_V_3_3_PLUS:  # no on_kill for triggers: a kill and a triggerer stop both come here
                await self._finish_stopping()
            raise
        yield event

    async def _watch(self) -> TriggerEvent:
        """The job's one event: finished, timeout or error. The reader's session closes before it."""
        async with contextlib.AsyncExitStack() as stack:
            try:
                reader = await stack.enter_async_context(
                    WatchedJob(self.job_id, self.hook_kwargs, self.poll_interval, shared=self.shared_polling)
                )
            except Exception as error:  # bad connection or credentials: the task must say why
                return self._event(EventStatus.ERROR, message=f"cannot reach the Slurm Job API: {error}")
            if not self.live_output:
                return await self._poll_to_the_end(reader)
            from airflow_provider_slurmapi.triggers.live_output import LiveWatch

            live = await stack.enter_async_context(
                LiveWatch(self.live_output, self.hook_kwargs, self.poll_interval, self.log)
            )
            event = await live.alongside(self._poll_to_the_end(reader))
            if event.payload.get("status") == EventStatus.FINISHED:
                event.payload["live_shown"] = live.follower.shown_bytes()
            return event

    async def _poll_to_the_end(self, reader: JobReader | SharedJobReader) -> TriggerEvent:
        policy = JobWaitPolicy(self.job_id, lost_grace=self.lost_grace, deadline=self.deadline)
        wait = follow(policy, self.poll_interval, self.log)
        answer: JobStatus | str | None = None
        try:
            while True:
                step = wait.send(answer)
                if isinstance(step, Read):
                    answer = await self._read(reader, policy)
                elif isinstance(step, RequeueLine):
                    answer = await reader.describe_requeue(step.status)
                else:
                    answer = None  # the reader itself waits for the next interval
        except StopIteration as done:
            status: JobStatus = done.value
            self.log.info("%s", status.describe())
            return TriggerEvent(finished_event(status))
        except TimeoutError:
            cancelled = self.cancel_on_kill and await self._cancel_job()
            outcome = "; it was cancelled" if cancelled else ""
            message = f"Slurm job {self.job_id} did not finish before the task's deadline{outcome}"
            return self._event(EventStatus.TIMEOUT, message=message)
        except (JobLostError, UnknownJobStateError, SlurmJobApiError) as error:
            return self._event(EventStatus.ERROR, message=str(error))

    async def _read(self, reader: JobReader | SharedJobReader, policy: JobWaitPolicy) -> JobStatus | None:
        """The job's next status (None: found nowhere). A read that fails for now (the client
        already retried) is tried again, logged once per outage: the job is never lost;
        TimeoutError at the deadline."""
        failed = 0
        while True:
            until_deadline = asyncio.timeout(policy.time_left(time.time()))
            try:
                async with until_deadline:
                    status = await reader.next_status(self.job_id)
            except JobNotFoundError:
                return None
            except TimeoutError as error:
                if until_deadline.expired():
                    raise
                failed = self._read_failed(failed, repr(error))
            except SlurmJobApiError as error:
                if not error.retryable:
                    raise
                failed = self._read_failed(failed, str(error))
            else:
                if failed:
                    self.log.info("Slurm job %s: status read again, after %d failed reads", self.job_id, failed)
                return status

    def _read_failed(self, failed_before: int, error: str) -> int:
        if not failed_before:  # not at every interval while the outage lasts
            self.log.warning(
                "Slurm job %s: status unavailable for now, read again every interval: %s", self.job_id, error
            )
        return failed_before + 1

    async def _cancel_job(self) -> bool:
        """Cancel the job; True if it was still active. The one way this trigger cancels."""
        async with await open_client(self.hook_kwargs) as client:
            return await client.cancel_job(self.job_id)

    async def on_kill(self) -> None:
        """Airflow 3.3+ stopped the trigger for a user's kill, or because another triggerer adopted it."""
        await self._finish_stopping()

    async def _finish_stopping(self) -> None:
        # Airflow 3.3 cancels a stopping trigger again at every triggerer loop (about 1 s) until it
        # has ended, which would cut the state read or the cancel short: run them in a task of their own.
        task = asyncio.ensure_future(self._cancel_if_killed())
        _STOPPING.add(task)
        task.add_done_callback(_STOPPING.discard)
        await asyncio.shield(task)

    async def _cancel_if_killed(self) -> None:
        """Cancel the job only if a user killed the task: its task instance is no longer DEFERRED.
        A killed wait's live output position is removed too (no trigger will go on from it).

        A task still DEFERRED is watched by a trigger elsewhere (this triggerer stalled and another
        adopted its triggers, or it is shutting down): its job must run on.
        """
        if not self.cancel_on_kill and not self.live_output:
            return
        ti = getattr(self, "task_instance", None)
        if ti is None:
            self.log.warning("Trigger stopped with no task instance to check; not cancelling Slurm job %s", self.job_id)
            return
        try:
            state = await (_task_state_v3(ti) if AIRFLOW_V_3_0_PLUS else _task_state_v2(ti))
        except Exception as error:  # unsure: never cancel a job on a guess
            self.log.warning(
                "Cannot read the state of task %s (%s); not cancelling Slurm job %s", ti.task_id, error, self.job_id
            )
            return
        if state == "deferred":
            self.log.info(
                "Trigger stopped while task %s is still deferred (another triggerer watches it): Slurm job %s runs on",
                ti.task_id,
                self.job_id,
            )
            return
        if self.live_output:
            from airflow_provider_slurmapi.triggers.live_output import drop_position

            await drop_position(self.live_output, self.log)
        if not self.cancel_on_kill:
            return
        active = await self._cancel_job()
        outcome = "cancelled" if active else "nothing to cancel for"
        self.log.info("Task killed (now %s): %s Slurm job %s", state, outcome, self.job_id)

    def _event(self, status: EventStatus, message: str) -> TriggerEvent:
        """An event that ends the wait without a final status: ``timeout`` or ``error``."""
        return TriggerEvent(ended_event(status, self.job_id, message))


async def _task_state_v3(ti: Any) -> str | None:
    from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance
    from asgiref.sync import sync_to_async

    states = await sync_to_async(RuntimeTaskInstance.get_task_states)(
        dag_id=ti.dag_id, task_ids=[ti.task_id], run_ids=[ti.run_id], map_index=ti.map_index
    )
    # the execution API names a mapped task instance "<task_id>_<map_index>"
    key = ti.task_id if ti.map_index is None or ti.map_index < 0 else f"{ti.task_id}_{ti.map_index}"
    run_states = states[ti.run_id]  # a missing entry raises: an unread state never cancels
    return run_states[key] if key in run_states else run_states[ti.task_id]


async def _task_state_v2(ti: Any) -> str | None:
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from asgiref.sync import sync_to_async

    def read() -> str | None:
        with create_session() as session:
            row = session.query(TaskInstance.state).filter_by(
                dag_id=ti.dag_id, task_id=ti.task_id, run_id=ti.run_id, map_index=ti.map_index
            )
            return row.scalar()

    return await sync_to_async(read)()
