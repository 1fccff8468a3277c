"""Job output and usage, end to end in one process: the emulator runs the job, its output mount
publishes the files to a Cloud Storage stand-in, and the hook and the operators read them through
the Google provider's GCSHook and the real google-cloud-storage client."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from airflow.providers.common.compat.sdk import AirflowException

from airflow_provider_slurmapi.emulator import Emulator, EmulatorConfig
from airflow_provider_slurmapi.hooks.slurm_job_api import SlurmJobApiHook
from airflow_provider_slurmapi.operators.job import SlurmSubmitJobOperator
from airflow_provider_slurmapi.sensors.job import SlurmJobSensor
from tests.conftest import connection_json
from tests.integration.airflow_runtime import context
from tests.jobs import JOB
from tests.storage import BUCKET

PREFIX = f"gs://{BUCKET}/runs"


@pytest.fixture(scope="module")
def mounted(tmp_path_factory: pytest.TempPathFactory, storage_host: str) -> Iterator[tuple[Emulator, Path]]:
    """An emulator whose jobs write under ``mount``, which it publishes to ``PREFIX`` in the stand-in."""
    work = tmp_path_factory.mktemp("output")
    mount = work / "cluster-mount"
    mount.mkdir()
    config = EmulatorConfig(
        min_job_age=1.0,
        key_file=work / "key.json",
        state_dir=work / "jobs",
        output_mount=f"{mount}={PREFIX}",
        storage_host=storage_host,
    )
    with Emulator(config) as emu:
        yield emu, mount


@pytest.fixture
def gs_connection(mounted: tuple[Emulator, Path], storage_host: str, monkeypatch: pytest.MonkeyPatch) -> Path:
    emu, mount = mounted
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", storage_host)
    extra = {"output_uri": PREFIX, "output_cluster_path": str(mount)}
    monkeypatch.setenv("AIRFLOW_CONN_SLURM_JOB_API_DEFAULT", connection_json(emu, **extra))
    return mount


def submit(body: str, job: dict[str, Any] | None = None, **kwargs: Any) -> tuple[SlurmSubmitJobOperator, Any]:
    operator = SlurmSubmitJobOperator(
        task_id="t",
        job=job or JOB,
        script=f"#!/bin/bash\n{body}\n",
        poll_interval=0.3,
        deferrable=False,
        output_wait=5,
        **{"live_output": False, **kwargs},  # the end-of-job excerpt, whole (live output has its own tests)
    )
    return operator, context()


def test_a_failed_job_shows_its_output_and_ends_the_error_with_stderr(gs_connection: Path, task_log: Any) -> None:
    operator, ctx = submit('for i in $(seq 1 500); do echo "step $i"; done\necho "loss is NaN" >&2\nexit 4')
    with pytest.raises(AirflowException) as failure:
        operator.execute(ctx)
    job_id = ctx["ti"].xcom["job_id"]
    ti = ctx["ti"]
    stem = f"operator_tests/{ti.run_id.replace(':', '_')}/t/try-1/{job_id}"
    message = str(failure.value)
    assert message.startswith(f"Slurm job {job_id} is FAILED; reason: NonZeroExitCode; exit code 4")
    assert message.endswith(
        f"Last lines of stderr of job {job_id} ({PREFIX}/{stem}.err):\n[job {job_id} stderr] loss is NaN"
    )
    log = task_log()
    assert f"----- Slurm job {job_id} stdout: last 100 lines of {PREFIX}/{stem}.out" in log
    assert f"\n[job {job_id} stdout] step 401\n" in log and f"[job {job_id} stdout] step 500\n" in log
    assert "step 400\n" not in log
    assert f"----- end of Slurm job {job_id} stderr -----" in log
    assert (gs_connection / f"{stem}.out").exists()  # where the job wrote, on the "cluster"
    usage = ti.xcom["usage"]
    assert usage["job_id"] == job_id and usage["cpus"] >= 1 and usage["gpu_hours"] == 0.0
    assert ti.xcom["slurm_output_console_url"] == (
        f"https://console.cloud.google.com/storage/browser/_details/{BUCKET}/runs/{stem}.out"
    )


def test_the_hook_reads_a_huge_output_by_its_end(gs_connection: Path) -> None:
    """A 20 MB output: the tail is read from the end (the caps), not the whole object."""
    hook = SlurmJobApiHook()
    out = f"{gs_connection}/huge-%j.out"
    job = {**JOB, "standard_output": out, "standard_error": out}
    job_id = hook.submit_job(job, "#!/bin/bash\nyes 'padding line' | head -c 20000000\necho; echo last-line\n")
    assert hook.wait_for_job(job_id, poll_interval=0.3).state == "COMPLETED"
    (tail,) = hook.read_job_output(job_id, tail_lines=3, tail_bytes=4096, wait=5)
    assert tail.stream == "stdout+stderr" and tail.size == 20_000_000 + len("\nlast-line\n")
    assert tail.text.splitlines() == ["padding line", "padding", "last-line"]  # head -c cut the last one


def test_an_array_shows_its_failed_tasks_first(gs_connection: Path) -> None:
    hook = SlurmJobApiHook()
    settings = hook.resolve_output_settings()
    out, err = settings.per_try_paths("d", "r", "arr", -1, 1, array=True)
    job = {**JOB, "array": "0-2", "standard_output": out, "standard_error": err}
    script = '#!/bin/bash\necho "task $SLURM_ARRAY_TASK_ID"\n[ "$SLURM_ARRAY_TASK_ID" = 1 ] && { echo boom >&2; exit 1; }\nexit 0\n'
    job_id = hook.submit_job(job, script)
    assert hook.wait_for_job(job_id, poll_interval=0.3).state == "FAILED"
    tails = hook.read_job_output(job_id, wait=5)
    assert [(tail.job_id, tail.stream) for tail in tails[:2]] == [(f"{job_id}_1", "stdout"), (f"{job_id}_1", "stderr")]
    assert tails[1].text == "boom"
    assert sorted(tail.text for tail in tails if tail.stream == "stdout") == ["task 0", "task 1", "task 2"]


def test_a_job_that_wrote_nothing_is_waited_for_then_reported(gs_connection: Path) -> None:
    """A job cancelled while pending never opened its output: the task says so and keeps its outcome."""
    hook = SlurmJobApiHook()
    out = f"{gs_connection}/never-%j.out"
    job_id = hook.submit_job({**JOB, "standard_output": out, "hold": True}, "#!/bin/bash\ntrue\n")
    hook.cancel_job(job_id)
    assert hook.wait_for_job(job_id, poll_interval=0.3).state == "CANCELLED"
    (tail,) = hook.read_job_output(job_id, wait=1.5)
    assert tail.problem == f"{PREFIX}/never-{job_id}.out was not found after waiting 1.5 s"


def test_the_sensor_shows_the_output_of_the_job_it_watched(gs_connection: Path, task_log: Any) -> None:
    hook = SlurmJobApiHook()
    out = f"{gs_connection}/sensed-%j.out"
    job_id = hook.submit_job({**JOB, "standard_output": out}, "#!/bin/bash\necho sensed-output\n")
    sensor = SlurmJobSensor(task_id="s", job_id=job_id, poke_interval=0.3, timeout=60, output_wait=5)
    sensor.execute(context())
    log = task_log()
    assert f"----- Slurm job {job_id} stdout+stderr: last 1 line of {PREFIX}/sensed-{job_id}.out" in log
    assert "sensed-output" in log


def test_output_outside_the_mount_is_named_and_warned_about(gs_connection: Path, task_log: Any) -> None:
    operator, ctx = submit("echo hi", job={**JOB, "standard_output": "/tmp/elsewhere-%j.out"})
    job_id = operator.execute(ctx)
    log = task_log()
    assert "/tmp/elsewhere-%j.out is not under output_cluster_path" in log
    assert f"written to /tmp/elsewhere-{job_id}.out on the cluster; it is not under output_cluster_path" in log


def test_bad_output_settings_are_refused_before_anything_is_sent(
    gs_connection: Path, mounted: tuple[Emulator, Path]
) -> None:
    emu, _ = mounted
    with pytest.raises(ValueError, match="^output_cluster_path: must be an absolute path, got 'relative/dir'$"):
        submit("true", output_cluster_path="relative/dir")
    with pytest.raises(ValueError, match="^output_tail_lines: must be an integer from 1 to 10000, got 0$"):
        SlurmJobSensor(task_id="s", job_id=1, output_tail_lines=0)
    submits = len(emu.requests.calls("POST"))
    operator, ctx = submit("true")
    operator.output_uri = "ftp://x/y"  # as a connection could hold it: refused at run time, before the submit
    with pytest.raises(ValueError, match="^output_uri: must start with gs:// or file://"):
        operator.execute(ctx)
    assert len(emu.requests.calls("POST")) == submits


def test_a_shared_filesystem_is_read_through_file_uris(
    emulator: Emulator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, task_log: Any
) -> None:
    """file://: the workers mount what the cluster mounts (here both are this machine's directory)."""
    extra = {"output_uri": f"file://{tmp_path}", "output_cluster_path": str(tmp_path)}
    monkeypatch.setenv("AIRFLOW_CONN_SLURM_JOB_API_DEFAULT", connection_json(emulator, **extra))
    operator, ctx = submit("echo on-the-shared-disk; echo bad >&2; exit 2")
    with pytest.raises(AirflowException, match=r"(?s)exit code 2.*\n\[job \d+ stderr\] bad$"):
        operator.execute(ctx)
    assert "on-the-shared-disk" in task_log()
    assert "slurm_output_console_url" not in ctx["ti"].xcom  # the console link is for gs:// only
