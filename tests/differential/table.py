"""The differential table in docs/output.md: what the suite observed on real Slurm, bare and wrapped.

``python -m tests.differential.table`` runs the real-Slurm part of the suite with
``DIFFERENTIAL_TABLE=write``, which rewrites the table between the markers from what it observed.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parents[2] / "docs" / "output.md"
BEGIN, END = "<!-- differential table: begin -->", "<!-- differential table: end -->"


def markdown(rows: list[tuple[str, str, str]]) -> str:
    """The table: one row per case, its cells as the suite words them."""
    lines = ["| case | bare | wrapped |", "| --- | --- | --- |"]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def documented() -> str:
    """The table as docs/output.md has it between the markers."""
    text = DOCS.read_text()
    if BEGIN not in text or END not in text:
        return ""
    return text.split(BEGIN, 1)[1].split(END, 1)[0].strip()


def write(table: str) -> None:
    text = DOCS.read_text()
    head, rest = text.split(BEGIN, 1)
    tail = rest.split(END, 1)[1]
    DOCS.write_text(f"{head}{BEGIN}\n{table}\n{END}{tail}")


def rewriting() -> bool:
    return os.environ.get("DIFFERENTIAL_TABLE") == "write"


if __name__ == "__main__":
    module = Path(__file__).with_name("test_differential.py")
    environment = {**os.environ, "DIFFERENTIAL_TABLE": "write"}
    command = [sys.executable, "-m", "pytest", "-q", "-m", "real_slurm", str(module), *sys.argv[1:]]
    sys.exit(subprocess.run(command, env=environment).returncode)
