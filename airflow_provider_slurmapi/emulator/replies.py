"""Build slurmrestd-shaped JSON replies by filling templates captured from a real Slurm 24.11.5.

Each template is one object from a real reply (``templates/``); we deep-copy it and overwrite only
the values that depend on the job, so every other key keeps the real name and value type.
"""

from __future__ import annotations

import copy
import json
import socket
from functools import cache
from importlib import resources
from typing import Any

from airflow_provider_slurmapi.emulator.gres_request import REQUEST_FIELDS
from airflow_provider_slurmapi.emulator.job_model import NO_VAL, TERM_EXIT, ExitInfo, Job, State, format_ranges

Reply = dict[str, Any]

# slurmrestd's text for error 9000, whatever it failed to parse (a bad job id, method or submission)
PARSE_ERROR = "Query empty or not RFC7320 compliant"


@cache
def _template(name: str) -> Any:
    text = resources.files("airflow_provider_slurmapi.emulator").joinpath("templates", name).read_text()
    return json.loads(text)


def template(name: str) -> Any:
    """A fresh copy of a template, safe to modify."""
    return copy.deepcopy(_template(name))


@cache
def job_desc_fields() -> frozenset[str]:
    """Property names of v0.0.42_job_desc_msg: anything else in ``job`` draws a warning."""
    return frozenset(_template("job_desc_fields.json"))


def number(value: float, *, is_set: bool = True, infinite: bool = False) -> dict[str, Any]:
    """Slurm's {set, infinite, number} wrapper."""
    return {"set": is_set, "infinite": infinite, "number": value}


def exit_code(info: ExitInfo) -> dict[str, Any]:
    return {
        "status": [info.status],
        "return_code": number(info.return_code, is_set=info.signal is None),
        "signal": {
            "id": number(info.signal or 0, is_set=info.signal is not None),
            "name": info.signal_name,
        },
    }


def meta(kind: str, version: str, cluster: str) -> dict[str, Any]:
    """``kind`` is "slurmctld" (/slurm paths) or "slurmdbd" (/slurmdb paths)."""
    result = template(f"meta_{kind}.json")
    result["plugin"]["data_parser"] = f"data_parser/{version}"
    result["slurm"]["cluster"] = cluster
    return result


def envelope(
    kind: str,
    version: str,
    cluster: str,
    fields: dict[str, Any],
    errors: list[dict[str, Any]] | None = None,
    warnings: list[dict[str, Any]] | None = None,
) -> Reply:
    reply = dict(fields)
    reply["meta"] = meta(kind, version, cluster)
    reply["errors"] = errors or []
    reply["warnings"] = warnings or []
    return reply


def error(number_: int, error_: str, description: str, source: str) -> dict[str, Any]:
    return {"description": description, "error_number": number_, "error": error_, "source": source}


def warning(description: str, source: str) -> dict[str, Any]:
    return {"description": description, "source": source}


def ping() -> dict[str, Any]:
    entry = template("ping.json")
    entry["hostname"] = socket.gethostname()
    return entry


def delete_status(step_id: str, job_id: int | None, code: int, message: str) -> dict[str, Any]:
    entry = template("delete_status.json")
    entry["error"] = {"string": message, "code": code, "message": message}
    entry["step_id"] = step_id
    entry["job_id"] = number(job_id or 0, is_set=job_id is not None)
    return entry


def _time_limit(job: Job) -> dict[str, Any]:
    if job.time_limit is None:
        return number(0, is_set=True, infinite=True)
    return number(job.time_limit)


def _planned_end(job: Job, start: int) -> int:
    return start + job.time_limit * 60 if job.time_limit is not None else 0


def state_list(job: Job) -> list[str]:
    return [job.state.value, "COMPLETING"] if job.completing else [job.state.value]


def job_flags(job: Job) -> list[str]:
    """The job's ``flags``, in Slurm's order (the order of v0.0.42_job_flags in its OpenAPI spec)."""
    flags = {
        "SKIP_TRES_STRING_ACCOUNTING": job.skip_tres,
        "EXACT_TASK_COUNT_REQUESTED": job.tasks is not None,
        "JOB_WAS_RUNNING": job.state is State.RUNNING,
        "USING_DEFAULT_ACCOUNT": True,
        "USING_DEFAULT_PARTITION": job.default_partition,
        "USING_DEFAULT_QOS": True,
        "USING_DEFAULT_WCKEY": True,
        "DEPENDENT": job.dependent,
        "PARTITION_ASSIGNED": job.default_partition,
    }
    return [name for name, present in flags.items() if present]


def slurm_job(job: Job, cluster: str) -> dict[str, Any]:
    """The job as ``GET /slurm/V/job/{id}`` shows it (template: a RUNNING job)."""
    out = template("slurm_job.json")
    _fill_submission(out, job, cluster)
    _fill_hold(out, job)
    out["exit_code"] = exit_code(job.exit)
    out["derived_exit_code"] = exit_code(job.derived_exit)
    out["flags"] = job_flags(job)
    _fill_size(out, job)
    # array fields: the array job id is set (0 for plain jobs), the task id only for task records
    out["array_job_id"] = number(job.array_job_id)
    out["array_task_id"] = _array_task_id(job)
    out["array_max_tasks"] = number(job.array_max_tasks)
    out["array_task_string"] = job.array_task_string
    _fill_times(out, job)
    _fill_allocation(out, job)
    return out


def _array_task_id(job: Job) -> dict[str, Any]:
    return number(job.array_task_id or 0, is_set=job.array_task_id is not None)


def _alloc_tres(job: Job) -> str:
    """The TRES of an allocation on the job's node: its CPUs and the GPUs accounting tracks."""
    return f"cpu={job.cpus},node=1,billing={job.cpus}{_gres_tres(job)}"


def _gres_tres(job: Job) -> str:
    return "".join(f",{tres.key}={count}" for tres, count in job.gres.tres)


def _gres_detail(job: Job) -> list[str]:
    """What it got of each GRES, with the device indices: ``gpu:h100:2(IDX:0-1)``."""
    return [f"{gres}(IDX:{format_ranges(list(range(gres.count)))})" for gres in job.gres.gres]


def _set_node(out: dict[str, Any], job: Job) -> None:
    """The job's node where a template names the captured one."""
    out["batch_host"] = out["nodes"] = job.node
    if out.get("job_resources"):
        out["job_resources"]["nodes"]["list"] = job.node
        out["job_resources"]["nodes"]["allocation"][0]["name"] = job.node


def _fill_submission(out: dict[str, Any], job: Job, cluster: str) -> None:
    """What was submitted, by whom, and where the job stands."""
    out["job_id"] = job.job_id
    out["name"] = job.name
    out["cluster"] = cluster
    out["user_name"] = job.user_name
    out["user_id"] = job.user_id
    out["group_id"] = job.group_id
    out["group_name"] = job.group_name
    out["mail_user"] = job.user_name
    out["partition"] = job.partition
    out["comment"] = job.comment
    out["job_state"] = state_list(job)
    out["state_reason"] = job.state_reason
    out["state_description"] = job.state_description
    out["current_working_directory"] = job.cwd
    out["standard_output"] = job.expand(job.stdout_pattern)
    out["standard_error"] = job.expand(job.stderr_pattern or job.stdout_pattern)
    out["standard_input"] = job.stdin
    out["time_limit"] = _time_limit(job)
    for key in REQUEST_FIELDS:
        out[key] = job.gres.request(key)


def _fill_hold(out: dict[str, Any], job: Job) -> None:
    """Hold, priority and requeue."""
    # a held job stays held (priority 0) once cancelled; jobs held at submission also read
    # max_nodes 1 in 24.11, those held later (scontrol hold, requeuehold) read 0
    held_at_submit = job.hold and job.hold_reason == "JobHeldUser" and not job.restart_cnt
    out["hold"] = job.hold
    out["priority"] = number(0 if job.hold else 1)
    out["max_nodes"] = number(1 if held_at_submit else 0)
    out["requeue"] = job.requeue
    out["restart_cnt"] = job.restart_cnt
    out["failed_node"] = job.failed_node


def _fill_size(out: dict[str, Any], job: Job) -> None:
    """Tasks and CPUs, as requested."""
    cpus = job.cpus
    if job.task_count is None and job.terminal and not job.ran:
        out["tasks"] = number(0, is_set=False)  # none requested and never ran (cancelled pending)
    else:
        out["tasks"] = number(job.task_count or 1)
    out["tasks_per_node"] = number(job.tasks_per_node)
    out["cpus_per_task"] = number(job.cpus_per_task)
    out["cpus"] = number(cpus)
    out["minimum_cpus_per_node"] = number(max(job.tasks_per_node, 1) * job.cpus_per_task)
    out["tres_req_str"] = f"cpu={cpus},mem=21694M,node=1,billing={cpus}{_gres_tres(job)}"


def _fill_times(out: dict[str, Any], job: Job) -> None:
    """Epoch seconds in {set, infinite, number}; see real-slurm.md section 6."""
    ran = job.ran
    eligible = job.begin_time or job.submit_time
    requeued = job.restart_cnt > 0  # a requeued job has its begin time (and tres) whether held or not
    out["submit_time"] = number(job.submit_time)
    out["eligible_time"] = number(0 if job.hold and not ran and not requeued else eligible)
    out["accrue_time"] = number(eligible if ran or requeued or not (job.hold or job.begin_time) else 0)
    out["last_sched_evaluation"] = number(job.start_time or job.submit_time)
    if job.state is State.PENDING:
        planned = job.begin_time if (job.begin_time and (requeued or not job.hold)) else 0
        out["start_time"] = number(planned)
        out["end_time"] = number(_planned_end(job, planned) if planned else 0)
    elif job.state is State.RUNNING:
        out["start_time"] = number(job.start_time)
        out["end_time"] = number(_planned_end(job, job.start_time))
    else:
        out["start_time"] = number(job.start_time or job.end_time)
        out["end_time"] = number(job.end_time)


def _fill_allocation(out: dict[str, Any], job: Job) -> None:
    """The node and CPUs the job got: none until it ran."""
    cpus = job.cpus
    if job.ran:
        resources_ = out["job_resources"]
        resources_["cpus"] = cpus
        resources_["nodes"]["allocation"][0]["cpus"]["count"] = cpus
        _set_node(out, job)
        out["gres_detail"] = _gres_detail(job)
        out["billable_tres"] = number(float(cpus))
        out["tres_alloc_str"] = _alloc_tres(job)
    else:
        out["job_resources"] = None
        out["batch_host"] = ""
        out["nodes"] = ""
        out["billable_tres"] = number(float(cpus), is_set=job.restart_cnt > 0)  # set once requeued
        # a node failure keeps the last allocation's tres string (SKIP_TRES_STRING_ACCOUNTING)
        out["tres_alloc_str"] = _alloc_tres(job) if job.skip_tres else ""


def _unset_exit() -> dict[str, Any]:
    """An exit code accounting never got (a job whose node failed): status PENDING, nothing set."""
    return {
        "status": ["PENDING"],
        "return_code": number(0, is_set=False),
        "signal": {"id": number(0, is_set=False), "name": ""},
    }


def _step(
    job: Job, step_id: str, name: str, state: State, info: ExitInfo, start: int, end: int, cpus: int
) -> dict[str, Any]:
    out = template("slurmdb_step.json")
    out["step"] = {"id": f"{job.job_id}.{step_id}", "name": name}
    out["state"] = [state.value]
    out["exit_code"] = exit_code(info)
    out["time"]["start"] = number(start)
    out["time"]["end"] = number(end)
    out["time"]["elapsed"] = max(0, (end or start) - start)
    out["kill_request_user"] = job.kill_request_user
    out["nodes"] = {"count": 1, "range": job.node, "list": [job.node]}
    for entry in out["tres"]["allocated"]:
        if entry["type"] == "cpu":
            entry["count"] = cpus
    # a step gets all of the job's GRES unless it asks otherwise (srun --gres)
    out["tres"]["allocated"] += _gres_records(job)
    return out


def _gres_records(job: Job) -> list[dict[str, Any]]:
    """The job's tracked GRES as accounting lists TRES (after the static ones, by id)."""
    return [tres.record(count) for tres, count in job.gres.tres]


def _batch_step(job: Job, cpus: int) -> dict[str, Any]:
    if job.state is State.RUNNING:
        state, info, end = State.RUNNING, ExitInfo(), 0
    elif job.state is State.NODE_FAIL:
        # real accounting: CANCELLED with an exit code never filled in (status PENDING)
        out = _step(job, "batch", "batch", State.CANCELLED, ExitInfo(), job.start_time, job.end_time, cpus)
        out["exit_code"] = _unset_exit()
        return out
    elif job.state in (State.REQUEUED, State.PREEMPTED) or job.stop_reason is not None:
        # real accounting: the batch step of a job killed for a requeue, cancelled or timed out
        # reads CANCELLED, SIGNALED/TERM
        state, info, end = State.CANCELLED, TERM_EXIT, job.end_time
    elif job.exit.signal is not None:
        state, info, end = State.CANCELLED, job.exit, job.end_time
    else:
        state = State.COMPLETED if job.exit.return_code == 0 else State.FAILED
        info, end = job.exit, job.end_time
    return _step(job, "batch", "batch", state, info, job.start_time, end, cpus)


def slurmdb_job(job: Job, cluster: str, now: int) -> dict[str, Any]:
    """The job as ``GET /slurmdb/V/job/{id}`` shows it (template: a COMPLETED job)."""
    out = template("slurmdb_job.json")
    _fill_db_submission(out, job, cluster)
    # the hold of submission or requeuehold, even once released or cancelled
    out["hold"] = job.db_hold
    out["priority"] = number(0 if job.db_hold else 1)
    out["restart_cnt"] = job.restart_cnt
    out["failed_node"] = job.failed_node
    out["kill_request_user"] = job.kill_request_user
    _fill_db_state(out, job)
    _fill_db_array(out, job)
    _fill_db_times(out["time"], job, now)
    _fill_db_allocation(out, job)
    return out


def _fill_db_submission(out: dict[str, Any], job: Job, cluster: str) -> None:
    """What was submitted and by whom; accounting keeps the file names both as given and expanded."""
    out["job_id"] = job.job_id
    out["name"] = job.name
    out["cluster"] = cluster
    out["user"] = job.user_name
    out["group"] = job.group_name
    out["association"]["cluster"] = cluster
    out["association"]["user"] = job.user_name
    out["partition"] = job.partition
    out["comment"] = {"administrator": "", "job": job.comment, "system": ""}
    out["working_directory"] = job.cwd
    out["stdout"] = job.stdout_pattern
    out["stdout_expanded"] = job.expand(job.stdout_pattern)
    out["stderr"] = job.stderr_pattern
    out["stderr_expanded"] = job.expand(job.stderr_pattern)
    out["stdin"] = ""


def _fill_db_state(out: dict[str, Any], job: Job) -> None:
    current = ["PENDING", "REQUEUED"] if job.state is State.REQUEUED else [job.state.value]
    out["state"] = {"current": current, "reason": job.db_reason}
    if job.state is State.NODE_FAIL:  # accounting: ERROR/1, whatever the live record says
        out["exit_code"] = exit_code(ExitInfo(return_code=1))
        out["derived_exit_code"] = _unset_exit()
    else:
        # /slurmdb reports SUCCESS/0 for cancelled, timed-out, preempted and requeued runs; the
        # signal is only in the steps
        out["exit_code"] = exit_code(ExitInfo() if job.stop_reason is not None else job.exit)
        out["derived_exit_code"] = exit_code(job.derived_exit)


def _fill_db_array(out: dict[str, Any], job: Job) -> None:
    array = out["array"]
    array["job_id"] = job.array_job_id
    # accounting keeps the %N limit on the array's own record only, not on split-off tasks
    array["limits"]["max"]["running"]["tasks"] = job.array_max_tasks if job.job_id == job.array_job_id else 0
    array["task_id"] = _array_task_id(job)
    array["task"] = job.array_task_mask


def _fill_db_times(t: dict[str, Any], job: Job, now: int) -> None:
    """Accounting's times: plain epoch seconds; ``planned`` is how long the job waited to start."""
    # a job held since submission never became eligible: 0, and nothing planned
    never_eligible = job.hold and not job.ran and not job.restart_cnt
    eligible = 0 if never_eligible else job.begin_time or job.submit_time
    t["submission"] = job.submit_time
    t["eligible"] = eligible
    t["limit"] = _time_limit(job)
    t["end"] = job.end_time if job.terminal else 0
    if job.ran:
        t["start"] = job.start_time
        t["elapsed"] = max(0, (job.end_time if job.terminal else now) - job.start_time)
        t["planned"] = number(max(0, job.start_time - eligible))
    else:
        t["start"] = NO_VAL if job.terminal else 0  # NO_VAL: it never started
        t["elapsed"] = 0
        t["planned"] = number(max(0, (job.end_time or now) - eligible) if eligible else 0)


def db_started(record: dict[str, Any]) -> bool:
    """Whether an accounting record's job ever started (its start is neither 0 nor NO_VAL)."""
    return record["time"]["start"] not in (0, NO_VAL)


def truncate_usage(record: dict[str, Any], start: int, end: int) -> None:
    """Cut an accounting record's run to [start, end], as slurmdbd does unless told not to.

    The start moves up to ``start`` and the end (none yet: a running job) down to ``end``; a job
    that never started starts at its end. ``elapsed`` and ``planned`` follow the new start.
    """
    t = record["time"]
    started = db_started(record)
    if not t["end"] or t["end"] > end:
        t["end"] = end
    t["start"] = max(t["start"], start) if started else t["end"]
    t["elapsed"] = max(0, t["end"] - t["start"])
    if started and t["eligible"]:
        t["planned"] = number(max(0, t["start"] - t["eligible"]))


def _fill_db_allocation(out: dict[str, Any], job: Job) -> None:
    """The CPUs asked for and, once it ran, the allocation and the steps; a job that never ran has neither."""
    cpus = job.cpus
    out["required"]["CPUs"] = cpus
    for entry in out["tres"]["allocated"] + out["tres"]["requested"]:
        if entry["type"] in ("cpu", "billing"):
            entry["count"] = cpus
    out["tres"]["requested"] += _gres_records(job)
    out["tres"]["allocated"] += _gres_records(job)
    if not job.ran:
        out["allocation_nodes"] = 0
        out["nodes"] = "None assigned"
        out["flags"] = ["START_RECEIVED"]
        out["tres"]["allocated"] = []
        out["steps"] = []
        return
    out["nodes"] = job.node
    steps = [_batch_step(job, cpus)]
    for step in job.steps:
        steps.append(_step(job, step.step_id, step.name, step.state, step.exit, step.start, step.end, cpus))
    out["steps"] = steps
