"""The retention of staged scripts against the jobs that may still run them: a job held in the
queue past the retention keeps its script through another staging of its DAG, and runs it once
released; an old script no job in the queue runs is removed.

The scripts are staged in the Cloud Storage stand-in, which the emulator's output mount shows to
the jobs (as Cloud Storage FUSE would). Their staging times are set back rather than waited for."""

from __future__ import annotations

import hashlib
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_slurmapi.emulator import Emulator, EmulatorConfig
from airflow_provider_slurmapi.hooks.object_store import STAGED_AT
from airflow_provider_slurmapi.hooks.slurm_job_api import SlurmJobApiHook
from airflow_provider_slurmapi.operators.job import SlurmSubmitJobOperator
from tests.conftest import connection_json
from tests.integration.airflow_runtime import RecordingTaskInstance
from tests.jobs import JOB
from tests.storage import BUCKET

PREFIX = f"gs://{BUCKET}/staged-retention"  # and the backend's name: each backend its own
DAG = "staged_retention"


@dataclass(frozen=True)
class Cluster:
    emulator: Emulator
    mount: str  # where the jobs see the output location
    prefix: str  # the output location, each backend its own
    release: Callable[[str], object]  # lets a held job start


@pytest.fixture(scope="module", params=["builtin", pytest.param("slurmrestd", marks=pytest.mark.real_slurm)])
def mounted(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, storage_host: str
) -> Iterator[Cluster]:
    """An emulator whose jobs see the output location at a mount."""
    prefix = f"{PREFIX}-{request.param}"
    work = tmp_path_factory.mktemp("staged-retention")
    common: dict[str, Any] = {"key_file": work / "key.json", "state_dir": work / "jobs", "storage_host": storage_host}
    if request.param == "builtin":
        mount = work / "cluster-mount"
        mount.mkdir()
        config = EmulatorConfig(min_job_age=1.0, output_mount=f"{mount}={prefix}", **common)
        with Emulator(config) as emu:
            yield Cluster(emu, str(mount), prefix, lambda job_id: emu.control(job_id, "release"))
        return
    slurm = request.getfixturevalue("real_slurm")
    mount = Path("/tmp/airflow-staged-retention")
    shutil.rmtree(slurm.host_path(str(mount)), ignore_errors=True)  # the chroot outlives a test run
    slurm.host_path(str(mount)).mkdir(mode=0o1777)
    slurm.host_path(str(mount)).chmod(0o1777)  # as open as a FUSE mount with a permissive dir-mode
    config = slurm.emulator_config(output_mount=f"{mount}={prefix}", cluster_root=str(slurm.chroot), **common)
    with Emulator(config) as emu:
        yield Cluster(emu, str(mount), prefix, lambda job_id: slurm.admin("scontrol", "release", job_id))


@pytest.fixture
def connection(mounted: Cluster, storage_host: str, monkeypatch: pytest.MonkeyPatch) -> Cluster:
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", storage_host)
    extra = {"output_uri": mounted.prefix, "output_cluster_path": mounted.mount, "output_staged_retention_days": "1"}
    monkeypatch.setenv("AIRFLOW_CONN_SLURM_JOB_API_DEFAULT", connection_json(mounted.emulator, **extra))
    return mounted


def bucket() -> Any:
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    return storage.Client(project="test", credentials=AnonymousCredentials()).bucket(BUCKET)


def big_script(line: str) -> str:
    """Past the request's 1 MB: staged, and run through the wrapper."""
    return "#!/bin/bash\n" + "# padding of the staged script\n" * 40_000 + f"echo '{line}'\n"


def staged_folder(cluster: Cluster) -> str:
    """The DAG's staged scripts, as object names."""
    return f"{cluster.prefix.split('/', 3)[3]}/staged/{DAG}"


def staged_name(cluster: Cluster, script: str) -> str:
    return f"{staged_folder(cluster)}/{hashlib.sha256(script.encode()).hexdigest()}.script"


def staged_days_ago(name: str, days: float) -> None:
    """Make the object look last staged ``days`` ago (the retention counts from there)."""
    blob = bucket().get_blob(name)
    blob.metadata = {**(blob.metadata or {}), STAGED_AT: f"{time.time() - days * 86400:.3f}"}
    blob.patch()


def submit(script: str, job: dict[str, Any], *, wait: bool) -> str:
    operator = SlurmSubmitJobOperator(
        task_id="staged", job=job, script=script, poll_interval=0.5, deferrable=False, wait_for_completion=wait
    )
    ti = RecordingTaskInstance()
    ti.dag_id = DAG
    return str(operator.execute({"ti": ti}))


def test_a_script_whose_job_is_held_past_the_retention_stays_and_runs_once_released(connection: Cluster) -> None:
    held_script = big_script("the held job ran its staged script")
    held = submit(held_script, {**JOB, "hold": True}, wait=False)
    unused = f"{staged_folder(connection)}/{'0' * 64}.script"  # a script no job in the queue runs any more
    bucket().blob(unused).upload_from_string(b"#!/bin/bash\necho an old run\n")
    for name in (staged_name(connection, held_script), unused):
        staged_days_ago(name, 2)  # past the retention of one day

    submit(big_script("another task of the DAG"), JOB, wait=True)  # its staging cleans the folder

    assert bucket().get_blob(unused) is None
    assert bucket().get_blob(staged_name(connection, held_script)) is not None
    connection.release(held)
    hook = SlurmJobApiHook()
    status = hook.wait_for_job(held, poll_interval=0.5, timeout=120)
    assert status.state == "COMPLETED", status
    output = "".join(tail.text for tail in hook.read_job_output(held))
    assert "the held job ran its staged script" in output, output
