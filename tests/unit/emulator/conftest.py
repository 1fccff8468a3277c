"""Fixtures for the emulator tests: a real Emulator on a free port, spoken to over HTTP."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from emulator_testkit import Api

from airflow_provider_slurmapi.emulator import Emulator, EmulatorConfig


@pytest.fixture(scope="module")
def emu(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Emulator]:
    config = EmulatorConfig(
        seconds_per_minute=1.5, min_job_age=2.0, kill_wait=1.0, state_dir=tmp_path_factory.mktemp("emu-state")
    )
    with Emulator(config) as emulator:
        yield emulator


@pytest.fixture(scope="module")
def api(emu: Emulator) -> Api:
    return Api(emu)


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    return tmp_path
