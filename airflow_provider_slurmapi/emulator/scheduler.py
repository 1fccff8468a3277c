"""The emulated slurmctld of one cluster: its job table, and the passes that move each job from
PENDING to RUNNING to an end (COMPLETED, FAILED, CANCELLED, TIMEOUT).

One node with room for every job: what keeps a job pending is only a hold, its begin_time, its
array's %N limit or the scheduler's start delay. The ``ProcessRunner`` runs a started job and
answers how it ended; the scheduler applies that to the job.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from dataclasses import replace

from airflow_provider_slurmapi.emulator.job_model import TERM_EXIT, Job, State, epoch_seconds
from airflow_provider_slurmapi.emulator.runner import ProcessRunner, RunOutcome

log = logging.getLogger(__name__)


class Scheduler:
    """Holds one cluster's jobs and decides their states; ``runner`` runs their scripts."""

    def __init__(
        self,
        runner: ProcessRunner,
        *,
        min_job_age: float = 30.0,
        seconds_per_minute: float = 60.0,
        kill_wait: float = 3.0,
        sched_delay: float = 0.0,
    ) -> None:
        self.runner = runner
        self.min_job_age = min_job_age
        self.seconds_per_minute = seconds_per_minute
        self.kill_wait = kill_wait
        self.sched_delay = sched_delay
        self.jobs: dict[int, Job] = {}
        self.next_job_id = 1
        self.seq = 0  # orders records like slurmctld's lists (Job.list_seq, Job.array_seq)
        self.last_change = 0
        self._tasks: set[asyncio.Task[None]] = set()
        self._wake: asyncio.Event | None = None
        self._scheduler: asyncio.Task[None] | None = None
        self._kill_timers: dict[int, asyncio.TimerHandle] = {}

    async def start(self) -> None:
        self._wake = asyncio.Event()
        self._scheduler = asyncio.create_task(self._schedule_forever())

    async def close(self) -> None:
        if self._scheduler:
            self._scheduler.cancel()
        self.runner.kill_all()
        for timer in self._kill_timers.values():
            timer.cancel()
        # let the run tasks reap their (now killed) processes, so nothing is left as a zombie
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=5)
        pending = [task for task in [self._scheduler, *self._tasks] if task is not None]
        for task in pending:
            task.cancel()
        # wait for the cancellations, so no task is left pending when the loop stops
        await asyncio.gather(*pending, return_exceptions=True)

    # --- what the routes ask for ----------------------------------------------------------------

    def submit(self, job: Job) -> None:
        """Queue ``job``, made with ``next_job_id`` as its id."""
        self.next_job_id = job.job_id + 1
        self._add(job)
        self._poke()

    def in_queue(self, job: Job) -> bool:
        """Whether slurmctld still shows the job (finished jobs leave after min_job_age)."""
        if not job.terminal or job.completing:
            return True
        return time.time() - job.ended_at < self.min_job_age

    def cancel(self, job: Job, sig: signal.Signals, user: str) -> None:
        self._stop(job, State.CANCELLED, sig, user)

    def drop_pending_task(self, meta: Job, task: int) -> None:
        """Cancel a task of an array that has not started: it just leaves the meta record."""
        meta.pending_tasks.remove(task)
        self._touch(meta)

    def send_signal(self, job: Job, sig: signal.Signals) -> None:
        """Deliver ``sig`` to a running job, which keeps running."""
        self.runner.send_signal(job, sig)

    # --- bookkeeping ----------------------------------------------------------------------------

    def _touch(self, job: Job) -> None:
        job.last_change = epoch_seconds()
        self.last_change = max(self.last_change, job.last_change)

    def _next_seq(self) -> int:
        self.seq += 1
        return self.seq

    def _add(self, job: Job) -> None:
        job.list_seq = job.array_seq = self._next_seq()
        self.jobs[job.job_id] = job
        self._touch(job)

    # --- scheduling ----------------------------------------------------------------------------

    def _poke(self) -> None:
        if self._wake is not None:
            self._wake.set()

    async def _schedule_forever(self) -> None:
        assert self._wake is not None
        while True:
            self._schedule_once()
            # wake on submit/finish, and at least every 0.2 s for begin_time
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=0.2)
            self._wake.clear()

    def _schedule_once(self) -> None:
        now = epoch_seconds()
        for job in sorted(self.jobs.values(), key=lambda j: j.job_id):
            while job.state is State.PENDING:  # an array's meta record may start several tasks
                past_delay = time.monotonic() >= job.queued_at + self.sched_delay
                if job.dependent and past_delay:  # a scheduler pass clears it (real: 1.5-8 s in)
                    job.dependent = False
                    self._touch(job)
                reason = "None"
                if job.hold:
                    reason = "JobHeldUser"
                elif job.begin_time > now:
                    reason = "BeginTime"
                elif job.array_max_tasks and self._running_tasks(job.array_job_id) >= job.array_max_tasks:
                    reason = "JobArrayTaskLimit"
                elif not past_delay:
                    break  # like Slurm's batch_sched_delay: PENDING, reason None, until the next pass
                if reason != "None":
                    if job.state_reason != reason:
                        job.state_reason = reason
                        self._touch(job)
                    break
                self._start(self._split_task(job), now)

    def _split_task(self, job: Job) -> Job:
        """The record to start: the job itself, or for an array's meta record its next task.

        Like slurmctld, a starting task is split off into a record of its own with a new job id;
        once one task is left, the meta record becomes that task (array_task_id set), pending or
        not, so the last task to start keeps the array's own job id.
        """
        if not job.is_array_meta:
            return job
        task = job.pending_tasks.pop(0)
        if not job.pending_tasks:
            job.array_task_id, job.array_seq = task, self._next_seq()
            return job
        record = replace(job, job_id=self.next_job_id, array_task_id=task, pending_tasks=[], steps=[])
        self.next_job_id += 1
        if len(job.pending_tasks) == 1:
            job.array_task_id, job.array_seq = job.pending_tasks.pop(), self._next_seq()
        self._add(record)
        job.list_seq = self._next_seq()  # slurmctld re-queues the array's record after the new one
        self._touch(job)
        return record

    def _start(self, job: Job, now: int) -> None:
        job.state, job.state_reason, job.start_time, job.ran = State.RUNNING, "None", now, True
        self._touch(job)
        task = asyncio.create_task(self._run(job))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _running_tasks(self, array_job_id: int) -> int:
        return sum(
            1
            for j in self.jobs.values()
            if j.array_job_id == array_job_id and (j.state is State.RUNNING or j.completing)
        )

    async def _run(self, job: Job) -> None:
        limit = None if job.time_limit is None else job.time_limit * self.seconds_per_minute
        outcome = await self.runner.run(job, limit, lambda: self._stop(job, State.TIMEOUT, signal.SIGTERM, ""))
        timer = self._kill_timers.pop(job.job_id, None)
        if timer:
            timer.cancel()
        self._finish(job, outcome)

    def _finish(self, job: Job, outcome: RunOutcome) -> None:
        """The batch process is gone (or never started): settle the final state."""
        job.steps = outcome.steps
        info = outcome.exit
        if job.stop_reason is not None:
            # set only now: while COMPLETING, real Slurm still reads SUCCESS/0; afterwards it reports
            # SIGNALED/TERM, even after ?signal=KILL
            job.exit = TERM_EXIT
        else:
            job.end_time = epoch_seconds()
            job.exit = info
            if info.signal is not None:
                job.state, job.state_reason = State.FAILED, "RaisedSignal"
                # e.g. "RaisedSignal:53(Real-time signal 19)" for IO_SETUP_SIGNAL, as in real Slurm
                job.state_description = f"RaisedSignal:{info.signal}({signal.strsignal(info.signal)})"
            elif info.return_code != 0:
                job.state, job.state_reason = State.FAILED, "NonZeroExitCode"
                job.state_description = outcome.description
            else:
                job.state = State.COMPLETED
        job.completing = False
        job.ended_at = time.time()
        log.info("job %s ended: %s", job.job_id, job.state.value)
        self._touch(job)
        self._poke()

    def _stop(self, job: Job, reason: State, sig: signal.Signals, user: str) -> None:
        """Cancel (scancel) or time out a job: signal it now, SIGKILL after kill_wait."""
        job.kill_request_user = user
        now = epoch_seconds()
        if job.state is State.PENDING:
            job.state, job.end_time, job.ended_at = State.CANCELLED, now, time.time()
            self._touch(job)
            self._poke()
            return
        job.stop_reason = reason
        job.state = reason
        if reason is State.TIMEOUT:
            job.state_reason = "TimeLimit"
        job.end_time = now
        job.completing = True
        self._touch(job)
        self.runner.send_signal(job, sig)
        loop = asyncio.get_running_loop()
        self._kill_timers[job.job_id] = loop.call_later(self.kill_wait, self.runner.send_signal, job, signal.SIGKILL)
