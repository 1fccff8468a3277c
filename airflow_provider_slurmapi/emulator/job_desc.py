"""Read a ``job/submit`` body the way slurmrestd does: a new ``Job`` and its warnings, or a ``SubmitError``."""

from __future__ import annotations

import json
import os
from typing import Any

from airflow_provider_slurmapi.emulator import replies
from airflow_provider_slurmapi.emulator.job_model import Job, epoch_seconds, parse_array

DEFAULT_PARTITION = "debug"
PARTITIONS = frozenset({DEFAULT_PARTITION})

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


def new_job(body: Any, principal: str, job_id: int) -> tuple[Job, list[dict[str, Any]]]:
    """Job ``job_id`` of ``principal`` as ``body`` describes it, and slurmrestd's warnings about ``body``."""
    body = body if isinstance(body, dict) else {}
    script = body.get("script")
    if not isinstance(script, str) or not script:
        raise SubmitError(
            422, 9000, replies.PARSE_ERROR, 'Populated "script" field is required for job submission', "_job_post"
        )
    desc = body.get("job")
    if not isinstance(desc, dict):
        raise SubmitError(
            422,
            9000,
            replies.PARSE_ERROR,
            'Populated "job" field is required for job submission (the emulator does not support heterogeneous "jobs")',
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

    user = principal.split("@")[0] or "emulator"
    begin = _epoch_field(desc, "begin_time")
    now = epoch_seconds()
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
        db_hold=hold,
        requeue=desc.get("requeue") is not False,  # Slurm's default (JobRequeue=1): requeue
        open_append=_open_append(desc.get("open_mode")),
        submit_time=now,
        begin_time=begin if begin > now else 0,
        tasks=tasks,
        tasks_per_node=tasks_per_node,
        cpus_per_task=cpus_per_task,
        min_nodes=min_nodes,
        default_partition=not desc.get("partition"),
        # real slurmctld flags held jobs and arrays DEPENDENT until their first scheduling pass
        dependent=hold or bool(array_tasks),
        # an array starts as one record, the meta record, holding every task (see Scheduler._split_task)
        array_job_id=job_id if array_tasks else 0,
        array_max_tasks=max_running,
        pending_tasks=array_tasks,
    )
    return job, warnings
