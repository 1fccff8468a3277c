"""ruff and mypy over the code base: each must pass, and the failure shows their report."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]


def run(module: str, *args: str) -> None:
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed (pip install -e '.[test]')")
    result = subprocess.run(
        [sys.executable, "-m", module, *args], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, f"{module} {' '.join(args)}:\n{result.stdout}{result.stderr}"


def test_ruff_check() -> None:
    run("ruff", "check", ".")


def test_ruff_format() -> None:
    # Markdown code blocks are examples laid out by hand, not formatted code.
    run("ruff", "format", "--check", "--extend-exclude", "*.md", ".")


def test_mypy() -> None:
    run("mypy")  # settings and files: [tool.mypy] in pyproject.toml
