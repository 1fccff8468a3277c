"""Shared fixtures: a real emulator on a free port and Airflow connections pointing at it."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from airflow_provider_slurmapi.emulator import Emulator, EmulatorConfig
from tests import real_slurm as real_slurm_support
from tests.real_slurm import RealSlurm
from tests.storage import BUCKET, emulator_publishing_output, storage_stand_in

PROJECT, REGION, CLUSTER = "test-project", "us-central1", "test-cluster"
FIXTURES = Path(__file__).parent / "fixtures" / "slurm-24.11.5"


def connection_json(emu: Emulator, conn_type: str = "slurm_job_api", **extra: object) -> str:
    fields = {
        "project_id": PROJECT,
        "region": REGION,
        "cluster_id": CLUSTER,
        "endpoint": emu.url,
        "key_path": str(emu.key_file),
        **extra,
    }
    return json.dumps({"conn_type": conn_type, "extra": {k: v for k, v in fields.items() if v is not None}})


@pytest.fixture(scope="module")
def emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Emulator]:
    """One emulator per test module; short purge age and fast time limits keep tests quick."""
    work = tmp_path_factory.mktemp("emulator")
    config = EmulatorConfig(
        min_job_age=3.0,
        seconds_per_minute=2.0,
        key_file=work / "key.json",
        state_dir=work / "jobs",
        kill_wait=1.0,
        requeue_delay=1.0,  # real Slurm: about 121 s before a requeued job may start again
    )
    with Emulator(config) as emu:
        yield emu


@pytest.fixture
def slurm_connection(emulator: Emulator, monkeypatch: pytest.MonkeyPatch) -> str:
    """``slurm_job_api_default`` as an environment connection to the emulator."""
    monkeypatch.setenv("AIRFLOW_CONN_SLURM_JOB_API_DEFAULT", connection_json(emulator))
    return "slurm_job_api_default"


@pytest.fixture(scope="module")
def storage_host() -> Iterator[str]:
    """A Cloud Storage stand-in for the module's tests: its URL, for STORAGE_EMULATOR_HOST and the
    emulator's output mount, with the output bucket created (as a real deployment has it)."""
    with storage_stand_in(bucket=BUCKET) as stand_in:
        yield stand_in.url


@pytest.fixture(scope="module")
def publishing_emulator(tmp_path_factory: pytest.TempPathFactory, storage_host: str) -> Iterator[tuple[Emulator, str]]:
    """The emulator whose jobs write under a mount it publishes to the storage stand-in, and the
    connection JSON that reads their output there."""
    work = tmp_path_factory.mktemp("publishing-emulator")
    with emulator_publishing_output(work, storage_host, f"gs://{BUCKET}/airflow") as published:
        yield published


@pytest.fixture(autouse=True, scope="session")
def _airflow_home(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Keep Airflow from writing into the user's home."""
    home = tmp_path_factory.mktemp("airflow-home")
    os.environ.setdefault("AIRFLOW_HOME", str(home))
    os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")


@pytest.fixture(scope="session")
def real_slurm() -> Iterator[RealSlurm]:
    """A real Slurm 24.11 + slurmrestd (see tests/real_slurm.py): mandatory in CI, else skipped."""
    slurm = real_slurm_support.require()
    yield slurm
    real_slurm_support.stop(slurm)


@pytest.fixture
def task_log(caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]) -> Callable[[], str]:
    """What the task, hook or trigger logged since the last call, each line once: Airflow 3 writes
    it to stdout (structlog), 2.x to logging (whose console handler also prints it)."""
    from airflow_provider_slurmapi.version_compat import AIRFLOW_V_3_0_PLUS

    caplog.set_level("INFO")

    def read() -> str:
        printed, logged = capsys.readouterr().out, caplog.text
        caplog.clear()
        return printed if AIRFLOW_V_3_0_PLUS else logged

    return read
