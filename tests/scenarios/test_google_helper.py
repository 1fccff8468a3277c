"""Google's own Python helper from the guide runs unchanged against the emulator, on both backends."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from airflow_provider_slurmapi.emulator import Emulator

HELPER = Path(__file__).parent / "google" / "slurm_job_api_helper.py"

pytestmark = pytest.mark.scenario


def test_google_helper_submits_checks_and_cancels(emulator_backend: tuple[str, Emulator]) -> None:
    _, emu = emulator_backend
    env = {**os.environ, "SLURM_JOB_API_ENDPOINT": emu.url, "GOOGLE_APPLICATION_CREDENTIALS": str(emu.key_file)}
    result = subprocess.run([sys.executable, str(HELPER)], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    submitted = re.fullmatch(r"submitted job (\d+)", lines[0])
    assert submitted, result.stdout
    job_id = submitted[1]
    # submitted moments ago: waiting for the scheduler or already running
    assert re.fullmatch(r"state: \['(PENDING|RUNNING)'\]", lines[1]), result.stdout
    assert lines[2] == f"cancelled job {job_id}"
    assert re.fullmatch(r"state \['CANCELLED'(, '\w+')*\]", lines[3]), result.stdout
    assert len(lines) == 4
