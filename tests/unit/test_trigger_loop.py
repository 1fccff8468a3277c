"""The trigger's loop with a stand-in reader: what a read's error, the deadline and the end mean."""

from __future__ import annotations

import asyncio
import time

import pytest

from airflow_provider_slurmapi.client.errors import JobNotFoundError
from airflow_provider_slurmapi.client.jobs import JobStatus
from airflow_provider_slurmapi.triggers.job import SlurmJobTrigger


class ScriptedReader:
    """Answers each read with the next item: a status, or an exception to raise."""

    def __init__(self, *answers: JobStatus | BaseException, pause: float = 0.0) -> None:
        self.answers = list(answers)
        self.pause = pause

    async def next_status(self, job_id: str) -> JobStatus:
        await asyncio.sleep(self.pause)
        answer = self.answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer


def trigger(**kwargs: object) -> tuple[SlurmJobTrigger, list[str]]:
    cancels: list[str] = []
    made = SlurmJobTrigger("7", cancel_on_kill=True, **kwargs)

    async def cancel() -> bool:
        cancels.append(made.job_id)
        return True

    made._cancel_job = cancel
    return made, cancels


async def test_a_read_that_times_out_is_not_the_deadline() -> None:
    made, cancels = trigger()
    reader = ScriptedReader(TimeoutError("read timed out"), JobStatus("7", "RUNNING"), JobStatus("7", "COMPLETED"))
    event = await made._poll_to_the_end(reader)
    assert event.payload == {"status": "finished", "job": JobStatus("7", "COMPLETED").to_dict()}
    assert cancels == []


async def test_the_deadline_cancels_the_job_once() -> None:
    made, cancels = trigger(deadline=time.time() + 0.3)
    reader = ScriptedReader(*[JobStatus("7", "RUNNING")] * 50, pause=0.05)
    event = await made._poll_to_the_end(reader)
    assert event.payload == {
        "status": "timeout",
        "job_id": "7",
        "message": "Slurm job 7 did not finish before the task's deadline; it was cancelled",
    }
    assert cancels == ["7"]


async def test_a_job_found_nowhere_is_lost_after_the_grace() -> None:
    made, cancels = trigger(lost_grace=0.2)
    reader = ScriptedReader(*[JobNotFoundError("7")] * 50, pause=0.05)
    event = await made._poll_to_the_end(reader)
    assert (event.payload["status"], event.payload["job_id"]) == ("error", "7")
    assert event.payload["message"].startswith("Slurm job 7 is lost")
    assert cancels == []


@pytest.mark.parametrize("state", ["FAILED", "CANCELLED", "TIMEOUT"])
async def test_any_end_is_one_finished_event_naming_the_job_once(state: str) -> None:
    made, _ = trigger()
    event = await made._poll_to_the_end(ScriptedReader(JobStatus("7", state)))
    assert set(event.payload) == {"status", "job"} and event.payload["job"]["job_id"] == "7"
