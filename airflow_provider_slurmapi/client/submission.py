"""Submitting a job once: every job carries a key in its ``comment``, which Slurm keeps in
accounting, so an attempt can find the job an earlier attempt (or a lost reply) left behind.

The key is derived from what names one task run (DAG, task, run, map index), never from the try
number, so every try of the same task run looks for the same job.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from enum import StrEnum
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


class Outcome(StrEnum):
    """What ``submit_once`` did with the job of a key."""

    SUBMITTED = "submitted"  # a new job
    REATTACHED = "reattached"  # an earlier attempt's job, still pending or running
    ADOPTED = "adopted"  # an earlier attempt's job that already completed successfully


@dataclass(frozen=True)
class Submission:
    """What ``submit_once`` did; ``status`` is the job's status when it was found, not submitted."""

    job_id: str
    outcome: Outcome
    status: JobStatus | None = None
