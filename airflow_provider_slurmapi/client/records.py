"""Reading the values of Slurm's reply records: its number wrapper, its state lists, and the ID a
record stands for (a plain job, an array task or the array's meta record, a het component), as
the live queue (/slurm) and accounting (/slurmdb) each write it."""

from __future__ import annotations

from typing import Any


def number(value: object) -> int | None:
    """Read Slurm's ``{set, infinite, number}`` wrapper (or a plain int); unset gives None."""
    if isinstance(value, dict):
        return int(value["number"]) if value.get("set") and not value.get("infinite") else None
    if isinstance(value, bool):
        return None
    return int(value) if isinstance(value, (int, float)) else None


def state_list(value: object) -> list[str]:
    if isinstance(value, str):
        return [value] if value else []
    return [str(v) for v in value] if isinstance(value, (list, tuple)) else []


def live_record_id(job: dict[str, Any]) -> str:
    array_task = number(job.get("array_task_id"))
    array_job = number(job.get("array_job_id"))
    if array_task is not None and array_job:
        return f"{array_job}_{array_task}"
    if array_job and job.get("array_task_string"):
        # the array's meta record: the tasks not started yet, named like squeue does ("86_[2-3]")
        return f"{array_job}_[{job['array_task_string']}]"
    het_offset = number(job.get("het_job_offset"))
    het_job = number(job.get("het_job_id"))
    if het_job and het_offset is not None and het_job != job.get("job_id"):
        return f"{het_job}+{het_offset}"
    return str(job.get("job_id"))


def accounting_record_id(job: dict[str, Any]) -> str:
    array = job.get("array") or {}
    task = number(array.get("task_id")) if isinstance(array, dict) else None
    if task is not None and array.get("job_id"):
        return f"{array['job_id']}_{task}"
    if isinstance(array, dict) and array.get("job_id") and array.get("task"):
        # the meta record: accounting gives its pending tasks as a hex bitmap ("0xC" = tasks 2-3)
        return f"{array['job_id']}_[{_mask_to_ranges(str(array['task']), array)}]"
    het = job.get("het") or {}
    offset = number(het.get("job_offset")) if isinstance(het, dict) else None
    if offset is not None and het.get("job_id"):
        return f"{het['job_id']}+{offset}"
    return str(job.get("job_id"))


def _mask_to_ranges(mask: str, array: dict[str, Any]) -> str:
    """Accounting's task bitmap as the live queue's ``array_task_string`` ("0xE", limit 1 -> "1-3%1")."""
    try:
        bits = int(mask, 16)
    except ValueError:
        return mask
    runs: list[list[int]] = []
    for task in range(bits.bit_length()):
        if bits >> task & 1:
            if runs and runs[-1][1] == task - 1:
                runs[-1][1] = task
            else:
                runs.append([task, task])
    text = ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)
    limits = array.get("limits")
    limit = limits.get("max", {}).get("running", {}).get("tasks") if isinstance(limits, dict) else None
    return f"{text}%{limit}" if isinstance(limit, int) and limit > 0 else text
