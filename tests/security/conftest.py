"""The security suite: each test is one attack, tried for real, named by what the attacker does.

The emulator keeps the storage as open as real shared storage often is (folders any job's user
may write, as a FUSE mount with a permissive dir-mode): the defence must be in the provider.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_provider_slurmapi.emulator import Emulator
from tests.conftest import connection_json


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/security/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.security)


@pytest.fixture
def shared_folder(emulator: Emulator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A ``file://`` output folder that the workers and the cluster's nodes both mount."""
    root = tmp_path / "shared"
    root.mkdir()
    extra = {"output_uri": f"file://{root}", "output_cluster_path": str(root)}
    monkeypatch.setenv("AIRFLOW_CONN_SLURM_JOB_API_DEFAULT", connection_json(emulator, **extra))
    return root
