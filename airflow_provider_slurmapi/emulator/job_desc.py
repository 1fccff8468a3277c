"""Read a ``job/submit`` body the way slurmrestd does: a new ``Job`` and its warnings, or a ``SubmitError``."""

from __future__ import annotations

import json
import os
from typing import Any, TypedDict

from airflow_provider_slurmapi.emulator import replies
from airflow_provider_slurmapi.emulator.gres_request import GresAllocation, GresRefused, allocate
from airflow_provider_slurmapi.emulator.job_model import Job, epoch_seconds, parse_array, parse_signal
from airflow_provider_slurmapi.emulator.slurm_conf import Partition, SlurmConf

_DEFAULT_CONF = SlurmConf()

# how slurmrestd names JSON types in its warnings; bool first, as a bool is also an int
_JSON_TYPE_NAMES: tuple[tuple[type, str], ...] = (
    (bool, "boolean"),
    (int, "64 bit integer"),
    (float, "64 bit floating point number"),
    (str, "string"),
    (list, "list"),
    (dict, "dictionary"),
)


def _json_type_name(value: Any) -> str:
    return next((name for kind, name in _JSON_TYPE_NAMES if isinstance(value, kind)), "null")


class SubmitError(Exception):
    """A submission slurmrestd refuses: its HTTP status and the error entry of its reply."""

    def __init__(self, status: int, number: int, error: str, description: str, source: str) -> None:
        super().__init__(description)
        self.status, self.number, self.error, self.description, self.source = (
            status,
            number,
            error,
            description,
            source,
        )


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


def _open_append(value: Any) -> bool:
    """open_mode is a list of flags (["APPEND"]); a plain string is taken too."""
    values = value if isinstance(value, list) else [value]
    return any(str(item).upper() == "APPEND" for item in values)


class _Owner(TypedDict):
    user_name: str
    user_id: int
    group_id: int
    group_name: str


class _Times(TypedDict):
    time_limit: int | None
    submit_time: int
    begin_time: int


class _Resources(TypedDict):
    tasks: int | None
    tasks_per_node: int
    cpus_per_task: int
    min_nodes: int


class _Files(TypedDict):
    stdout_pattern: str
    stderr_pattern: str
    stdin: str
    open_append: bool


class _KillWarning(TypedDict):
    warn_signal: int | None
    warn_delay: int
    warn_batch_only: bool


class _Array(TypedDict):
    array_job_id: int
    array_max_tasks: int
    pending_tasks: list[int]


def new_job(
    body: Any, principal: str, job_id: int, conf: SlurmConf = _DEFAULT_CONF
) -> tuple[Job, list[dict[str, Any]]]:
    """Job ``job_id`` of ``principal`` as ``body`` describes it, on the cluster ``conf`` describes,
    and slurmrestd's warnings about ``body``."""
    script, desc = _script_and_desc(body)
    warnings = _unknown_field_warnings(desc)
    # read in this order: it decides which refusal a submission with several faults gets, and the
    # order of the warnings
    times = _times(desc)
    resources = _resources(desc, warnings)
    environment = _environment(desc, warnings)
    cwd = _working_directory(desc)
    partition = _partition(desc, conf)
    gres = _gres(desc, partition, conf, resources)
    array = _array(desc, job_id)
    kill_warning = _kill_warning(desc, warnings)
    hold = bool(desc.get("hold"))
    job = Job(
        job_id=job_id,
        name=str(desc.get("name") or ""),
        script=script,
        environment=environment,
        cwd=cwd,
        partition=partition.name,
        default_partition=not desc.get("partition"),
        node=partition.node,
        gres=gres,
        comment=str(desc.get("comment") or ""),
        hold=hold,
        db_hold=hold,
        requeue=desc.get("requeue") is not False,  # Slurm's default (JobRequeue=1): requeue
        # real slurmctld flags held jobs and arrays DEPENDENT until their first scheduling pass
        dependent=hold or bool(array["pending_tasks"]),
        **_owner(principal),
        **times,
        **resources,
        **_files(desc, is_array=bool(array["pending_tasks"])),
        **array,
        **kill_warning,
    )
    return job, warnings


def _parse_error(description: str) -> SubmitError:
    """slurmrestd cannot read the submission at all."""
    return SubmitError(422, 9000, replies.PARSE_ERROR, description, "_job_post")


def _submit_failed(number: int, error: str) -> SubmitError:
    """slurmctld refuses the batch job: slurmrestd passes its error on."""
    return SubmitError(500, number, error, "Batch job submission failed", "slurm_submit_batch_job()")


def _script_and_desc(body: Any) -> tuple[str, dict[str, Any]]:
    """The batch script and the ``job`` description of a submission: both are required."""
    body = body if isinstance(body, dict) else {}
    script = body.get("script")
    if not isinstance(script, str) or not script:
        raise _parse_error('Populated "script" field is required for job submission')
    desc = body.get("job")
    if not isinstance(desc, dict):
        raise _parse_error(
            'Populated "job" field is required for job submission (the emulator does not support heterogeneous "jobs")'
        )
    return script, desc


def _unknown_field_warnings(desc: dict[str, Any]) -> list[dict[str, Any]]:
    known = replies.job_desc_fields()
    return [
        replies.warning(
            f'Ignoring unknown field "{key}" of type {_json_type_name(value)} in DATA_PARSER_JOB_DESC_MSG',
            f"#/job/{key}/",
        )
        for key, value in desc.items()
        if key not in known
    ]


def user_name(principal: str) -> str:
    """The Unix user a caller's principal maps to: its name before the @."""
    return principal.split("@")[0] or "emulator"


def _owner(principal: str) -> _Owner:
    """The caller's name as user and group; the job runs with the emulator's own ids."""
    user = user_name(principal)
    return {"user_name": user, "user_id": os.getuid(), "group_id": os.getgid(), "group_name": user}


def _times(desc: dict[str, Any]) -> _Times:
    """A begin time in the past (or none) makes the job eligible at once."""
    time_limit = _time_limit(desc)
    begin = _epoch_field(desc, "begin_time")
    now = epoch_seconds()
    return {"time_limit": time_limit, "submit_time": now, "begin_time": begin if begin > now else 0}


def _resources(desc: dict[str, Any], warnings: list[dict[str, Any]]) -> _Resources:
    return {
        "tasks": _int_field(desc, "tasks", 0, warnings) or None,
        "tasks_per_node": _int_field(desc, "tasks_per_node", 0, warnings),
        "cpus_per_task": _int_field(desc, "cpus_per_task", 1, warnings),
        "min_nodes": _int_field(desc, "minimum_nodes", 1, warnings),
    }


def _environment(desc: dict[str, Any], warnings: list[dict[str, Any]]) -> dict[str, str]:
    """A list of ``NAME=value``; slurmrestd takes a mapping too, with a warning, but not none at all."""
    value = desc.get("environment")
    if isinstance(value, dict):
        text = json.dumps(value, separators=(",", ":")).replace("/", "\\/")
        warnings.append(
            replies.warning(
                "Expected OpenAPI type=array (Slurm type=list) but got OpenAPI type=object "
                f"(Slurm type=dictionary): {text}",
                "#/job/environment/",
            )
        )
        return {str(k): str(v) for k, v in value.items()}
    if not isinstance(value, list) or not value:
        raise _submit_failed(2019, "I/O error writing script/environment to file")
    environment: dict[str, str] = {}
    for item in value:
        key, _, text = str(item).partition("=")
        if key:
            environment[key] = text
    return environment


def _working_directory(desc: dict[str, Any]) -> str:
    cwd = desc.get("current_working_directory")
    if not isinstance(cwd, str) or not cwd:
        raise _submit_failed(2063, "Job cannot be submitted without the current working directory specified.")
    return cwd


def _partition(desc: dict[str, Any], conf: SlurmConf) -> Partition:
    partition = conf.partition(str(desc.get("partition"))) if desc.get("partition") else conf.default_partition
    if partition is None:
        raise _submit_failed(2000, "Invalid partition name specified")
    return partition


def _gres(desc: dict[str, Any], partition: Partition, conf: SlurmConf, resources: _Resources) -> GresAllocation:
    """The GPUs (and other GRES) the job asks for, on its partition's node."""
    tasks = resources["tasks"] or resources["tasks_per_node"] * resources["min_nodes"] or 1
    try:
        return allocate(desc, partition, conf, tasks)
    except GresRefused as refused:
        raise _submit_failed(refused.number, refused.error) from None


def _array(desc: dict[str, Any], job_id: int) -> _Array:
    """An array starts as one record, the meta record, holding every task (see Scheduler._split_task)."""
    if not desc.get("array"):
        return {"array_job_id": 0, "array_max_tasks": 0, "pending_tasks": []}
    try:
        tasks, max_running = parse_array(str(desc["array"]))
    except ValueError:
        raise _submit_failed(2003, "Invalid job array specification") from None
    return {"array_job_id": job_id, "array_max_tasks": max_running, "pending_tasks": tasks}


def _kill_warning(desc: dict[str, Any], warnings: list[dict[str, Any]]) -> _KillWarning:
    """sbatch --signal=[B:]SIG[@TIME]. Unlike sbatch, slurmctld has no default TIME: without
    kill_warning_delay the signal is never sent."""
    value = desc.get("kill_warning_signal")
    try:
        warn_signal = parse_signal(value) if value not in (None, "") else None
    except ValueError:
        raise _parse_error(f"Unknown signal {value}") from None
    flags = desc.get("kill_warning_flags") or []
    flags = flags if isinstance(flags, list) else [flags]
    return {
        "warn_signal": warn_signal,
        "warn_delay": _int_field(desc, "kill_warning_delay", 0, warnings),
        "warn_batch_only": "BATCH_JOB" in [str(flag).upper() for flag in flags],
    }


def _files(desc: dict[str, Any], *, is_array: bool) -> _Files:
    """The standard streams, as patterns (see Job.expand); no stderr: it goes to the stdout file."""
    default_output = "slurm-%A_%a.out" if is_array else "slurm-%j.out"
    return {
        "stdout_pattern": str(desc.get("standard_output") or default_output),
        "stderr_pattern": str(desc.get("standard_error") or ""),
        "stdin": str(desc.get("standard_input") or "/dev/null"),
        "open_append": _open_append(desc.get("open_mode")),
    }
