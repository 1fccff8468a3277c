"""Backends answer the Slurm REST call that callSlurmRestApi forwards.

``SlurmBackend`` is the seam: the server validates the Google side (auth, cluster, envelope) and
hands a ``SlurmRequest`` to a backend, which answers ``(slurmrestd HTTP status, reply)``.

- ``BuiltinBackend`` (here) emulates slurmctld + slurmdbd with local processes.
- ``SlurmrestdBackend`` (``slurmrestd.py``) forwards every call to a real slurmrestd.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import datetime
import json
import logging
import os
import re
import shlex
import signal
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from airflow_provider_slurmapi.emulator import replies
from airflow_provider_slurmapi.emulator.jobs import (
    TERM_EXIT,
    ExitInfo,
    Job,
    State,
    Step,
    parse_array,
)

log = logging.getLogger(__name__)

SLURM_VERSIONS = ("v0.0.40", "v0.0.41", "v0.0.42")
DEFAULT_PARTITION = "debug"
PARTITIONS = frozenset({DEFAULT_PARTITION})


@dataclass(frozen=True)
class SlurmRequest:
    """One Slurm REST call, as unwrapped from callSlurmRestApi."""

    method: str  # "GET", "POST", "DELETE", "PUT", "PATCH"
    path: str  # without the query string
    query: dict[str, list[str]] = field(default_factory=dict)  # decoded, repeated keys kept
    raw_query: str = ""  # undecoded, for checks that depend on the literal text
    body: Any = None
    principal: str = ""


# a JSON reply, or the text of one slurmrestd answers as text/plain (e.g. "Authentication failure")
SlurmAnswer = tuple[int, replies.Reply | str]


class BackendUnavailable(Exception):
    """The backend cannot answer at all (e.g. slurmrestd is unreachable); the server says UNAVAILABLE."""


class SlurmBackend(abc.ABC):
    """What the server needs from something that can answer Slurm REST calls for one cluster."""

    @abc.abstractmethod
    def is_known_path(self, path: str) -> bool:
        """Whether ``path`` (no query string) is a Slurm REST route; unknown ones are INVALID_ARGUMENT."""

    @abc.abstractmethod
    async def handle(self, request: SlurmRequest) -> SlurmAnswer:
        """Answer one call with slurmrestd's HTTP status and reply; raise ``BackendUnavailable`` if none."""

    async def start(self) -> None:  # noqa: B027 - optional hook
        """Called in the server's event loop before the first request."""

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Called in the server's event loop on shutdown."""


# --- routes --------------------------------------------------------------------------------------

_PATH = re.compile(r"^/(slurm|slurmdb)/(v0\.0\.4[0-2])/(.*)$")
_SLURM_ROUTES = re.compile(r"^(job/submit|job/[^/]+|jobs/?|jobs/state/?|ping/?)$")
_SLURMDB_ROUTES = re.compile(r"^(job/[^/]+|jobs/?)$")


def is_slurm_route(path: str) -> bool:
    """Whether ``path`` (no query string) is a Slurm REST route the API forwards."""
    match = _PATH.match(path)
    if not match:
        return False
    routes = _SLURM_ROUTES if match.group(1) == "slurm" else _SLURMDB_ROUTES
    return bool(routes.match(match.group(3)))


_JOB_ID = re.compile(r"^(\d+)(?:_(\d+))?$")

_PARSE_ERROR = "Query empty or not RFC7320 compliant"

# the srun shim: runs its command as a "step" and records the exit status, so the batch job's
# derived_exit_code can report the worst step like real Slurm does
_SRUN_SHIM = r"""#!/bin/sh
# emulator srun: strip srun's own options, run the command, record "rc start end name"
while [ $# -gt 0 ]; do
  case "$1" in
    --) shift; break ;;
    --*=*) shift ;;
    --ntasks|--nodes|--cpus-per-task|--partition|--job-name|--time|--output|--error|--input|\
--nodelist|--exclude|--chdir|--gpus|--gpus-per-node|--gpus-per-task|--account|--mem|--mem-per-cpu|\
--ntasks-per-node|--gres|--cpu-bind|--distribution|--export|--constraint|--qos|--reservation|\
--dependency|--mpi|--het-group) shift 2 ;;
    -[nNcpJtoeiwxCDGAdmq]) shift 2 ;;
    -*) shift ;;
    *) break ;;
  esac
done
if [ $# -eq 0 ]; then echo "srun: fatal: No command given to execute." >&2; exit 1; fi
start=$(date +%s)
"$@"
rc=$?
end=$(date +%s)
printf '%s %s %s %s\n' "$rc" "$start" "$end" "$(basename "$1")" >> STEPS_FILE
exit $rc
"""


def _now() -> int:
    return int(time.time())


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


def _json_type_name(value: Any) -> str:
    # how slurmrestd names JSON types in its "Ignoring unknown field" warnings
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "64 bit integer"
    if isinstance(value, float):
        return "64 bit floating point number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "list"
    if isinstance(value, dict):
        return "dictionary"
    return "null"


class SubmitError(Exception):
    def __init__(self, status: int, number: int, error: str, description: str, source: str) -> None:
        super().__init__(description)
        self.status, self.number, self.error, self.description, self.source = (
            status,
            number,
            error,
            description,
            source,
        )


IO_SETUP_SIGNAL = 53  # what real Slurm reports when the job's output file cannot be opened


class _OutputFailure(Exception):
    """The output files cannot be opened (e.g. their directory does not exist)."""


class _SetupFailure(Exception):
    """The job could not be started (no working directory, output not writable...)."""


def _int_field(desc: dict[str, Any], key: str, default: int, warnings: list[dict[str, Any]]) -> int:
    """Read an integer job field like slurmrestd: {set, number} or an int; bad strings only warn."""
    value = desc.get(key)
    if isinstance(value, dict):
        value = value.get("number") if value.get("set", True) else None
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, str) and value.isdigit():
            return int(value)
        warnings.append(
            replies.warning(
                "Expected OpenAPI type=integer format=int32 (Slurm type=64 bit integer) but got OpenAPI "
                f"type={_json_type_name(value)} (Slurm type={_json_type_name(value)}): "
                f"{json.dumps(value)}",
                f"#/job/{key}/",
            )
        )
        return default
    return value


def _time_limit(desc: dict[str, Any]) -> int | None:
    """Minutes, or None for unlimited. Accepts 5 or {"set": true, "number": 5}."""
    if "time_limit" not in desc:
        return None
    value = desc["time_limit"]
    if isinstance(value, dict):
        if value.get("infinite") or not value.get("set", True):
            return None
        value = value.get("number", 0)
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, str) and value.isdigit():
            return int(value)
        raise SubmitError(
            500,
            9202,
            "Unable to convert Data type",
            f"Expected integer but got {json.dumps(value)}",
            "#/job/time_limit/",
        )
    return value


def _epoch_field(desc: dict[str, Any], key: str) -> int:
    value = desc.get(key)
    if isinstance(value, dict):
        value = value.get("number", 0) if value.get("set", True) else 0
    if isinstance(value, bool) or not isinstance(value, int):
        return 0
    return value


class BuiltinBackend(SlurmBackend):
    """A one-node Slurm stand-in: jobs run as local processes, one process group each."""

    def __init__(
        self,
        cluster: str,
        state_dir: Path,
        *,
        min_job_age: float = 30.0,
        seconds_per_minute: float = 60.0,
        kill_wait: float = 3.0,
        sched_delay: float = 0.0,
        virtual_jobs: bool = False,
    ) -> None:
        self.cluster = cluster
        self.sched_delay = sched_delay
        self.virtual_jobs = virtual_jobs
        self.state_dir = state_dir
        self.min_job_age = min_job_age
        self.seconds_per_minute = seconds_per_minute
        self.kill_wait = kill_wait
        self.jobs: dict[int, Job] = {}
        self.next_job_id = 1
        self.seq = 0  # orders records like slurmctld's lists (Job.list_seq, Job.array_seq)
        self.last_change = 0
        self._tasks: set[asyncio.Task[None]] = set()
        self._wake: asyncio.Event | None = None
        self._scheduler: asyncio.Task[None] | None = None
        self._kill_timers: dict[int, asyncio.TimerHandle] = {}

    # --- SlurmBackend ---------------------------------------------------------------------------

    def is_known_path(self, path: str) -> bool:
        return is_slurm_route(path)

    async def start(self) -> None:
        self._wake = asyncio.Event()
        self._scheduler = asyncio.create_task(self._schedule_forever())

    async def close(self) -> None:
        if self._scheduler:
            self._scheduler.cancel()
        for job in self.jobs.values():
            if job.process is not None and job.process.returncode is None:
                self._signal_group(job, signal.SIGKILL)
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

    async def handle(self, request: SlurmRequest) -> SlurmAnswer:
        match = _PATH.match(request.path)
        assert match, "server checks is_known_path first"
        service, version, route = match.groups()
        route = route.rstrip("/")
        if service == "slurmdb":
            kind = "slurmdbd"
            if request.method != "GET":
                return self._bad_method(kind, version, "op_handler_job" if route != "jobs" else "op_handler_jobs")
            if route == "jobs":
                return self._slurmdb_jobs(version, request.query.get("job_name"))
            return self._slurmdb_job(version, route.removeprefix("job/"))
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

    # --- helpers --------------------------------------------------------------------------------

    def _bad_method(self, kind: str, version: str, source: str) -> SlurmAnswer:
        return _slurm_error(
            422,
            9000,
            _PARSE_ERROR,
            "Rejecting request. Failure parsing parameters",
            source,
            kind,
            version,
            self.cluster,
        )

    def _touch(self, job: Job) -> None:
        job.last_change = _now()
        self.last_change = max(self.last_change, job.last_change)

    def _in_queue(self, job: Job) -> bool:
        """Whether slurmctld still shows the job (finished jobs leave after min_job_age)."""
        if not job.terminal or job.completing:
            return True
        return time.time() - job.ended_at < self.min_job_age

    def _parse_ref(self, job_ref: str) -> tuple[int, int | None] | None:
        """``123`` or ``123_4`` as (job id, task id or None); None if malformed."""
        match = _JOB_ID.match(job_ref)
        if not match:
            return None
        return int(match.group(1)), None if match.group(2) is None else int(match.group(2))

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

    @staticmethod
    def _state_order(jobs: list[Job]) -> list[Job]:
        """The order of jobs/state and DELETE statuses: newest first, a pending meta record last."""
        return sorted(jobs, key=lambda j: (j.is_array_meta, -j.array_seq))

    def _task_record(self, array_id: int, task: int) -> Job | None:
        """The record that holds task ``task`` of array ``array_id``: its own, or the meta record."""
        for job in self.jobs.values():
            if job.array_job_id == array_id and (job.array_task_id == task or task in job.pending_tasks):
                return job
        return None

    # --- /slurm routes --------------------------------------------------------------------------

    def _get_job(self, version: str, job_ref: str) -> SlurmAnswer:
        ref = self._parse_ref(job_ref)
        if ref is None:
            return self._bad_method("slurmctld", version, "op_handler_job")
        # real slurmrestd ignores a task suffix here: 123_4 answers like 123 (the whole array)
        jobs = [j for j in self._records(ref[0]) if self._in_queue(j)]
        fields: dict[str, Any] = {
            "jobs": [replies.slurm_job(j, self.cluster) for j in jobs],
            "last_backfill": replies.number(0),
            "last_update": replies.number(self.last_change if jobs else 0),
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
        jobs = [j for j in sorted(self.jobs.values(), key=lambda j: j.list_seq) if self._in_queue(j)]
        last_update = self.last_change
        since = (request.query.get("update_time") or [""])[0]
        if since.isdigit() and self.last_change <= int(since):
            # all or nothing, like real slurmctld
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
                _PARSE_ERROR,
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
                ref = self._parse_ref(raw)
                if ref is None:
                    return self._bad_method("slurmctld", version, "op_handler_jobs_state")
                job_id, task = ref
                if task is None:
                    found = self._records(job_id)
                else:  # the task's record; for a task not started yet, the whole meta record
                    record = self._task_record(job_id, task)
                    found = [record] if record is not None else []
                # in the order asked for, like real slurmctld
                selected.update((j.job_id, j) for j in self._state_order(found) if self._in_queue(j))
            jobs = list(selected.values())
        else:
            jobs = [j for j in sorted(self.jobs.values(), key=lambda j: j.list_seq) if self._in_queue(j)]
        entries = [{"job_id": name, "state": replies._state_list(j)} for j in jobs for name in j.state_ids]
        return 200, replies.envelope("slurmctld", version, self.cluster, {"jobs": entries})

    def _delete_job(self, version: str, job_ref: str, request: SlurmRequest) -> SlurmAnswer:
        ref = self._parse_ref(job_ref)
        if ref is None:
            return self._bad_method("slurmctld", version, "op_handler_job")
        sig_text = (request.query.get("signal") or [""])[0].upper().removeprefix("SIG")
        sig: signal.Signals | None = None
        if sig_text:
            try:
                sig = signal.Signals(int(sig_text)) if sig_text.isdigit() else signal.Signals["SIG" + sig_text]
            except (KeyError, ValueError):
                return self._bad_method("slurmctld", version, "op_handler_job")
        job_id, task = ref
        if task is None:
            jobs = self._records(job_id)
        else:
            record = self._task_record(job_id, task)
            jobs = [record] if record is not None else []
        jobs = [j for j in jobs if self._in_queue(j)]
        if not jobs:
            status = [replies.delete_status(job_ref, None, 2017, "Invalid job id specified")]
            return 200, replies.envelope("slurmctld", version, self.cluster, {"status": status})
        user = request.principal.split("@")[0]
        cancel = sig in (None, signal.SIGKILL, signal.SIGTERM)
        meta = jobs[0] if task is not None and jobs[0].is_array_meta and not jobs[0].terminal else None
        if cancel and meta is not None and task is not None and meta.pending_tasks != [task]:
            # a task not started yet just leaves the meta record, without a record of its own
            meta.pending_tasks.remove(task)
            self._touch(meta)
            return 200, replies.envelope("slurmctld", version, self.cluster, {"status": []})
        status = []
        for job in self._state_order(jobs):
            if job.terminal:  # one entry per record already over; the others are cancelled
                step_id = str(job.job_id) if job.array_task_id is None else f"{job.array_job_id}_{job.array_task_id}"
                status.append(
                    replies.delete_status(step_id, job.job_id, 2021, "Job/step already completing or completed")
                )
            elif cancel:
                self._stop(job, State.CANCELLED, sig or signal.SIGTERM, user)
            elif job.state is State.RUNNING and sig is not None:
                self._signal_group(job, sig)  # delivered only; the job keeps running
        return 200, replies.envelope("slurmctld", version, self.cluster, {"status": status})

    def _submit(self, version: str, request: SlurmRequest) -> SlurmAnswer:
        try:
            job, warnings = self._new_job(request)
        except SubmitError as exc:
            return _slurm_error(
                exc.status, exc.number, exc.error, exc.description, exc.source, "slurmctld", version, self.cluster
            )
        self._add(job)
        self._poke()
        fields: dict[str, Any] = {"job_id": job.job_id, "step_id": "batch", "job_submit_user_msg": ""}
        if any(w["description"].startswith("Expected OpenAPI type=integer") for w in warnings):
            # real slurmrestd 24.11 submits the job but leaves job_id out of the reply in this case
            # (fixture submit_error_wrong_type.json)
            fields = {}
        return 200, replies.envelope("slurmctld", version, self.cluster, fields, warnings=warnings)

    def _next_seq(self) -> int:
        self.seq += 1
        return self.seq

    def _add(self, job: Job) -> None:
        job.list_seq = job.array_seq = self._next_seq()
        self.jobs[job.job_id] = job
        self._touch(job)

    def _new_job(self, request: SlurmRequest) -> tuple[Job, list[dict[str, Any]]]:
        body = request.body if isinstance(request.body, dict) else {}
        script = body.get("script")
        if not isinstance(script, str) or not script:
            raise SubmitError(
                422, 9000, _PARSE_ERROR, 'Populated "script" field is required for job submission', "_job_post"
            )
        desc = body.get("job")
        if not isinstance(desc, dict):
            raise SubmitError(
                422,
                9000,
                _PARSE_ERROR,
                'Populated "job" field is required for job submission (the emulator does '
                'not support heterogeneous "jobs")',
                "_job_post",
            )
        warnings: list[dict[str, Any]] = []
        known = replies.job_desc_fields()
        for key, value in desc.items():
            if key not in known:
                warnings.append(
                    replies.warning(
                        f'Ignoring unknown field "{key}" of type {_json_type_name(value)} in DATA_PARSER_JOB_DESC_MSG',
                        f"#/job/{key}/",
                    )
                )
        time_limit = _time_limit(desc)
        tasks = _int_field(desc, "tasks", 0, warnings) or None
        tasks_per_node = _int_field(desc, "tasks_per_node", 0, warnings)
        cpus_per_task = _int_field(desc, "cpus_per_task", 1, warnings)
        min_nodes = _int_field(desc, "minimum_nodes", 1, warnings)

        env_value = desc.get("environment")
        environment: dict[str, str] = {}
        if isinstance(env_value, dict):
            text = json.dumps(env_value, separators=(",", ":")).replace("/", "\\/")
            warnings.append(
                replies.warning(
                    "Expected OpenAPI type=array (Slurm type=list) but got OpenAPI type=object "
                    f"(Slurm type=dictionary): {text}",
                    "#/job/environment/",
                )
            )
            environment = {str(k): str(v) for k, v in env_value.items()}
        elif isinstance(env_value, list) and env_value:
            for item in env_value:
                key, _, value = str(item).partition("=")
                if key:
                    environment[key] = value
        else:
            raise SubmitError(
                500,
                2019,
                "I/O error writing script/environment to file",
                "Batch job submission failed",
                "slurm_submit_batch_job()",
            )
        cwd = desc.get("current_working_directory")
        if not isinstance(cwd, str) or not cwd:
            raise SubmitError(
                500,
                2063,
                "Job cannot be submitted without the current working directory specified.",
                "Batch job submission failed",
                "slurm_submit_batch_job()",
            )
        partition = desc.get("partition") or DEFAULT_PARTITION
        if partition not in PARTITIONS:
            raise SubmitError(
                500, 2000, "Invalid partition name specified", "Batch job submission failed", "slurm_submit_batch_job()"
            )
        array_tasks: list[int] = []
        max_running = 0
        if desc.get("array"):
            try:
                array_tasks, max_running = parse_array(str(desc["array"]))
            except ValueError:
                raise SubmitError(
                    500,
                    2003,
                    "Invalid job array specification",
                    "Batch job submission failed",
                    "slurm_submit_batch_job()",
                ) from None

        user = request.principal.split("@")[0] or "emulator"
        begin = _epoch_field(desc, "begin_time")
        now = _now()
        job_id = self.next_job_id
        self.next_job_id += 1
        hold = bool(desc.get("hold"))
        job = Job(
            job_id=job_id,
            name=str(desc.get("name") or ""),
            user_name=user,
            user_id=os.getuid(),
            group_id=os.getgid(),
            group_name=user,
            script=script,
            environment=environment,
            cwd=cwd,
            stdout_pattern=str(desc.get("standard_output") or ("slurm-%A_%a.out" if array_tasks else "slurm-%j.out")),
            stderr_pattern=str(desc.get("standard_error") or ""),
            stdin=str(desc.get("standard_input") or "/dev/null"),
            partition=partition,
            comment=str(desc.get("comment") or ""),
            time_limit=time_limit,
            hold=hold,
            submit_time=now,
            begin_time=begin if begin > now else 0,
            tasks=tasks,
            tasks_per_node=tasks_per_node,
            cpus_per_task=cpus_per_task,
            min_nodes=min_nodes,
            default_partition=not desc.get("partition"),
            # real slurmctld flags held jobs and arrays DEPENDENT until their first scheduling pass
            dependent=hold or bool(array_tasks),
            # an array starts as one record, the meta record, holding every task (see _split_task)
            array_job_id=job_id if array_tasks else 0,
            array_max_tasks=max_running,
            pending_tasks=array_tasks,
        )
        return job, warnings

    # --- /slurmdb routes ------------------------------------------------------------------------

    def _slurmdb_job(self, version: str, job_ref: str) -> SlurmAnswer:
        ref = self._parse_ref(job_ref)
        if ref is None:
            return self._bad_method("slurmdbd", version, "op_handler_job")
        job_id, task = ref
        jobs = self._records(job_id)
        if task is not None:  # only a task that started has a row of its own
            jobs = [j for j in jobs if j.array_job_id == job_id and j.array_task_id == task]
        jobs.sort(key=lambda j: j.job_id)
        now = _now()
        warnings = []
        if not jobs:
            warnings.append(replies.warning(f"slurmdb_jobs_get(0x{id(self):x}) found nothing", "_dump_jobs"))
        fields = {"jobs": [replies.slurmdb_job(j, self.cluster, now) for j in jobs]}
        return 200, replies.envelope("slurmdbd", version, self.cluster, fields, warnings=warnings)

    def _slurmdb_jobs(self, version: str, names: list[str] | None = None) -> SlurmAnswer:
        """All jobs, or those named in ``job_name`` (comma-separated, like sacct --name)."""
        now = _now()
        wanted = {name for value in names or [] for name in value.split(",") if name}
        chosen = [j for j in sorted(self.jobs.values(), key=lambda j: j.job_id) if not wanted or j.name in wanted]
        jobs = [replies.slurmdb_job(j, self.cluster, now) for j in chosen]
        return 200, replies.envelope("slurmdbd", version, self.cluster, {"jobs": jobs})

    # --- scheduling and processes ---------------------------------------------------------------

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
        now = _now()
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

    def _job_dir(self, job: Job) -> Path:
        return self.state_dir / "jobs" / str(job.job_id)

    def _prepare(self, job: Job) -> tuple[list[str], dict[str, str], int, int, str]:
        """Blocking setup (run in a thread): script, srun shim, environment, output files."""
        job_dir = self._job_dir(job)
        bin_dir = job_dir / "bin"
        bin_dir.mkdir(parents=True, exist_ok=True)
        script_path = job_dir / "script"
        script_path.write_text(job.script)
        script_path.chmod(0o700)
        steps_file = job_dir / "steps"
        steps_file.write_text("")
        shim = bin_dir / "srun"
        shim.write_text(_SRUN_SHIM.replace("STEPS_FILE", shlex.quote(str(steps_file))))
        shim.chmod(0o755)

        env = dict(job.environment)
        env["PATH"] = f"{bin_dir}:{env.get('PATH') or '/usr/local/bin:/usr/bin:/bin'}"
        env["SLURM_JOB_ID"] = str(job.job_id)
        env["SLURM_JOB_NAME"] = job.name
        env["SLURM_SUBMIT_DIR"] = job.cwd
        env["SLURM_CLUSTER_NAME"] = self.cluster
        if job.array_task_id is not None:
            env["SLURM_ARRAY_JOB_ID"] = str(job.array_job_id)
            env["SLURM_ARRAY_TASK_ID"] = str(job.array_task_id)

        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
        try:
            out_fd = os.open(job.expand(job.stdout_pattern), flags, 0o644)
        except OSError as exc:
            raise _OutputFailure(f"cannot open standard_output: {exc.strerror}") from None
        err_fd = out_fd
        if job.stderr_pattern:
            try:
                err_fd = os.open(job.expand(job.stderr_pattern), flags, 0o644)
            except OSError as exc:
                os.close(out_fd)
                raise _OutputFailure(f"cannot open standard_error: {exc.strerror}") from None
        cwd = job.cwd
        if not os.path.isdir(cwd):  # slurmstepd says so in the job's output and runs in /tmp
            cwd = "/tmp"
            os.write(
                err_fd,
                f"slurmstepd-node1: error: couldn't chdir to `{job.cwd}': No such file or directory: "
                "going to /tmp instead\n".encode(),
            )
        # honour the shebang (the kernel does it when we exec the file); no shebang -> bash
        argv = [str(script_path)] if job.script.startswith("#!") else ["/bin/bash", str(script_path)]
        return argv, env, out_fd, err_fd, cwd

    async def _run(self, job: Job) -> None:
        if self.virtual_jobs:
            await self._run_virtual(job)
            return
        try:
            argv, env, out_fd, err_fd, cwd = await asyncio.to_thread(self._prepare, job)
        except _OutputFailure as exc:
            # slurmstepd cannot connect the batch step's IO: the step dies by "signal" 53
            log.info("job %s: %s", job.job_id, exc)
            self._finish(job, ExitInfo(return_code=0, signal=IO_SETUP_SIGNAL), "")
            return
        except (_SetupFailure, OSError) as exc:
            self._finish(job, ExitInfo(return_code=1), f"emulator: {exc}")
            return
        stdin: int = asyncio.subprocess.DEVNULL
        with contextlib.suppress(OSError):
            stdin = os.open(job.stdin, os.O_RDONLY)
        try:
            job.process = await asyncio.create_subprocess_exec(
                *argv, stdin=stdin, stdout=out_fd, stderr=err_fd, cwd=cwd, env=env, start_new_session=True
            )  # own process group, so cancel can signal all of it
        except OSError as exc:
            self._finish(job, ExitInfo(return_code=1), f"emulator: cannot start the script: {exc.strerror}")
            return
        finally:
            os.close(out_fd)
            if err_fd != out_fd:
                os.close(err_fd)
            if isinstance(stdin, int) and stdin >= 0:
                os.close(stdin)
        log.info("job %s started (pid %s)", job.job_id, job.process.pid)
        if job.stop_reason is not None:  # cancelled while we were setting up
            self._signal_group(job, signal.SIGTERM)
        waiter = asyncio.ensure_future(job.process.wait())
        limit = None if job.time_limit is None else job.time_limit * self.seconds_per_minute
        try:
            await asyncio.wait_for(asyncio.shield(waiter), timeout=limit)
        except TimeoutError:
            self._stop(job, State.TIMEOUT, signal.SIGTERM, "")
            await waiter
        except asyncio.CancelledError:  # emulator shutdown: the shielded waiter must go too
            waiter.cancel()
            raise
        returncode = waiter.result()
        # like proctrack, the job's end takes down whatever it left behind in its group
        self._signal_group(job, signal.SIGKILL)
        timer = self._kill_timers.pop(job.job_id, None)
        if timer:
            timer.cancel()
        job.steps = await asyncio.to_thread(self._read_steps, job)
        self._finish(job, ExitInfo.from_returncode(returncode), "")

    async def _run_virtual(self, job: Job) -> None:
        """A job without a process, for scale tests: it lasts ``EMULATOR_RUNTIME`` seconds (its
        environment, default 0) and exits with ``EMULATOR_EXIT_CODE`` (default 0). A cancel takes
        effect when that time is over."""
        try:
            runtime = float(job.environment.get("EMULATOR_RUNTIME", "0"))
            code = int(job.environment.get("EMULATOR_EXIT_CODE", "0"))
        except ValueError as exc:
            self._finish(job, ExitInfo(return_code=1), f"emulator: {exc}")
            return
        await asyncio.sleep(runtime)
        timer = self._kill_timers.pop(job.job_id, None)
        if timer:
            timer.cancel()
        self._finish(job, ExitInfo(return_code=code), "")

    def _read_steps(self, job: Job) -> list[Step]:
        steps = []
        try:
            lines = (self._job_dir(job) / "steps").read_text().splitlines()
        except OSError:
            return []
        for index, line in enumerate(lines):
            parts = line.split(" ", 3)
            if len(parts) < 3 or not all(p.lstrip("-").isdigit() for p in parts[:3]):
                continue
            rc, start, end = (int(p) for p in parts[:3])
            info = ExitInfo(return_code=rc)
            state = State.COMPLETED if rc == 0 else State.FAILED
            steps.append(Step(str(index), parts[3] if len(parts) > 3 else "", state, info, start, end))
        return steps

    def _finish(self, job: Job, info: ExitInfo, description: str) -> None:
        """The batch process is gone (or never started): settle the final state."""
        if job.stop_reason is not None:
            # set only now: while COMPLETING, real Slurm still reads SUCCESS/0; afterwards it reports
            # SIGNALED/TERM, even after ?signal=KILL
            job.exit = TERM_EXIT
        else:
            job.end_time = _now()
            job.exit = info
            if info.signal is not None:
                job.state, job.state_reason = State.FAILED, "RaisedSignal"
                # e.g. "RaisedSignal:53(Real-time signal 19)" for IO_SETUP_SIGNAL, as in real Slurm
                job.state_description = f"RaisedSignal:{info.signal}({signal.strsignal(info.signal)})"
            elif info.return_code != 0:
                job.state, job.state_reason = State.FAILED, "NonZeroExitCode"
                job.state_description = description
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
        now = _now()
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
        if job.process is not None:
            self._signal_group(job, sig)
        loop = asyncio.get_running_loop()
        self._kill_timers[job.job_id] = loop.call_later(self.kill_wait, self._signal_group, job, signal.SIGKILL)

    @staticmethod
    def _signal_group(job: Job, sig: signal.Signals) -> None:
        if job.process is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(job.process.pid, sig)
