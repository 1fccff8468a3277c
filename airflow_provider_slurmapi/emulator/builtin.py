"""``BuiltinBackend``: answer each Slurm REST route as slurmctld and slurmdbd would, from the
jobs of an emulated cluster (``Scheduler``) whose scripts run as local processes (``ProcessRunner``).
"""

from __future__ import annotations

import datetime
import re
import signal
from dataclasses import dataclass
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
from airflow_provider_slurmapi.emulator.cluster_replies import NO_SLURMDBD, ClusterView
from airflow_provider_slurmapi.emulator.job_desc import SubmitError, new_job, user_name
from airflow_provider_slurmapi.emulator.job_model import Job, State, epoch_seconds
from airflow_provider_slurmapi.emulator.runner import ProcessRunner
from airflow_provider_slurmapi.emulator.scheduler import (
    KILL_WAIT,
    MIN_JOB_AGE,
    REQUEUE_DELAY,
    SECONDS_PER_MINUTE,
    Scheduler,
)
from airflow_provider_slurmapi.emulator.slurm_conf import SlurmConf

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


# the names ``state=`` of /slurmdb/V/jobs/ takes (v0.0.42_job_state in slurmrestd's OpenAPI spec)
_STATE_NAMES = frozenset(
    {
        "PENDING", "RUNNING", "SUSPENDED", "COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL",
        "PREEMPTED", "BOOT_FAIL", "DEADLINE", "OUT_OF_MEMORY", "LAUNCH_FAILED", "REQUEUED", "REQUEUE_HOLD",
        "SPECIAL_EXIT", "RESIZING", "CONFIGURING", "COMPLETING", "STOPPED", "RECONFIG_FAIL", "POWER_UP_NODE",
        "REVOKED", "REQUEUE_FED", "RESV_DEL_HOLD", "SIGNALING", "STAGE_OUT",
    }
)  # fmt: skip
_QUERY_REJECTED = "Rejecting request. Failure parsing query parameters"


class _QueryRefused(Exception):
    """A /slurmdb/V/jobs/ parameter slurmrestd cannot parse: the errors it names (before its 9000)."""

    def __init__(self, *errors: dict[str, Any]) -> None:
        super().__init__(errors)
        self.errors = list(errors)


@dataclass(frozen=True)
class _UsageWindow:
    """The [start, end] (seconds, both included) a /slurmdb/V/jobs/ query selects by."""

    start: int
    end: int

    @classmethod
    def settle(cls, start: int, end: int) -> _UsageWindow:
        # slurmdbd widens a window of one instant to the next second
        return cls(start, end + 1 if end == start else end)


def _timestamp(query: dict[str, list[str]], key: str) -> int:
    """``start_time`` or ``end_time`` in epoch seconds; 0 when absent (or 0, which means the same)."""
    text = (query.get(key) or ["0"])[0]
    if not text.isdigit():
        error = replies.error(
            9202, "Unable to convert Data type", f"Parsing of {text} for timestamp failed", f"#/{key}/"
        )
        raise _QueryRefused(error)
    return int(text)


def _flag(query: dict[str, list[str]], key: str) -> bool:
    return (query.get(key) or [""])[0] == "true"


def _db_state(record: dict[str, Any]) -> str:
    """The state slurmdbd keeps for a record: a requeued run's is REQUEUED (shown [PENDING, REQUEUED])."""
    current = record["state"]["current"]
    return "REQUEUED" if "REQUEUED" in current else current[0]


def _in_state_during(state: str, record: dict[str, Any], window: _UsageWindow) -> bool:
    """Whether ``record`` counts for ``state=`` over ``window``, by slurmdbd's rule for that state.

    PENDING and RUNNING: the job was in it for part of the window (whatever its state now); any
    other state: the job is in it now and ended within the window.
    """
    t = record["time"]
    started = replies.db_started(record)
    if state == "PENDING":
        return 0 < t["eligible"] < window.end and (not started or t["start"] > window.start)
    if state == "RUNNING":
        return started and t["start"] < window.end and (not t["end"] or t["end"] > window.start)
    return _db_state(record) == state and bool(t["end"]) and window.start <= t["end"] <= window.end


def _in_usage(record: dict[str, Any], window: _UsageWindow) -> bool:
    """Without ``state``: eligible before the window ends and not ended before it starts."""
    t = record["time"]
    return 0 < t["eligible"] < window.end and (not t["end"] or t["end"] >= window.start)


@dataclass(frozen=True)
class _JobsQuery:
    """What a ``GET /slurmdb/V/jobs/`` selects, as slurmrestd parses it and slurmdbd applies it.

    ``job_name``, ``users``, ``partition``, ``account`` and ``state`` may be repeated (each value
    may also be a list: an encoded comma); ``step`` repeats job IDs (like sacct -j).
    """

    names: frozenset[str]
    steps: list[tuple[int, int | None]]  # (job id, array task id or None)
    users: frozenset[str]
    partitions: frozenset[str]  # lower case: slurmdbd compares them so
    accounts: frozenset[str]  # lower case too
    states: list[str]
    state_errors: list[dict[str, Any]]
    window: _UsageWindow | None  # None: no time condition
    skip_steps: bool
    truncates: bool

    @classmethod
    def parse(cls, query: dict[str, list[str]], known_users: set[str], now: int) -> _JobsQuery:
        states, state_errors = _parse_states(query.get("state") or [])
        window = _parse_window(query, bool(states), now)
        skip_steps = _flag(query, "skip_steps")
        return cls(
            names=_values(query, "job_name"),
            steps=_parse_steps(query),
            users=_parse_users(query, known_users),
            partitions=frozenset(v.lower() for v in _values(query, "partition")),
            accounts=frozenset(v.lower() for v in _values(query, "account")),
            states=states,
            state_errors=state_errors,
            window=window,
            skip_steps=skip_steps,
            # slurmdbd cuts the times only when it leaves the steps out
            truncates=window is not None and skip_steps and not _flag(query, "disable_truncate_usage_time"),
        )

    def selects(self, run: Job, record: dict[str, Any]) -> bool:
        """Whether the record of ``run`` passes every condition but ``step``."""
        if self.names and run.name not in self.names:
            return False
        if self.users and not ({run.user_name, str(run.user_id)} & self.users):
            return False
        if self.partitions and record["partition"].lower() not in self.partitions:
            return False
        if self.accounts and record["account"].lower() not in self.accounts:
            return False
        if self.window is None:
            return True
        if self.window.end < self.window.start:  # a window that ends before it starts holds nothing
            return False
        if not self.states:
            return _in_usage(record, self.window)
        return any(_in_state_during(state, record, self.window) for state in self.states)

    def trim(self, record: dict[str, Any]) -> None:
        """Leave the steps out and cut the times to the window, as asked."""
        if self.skip_steps:
            record["steps"] = []
        if self.truncates and self.window is not None:
            replies.truncate_usage(record, self.window.start, self.window.end)


def _values(query: dict[str, list[str]], key: str) -> frozenset[str]:
    """A repeated parameter's values, each split at (encoded) commas, as slurmrestd reads a CSV list."""
    return frozenset(part for value in query.get(key) or [] for part in value.split(",") if part)


def _parse_steps(query: dict[str, list[str]]) -> list[tuple[int, int | None]]:
    """``step``: job IDs (``123`` or ``123_4``), repeated; a list in one value is refused."""
    refs = [_parse_ref(job_ref) for job_ref in query.get("step") or []]
    if None in refs:
        raise _QueryRefused()
    return [ref for ref in refs if ref is not None]


def _parse_users(query: dict[str, list[str]], known_users: set[str]) -> frozenset[str]:
    """User names or numeric IDs; a name nobody has is refused."""
    users = [part for value in query.get("users") or [] for part in value.split(",")]
    for index, user in enumerate(users):
        if user and not user.isdigit() and user not in known_users:
            raise _QueryRefused(
                replies.error(
                    2166,
                    "Unable to resolve user ID to user name",
                    f"Unable to resolve user: {user}",
                    f"#/users[{index}]/",
                )
            )
    # an empty value names no one: with it alone the query matches nothing
    return frozenset(users)


def _parse_states(values: list[str]) -> tuple[list[str], list[dict[str, Any]]]:
    """State names in upper case; slurmrestd reads a name it does not know as PENDING, and says so."""
    states, errors = [], []
    for index, value in enumerate(values):
        name = value.upper()
        if name not in _STATE_NAMES:
            errors.append(
                replies.error(
                    9207, "Data parser unable to parse invalid flag", f'Unknown flag "{value}"', f"#/state[{index}][0]/"
                )
            )
            name = "PENDING"
        states.append(name)
    return states, errors


def _parse_window(query: dict[str, list[str]], by_state: bool, now: int) -> _UsageWindow | None:
    """The time window, with slurmdbd's defaults.

    With ``state``: from start_time (default: now) to end_time (default: the start). Without: from
    start_time (default: the beginning) to end_time (default: now); neither: no window at all.
    """
    start, end = _timestamp(query, "start_time"), _timestamp(query, "end_time")
    if by_state:
        start = start or now
        return _UsageWindow.settle(start, end or start)
    if not start and not end:
        return None
    return _UsageWindow.settle(start, end or now)


def _state_order(jobs: list[Job]) -> list[Job]:
    """The order of jobs/state and DELETE statuses: newest first, a pending meta record last."""
    return sorted(jobs, key=lambda j: (j.is_array_meta, -j.array_seq))


class BuiltinBackend(SlurmBackend):
    """A Slurm stand-in with a node per partition (``slurm_conf``): jobs run as local processes,
    one process group each."""

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
        job_comments: bool = True,
        slurm_conf: SlurmConf | None = None,
    ) -> None:
        self.cluster = cluster
        self.job_comments = job_comments
        self.slurm_conf = slurm_conf or SlurmConf()
        self.view = ClusterView(self.slurm_conf, cluster, epoch_seconds())
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
            if not self.slurm_conf.accounting:
                return NO_SLURMDBD
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
                return self._get_job(version, job_ref, request.principal)
            if request.method == "DELETE":
                return self._delete_job(version, job_ref, request)
            return self._bad_method(kind, version, "op_handler_job")
        if request.method != "GET":
            return self._bad_method(kind, version, "op_handler_" + route.split("/")[0])
        if route == "jobs":
            return self._list_jobs(version, request)
        if route == "jobs/state":
            return self._jobs_state(version, request)
        what, _, name = route.partition("/")
        if what in ("partitions", "partition"):
            return self.view.partitions(version, name or None)
        if what in ("nodes", "node"):
            return self.view.nodes(version, name or None, list(self.jobs.values()))
        return 200, replies.envelope(kind, version, self.cluster, {"pings": [replies.ping()]})

    def _slurmdb_route(self, version: str, route: str, request: SlurmRequest) -> SlurmAnswer:
        if request.method != "GET":
            return self._bad_method("slurmdbd", version, "op_handler_job" if route != "jobs" else "op_handler_jobs")
        if route == "jobs":
            return self._slurmdb_jobs(version, request)
        if route == "tres":
            return self.view.tres(version)
        return self._slurmdb_job(version, route.removeprefix("job/"), request.principal)

    def _get_job(self, version: str, job_ref: str, principal: str) -> SlurmAnswer:
        ref = _parse_ref(job_ref)
        if ref is None:
            return self._bad_method("slurmctld", version, "op_handler_job")
        # real slurmrestd ignores a task suffix here: 123_4 answers like 123 (the whole array)
        jobs = [j for j in self._records(ref[0]) if self.scheduler.in_queue(j) and self._visible(j, principal)]
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
        jobs = [j for j in self._queue() if self._visible(j, request.principal)]
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
            return self._unparsable_query("slurmctld", version, "op_handler_jobs_state")
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
            job, warnings = new_job(request.body, request.principal, self.scheduler.next_job_id, self.slurm_conf)
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

    def _slurmdb_job(self, version: str, job_ref: str, principal: str) -> SlurmAnswer:
        ref = _parse_ref(job_ref)
        if ref is None:
            return self._bad_method("slurmdbd", version, "op_handler_job")
        jobs = [job for job in self._accounted(*ref) if self._visible(job, principal)]
        jobs = [run for job in jobs for run in (*job.runs, job)]  # one record per run, oldest first
        now = epoch_seconds()
        warnings = []
        if not jobs:
            warnings.append(replies.warning(f"slurmdb_jobs_get(0x{id(self):x}) found nothing", "_dump_jobs"))
        fields = {"jobs": [self._accounting_record(j, now) for j in jobs]}
        return 200, replies.envelope("slurmdbd", version, self.cluster, fields, warnings=warnings)

    def _accounting_record(self, job: Job, now: int) -> dict[str, Any]:
        record = replies.slurmdb_job(job, self.cluster, now)
        if not self.job_comments:  # slurmdbd without AccountingStoreFlags=job_comment: the field is empty
            record["comment"]["job"] = ""
        return record

    def _slurmdb_jobs(self, version: str, request: SlurmRequest) -> SlurmAnswer:
        """Accounting's records, like sacct: all jobs, or those the query selects (see ``_JobsQuery``).

        ``skip_steps=true`` leaves the steps out; with a time window and without
        ``disable_truncate_usage_time=true`` it also cuts each record's run to the window.
        """
        if "," in request.raw_query:
            # real slurmrestd refuses a literal comma in any parameter (an encoded one is a list)
            return self._unparsable_query("slurmdbd", version, "op_handler_jobs")
        try:
            query = _JobsQuery.parse(request.query, self._user_names(request.principal), epoch_seconds())
        except _QueryRefused as refused:
            errors = [*refused.errors, replies.error(9000, replies.PARSE_ERROR, _QUERY_REJECTED, "op_handler_jobs")]
            return 422, replies.envelope("slurmdbd", version, self.cluster, {}, errors=errors)
        records = self._selected_records(query, request.principal)
        warnings = []
        if not records:
            warnings.append(replies.warning(f"slurmdb_jobs_get(0x{id(self):x}) found nothing", "_dump_jobs"))
        # slurmdbd answers what it could parse, and says which state names it could not
        status = 500 if query.state_errors else 200
        fields = {"jobs": records}
        return status, replies.envelope(
            "slurmdbd", version, self.cluster, fields, errors=query.state_errors, warnings=warnings
        )

    def _selected_records(self, query: _JobsQuery, principal: str) -> list[dict[str, Any]]:
        """The accounting records ``query`` selects, one per run, by job ID and oldest run first."""
        now = epoch_seconds()
        jobs = sorted((j for j in self.jobs.values() if self._visible(j, principal)), key=lambda j: j.job_id)
        if query.steps:
            picked = {id(job) for ref in query.steps for job in self._accounted(*ref)}
            jobs = [j for j in jobs if id(j) in picked]
        records = [(run, self._accounting_record(run, now)) for job in jobs for run in (*job.runs, job)]
        selected = [record for run, record in records if query.selects(run, record)]
        for record in selected:
            query.trim(record)
        return selected

    def _user_names(self, principal: str) -> set[str]:
        """The user names accounting can resolve: the caller's and those of every job's owner."""
        return {user_name(principal), *(j.user_name for j in self.jobs.values())}

    def _visible(self, job: Job, principal: str) -> bool:
        """With ``PrivateData=jobs``, slurmctld and slurmdbd show a user only its own jobs: another's
        reads as no job at all. (jobs/state shows every job: slurmctld does not filter it.)"""
        return not self.slurm_conf.private_data or job.user_name == user_name(principal)

    def _unparsable_query(self, kind: str, version: str, source: str) -> SlurmAnswer:
        # real slurmrestd answers 400 text/plain "Unable to parse query."; we keep the reply JSON
        # so structuredBody stays an object
        return _slurm_error(
            400, 9000, replies.PARSE_ERROR, "Unable to parse query.", source, kind, version, self.cluster
        )

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
