"""Live output, end to end in one process: the job (run by the emulator) publishes its output in
closed pieces under the output mount, which the emulator uploads to the Cloud Storage stand-in as
FUSE does (a closed file appears, an open one does not), and the waiting task logs each new line."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_slurmapi.client.errors import InvalidRequestError
from airflow_provider_slurmapi.emulator import Emulator, EmulatorConfig
from airflow_provider_slurmapi.operators.job import SlurmSubmitJobOperator
from tests.conftest import connection_json
from tests.integration.airflow_runtime import context
from tests.jobs import JOB
from tests.storage import BUCKET

PREFIX = f"gs://{BUCKET}/live-runs"
# prints a line a second for 6 s, stderr too, and a last line without its newline
SCRIPT = """#!/bin/bash
for i in 1 2 3 4 5 6; do echo "step $i"; echo "warning $i" >&2; sleep 1; done
printf 'the end'
"""


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
        task_id="t", job=JOB, script=SCRIPT, poll_interval=0.5, deferrable=False, output_wait=5, **kwargs
    )


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
    live = log.split(f"----- Slurm job {job_id} stdout")[0]  # before the end-of-job excerpt
    assert re.findall(rf"\[job {job_id} stdout\] (step \d)", live) == [f"step {i}" for i in range(1, 7)], live
    assert re.findall(rf"\[job {job_id} stderr\] (warning \d)", live) == [f"warning {i}" for i in range(1, 7)]
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
