"""The emulated slurmctld of one cluster: its job table, and the passes that move each job from
PENDING to RUNNING to an end (COMPLETED, FAILED, CANCELLED, TIMEOUT, NODE_FAIL, PREEMPTED).

Each partition's node has room for every job: what keeps a job pending is only a hold, its begin_time, its
array's %N limit or the scheduler's start delay. The ``ProcessRunner`` runs a started job and
answers how it ended; the scheduler applies that to the job. ``control`` plays what an admin
or the cluster does to a job (requeue, hold, preemption, node failure), as Slurm 24.11 does it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import signal
import time
from dataclasses import replace

from airflow_provider_slurmapi.emulator.backend_api import ControlError
from airflow_provider_slurmapi.emulator.job_model import (
    TERM_EXIT,
    ExitInfo,
    Job,
    State,
    epoch_seconds,
)
from airflow_provider_slurmapi.emulator.runner import KillWarning, ProcessRunner, RunOutcome

log = logging.getLogger(__name__)

# the defaults of the Scheduler, the BuiltinBackend and the EmulatorConfig
MIN_JOB_AGE = 30.0  # seconds a finished job stays in the live queue (Slurm's MinJobAge)
SECONDS_PER_MINUTE = 60.0  # how long one minute of time_limit lasts
KILL_WAIT = 3.0  # seconds between SIGTERM and SIGKILL (Slurm's KillWait)
REQUEUE_DELAY = 120.0  # seconds a requeued job pends before it runs again (real Slurm: ~121 s)
# seconds a stopped job stays COMPLETING once its script ended, while its node cleans up
# (real Slurm 24.11: 10 to 50 ms)
CLEANUP_TIME = 0.05

# the actions only a running job allows, and how a refusal names what they do
_DONE = {"requeue": "requeued", "requeuehold": "requeued", "preempt": "preempted", "node_fail": "failed by its node"}


def _state_text(job: Job) -> str:
    return f"{job.state.value}+COMPLETING" if job.completing else job.state.value


def _refusal(job: Job, action: str) -> str | None:
    """Why the job's state does not allow ``action``, or None if it does."""
    if action in _DONE and not (job.state is State.RUNNING and not job.completing):
        return f"only a RUNNING job can be {_DONE[action]}"
    if action in ("requeue", "requeuehold") and not job.requeue:
        return "it was submitted with requeue: false"
    if action == "hold" and job.state is not State.PENDING:
        return "only a PENDING job can be held"
    if action == "release" and (job.state is not State.PENDING or not job.hold):
        return "only a held PENDING job can be released"
    return None


def _hold(job: Job) -> None:
    """scontrol hold, by an admin (root)."""
    job.hold, job.hold_reason = True, "JobHeldAdmin"
    job.state_reason, job.state_description = "JobHeldAdmin", ""


def _release(job: Job) -> None:
    job.hold, job.state_reason, job.state_description = False, "None", ""
    job.db_reason = job.hold_reason  # accounting keeps the reason the job was held for
    job.queued_at, job.repass = time.monotonic(), True  # reason None until the next scheduler pass


class Scheduler:
    """Holds one cluster's jobs and decides their states; ``runner`` runs their scripts."""

    def __init__(
        self,
        runner: ProcessRunner,
        *,
        min_job_age: float = MIN_JOB_AGE,
        seconds_per_minute: float = SECONDS_PER_MINUTE,
        kill_wait: float = KILL_WAIT,
        sched_delay: float = 0.0,
        requeue_delay: float = REQUEUE_DELAY,
    ) -> None:
        self.runner = runner
        self.requeue_delay = requeue_delay
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
        self._live: set[int] = set()  # jobs whose script still runs (or is being killed)

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

    def send_signal(self, job: Job, sig: int, *, batch_only: bool = False) -> None:
        """Deliver ``sig`` to a running job, which keeps running (unless the signal ends its script):
        to all its processes, or with ``batch_only`` (scancel --batch) to its batch shell alone."""
        self.runner.send_signal(job, sig, batch_only=batch_only)

    def control(self, job: Job, action: str, name: str) -> None:
        """Do ``action`` to ``job`` (called ``name`` in messages) as Slurm 24.11 does it:

        - ``requeue`` / ``requeuehold`` (scontrol): a running job goes [PENDING, COMPLETING] while its
          script is killed, then PENDING (``requeuehold``: held, JobHeldUser);
        - ``preempt`` (PreemptMode=REQUEUE) and ``node_fail`` (its node goes down): a running job
          goes PENDING at once if it may be requeued, else ends PREEMPTED or NODE_FAIL;
        - ``hold`` (scontrol hold: JobHeldAdmin) and ``release`` of a pending job.

        A requeued job keeps its id: accounting keeps the ended run as a record of its own, the
        job pends with reason BeginTime until ``requeue_delay`` has passed, then runs its script
        again from the start. Raises ``ControlError`` (409) for an action its state does not allow.
        """
        why = _refusal(job, action)
        if why is not None:
            raise ControlError(409, f"cannot {action} job {name}: it is {_state_text(job)}; {why}")
        if action == "requeue" or action == "requeuehold":
            self._requeue(job, State.REQUEUED, completing=True, hold=action == "requeuehold")
        elif action == "preempt":
            self._preempt(job)
        elif action == "node_fail":
            self._node_down(job)
        elif action == "hold":
            _hold(job)
        elif action == "release":
            _release(job)
        log.info("job %s: %s -> %s", name, action, _state_text(job))
        self._touch(job)
        self._poke()

    def _preempt(self, job: Job) -> None:
        if job.requeue:
            self._requeue(job, State.PREEMPTED)
        else:  # like a cancel, ending PREEMPTED (not captured from a real Slurm)
            self._stop(job, State.PREEMPTED, signal.SIGTERM, "")

    def _node_down(self, job: Job) -> None:
        job.skip_tres = True
        if job.requeue:
            # real slurmctld: PENDING reason None until its next pass, no COMPLETING
            self._requeue(job, State.NODE_FAIL, new_pass=True)
        else:
            self._node_failed(job)

    def _requeue(
        self, job: Job, end: State, *, completing: bool = False, hold: bool = False, new_pass: bool = False
    ) -> None:
        """End the running job's current run as ``end`` in accounting and queue it again."""
        now = epoch_seconds()
        run = replace(job, state=end, end_time=now, ended_at=time.time(), runs=[], steps=[], settled=False)
        if end is State.NODE_FAIL:
            run.failed_node = job.node
        job.runs.append(run)
        job.restart_cnt += 1
        job.settled = True  # the script's end is not the job's end
        job.state, job.completing = State.PENDING, completing
        # slurmctld: begin_time = requeue time + the credential lifetime (120 s) + 1
        job.begin_time = math.ceil(time.time() + self.requeue_delay)
        job.db_hold, job.db_reason = hold, "None"
        if hold:
            job.hold, job.hold_reason = True, "JobHeldUser"
            job.state_reason, job.state_description = "JobHeldUser", "job requeued in held state"
        if new_pass:
            job.state_reason = "None"
            job.queued_at, job.repass = time.monotonic(), True
        if not completing:
            self._new_run(job)
        # a node that went down takes its processes with it; otherwise SIGTERM, SIGKILL after kill_wait
        self._kill(job, signal.SIGKILL if end is State.NODE_FAIL else signal.SIGTERM)

    def _node_failed(self, job: Job) -> None:
        """A job that may not be requeued ends NODE_FAIL at once, as if killed by SIGHUP."""
        job.state, job.state_reason = State.NODE_FAIL, "NodeDown"
        job.exit, job.failed_node = ExitInfo(signal=signal.SIGHUP.value), job.node
        job.end_time, job.ended_at = epoch_seconds(), time.time()
        job.settled = True
        self._kill(job, signal.SIGKILL)

    @staticmethod
    def _new_run(job: Job) -> None:
        """Reset a requeued job for its next run (real Slurm also makes the requeue its submit time)."""
        job.submit_time = epoch_seconds()
        job.start_time = job.end_time = 0
        job.ran, job.steps, job.exit, job.kill_request_user = False, [], ExitInfo(), ""

    def _kill(self, job: Job, sig: signal.Signals) -> None:
        self.runner.send_signal(job, sig)
        if sig is not signal.SIGKILL:
            loop = asyncio.get_running_loop()
            self._kill_timers[job.job_id] = loop.call_later(
                self.kill_wait, self.runner.send_signal, job, signal.SIGKILL
            )

    def _poke(self) -> None:
        if self._wake is not None:
            self._wake.set()

    async def _schedule_forever(self) -> None:
        assert self._wake is not None
        while True:
            self._schedule_once()
            # wake on submit/finish, and at least every 0.2 s for begin_time
            # (asyncio.timeout, not asyncio.wait_for: on Python 3.11, wait_for returns a wait that
            # ended in the same loop turn as a cancel and swallows the cancel, so close() never ended)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(0.2):
                    await self._wake.wait()
            self._wake.clear()

    def _schedule_once(self) -> None:
        now = epoch_seconds()
        for job in sorted(self.jobs.values(), key=lambda j: j.job_id):
            while job.state is State.PENDING:  # an array's meta record may start several tasks
                if job.completing or job.job_id in self._live:
                    break  # requeued: the last run's script is still being killed
                past_delay = time.monotonic() >= job.queued_at + self.sched_delay
                if job.dependent and past_delay:  # a scheduler pass clears it (real: 1.5-8 s in)
                    job.dependent = False
                    self._touch(job)
                if job.repass and not job.hold and not past_delay:
                    break  # requeued after a node failure or released: reason None until the next pass
                job.repass = False
                reason = "None"
                if job.hold:
                    reason = job.hold_reason
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
        record = replace(job, job_id=self.next_job_id, array_task_id=task, pending_tasks=[], steps=[], runs=[])
        self.next_job_id += 1
        if len(job.pending_tasks) == 1:
            job.array_task_id, job.array_seq = job.pending_tasks.pop(), self._next_seq()
        self._add(record)
        job.list_seq = self._next_seq()  # slurmctld re-queues the array's record after the new one
        self._touch(job)
        return record

    def _start(self, job: Job, now: int) -> None:
        job.state, job.state_reason, job.start_time, job.ran = State.RUNNING, "None", now, True
        if job.restart_cnt:  # accounting keeps why the new run waited
            job.db_reason = "BeginTime"
        self._live.add(job.job_id)
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
        try:
            outcome = await self.runner.run(job, limit, lambda: self._time_limit(job), self._kill_warning(job))
        finally:
            self._live.discard(job.job_id)
        timer = self._kill_timers.pop(job.job_id, None)
        if timer:
            timer.cancel()
        if job.settled:
            self._run_ended(job, outcome)
            return
        self._finish(job, outcome)
        if job.completing:
            await asyncio.sleep(CLEANUP_TIME)
            self._cleaned_up(job)

    def _kill_warning(self, job: Job) -> KillWarning | None:
        """sbatch --signal: the warning ``warn_delay`` seconds (of Slurm time) before the time limit,
        at once if the limit is closer than that; none without a delay or a time limit."""
        if job.warn_signal is None or not job.warn_delay or job.time_limit is None:
            return None
        slurm_seconds = max(0, job.time_limit * 60 - job.warn_delay)
        return KillWarning(slurm_seconds * self.seconds_per_minute / 60, lambda: self._warn(job))

    def _warn(self, job: Job) -> None:
        if job.warn_signal is not None and job.stop_reason is None and not job.settled:
            log.info("job %s: warning signal %s", job.job_id, job.warn_signal)
            self.runner.send_signal(job, job.warn_signal, batch_only=job.warn_batch_only)

    def _time_limit(self, job: Job) -> None:
        if not job.settled:  # a run being killed for a requeue does not time out as well
            self._stop(job, State.TIMEOUT, signal.SIGTERM, "")

    def _run_ended(self, job: Job, outcome: RunOutcome) -> None:
        """The script of a run that an action ended is gone: requeued, the job now pends for real."""
        job.settled = False
        (job.runs[-1] if job.runs else job).steps = outcome.steps
        if job.completing:
            job.completing = False
            if job.state is State.PENDING:
                self._new_run(job)
        self._touch(job)
        self._poke()

    def _finish(self, job: Job, outcome: RunOutcome) -> None:
        """The batch process is gone (or never started): settle the final state."""
        job.steps = outcome.steps
        info = outcome.exit
        if job.stop_reason is not None:
            # a stopped job reads SUCCESS/0 until the end of its script reaches slurmctld, then
            # SIGNALED/TERM (even after ?signal=KILL), still COMPLETING until _cleaned_up
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
        job.ended_at = time.time()
        log.info("job %s ended: %s", job.job_id, job.state.value)
        self._touch(job)
        self._poke()

    def _cleaned_up(self, job: Job) -> None:
        """The node of a stopped job is done with it: the job is no longer COMPLETING."""
        job.completing = False
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
        self._kill(job, sig)

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
