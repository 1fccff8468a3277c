"""Airflow 3.3's own path for a trigger that its triggerer no longer owns, without a deployment.

A triggerer that stalls past ``triggerer_health_check_threshold`` loses its triggers to another
triggerer. When it resumes, ``TriggerRunnerSupervisor.update_triggers`` finds them missing from the
IDs it is asked to run and queues them for cancelling; ``TriggerRunner.cancel_triggers`` cancels
them with the user-action message, and ``run_trigger`` calls ``on_kill``, exactly as for a user's
kill; it cancels them again at every loop until they have ended. Only the task instance's state tells the two apart: still DEFERRED after a reassignment, no
longer DEFERRED after a user's kill. Here Airflow's real supervisor and runner code runs our
trigger against the emulator; only the answer to the state query stands in for the API server.
"""

from __future__ import annotations

import asyncio
import logging
import time
import types
from collections.abc import Iterator

import pytest

from airflow_provider_slurmapi.emulator import Emulator
from airflow_provider_slurmapi.hooks.slurm_job_api import SlurmJobApiHook
from airflow_provider_slurmapi.triggers import job as trigger_module
from airflow_provider_slurmapi.triggers.job import SlurmJobTrigger
from tests.integration.test_trigger import submit

airflow_3_3 = pytest.importorskip("airflow_provider_slurmapi.version_compat")
if not airflow_3_3.AIRFLOW_V_3_3_PLUS:
    pytest.skip("Airflow < 3.3 calls no on_kill: test_trigger.py covers its cancellation path", allow_module_level=True)

from airflow.jobs.triggerer_job_runner import TriggerRunner, TriggerRunnerSupervisor  # noqa: E402
from airflow.sdk.execution_time import task_runner  # noqa: E402
from airflow.sdk.execution_time.comms import GetTaskStates, TaskStatesResult  # noqa: E402

TRIGGER_ID = 7
RUN_ID = "manual__2026-12-01T00:00:00+00:00"


class StateAnswers:
    """The supervisor's end of ``GetTaskStates``: the task's state as the API server would give it."""

    def __init__(self, state: str | None, map_index: int) -> None:
        self.state, self.map_index = state, map_index
        self.asked: list[GetTaskStates] = []

    def send(self, msg: object) -> TaskStatesResult | None:
        if not isinstance(msg, GetTaskStates):
            return None  # e.g. the secrets masker's MaskSecret, which expects no answer
        self.asked.append(msg)
        time.sleep(1.5)  # a busy API server: the answer comes after the triggerer's next loop
        if self.state is None:
            raise ConnectionError("the API server did not answer")
        key = "train" if self.map_index < 0 else f"train_{self.map_index}"  # how the API names mapped tasks
        return TaskStatesResult(task_states={RUN_ID: {key: self.state}})


@pytest.fixture
def task_states(monkeypatch: pytest.MonkeyPatch) -> Iterator[type[StateAnswers]]:
    yield StateAnswers
    monkeypatch.setattr(task_runner, "SUPERVISOR_COMMS", None, raising=False)


async def reassign_away(trigger: SlurmJobTrigger) -> None:
    """Run the trigger in Airflow's runner until it polls, then cancel it the way a resumed triggerer does."""
    runner = TriggerRunner()
    task = asyncio.create_task(runner.run_trigger(TRIGGER_ID, trigger))
    runner.triggers[TRIGGER_ID] = {"task": task, "is_watcher": False, "name": "slurm", "events": 0}
    await asyncio.sleep(1.5)  # the trigger is watching the job
    # The supervisor is asked to run no trigger any more: another triggerer adopted this one.
    supervisor = types.SimpleNamespace(
        running_triggers={TRIGGER_ID}, events=[], cancelling_triggers=set(), failed_triggers=[], creating_triggers=[]
    )
    TriggerRunnerSupervisor.update_triggers(supervisor, set())
    assert supervisor.cancelling_triggers == {TRIGGER_ID}
    # Each loop the supervisor hands the runner the triggers still to cancel, until they have ended.
    while not task.done():
        runner.to_cancel.extend(supervisor.cancelling_triggers)
        await runner.cancel_triggers()
        await asyncio.wait([task], timeout=1)
    with pytest.raises(asyncio.CancelledError):
        await task
    while trigger_module._STOPPING:  # the state read and the cancel outlive the trigger's task
        await asyncio.sleep(0.1)


@pytest.mark.parametrize("map_index", [-1, 3])
@pytest.mark.parametrize(
    ("task_state", "cancelled"),
    [
        ("deferred", False),  # reassigned to another triggerer, which still watches the job
        (None, False),  # the state cannot be read: never cancel on a guess
        ("failed", True),  # a user marked the task failed
        ("success", True),  # ... or successful
        ("restarting", True),  # ... or cleared it
    ],
)
async def test_on_kill_cancels_only_a_job_whose_task_left_deferred(
    slurm_connection: str,
    emulator: Emulator,
    task_states: type[StateAnswers],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
    task_state: str | None,
    cancelled: bool,
    map_index: int,
) -> None:
    job_id = submit(slurm_connection, "sleep 120")
    answers = task_states(task_state, map_index)
    monkeypatch.setattr(task_runner, "SUPERVISOR_COMMS", answers, raising=False)
    trigger = SlurmJobTrigger(
        job_id, poll_interval=0.3, cancel_on_kill=True, hook_kwargs={"slurm_conn_id": slurm_connection}
    )
    trigger.task_instance = types.SimpleNamespace(
        id="0195", dag_id="dag", task_id="train", run_id=RUN_ID, try_number=1, map_index=map_index, context_carrier=None
    )
    since = emulator.requests.calls()[-1].at
    with caplog.at_level(logging.INFO):
        await reassign_away(trigger)

    assert [(m.task_ids, m.run_ids, m.map_index) for m in answers.asked] == [(["train"], [RUN_ID], map_index)]
    deletes = [call for call in emulator.requests.calls("DELETE", since=since) if call.path.endswith(f"/job/{job_id}")]
    hook = SlurmJobApiHook(slurm_connection)
    log = caplog.text + capsys.readouterr().out  # the trigger logs through structlog on Airflow 3
    if cancelled:
        assert len(deletes) == 1
        assert hook.wait_for_job(job_id, poll_interval=0.3, timeout=30).state == "CANCELLED"
        assert f"Task killed (now {task_state}): cancelled Slurm job {job_id}" in log
    else:
        assert deletes == []
        assert hook.get_job(job_id).state == "RUNNING"
        expected = "is still deferred" if task_state else "Cannot read the state of task train"
        assert expected in log, log
        hook.cancel_job(job_id)
