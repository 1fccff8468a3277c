"""Attacks through live output: what a running job publishes, and what is planted where its pieces
are read. Each task runs for real on the emulator, its output on a ``file://`` folder that the
workers and the cluster's nodes both mount, as open as a permissive mount."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_slurmapi.client.live_output import Piece, folder_tag
from airflow_provider_slurmapi.operators.job import SlurmSubmitJobOperator
from tests.integration.airflow_runtime import context
from tests.jobs import JOB

pytestmark = pytest.mark.security


def run_task(body: str, **kwargs: Any) -> str:
    """Run a submit task (live output on, a piece every 2 s) whose job runs ``body``; its job ID."""
    operator = SlurmSubmitJobOperator(
        task_id="t", job=JOB, script=f"#!/bin/bash\n{body}\n", poll_interval=0.3, deferrable=False, output_wait=5,
        live_output_period=2, **kwargs,
    )  # fmt: skip
    ctx = context()
    operator.execute(ctx)
    return str(ctx["ti"].xcom["job_id"])


def test_lines_imitating_airflow_are_shown_as_the_jobs_while_it_runs(
    shared_folder: Path, task_log: Callable[[], str]
) -> None:
    fake = ["Task exited with return code 0", "INFO - Marking task as SUCCESS"]
    job_id = run_task("\n".join(f"echo '{line}'; echo '{line}' >&2" for line in fake) + "\nsleep 5")
    log = task_log()
    for needle in fake:
        lines = [line for line in log.splitlines() if needle in line]
        assert lines, log[-3000:]
        for line in lines:  # one log record each, whose message is the job's prefix and the line
            assert re.match(rf"\S+ \[info\s*\] \[job {job_id} (stdout|stderr)\] ", line), line
    assert "all of it" in log  # shown while the job ran, not again at its end


def test_a_piece_planted_as_a_link_to_a_worker_file_is_not_read(
    shared_folder: Path, tmp_path: Path, task_log: Callable[[], str]
) -> None:
    secret = tmp_path / "worker-home" / "secret.txt"
    secret.parent.mkdir()
    secret.write_text("WORKER-SECRET-77a1\n")
    # the job names a link as the first piece of its stderr, which it never writes itself
    plant = (
        f'out=$(find {shared_folder} -path "*/try-1/$SLURM_JOB_ID.out" | head -n 1)\n'
        'tag=$(printf %s "$(dirname "$out")" | sha256sum | cut -c1-8)\n'
        f'ln -s {secret} {shared_folder}/live/"$(date +%s)-$SLURM_JOB_ID-$tag-0-err-000000"\n'
        "echo planted; sleep 3"
    )
    job_id = run_task(plant)
    log = task_log()
    assert f"[job {job_id} stdout] planted" in log
    [out] = shared_folder.glob(f"**/try-1/{job_id}.out")
    [planted] = [path for path in (shared_folder / "live").iterdir() if path.is_symlink()]
    piece = Piece.parse(planted.name)
    assert piece and (piece.job, piece.tag) == (job_id, folder_tag(str(out.parent))), "the attack is in place"
    assert "WORKER-SECRET" not in log
