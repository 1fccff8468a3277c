"""Live output, end to end in one process: the job (run by the emulator) publishes its output in
closed pieces under the output mount, which the emulator uploads to the Cloud Storage stand-in as
FUSE does (a closed file appears, an open one does not), and the waiting task logs each new line."""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from airflow.providers.common.compat.sdk import TaskDeferred

from airflow_provider_slurmapi.client.errors import InvalidRequestError
from airflow_provider_slurmapi.emulator import Emulator, EmulatorConfig
from airflow_provider_slurmapi.hooks.live_reader import LiveOutputReader
from airflow_provider_slurmapi.operators.job import SlurmSubmitJobOperator
from airflow_provider_slurmapi.triggers import live_output as live_triggers
from airflow_provider_slurmapi.triggers.job import SlurmJobTrigger
from tests.conftest import connection_json
from tests.integration.airflow_runtime import context, first_event
from tests.jobs import JOB
from tests.storage import BUCKET
from tests.unit.task_fakes import FakeVariables

PREFIX = f"gs://{BUCKET}/live-runs"
# prints a line a second for 6 s, stderr too, and a last line without its newline
SCRIPT = """#!/bin/bash
for i in 1 2 3 4 5 6; do echo "step $i"; echo "warning $i" >&2; sleep 1; done
printf 'the end'
"""
STDOUT = [f"step {i}" for i in range(1, 7)] + ["the end"]
STDERR = [f"warning {i}" for i in range(1, 7)]


@pytest.fixture(scope="module")
def mounted(tmp_path_factory: pytest.TempPathFactory, storage_host: str) -> Iterator[tuple[Emulator, Path]]:
    work = tmp_path_factory.mktemp("live")
    mount = work / "cluster-mount"
    mount.mkdir()
    config = EmulatorConfig(
        min_job_age=1.0, key_file=work / "key.json", state_dir=work / "jobs", output_mount=f"{mount}={PREFIX}",
        storage_host=storage_host,
    )  # fmt: skip
    with Emulator(config) as emu:
        yield emu, mount


@pytest.fixture
def gs_connection(mounted: tuple[Emulator, Path], storage_host: str, monkeypatch: pytest.MonkeyPatch) -> Path:
    emu, mount = mounted
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", storage_host)
    extra = {"output_uri": PREFIX, "output_cluster_path": str(mount)}
    monkeypatch.setenv("AIRFLOW_CONN_SLURM_JOB_API_DEFAULT", connection_json(emu, **extra))
    return mount


def operator(**kwargs: Any) -> SlurmSubmitJobOperator:
    return SlurmSubmitJobOperator(
        task_id="t", job=JOB, poll_interval=0.5, output_wait=5, **{"script": SCRIPT, "deferrable": False, **kwargs}
    )


@pytest.fixture
def variables(monkeypatch: pytest.MonkeyPatch) -> FakeVariables:
    """Airflow's Variables, where the triggers keep their position (no metadata database here)."""
    fake = FakeVariables()
    monkeypatch.setattr(live_triggers, "_variables", lambda: fake)
    return fake


@pytest.fixture
def collected(monkeypatch: pytest.MonkeyPatch) -> list[tuple[float, list[str]]]:
    """When each read of published pieces happened, and the lines it gave the task log."""
    seen: list[tuple[float, list[str]]] = []
    collect = LiveOutputReader.collect

    def spied(self: LiveOutputReader, names: list[str]) -> Any:
        lines = collect(self, names)
        seen.append((time.time(), [text for _, text in lines]))
        return lines

    monkeypatch.setattr(LiveOutputReader, "collect", spied)
    return seen


def deferred_trigger(task: SlurmSubmitJobOperator, ctx: dict[str, Any]) -> SlurmJobTrigger:
    """The trigger the task deferred to, as a triggerer makes it again from its serialized form."""
    with pytest.raises(TaskDeferred) as deferred:
        task.execute(ctx)
    _, kwargs = deferred.value.trigger.serialize()
    return SlurmJobTrigger(**json.loads(json.dumps(kwargs)))


def lines_of(stream: str, job_id: str, text: str) -> list[str]:
    return re.findall(rf"\[job {job_id} {stream}\] ((?:step|warning) \d|the end)", text)


def shown_live(stream: str, job_id: str, text: str) -> list[str]:
    """The lines of a stream the log showed while the job ran: the first ones, in order, each once.
    The last piece may never be published (the job's end takes down its publisher, as Slurm's
    process tracking does): the end-of-job excerpt shows what it held."""
    lines = lines_of(stream, job_id, text)
    assert lines and lines == (STDOUT if stream == "stdout" else STDERR)[: len(lines)], text
    return lines


def test_a_waiting_task_logs_the_jobs_lines_while_it_runs_each_once_and_in_order(
    gs_connection: Path, task_log: Any
) -> None:
    task = operator(live_output=True, live_output_period=2)
    polls: list[tuple[str | None, object]] = []  # each poll's state, and the lines it showed
    wait = task.hook.wait_for_job

    def watched(*args: Any, on_poll: Any = None, **kwargs: Any) -> Any:
        return wait(*args, on_poll=lambda status: polls.append((status and status.state, on_poll(status))), **kwargs)

    task.hook.wait_for_job = watched  # type: ignore[method-assign]
    ctx = context()
    task.execute(ctx)
    log = task_log()
    job_id = ctx["ti"].xcom["job_id"]
    # each line once, in order: shown while the job ran, then the end-of-job excerpt shows the rest
    assert lines_of("stdout", job_id, log) == STDOUT, log
    assert lines_of("stderr", job_id, log) == STDERR
    # lines reached the log while the job was still running
    assert any(state == "RUNNING" and shown for state, shown in polls), polls
    # the job's own files are what it printed
    [out] = gs_connection.glob(f"**/{job_id}.out")
    assert out.read_text() == "".join(f"step {i}\n" for i in range(1, 7)) + "the end"


def test_live_output_without_an_output_location_is_refused_before_anything_is_sent(
    mounted: tuple[Emulator, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    emu, _ = mounted
    monkeypatch.setenv("AIRFLOW_CONN_SLURM_JOB_API_DEFAULT", connection_json(emu))
    before = len(emu.requests.calls("POST"))
    with pytest.raises(InvalidRequestError) as refused:
        operator(live_output=True).execute(context())
    assert refused.value.field == "live_output" and len(emu.requests.calls("POST")) == before


@pytest.mark.parametrize("bad", [{"live_output_period": 0}, {"live_output_max_lines": -1}, {"live_output": "on"}])
def test_bad_live_output_arguments_are_refused_when_the_dag_is_parsed(bad: dict[str, Any]) -> None:
    with pytest.raises(InvalidRequestError, match=next(iter(bad))):
        operator(**bad)


def test_a_deferred_task_logs_the_lines_from_the_trigger_while_the_job_runs(
    gs_connection: Path, task_log: Any, variables: FakeVariables, collected: list[tuple[float, list[str]]]
) -> None:
    task = operator(live_output=True, live_output_period=2, deferrable=True)
    ctx = context()
    trigger = deferred_trigger(task, ctx)
    job_id = ctx["ti"].xcom["job_id"]
    assert trigger.live_output and trigger.live_output["job"] == job_id
    event = asyncio.run(first_event(trigger))
    ended = time.time()  # the job ended at most a poll (0.5 s) before the trigger said so
    log = task_log()
    live = {stream: shown_live(stream, job_id, log) for stream in ("stdout", "stderr")}
    # lines reached the log while the job ran: seconds before it ended
    assert any(when < ended - 2 and lines for when, lines in collected), (ended, collected)
    # the bytes shown are those of the lines shown (the last one has no newline)
    assert event["live_shown"] == {
        stream: sum(len(line) + (line != "the end") for line in lines) for stream, lines in live.items()
    }
    assert variables.values == {}  # the wait ended: no position left behind
    # the end-of-job excerpt shows the rest, repeating none
    assert task.execute_complete(ctx, event, **{"deferred_in_try": 1}) == job_id
    end = task_log()
    assert live["stdout"] + lines_of("stdout", job_id, end) == STDOUT, end
    assert live["stderr"] + lines_of("stderr", job_id, end) == STDERR, end


def test_a_trigger_started_again_goes_on_where_the_stopped_one_left_each_line_once(
    gs_connection: Path, task_log: Any, variables: FakeVariables, collected: list[tuple[float, list[str]]]
) -> None:
    task = operator(live_output=True, live_output_period=2, deferrable=True)
    ctx = context()
    trigger = deferred_trigger(task, ctx)
    job_id = ctx["ti"].xcom["job_id"]
    _, kwargs = trigger.serialize()

    async def stopped_after_some_lines() -> None:
        watch = asyncio.ensure_future(first_event(trigger))
        # stdout's first lines, not only stderr's: each stream's pieces are published apart
        while not any(" stdout] " in line for _, lines in collected for line in lines):
            await asyncio.sleep(0.1)
        watch.cancel()  # the triggerer stops (a restart, a handover)
        with pytest.raises(asyncio.CancelledError):
            await watch

    asyncio.run(stopped_after_some_lines())
    [saved] = variables.values.values()
    assert json.loads(saved)["job"] == job_id
    first = task_log()
    assert 0 < len(lines_of("stdout", job_id, first)) < 7, first
    event = asyncio.run(first_event(SlurmJobTrigger(**json.loads(json.dumps(kwargs)))))
    second = task_log()
    assert "goes on where an earlier trigger of this wait left it" in second
    both = lines_of("stdout", job_id, first) + lines_of("stdout", job_id, second)
    assert both == STDOUT[: len(both)] and len(both) > len(lines_of("stdout", job_id, first)), (first, second)
    assert event["status"] == "finished" and variables.values == {}
    task.execute_complete(ctx, event, **{"deferred_in_try": 1})
    assert both + lines_of("stdout", job_id, task_log()) == STDOUT  # the excerpt shows the rest


def test_triggers_of_one_output_location_share_one_listing_per_interval(
    gs_connection: Path, task_log: Any, variables: FakeVariables, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow_provider_slurmapi.hooks.object_store import ObjectStore

    listings: list[float] = []
    names_from = ObjectStore.names_from

    def counted(self: ObjectStore, folder: str, offset: str) -> list[str]:
        listings.append(time.monotonic())
        return names_from(self, folder, offset)

    monkeypatch.setattr(ObjectStore, "names_from", counted)
    triggers, jobs = [], []
    for _ in range(4):
        ctx = context()
        triggers.append(deferred_trigger(operator(live_output=True, live_output_period=2, deferrable=True), ctx))
        jobs.append(ctx["ti"].xcom["job_id"])

    async def all_of_them() -> list[dict[str, Any]]:
        return await asyncio.gather(*(first_event(trigger) for trigger in triggers))

    started = time.monotonic()
    events = asyncio.run(all_of_them())
    took = time.monotonic() - started
    log = task_log()
    for job_id, event in zip(jobs, events, strict=True):
        assert event["status"] == "finished"
        shown_live("stdout", job_id, log)
    # one shared listing per 0.5-s interval, plus each trigger's own last one when its job ended
    assert len(listings) <= took / 0.5 + 1 + len(triggers), (len(listings), took)


def test_a_killed_wait_leaves_no_position_behind_and_a_still_deferred_one_keeps_it(
    gs_connection: Path,
    task_log: Any,
    variables: FakeVariables,
    collected: list[tuple[float, list[str]]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import types

    from airflow_provider_slurmapi.triggers import job as trigger_module

    state = {"now": "deferred"}

    async def task_state(ti: object) -> str:
        return state["now"]

    monkeypatch.setattr(trigger_module, "_task_state_v3", task_state)
    monkeypatch.setattr(trigger_module, "_task_state_v2", task_state)
    task = operator(live_output=True, live_output_period=2, deferrable=True)
    trigger = deferred_trigger(task, context())
    trigger.task_instance = types.SimpleNamespace(dag_id="d", task_id="t", run_id="r", map_index=-1)

    async def stopped_then_killed(now: str) -> None:
        watch = asyncio.ensure_future(first_event(trigger))
        while not any(lines for _, lines in collected):
            await asyncio.sleep(0.1)
        watch.cancel()
        with pytest.raises(asyncio.CancelledError):
            await watch
        state["now"] = now
        await trigger.on_kill()  # what Airflow 3.3 calls after a user's action (2.11 to 3.2: the cancel itself)

    asyncio.run(stopped_then_killed("deferred"))  # another triggerer took the wait over
    assert len(variables.values) == 1
    collected.clear()
    asyncio.run(stopped_then_killed("failed"))  # a user marked the task failed: the job is cancelled
    assert variables.values == {}


def test_past_the_caps_a_note_names_the_object_holding_every_line(gs_connection: Path, task_log: Any) -> None:
    burst = '#!/bin/bash\nfor i in $(seq 1 20); do echo "line $i"; done\nsleep 3\n'
    task = operator(script=burst, live_output_period=2, live_output_max_lines=3)
    ctx = context()
    task.execute(ctx)
    job_id = ctx["ti"].xcom["job_id"]
    log = task_log()
    live, end = log.split(f"Slurm job {job_id} used")
    assert re.findall(rf"\[job {job_id} stdout\] (line \d+)", live) == ["line 1", "line 2", "line 3"], live
    # the end excerpt shows exactly the lines the caps kept from the log
    assert re.findall(rf"\[job {job_id} stdout\] (line \d+|)$", end, re.M) == [f"line {i}" for i in range(4, 21)], end
    stem = f"{PREFIX}/operator_tests/{ctx['ti'].run_id.replace(':', '_')}/t/try-1/{job_id}"
    assert (
        f"[job {job_id} stdout] [... 17 line(s) or piece(s) of this job's stdout not shown here (the caps per read"
        f" are 3 lines and 262,144 bytes): the whole output is in {stem}.out]"
    ) in log, log


def test_a_read_that_raises_anything_never_ends_the_wait_and_the_next_listing_reads_on(
    gs_connection: Path, task_log: Any, variables: FakeVariables, monkeypatch: pytest.MonkeyPatch
) -> None:
    collect, calls = LiveOutputReader.collect, []

    def surprising(self: LiveOutputReader, names: list[str]) -> Any:
        calls.append(names)
        if len(calls) == 1:
            raise RuntimeError("a surprise in the read")
        return collect(self, names)

    monkeypatch.setattr(LiveOutputReader, "collect", surprising)
    task = operator(live_output=True, live_output_period=2, deferrable=True)
    ctx = context()
    trigger = deferred_trigger(task, ctx)
    job_id = ctx["ti"].xcom["job_id"]
    event = asyncio.run(first_event(trigger))
    assert event["status"] == "finished", event
    log = task_log()
    shown_live("stdout", job_id, log)
    assert log.count("a surprise in the read") == 1, log
