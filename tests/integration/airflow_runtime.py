"""What Airflow hands the operators and does with a trigger, as the integration tests stand in for
it in one process: a task instance and its context, and a triggerer's wait for the first event."""

from __future__ import annotations

import asyncio
import uuid
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow_provider_slurmapi.triggers.job import SlurmJobTrigger


class RecordingTaskInstance:
    """The task instance attributes the operators read; each one is a new task run (own run_id)."""

    def __init__(self, try_number: int = 1, retries: int = 0, run_id: str | None = None) -> None:
        self.xcom: dict[str, Any] = {}
        self.dag_id, self.task_id, self.map_index = "operator_tests", "t", -1
        self.run_id = run_id or f"manual__{uuid.uuid4()}"
        self.try_number, self.max_tries = try_number, retries
        self.start_date = None

    def xcom_push(self, key: str, value: Any) -> None:
        self.xcom[key] = value


def context(**ti: Any) -> dict[str, Any]:
    return {"ti": RecordingTaskInstance(**ti)}


async def first_event(trigger: SlurmJobTrigger, timeout: float = 60) -> dict[str, Any]:
    """The payload of the trigger's first event (within ``timeout`` seconds); then the trigger is closed."""
    events = trigger.run()
    try:
        return (await asyncio.wait_for(events.__anext__(), timeout)).payload
    finally:
        await events.aclose()
