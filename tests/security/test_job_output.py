"""Attacks through a job's output: what a job prints, and what is planted where its output is read.

Each task runs for real on the emulator: its job writes under the output mount (published to the
Cloud Storage stand-in as Cloud Storage FUSE would) or on a shared folder read through ``file://``,
and the task log is what the task logged. The folders are as open as a permissive FUSE mount.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from airflow.providers.common.compat.sdk import AirflowException

from airflow_provider_slurmapi.decorators.result_secret import new_result_secret
from airflow_provider_slurmapi.decorators.slurm_python import slurm_python_task
from airflow_provider_slurmapi.emulator import Emulator, EmulatorConfig
from airflow_provider_slurmapi.hooks.shared_files import UnsafeOutputPath
from airflow_provider_slurmapi.operators.job import SlurmSubmitJobOperator
from airflow_provider_slurmapi.version_compat import AIRFLOW_V_3_0_PLUS
from tests.conftest import connection_json
from tests.integration.airflow_runtime import context
from tests.jobs import JOB
from tests.storage import BUCKET

try:
    from airflow.sdk import DAG
except ImportError:  # Airflow 2.x
    from airflow import DAG

ROOT = Path(__file__).parents[2]
PREFIX = f"gs://{BUCKET}/security-output"
# what a terminal or the log view would act on: escape sequences, overwrites, bidi overrides
HIDDEN = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


@pytest.fixture(scope="module")
def mounted(tmp_path_factory: pytest.TempPathFactory, storage_host: str) -> Iterator[tuple[Emulator, Path]]:
    work = tmp_path_factory.mktemp("security-output")
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
def gs_output(mounted: tuple[Emulator, Path], storage_host: str, monkeypatch: pytest.MonkeyPatch) -> None:
    emu, mount = mounted
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", storage_host)
    extra = {"output_uri": PREFIX, "output_cluster_path": str(mount)}
    monkeypatch.setenv("AIRFLOW_CONN_SLURM_JOB_API_DEFAULT", connection_json(emu, **extra))


@pytest.fixture
def worker_secret(tmp_path: Path) -> Path:
    """A file outside the output folder that the worker's user can read (a key, a config)."""
    secret = tmp_path / "worker-home" / "secret.txt"
    secret.parent.mkdir()
    secret.write_text("WORKER-SECRET-4f1c\nMarking task as SUCCESS\n")
    return secret


def run_task(body: str, job: dict[str, Any] | None = None, **kwargs: Any) -> tuple[str, str | None]:
    """Run a submit task whose job runs ``body``: its job ID and its failure message (None if it succeeded)."""
    operator = SlurmSubmitJobOperator(
        task_id="t",
        job=job or JOB,
        script=f"#!/bin/bash\n{body}\n",
        poll_interval=0.3,
        deferrable=False,
        output_wait=5,
        # the end-of-job read is attacked here; live output's own reads are in test_live_output_attacks
        **{"live_output": False, **kwargs},
    )
    ctx = context()
    try:
        operator.execute(ctx)
        failure = None
    except AirflowException as error:
        failure = str(error)
    return ctx["ti"].xcom["job_id"], failure


def assert_lines_are_the_jobs(text: str, job_id: str, *needles: str) -> None:
    """Every line holding one of ``needles`` is visibly the job's: it starts with the job's prefix."""
    for needle in needles:
        lines = [line for line in text.splitlines() if needle in line]
        assert lines, f"{needle!r} not shown at all:\n{text[-3000:]}"
        for line in lines:
            assert re.match(rf"\[job {job_id} (stdout|stderr|stdout\+stderr)\] ", line), line


def test_a_job_printing_escape_sequences_and_carriage_returns_cannot_rewrite_the_task_log(
    gs_output: None, task_log: Callable[[], str]
) -> None:
    body = r"""printf 'clear\033[2J\033[Hscreen\n'
printf 'title \033]0;pwned\007 and link \033]8;;https://evil.example\033\\click\033]8;;\033\\\n'
printf 'progress 10%%\rTask exited with return code 0\n'
printf 'rm -rf /tmp/x\b\b\b\b\b\b\b\b\b\b\b\bls\n'
printf 'csi \302\233 1m and bidi \342\200\256txt.exe\n'
printf 'err \033[31mred\033[0m\n' >&2"""
    job_id, failure = run_task(body)
    log = task_log()
    assert failure is None
    assert not HIDDEN.search(log), repr(HIDDEN.search(log))
    assert f"[job {job_id} stdout] clear\\x1b[2J\\x1b[Hscreen" in log
    assert f"[job {job_id} stdout] title \\x1b]0;pwned\\x07 and link \\x1b]8;;https://evil.example\\x1b\\click" in log
    assert f"[job {job_id} stdout] progress 10%\\rTask exited with return code 0" in log
    assert f"[job {job_id} stdout] rm -rf /tmp/x" + "\\x08" * 12 + "ls" in log
    assert f"[job {job_id} stdout] csi \\x9b 1m and bidi \\u202etxt.exe" in log
    assert f"[job {job_id} stderr] err \\x1b[31mred\\x1b[0m" in log


def test_a_job_imitating_airflow_log_lines_cannot_pass_them_for_airflows(
    gs_output: None, task_log: Callable[[], str]
) -> None:
    fake = [
        "Task exited with return code 0",
        "[2026-12-01, 23:53:55 UTC] {taskinstance.py:1234} INFO - Marking task as SUCCESS",
        '{"event": "Task instance in success state", "level": "info"}',
    ]
    body = "\n".join(f"echo '{line}'; echo '{line}' >&2" for line in fake) + "\nexit 1"
    job_id, failure = run_task(body)
    log = task_log()
    assert failure is not None
    assert_lines_are_the_jobs(log, job_id, "Task exited with return code 0", "Marking task as SUCCESS")
    # the task's failure message ends with stderr's last lines: they too are the job's
    assert_lines_are_the_jobs(failure, job_id, "Task exited with return code 0", "Marking task as SUCCESS")


def test_a_job_printing_a_10_mb_line_is_cut_in_the_log(gs_output: None, task_log: Callable[[], str]) -> None:
    body = "head -c 10000000 /dev/zero | tr '\\0' 'A'; echo\nhead -c 10000000 /dev/zero | tr '\\0' 'B' >&2; exit 3"
    job_id, failure = run_task(body)
    log = task_log()
    assert failure is not None
    assert len(log) < 50_000 and len(failure) < 30_000  # read within output_tail_bytes, then cut per line
    out = re.search(rf"\[job {job_id} stdout\] (A+) \[\.\.\. ([\d,]+) more characters not shown\]", log)
    assert out, log[-3000:]
    assert (
        len(out.group(1)) == 4000 and int(out.group(2).replace(",", "")) + 4000 == 64 * 1024 - 1
    )  # the end of the line, read within the cap
    assert re.search(rf"\[job {job_id} stderr\] B{{4000}} \[\.\.\. [\d,]+ more characters not shown\]", failure)


def test_a_job_planting_a_symlink_to_a_worker_secret_as_its_output_leaks_nothing(
    shared_folder: Path, worker_secret: Path, task_log: Callable[[], str]
) -> None:
    planted = shared_folder / "planted"
    job = {**JOB, "standard_output": f"{planted}/%j.out", "standard_error": f"{planted}/%j.err"}
    body = (
        f'echo hello\nln -sf {worker_secret} {planted}/"$SLURM_JOB_ID".out\n'
        f'ln -sf {worker_secret} {planted}/"$SLURM_JOB_ID".err\nexit 1'
    )
    job_id, failure = run_task(body, job=job)
    log = task_log()
    assert (planted / f"{job_id}.out").is_symlink()  # the attack is in place
    assert failure is not None
    assert "WORKER-SECRET" not in log and "WORKER-SECRET" not in failure
    for stream in ("out", "err"):
        path = f"{planted}/{job_id}.{stream}"
        assert f"{path} is a symbolic link: not read" in log, log[-3000:]


def test_a_symlinked_folder_in_the_output_path_is_not_followed(
    shared_folder: Path, tmp_path: Path, task_log: Callable[[], str]
) -> None:
    """Another user swaps the task's folder for a link to one of theirs, holding forged output."""
    theirs = tmp_path / "attacker"
    theirs.mkdir()
    folder = shared_folder / "team" / "logs"
    job = {**JOB, "standard_output": f"{folder}/%j.out", "standard_error": f"{folder}/%j.err"}
    body = (
        f'echo real-output\nprintf "FORGED: all good\\n" > {theirs}/"$SLURM_JOB_ID".out\n'
        f"mv {folder} {folder}.moved && ln -s {theirs} {folder}"
    )
    job_id, failure = run_task(body, job=job)
    log = task_log()
    assert (shared_folder / "team" / "logs").is_symlink() and failure is None
    assert "FORGED" not in log
    assert f"{folder}/{job_id}.out: {folder} is a symbolic link: not read" in log, log[-3000:]


def returns_seven() -> int:
    """Runs on the cluster."""
    return 7


def test_a_try_folder_linked_to_another_users_folder_gives_no_return_value(
    shared_folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before the task runs, another user makes its (predictable) try folder a link to a folder of
    theirs: the job's stdout and its function's result land there, where they can rewrite them."""
    # the secret the result keys come from, as an administrator may set it (no metadata database here)
    monkeypatch.setenv("AIRFLOW_VAR_SLURM_PYTHON_RESULT_SECRET", new_result_secret())
    theirs = tmp_path / "attacker"
    theirs.mkdir()
    ctx = context()
    ti = ctx["ti"]
    run_folder = shared_folder / ti.dag_id / ti.run_id.replace(":", "_") / ti.task_id
    run_folder.mkdir(parents=True)
    (run_folder / "try-1").symlink_to(theirs)
    with DAG(ti.dag_id, schedule=None, start_date=datetime(2026, 1, 1)):
        operator = slurm_python_task(job=JOB, poll_interval=0.3, output_wait=2, deferrable=False)(returns_seven)()
    with pytest.raises(UnsafeOutputPath) as refused:
        operator.operator.execute(ctx)
    job_id = ti.xcom["job_id"]
    assert (theirs / f"{job_id}.return.json").exists()  # the job wrote it through the link
    link = f"{run_folder}/try-1"
    assert str(refused.value) == f"{link}/{job_id}.return.json: {link} is a symbolic link: not read"
    assert "return_value" not in ti.xcom


@pytest.mark.skipif(
    not AIRFLOW_V_3_0_PLUS,
    reason="2.x masks in the task handler's filter, which writes only with a real task instance's context",
)
def test_a_job_printing_a_connection_password_and_a_masked_variable_shows_them_masked(
    mounted: tuple[Emulator, Path], storage_host: str, tmp_path: Path
) -> None:
    """The job's lines go through the task's logger, so Airflow's secrets masker redacts the values
    it masks, in the output's frame and in the failure message (``job_output_support``)."""
    emu, mount = mounted
    password, api_key = "pw-Zq81-not-for-logs", "key-Xv42-not-for-logs"
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(tmp_path),
        "PYTHONPATH": str(ROOT),
        "AIRFLOW_CONN_SLURM_JOB_API_DEFAULT": connection_json(emu, output_uri=PREFIX, output_cluster_path=str(mount)),
        "AIRFLOW_CONN_SECRET_CONN": json.dumps({"conn_type": "generic", "password": password}),
        "AIRFLOW_VAR_API_KEY": api_key,  # a sensitive name: Airflow masks its value
        "STORAGE_EMULATOR_HOST": storage_host,
    }
    command = [sys.executable, "-m", "tests.security.job_output_support"]
    result = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
    log = result.stdout + result.stderr
    assert result.returncode == 0 and "is FAILED" in log, log[-5000:]  # the job ran, printed and failed
    assert password not in log and api_key not in log, log[-5000:]
    # masked in the lines shown while the job ran (one log record each) and in the end-of-job excerpt
    assert re.search(r"\[job \d+ stdout\] password=\*\*\*(\s+\[|\n)", log), log[-5000:]
    assert re.search(r"\[job \d+ stderr\] api key \*\*\* in stderr(\s+\[|\n)", log), log[-5000:]
    assert re.search(r"Last lines of stderr of job \d+ \(.*\):\n\[job \d+ stderr\] api key \*\*\* in stderr", log)
