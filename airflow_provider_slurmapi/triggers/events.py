"""The one shape of a ``SlurmJobTrigger`` event, written by the trigger and read by the task.

``{"status": "finished", "job": JobStatus.to_dict()}`` carries the final status (its ``job_id``
inside); ``{"status": "timeout" | "error", "job_id", "message"}`` ends the wait without one.
Cheap to import: the operators read events at run time, but are imported at every DAG parse.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from airflow.providers.common.compat.sdk import AirflowException

from airflow_provider_slurmapi.client.jobs import JobStatus


class EventStatus(StrEnum):
    FINISHED = "finished"  # the job ended: its final status is in "job"
    TIMEOUT = "timeout"  # the task's deadline passed first
    ERROR = "error"  # the job is lost, in a state never heard of, or the API refused the wait


def finished_event(status: JobStatus) -> dict[str, Any]:
    return {"status": EventStatus.FINISHED.value, "job": status.to_dict()}


def ended_event(status: EventStatus, job_id: str, message: str) -> dict[str, Any]:
    return {"status": status.value, "job_id": job_id, "message": message}


def status_from_event(event: dict[str, Any] | None) -> JobStatus:
    """The final status an event carries, or the task's failure with the trigger's reason."""
    event = event or {}
    if event.get("status") == EventStatus.FINISHED:
        return JobStatus.from_dict(event["job"])
    raise AirflowException(event.get("message") or f"Slurm job {event.get('job_id')}: no status received")
