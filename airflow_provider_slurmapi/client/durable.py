"""Submitting a job once: every job carries a key in its ``comment``, which Slurm keeps in
accounting, so an attempt can find the job an earlier attempt (or a lost reply) left behind.

The key is derived from what names one task run (DAG, task, run, map index), never from the try
number, so every try of the same task run looks for the same job.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from airflow_provider_slurmapi.client.jobs import JobStatus

KEY_PREFIX = "airflow-key="


def submission_key(dag_id: str, task_id: str, run_id: str, map_index: int | None = -1) -> str:
    """The key of one task run, e.g. ``airflow-key=3f1c...`` (24 hex digits)."""
    text = "\0".join((dag_id, task_id, run_id, str(-1 if map_index is None else map_index)))
    return KEY_PREFIX + hashlib.sha256(text.encode()).hexdigest()[:24]


def with_key(job: dict[str, Any], key: str) -> dict[str, Any]:
    """The job description with ``key`` added to its comment (a comment of the user's is kept)."""
    comment = job.get("comment")
    if comment is not None and not isinstance(comment, str):
        return job  # left for the schema check, which names the field and the allowed type
    if comment and key in comment.split():
        return job
    return {**job, "comment": f"{comment} {key}" if comment else key}


def carries_key(status: JobStatus, key: str) -> bool:
    return key in status.comment.split()


def base_job_id(job_id: str) -> str:
    """The ID the submit returned, for a record of an array task (``86_2``) or a het component."""
    for separator in ("_", "+"):
        job_id = job_id.partition(separator)[0]
    return job_id


@dataclass(frozen=True)
class Submission:
    """What ``submit_once`` did: ``submitted`` a new job, ``reattached`` to one still active, or
    ``adopted`` one that already completed successfully (then ``status`` is its final status)."""

    job_id: str
    outcome: str
    status: JobStatus | None = None
