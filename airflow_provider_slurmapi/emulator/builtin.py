"""``BuiltinBackend``: answer each Slurm REST route as slurmctld and slurmdbd would, from the
jobs of an emulated cluster (``Scheduler``) whose scripts run as local processes (``ProcessRunner``).
"""

from __future__ import annotations

import datetime
import re
import signal
from pathlib import Path
from typing import Any

from airflow_provider_slurmapi.emulator import replies
from airflow_provider_slurmapi.emulator.backend_api import (
    CONTROL_ACTIONS,
    SLURM_PATH,
    ControlError,
    SlurmAnswer,
    SlurmBackend,
    SlurmRequest,
    is_slurm_route,
)
from airflow_provider_slurmapi.emulator.job_desc import SubmitError, new_job
from airflow_provider_slurmapi.emulator.job_model import Job, State, epoch_seconds
from airflow_provider_slurmapi.emulator.runner import ProcessRunner
from airflow_provider_slurmapi.emulator.scheduler import (
    KILL_WAIT,
    MIN_JOB_AGE,
    REQUEUE_DELAY,
    SECONDS_PER_MINUTE,
    Scheduler,
)

_JOB_ID = re.compile(r"^(\d+)(?:_(\d+))?$")


def _slurm_error(
    status: int,
    number: int,
    error: str,
    description: str,
    source: str,
    kind: str,
    version: str,
    cluster: str,
    **fields: Any,
) -> SlurmAnswer:
    reply = replies.envelope(kind, version, cluster, fields, errors=[replies.error(number, error, description, source)])
    return status, reply


def _parse_ref(job_ref: str) -> tuple[int, int | None] | None:
    """``123`` or ``123_4`` as (job id, task id or None); None if malformed."""
    match = _JOB_ID.match(job_ref)
    if not match:
        return None
    return int(match.group(1)), None if match.group(2) is None else int(match.group(2))


def _parse_signal(text: str) -> signal.Signals | None:
    """``?signal=``: a number or a name, with or without SIG; None if empty. Raises KeyError or ValueError."""
    text = text.upper().removeprefix("SIG")
    if not text:
        return None
    return signal.Signals(int(text)) if text.isdigit() else signal.Signals["SIG" + text]


def _state_order(jobs: list[Job]) -> list[Job]:
    """The order of jobs/state and DELETE statuses: newest first, a pending meta record last."""
    return sorted(jobs, key=lambda j: (j.is_array_meta, -j.array_seq))


class BuiltinBackend(SlurmBackend):
    """A one-node Slurm stand-in: jobs run as local processes, one process group each."""

    def __init__(
        self,
        cluster: str,
        state_dir: Path,
        *,
        min_job_age: float = MIN_JOB_AGE,
        seconds_per_minute: float = SECONDS_PER_MINUTE,
        kill_wait: float = KILL_WAIT,
        sched_delay: float = 0.0,
        virtual_jobs: bool = False,
        requeue_delay: float = REQUEUE_DELAY,
    ) -> None:
        self.cluster = cluster
        self.scheduler = Scheduler(
            ProcessRunner(cluster, state_dir, virtual=virtual_jobs),
            min_job_age=min_job_age,
            seconds_per_minute=seconds_per_minute,
            kill_wait=kill_wait,
            sched_delay=sched_delay,
            requeue_delay=requeue_delay,
        )

    @property
    def jobs(self) -> dict[int, Job]:
        """Every job record of the cluster, by job id."""
        return self.scheduler.jobs

    def is_known_path(self, path: str) -> bool:
        return is_slurm_route(path)

    def control(self, job_ref: str, action: str) -> dict[str, Any]:
        """Requeue, hold, release, preempt or fail (its node) the job or array task ``job_ref``.

        Acts on the one record named: ``12`` (a job, or an array's own record) or ``12_3`` (a task).
        Answers the record's job id, its state list and restart count.
        """
        if action not in CONTROL_ACTIONS:
            raise ControlError(400, f"unknown action {action!r}; allowed: {', '.join(CONTROL_ACTIONS)}")
        ref = _parse_ref(job_ref)
        if ref is None:
            raise ControlError(400, f"{job_ref!r} is not a job id (123, or 123_4 for an array task)")
        job_id, task = ref
        job = self.jobs.get(job_id) if task is None else self._task_record(job_id, task)
        if job is None or not self.scheduler.in_queue(job):
            raise ControlError(404, f"job {job_ref} is not in the queue of cluster {self.cluster}")
        if task is not None and job.is_array_meta and job.pending_tasks != [task]:
            raise ControlError(
                409, f"cannot {action} job {job_ref}: the task has not started; name the array ({job_id}) instead"
            )
        self.scheduler.control(job, action, job_ref)
        return {
            "job_id": job.job_id,
            "action": action,
            "state": replies.state_list(job),
            "restart_cnt": job.restart_cnt,
        }

    async def start(self) -> None:
        await self.scheduler.start()

    async def close(self) -> None:
        await self.scheduler.close()

    async def handle(self, request: SlurmRequest) -> SlurmAnswer:
        match = SLURM_PATH.match(request.path)
        assert match, "server checks is_known_path first"
        service, version, route = match.groups()
        route = route.rstrip("/")
        if service == "slurmdb":
            return self._slurmdb_route(version, route, request)
        return self._slurm_route(version, route, request)

    def _slurm_route(self, version: str, route: str, request: SlurmRequest) -> SlurmAnswer:
        kind = "slurmctld"
        if route == "job/submit":
            if request.method != "POST":
                return self._bad_method(kind, version, "op_handler_job")
            return self._submit(version, request)
        if route.startswith("job/"):
            job_ref = route.removeprefix("job/")
            if request.method == "GET":
                return self._get_job(version, job_ref)
            if request.method == "DELETE":
                return self._delete_job(version, job_ref, request)
            return self._bad_method(kind, version, "op_handler_job")
        if request.method != "GET":
            return self._bad_method(kind, version, "op_handler_" + route.split("/")[0])
        if route == "jobs":
            return self._list_jobs(version, request)
        if route == "jobs/state":
            return self._jobs_state(version, request)
        return 200, replies.envelope(kind, version, self.cluster, {"pings": [replies.ping()]})

    def _slurmdb_route(self, version: str, route: str, request: SlurmRequest) -> SlurmAnswer:
        if request.method != "GET":
            return self._bad_method("slurmdbd", version, "op_handler_job" if route != "jobs" else "op_handler_jobs")
        if route == "jobs":
            return self._slurmdb_jobs(version, request)
        return self._slurmdb_job(version, route.removeprefix("job/"))

    def _get_job(self, version: str, job_ref: str) -> SlurmAnswer:
        ref = _parse_ref(job_ref)
        if ref is None:
            return self._bad_method("slurmctld", version, "op_handler_job")
        # real slurmrestd ignores a task suffix here: 123_4 answers like 123 (the whole array)
        jobs = [j for j in self._records(ref[0]) if self.scheduler.in_queue(j)]
        fields: dict[str, Any] = {
            "jobs": [replies.slurm_job(j, self.cluster) for j in jobs],
            "last_backfill": replies.number(0),
            "last_update": replies.number(self.scheduler.last_change if jobs else 0),
        }
        if not jobs:
            return _slurm_error(
                404,
                2017,
                "Invalid job id specified",
                f"Unable to query JobId={job_ref}",
                "_handle_job_get",
                "slurmctld",
                version,
                self.cluster,
                **fields,
            )
        return 200, replies.envelope("slurmctld", version, self.cluster, fields)

    def _list_jobs(self, version: str, request: SlurmRequest) -> SlurmAnswer:
        warnings = []
        jobs = self._queue()
        last_update = epoch_seconds()  # when the answer was made, as slurmctld stamps it
        since = (request.query.get("update_time") or [""])[0]
        if since.isdigit() and self.scheduler.last_change < int(since):
            # all or nothing, like real slurmctld, which counts a change in the second asked for
            # as a change (a job changed in the same second as the last answer is not missed)
            stamp = datetime.datetime.fromtimestamp(int(since)).strftime("%Y-%m-%dT%H:%M:%S")
            warnings.append(replies.warning(f"No job changes since update_time[{since}]={stamp}", "op_handler_jobs"))
            jobs, last_update = [], 0
        fields = {
            "jobs": [replies.slurm_job(j, self.cluster) for j in jobs],
            "last_backfill": replies.number(0),
            "last_update": replies.number(last_update),
        }
        return 200, replies.envelope("slurmctld", version, self.cluster, fields, warnings=warnings)

    def _jobs_state(self, version: str, request: SlurmRequest) -> SlurmAnswer:
        raw_ids = [
            part.partition("=")[2] for part in request.raw_query.split("&") if part.partition("=")[0] == "job_id"
        ]
        if any("," in raw for raw in raw_ids):
            # real slurmrestd answers 400 text/plain "Unable to parse query." for a literal comma;
            # we keep the reply JSON so structuredBody stays an object
            return _slurm_error(
                400,
                9000,
                replies.PARSE_ERROR,
                "Unable to parse query.",
                "op_handler_jobs_state",
                "slurmctld",
                version,
                self.cluster,
            )
        refs = request.query.get("job_id", [])
        if refs:
            selected: dict[int, Job] = {}
            for raw in refs:
                ref = _parse_ref(raw)
                if ref is None:
                    return self._bad_method("slurmctld", version, "op_handler_jobs_state")
                # a task's record; for a task not started yet, the whole meta record
                found = self._named(*ref)
                # in the order asked for, like real slurmctld
                selected.update((j.job_id, j) for j in _state_order(found) if self.scheduler.in_queue(j))
            jobs = list(selected.values())
        else:
            jobs = self._queue()
        entries = [{"job_id": name, "state": replies.state_list(j)} for j in jobs for name in j.state_ids]
        return 200, replies.envelope("slurmctld", version, self.cluster, {"jobs": entries})

    def _delete_job(self, version: str, job_ref: str, request: SlurmRequest) -> SlurmAnswer:
        ref = _parse_ref(job_ref)
        if ref is None:
            return self._bad_method("slurmctld", version, "op_handler_job")
        try:
            sig = _parse_signal((request.query.get("signal") or [""])[0])
        except (KeyError, ValueError):
            return self._bad_method("slurmctld", version, "op_handler_job")
        job_id, task = ref
        jobs = [j for j in self._named(job_id, task) if self.scheduler.in_queue(j)]
        if not jobs:
            status = [replies.delete_status(job_ref, None, 2017, "Invalid job id specified")]
            return 200, replies.envelope("slurmctld", version, self.cluster, {"status": status})
        user = request.principal.split("@")[0]
        cancel = sig in (None, signal.SIGKILL, signal.SIGTERM)
        meta = jobs[0] if task is not None and jobs[0].is_array_meta and not jobs[0].terminal else None
        if cancel and meta is not None and task is not None and meta.pending_tasks != [task]:
            # a task not started yet just leaves the meta record, without a record of its own
            self.scheduler.drop_pending_task(meta, task)
            return 200, replies.envelope("slurmctld", version, self.cluster, {"status": []})
        status = []
        for job in _state_order(jobs):
            if job.terminal:  # one entry per record already over; the others are cancelled
                step_id = str(job.job_id) if job.array_task_id is None else f"{job.array_job_id}_{job.array_task_id}"
                status.append(
                    replies.delete_status(step_id, job.job_id, 2021, "Job/step already completing or completed")
                )
            elif cancel:
                self.scheduler.cancel(job, sig or signal.SIGTERM, user)
            elif job.state is State.RUNNING and sig is not None:
                self.scheduler.send_signal(job, sig)
        return 200, replies.envelope("slurmctld", version, self.cluster, {"status": status})

    def _submit(self, version: str, request: SlurmRequest) -> SlurmAnswer:
        try:
            job, warnings = new_job(request.body, request.principal, self.scheduler.next_job_id)
        except SubmitError as exc:
            return _slurm_error(
                exc.status, exc.number, exc.error, exc.description, exc.source, "slurmctld", version, self.cluster
            )
        self.scheduler.submit(job)
        fields: dict[str, Any] = {"job_id": job.job_id, "step_id": "batch", "job_submit_user_msg": ""}
        if any(w["description"].startswith("Expected OpenAPI type=integer") for w in warnings):
            # real slurmrestd 24.11 submits the job but leaves job_id out of the reply in this case
            # (fixture submit_error_wrong_type.json)
            fields = {}
        return 200, replies.envelope("slurmctld", version, self.cluster, fields, warnings=warnings)

    def _slurmdb_job(self, version: str, job_ref: str) -> SlurmAnswer:
        ref = _parse_ref(job_ref)
        if ref is None:
            return self._bad_method("slurmdbd", version, "op_handler_job")
        jobs = self._accounted(*ref)
        jobs = [run for job in jobs for run in (*job.runs, job)]  # one record per run, oldest first
        now = epoch_seconds()
        warnings = []
        if not jobs:
            warnings.append(replies.warning(f"slurmdb_jobs_get(0x{id(self):x}) found nothing", "_dump_jobs"))
        fields = {"jobs": [replies.slurmdb_job(j, self.cluster, now) for j in jobs]}
        return 200, replies.envelope("slurmdbd", version, self.cluster, fields, warnings=warnings)

    def _slurmdb_jobs(self, version: str, request: SlurmRequest) -> SlurmAnswer:
        """All jobs, those named in ``job_name`` (comma-separated, like sacct --name), or those
        whose IDs ``step`` repeats (like sacct -j; ``skip_steps=true`` leaves their steps out)."""
        now = epoch_seconds()
        wanted = {name for value in request.query.get("job_name") or [] for name in value.split(",") if name}
        chosen = [j for j in sorted(self.jobs.values(), key=lambda j: j.job_id) if not wanted or j.name in wanted]
        ids = request.query.get("step") or []
        if ids:
            refs = [_parse_ref(job_ref) for job_ref in ids]
            if None in refs:  # real slurmrestd refuses a comma-separated list too
                return self._bad_method("slurmdbd", version, "op_handler_jobs")
            picked = {id(job) for ref in refs if ref is not None for job in self._accounted(*ref)}
            chosen = [j for j in chosen if id(j) in picked]
        jobs = [replies.slurmdb_job(run, self.cluster, now) for j in chosen for run in (*j.runs, j)]
        if (request.query.get("skip_steps") or [""])[0] == "true":
            for job in jobs:
                job["steps"] = []
        return 200, replies.envelope("slurmdbd", version, self.cluster, {"jobs": jobs})

    def _bad_method(self, kind: str, version: str, source: str) -> SlurmAnswer:
        return _slurm_error(
            422,
            9000,
            replies.PARSE_ERROR,
            "Rejecting request. Failure parsing parameters",
            source,
            kind,
            version,
            self.cluster,
        )

    def _queue(self) -> list[Job]:
        """The records slurmctld still shows, in the order of its job list."""
        return [j for j in sorted(self.jobs.values(), key=lambda j: j.list_seq) if self.scheduler.in_queue(j)]

    def _records(self, job_id: int) -> list[Job]:
        """The job, or, for an array's id, every record of the array.

        In slurmctld's order: the record with the array's own id first (the meta record while
        tasks are pending, afterwards the last task to start), then the others, newest first.
        """
        job = self.jobs.get(job_id)
        if job is None or job.array_job_id != job_id:
            return [job] if job is not None else []
        others = [j for j in self.jobs.values() if j.array_job_id == job_id and j is not job]
        return [job, *sorted(others, key=lambda j: j.array_seq, reverse=True)]

    def _accounted(self, job_id: int, task: int | None) -> list[Job]:
        """The records accounting keeps for ``job_id`` (or one started task of its array), by ID."""
        jobs = self._records(job_id)
        if task is not None:  # only a task that started has a row of its own
            jobs = [j for j in jobs if j.array_job_id == job_id and j.array_task_id == task]
        return sorted(jobs, key=lambda j: j.job_id)

    def _task_record(self, array_id: int, task: int) -> Job | None:
        """The record that holds task ``task`` of array ``array_id``: its own, or the meta record."""
        for job in self.jobs.values():
            if job.array_job_id == array_id and (job.array_task_id == task or task in job.pending_tasks):
                return job
        return None

    def _named(self, job_id: int, task: int | None) -> list[Job]:
        """The records ``job_id`` names (see _records), or the one holding task ``task`` of the array."""
        if task is None:
            return self._records(job_id)
        record = self._task_record(job_id, task)
        return [record] if record is not None else []
