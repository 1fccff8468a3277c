"""The plan of a script too large for the request: where it is staged and the wrapper submitted."""

from __future__ import annotations

import os
import posixpath
import subprocess
from pathlib import Path

import pytest

from airflow_provider_slurmapi.client.jobs import ExitCode, JobStatus
from airflow_provider_slurmapi.client.output import OutputSettings
from airflow_provider_slurmapi.client.paths import SlurmPaths
from airflow_provider_slurmapi.client.staging import (
    STAGED_SCRIPT_CHANGED,
    StagedScript,
    changed_script_headline,
    scripts_in_use,
    staged_mark,
    submit_call,
    with_staged_mark,
)

SETTINGS = OutputSettings(uri="gs://bucket/airflow", cluster_path="/mnt/out")
JOB = {"name": "big", "current_working_directory": "/tmp"}


def test_a_script_is_staged_under_its_content_hash_and_run_by_its_own_interpreter(tmp_path: Path) -> None:
    script = "#!/usr/bin/env python3\n#SBATCH --gres=gpu:8\n# notes\nprint('staged', 'ok')\n#SBATCH --late\n"
    staged = StagedScript.plan(script, OutputSettings(uri=f"file://{tmp_path}", cluster_path=str(tmp_path)))
    assert staged == StagedScript.plan(script, OutputSettings(uri=f"file://{tmp_path}", cluster_path=str(tmp_path)))
    assert staged.cluster_file.startswith(f"{tmp_path}/staged/_no_dag/") and staged.cluster_file.endswith(".script")
    assert staged.location == f"file://{staged.cluster_file}"
    # the header's directives come along (Slurm reads them from the submitted script), not later ones
    assert staged.wrapper.splitlines()[:2] == ["#!/bin/bash", "#SBATCH --gres=gpu:8"]
    assert "--late" not in staged.wrapper
    Path(staged.cluster_file).parent.mkdir(parents=True)
    Path(staged.cluster_file).write_bytes(staged.data)
    ran = subprocess.run(["bash", "-c", staged.wrapper], capture_output=True, text=True, timeout=30)
    assert ran.stdout == "staged ok\n", ran.stderr


def _staged_bash(tmp_path: Path) -> StagedScript:
    script = "#!/bin/bash\n" + "# padding\n" * 1000 + 'echo "ran with $# arguments: $*"\n'
    staged = StagedScript.plan(script, OutputSettings(uri=f"file://{tmp_path}", cluster_path=str(tmp_path)), "d")
    Path(staged.cluster_file).parent.mkdir(parents=True)
    Path(staged.cluster_file).write_bytes(staged.data)
    return staged


def _run(wrapper: str, *args: str, tmpdir: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {"PATH": os.environ["PATH"], **({"TMPDIR": str(tmpdir)} if tmpdir else {})}
    return subprocess.run(["bash", "-c", wrapper, "job", *args], capture_output=True, text=True, timeout=30, env=env)


def test_the_wrapper_runs_the_staged_script_with_the_jobs_arguments(tmp_path: Path) -> None:
    ran = _run(_staged_bash(tmp_path).wrapper, "a b", "c")
    assert (ran.returncode, ran.stdout) == (0, "ran with 2 arguments: a b c\n"), ran.stderr


@pytest.mark.parametrize(
    "replace",
    [
        pytest.param(lambda path: path.write_text("#!/bin/bash\necho someone else\n"), id="replaced"),
        pytest.param(lambda path: path.write_bytes(path.read_bytes() + b"echo appended\n"), id="appended"),
        pytest.param(lambda path: path.unlink(), id="removed"),
        pytest.param(lambda path: (path.unlink(), os.mkfifo(path)), id="a FIFO"),
        pytest.param(lambda path: (path.unlink(), path.symlink_to("/dev/zero")), id="a link to a device"),
    ],
)
def test_the_wrapper_runs_nothing_but_what_airflow_staged(tmp_path: Path, replace: object) -> None:
    staged = _staged_bash(tmp_path)
    replace(Path(staged.cluster_file))  # type: ignore[operator]
    private = tmp_path / "private"
    private.mkdir()
    ran = _run(staged.wrapper, tmpdir=private)
    assert ran.returncode == STAGED_SCRIPT_CHANGED and ran.stdout == "", ran
    assert f"the staged script {staged.location} was changed after Airflow staged it" in ran.stderr
    assert list(private.iterdir()) == []  # no copy left behind


def test_the_task_failure_names_the_changed_script() -> None:
    location = "gs://b/p/staged/d/" + "a" * 64 + ".script"
    excerpt = f"\n[job 7 stderr] slurm-job-api: the staged script {location} was changed after Airflow staged it"
    refused = JobStatus(job_id="7", state="FAILED", exit_code=ExitCode("ERROR", STAGED_SCRIPT_CHANGED))
    headline = changed_script_headline(refused, excerpt)
    assert headline.startswith(f"The staged script {location} was changed after Airflow staged it")
    assert "a retry of the task stages it again" in headline
    # the same words from the job's own code, with its own exit code, are the job's failure
    assert changed_script_headline(JobStatus(job_id="7", state="FAILED", exit_code=ExitCode("ERROR", 1)), excerpt) == ""


def test_another_content_is_another_object() -> None:
    first = StagedScript.plan("#!/bin/bash\necho 1\n", SETTINGS)
    second = StagedScript.plan("#!/bin/bash\necho 2\n", SETTINGS)
    assert first.location != second.location and first.location.startswith("gs://bucket/airflow/staged/")


def test_the_limit_is_the_request_as_sent() -> None:
    paths = SlurmPaths()
    small = "#!/bin/bash\n" + "#" * 1000 + "\n"
    big = "#!/bin/bash\n" + "#" * (1024 * 1024) + "\n"
    assert submit_call(JOB, small, paths).fits()
    assert not submit_call(JOB, big, paths).fits()


def test_a_jobs_staged_mark_names_the_start_of_its_scripts_hash_and_keeps_its_comment() -> None:
    staged = StagedScript.plan("#!/bin/bash\necho big\n", SETTINGS, "d")
    mark = staged_mark("#!/bin/bash\necho big\n")
    digits = mark.removeprefix("airflow-staged=")
    assert len(digits) == 16 and posixpath.basename(staged.cluster_file).startswith(digits)
    marked = with_staged_mark({**JOB, "comment": "mine airflow-key=1"}, "#!/bin/bash\necho big\n")
    assert marked["comment"] == f"mine airflow-key=1 {mark}"


def test_the_scripts_in_use_are_those_whose_mark_a_comment_carries() -> None:
    used, unused = "a" * 64 + ".script", "b" * 64 + ".script"
    comments = ["", "a user's note", f"airflow-key=1 airflow-staged={'a' * 16}", "airflow-staged="]
    assert scripts_in_use([used, unused], comments) == {used}
    assert scripts_in_use([used, unused], [f"airflow-staged={'b' * 15}"]) == set()  # not a mark: kept by none
