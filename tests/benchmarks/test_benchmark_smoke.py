"""The benchmarks run end to end in their ``--quick`` size and print their table (no timing checks)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", ["import_cost", "submit_overhead", "triggerer_scale"])
def test_benchmark_runs_quick(name: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", f"benchmarks.{name}", "--quick"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert any(line.startswith("| ") for line in lines), result.stdout
    assert any(line.startswith("|") and set(line) <= set("|:- ") for line in lines), result.stdout
    assert any(line.startswith("Machine: ") and "Python" in line and "Airflow" in line for line in lines)
