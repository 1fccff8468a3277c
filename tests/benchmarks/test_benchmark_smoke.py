"""The benchmarks run end to end in their ``--quick`` size and print their table (no timing checks)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]


def quick_run(name: str, timeout: float = 900) -> list[str]:
    """The lines a benchmark printed in its ``--quick`` size: it ended well, with a Markdown table
    and the machine line."""
    result = subprocess.run(
        [sys.executable, "-m", f"benchmarks.{name}", "--quick"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert any(line.startswith("|") and set(line) <= set("|:- ") for line in lines), result.stdout
    assert any(line.startswith("Machine: ") and "Python" in line and "Airflow" in line for line in lines)
    return lines


@pytest.mark.parametrize("name", ["import_cost", "submit_overhead", "triggerer_scale", "job_events", "slurm_tab"])
def test_benchmark_runs_quick(name: str) -> None:
    lines = quick_run(name)
    assert any(line.startswith("| ") for line in lines), lines


def test_output_tail_quick_stays_within_its_limits() -> None:
    """The tail of an output object costs at most 2 storage requests and 2 x output_tail_bytes (counts)."""
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks.output_tail", "--quick"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert any(line.startswith("| (b) tail read") for line in lines), result.stdout
    assert any(line.startswith("|") and set(line) <= set("|:- ") for line in lines), result.stdout
    assert any(line.startswith("Machine: ") and "Python" in line and "Airflow" in line for line in lines)
    limits = [line for line in lines if line.startswith("Limit: ")]
    assert len(limits) == 2, result.stdout
    assert limits[0].startswith("Limit: storage requests per tail read <= 2: held"), result.stdout
    assert limits[1].startswith("Limit: response body bytes per tail read <= 2 x output_tail_bytes"), result.stdout
    assert ": held (" in limits[1], result.stdout


def test_triggerer_pending_quick_stays_within_its_limits() -> None:
    """Shared polling makes at most 2 calls in any tick of any phase, and reports every hold,
    release and requeue played (counts)."""
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.triggerer_pending",
            "--quick",
            "--modes",
            "shared",
            "--phases",
            "holds",
            "requeue storm",
        ],  # fmt: skip
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert sum(line.startswith("| ") for line in lines) == 2 + 2, result.stdout  # header, rule, 2 phases
    limits = [line for line in lines if line.startswith("Limit: ")]
    assert len(limits) == 2 and all(": held (" in line for line in limits), result.stdout


def test_live_output_cost_quick_prints_its_table() -> None:
    """The three rows: the triggers without live output, with it, and with it at the baseline commit."""
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks.live_output_cost", "--quick"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    rows = [line for line in lines if line.startswith("| ") and not line.startswith(("| jobs", "| :"))]
    assert len(rows) == 3, result.stdout
    assert any(line.startswith("|") and set(line) <= set("|:- ") for line in lines), result.stdout
    assert any(line.startswith("Machine: ") and "Python" in line and "Airflow" in line for line in lines)
    assert all(" of " in row and "missing" in row for row in rows[1:]), result.stdout


@pytest.mark.parametrize(("name", "rows"), [("live_output_listing", 4), ("live_output_progress", 2)])
def test_live_output_bounds_quick_print_their_tables(name: str, rows: int) -> None:
    """A pending job's listing in an empty and a busy folder, and a progress bar's memory: a row per
    provider (the baseline commit, this tree) and folder; the figures are not checked here."""
    lines = quick_run(name, timeout=300)
    table = [line for line in lines if line.startswith("| ")]
    assert len(table) == 2 + rows, lines  # header, rule, rows
