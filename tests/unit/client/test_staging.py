"""The plan of a script too large for the request: where it is staged and the wrapper submitted."""

from __future__ import annotations

import subprocess
from pathlib import Path

from airflow_provider_slurmapi.client.output import OutputSettings
from airflow_provider_slurmapi.client.paths import SlurmPaths
from airflow_provider_slurmapi.client.staging import StagedScript, submit_call

SETTINGS = OutputSettings(uri="gs://bucket/airflow", cluster_path="/mnt/out")
JOB = {"name": "big", "current_working_directory": "/tmp"}


def test_a_script_is_staged_under_its_content_hash_and_run_by_its_own_interpreter(tmp_path: Path) -> None:
    script = "#!/usr/bin/env python3\n#SBATCH --gres=gpu:8\n# notes\nprint('staged', 'ok')\n#SBATCH --late\n"
    staged = StagedScript.plan(script, OutputSettings(uri=f"file://{tmp_path}", cluster_path=str(tmp_path)))
    assert staged == StagedScript.plan(script, OutputSettings(uri=f"file://{tmp_path}", cluster_path=str(tmp_path)))
    assert staged.cluster_file.startswith(f"{tmp_path}/staged/") and staged.cluster_file.endswith(".script")
    assert staged.location == f"file://{staged.cluster_file}"
    # the header's directives come along (Slurm reads them from the submitted script), not later ones
    assert staged.wrapper.splitlines()[:2] == ["#!/bin/bash", "#SBATCH --gres=gpu:8"]
    assert "--late" not in staged.wrapper
    Path(staged.cluster_file).parent.mkdir(parents=True)
    Path(staged.cluster_file).write_bytes(staged.data)
    ran = subprocess.run(["bash", "-c", staged.wrapper], capture_output=True, text=True, timeout=30)
    assert ran.stdout == "staged ok\n", ran.stderr


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
