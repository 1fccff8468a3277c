"""Shared helpers for the client-core unit tests: the captured slurmrestd 24.11.5 replies, and a
scripted callSlurmRestApi for the clients."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from scripted_api import ScriptedApi

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "slurm-24.11.5"


def _load(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / name).read_text())


def _index() -> dict[str, dict[str, str]]:
    rows = (FIXTURES / "_index.tsv").read_text().splitlines()
    header = rows[0].split("\t")
    return {r.split("\t")[0]: dict(zip(header, r.split("\t"), strict=False)) for r in rows[1:] if r.strip()}


@pytest.fixture
def slurm_fixture():
    """``slurm_fixture("job_running.json")`` -> the captured slurmrestd reply body (a dict)."""
    return _load


@pytest.fixture
def fixture_index():
    """The rows of ``_index.tsv`` by file name: method, path, http_status, content_type, note."""
    return _index()


@pytest.fixture
def api() -> Iterator[ScriptedApi]:
    """A scripted callSlurmRestApi on 127.0.0.1: set ``api.script``, read ``api.received``."""
    server = ScriptedApi()
    server.start()
    yield server
    server.stop()
