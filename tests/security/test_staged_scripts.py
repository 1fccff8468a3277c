"""Attacks on staged scripts: whoever can write where a script past the request limit is staged
(a principal with ``storage.objects.create`` on the bucket, another user's job on the shared mount)
replaces it, so that the next job of the DAG runs their code as the task's Slurm user.

Each task runs for real: its big script is staged in the Cloud Storage stand-in, the emulator's
output mount shows it to the job (as Cloud Storage FUSE would), and the job runs the wrapper Airflow
submitted. The attacker's script, if it ran, would leave a file behind; the genuine one prints a line.
The attacks land at chosen moments: after a task's run (for the next one), between the staging and
the submit, and on the mount after the job's node sees the object and before the job starts.
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from airflow.providers.common.compat.sdk import AirflowException

from airflow_provider_slurmapi.emulator import Emulator, EmulatorConfig
from airflow_provider_slurmapi.emulator.output_mount import MountingBackend
from airflow_provider_slurmapi.operators.job import SlurmSubmitJobOperator
from tests.conftest import connection_json
from tests.integration.airflow_runtime import RecordingTaskInstance
from tests.jobs import JOB
from tests.storage import BUCKET

PREFIX = f"gs://{BUCKET}/staging-attacks"  # and the backend's name: each backend its own
GENUINE = "the genuine staged script ran"


@pytest.fixture(scope="module", params=["builtin", pytest.param("slurmrestd", marks=pytest.mark.real_slurm)])
def mounted(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, storage_host: str
) -> Iterator[tuple[Emulator, Path, Path]]:
    """An emulator whose jobs see ``PREFIX`` at the mount: (emulator, the mount as the cluster
    names it, the same folder on this machine)."""
    work = tmp_path_factory.mktemp("staging-attacks")
    prefix = f"{PREFIX}-{request.param}"
    common: dict[str, Any] = {"key_file": work / "key.json", "state_dir": work / "jobs", "storage_host": storage_host}
    if request.param == "builtin":
        mount = work / "cluster-mount"
        mount.mkdir()
        config = EmulatorConfig(min_job_age=1.0, output_mount=f"{mount}={prefix}", **common)
        on_host: Callable[[str], Path] = Path
    else:
        slurm = request.getfixturevalue("real_slurm")
        mount = Path("/tmp/airflow-staging-attacks")
        on_host = slurm.host_path
        shutil.rmtree(on_host(str(mount)), ignore_errors=True)  # the chroot outlives a test run
        on_host(str(mount)).mkdir(mode=0o1777)
        on_host(str(mount)).chmod(0o1777)  # as open as a FUSE mount with a permissive dir-mode
        config = slurm.emulator_config(output_mount=f"{mount}={prefix}", cluster_root=str(slurm.chroot), **common)
    with Emulator(config) as emu:
        yield emu, mount, on_host


@pytest.fixture
def attacker(
    mounted: tuple[Emulator, Path, Callable[[str], Path]], storage_host: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Attacker]:
    emu, mount, on_host = mounted
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", storage_host)
    spec = emu.config.mount()
    assert spec is not None
    extra = {"output_uri": spec.uri, "output_cluster_path": str(mount)}
    monkeypatch.setenv("AIRFLOW_CONN_SLURM_JOB_API_DEFAULT", connection_json(emu, **extra))
    [backend] = emu.backends.values()
    assert isinstance(backend, MountingBackend)
    attacker = Attacker(backend, on_host(str(mount)), on_host, spec.uri)
    yield attacker
    attacker.stop()


class Attacker:
    """Writes where the DAG's scripts are staged: in the bucket, or on the mount the nodes see."""

    def __init__(self, backend: MountingBackend, local: Path, on_host: Callable[[str], Path], uri: str) -> None:
        self.backend, self.local, self.prefix = backend, local, uri.split("/", 3)[3]
        self.trace = on_host(f"/tmp/attacker-ran-{uuid.uuid4().hex}")  # where the job would leave it
        cluster_trace = f"/tmp/{self.trace.name}"
        self.script = f"#!/bin/bash\ntouch {cluster_trace}\necho the attacker's script ran\n"

    def ran(self) -> bool:
        return self.trace.exists()

    def stop(self) -> None:
        self.backend.__dict__.pop("fetch", None)

    def staged(self) -> Path:
        """The DAG's one staged script, on this machine."""
        [path] = (self.local / "staged" / "staging_attacks").glob("*.script")
        return path

    def write_bucket(self) -> None:
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import storage

        client = storage.Client(project="attacker", credentials=AnonymousCredentials())
        name = f"{self.prefix}/{self.staged().relative_to(self.local)}"
        client.bucket(BUCKET).blob(name).upload_from_string(self.script)

    def write_mount(self) -> None:
        self.staged().write_text(self.script)

    def after_the_node_sees_it(self, attack: Callable[[], None]) -> None:
        """``attack`` once the mount shows the staged object to the job, before the job starts."""
        fetch = self.backend.fetch

        def fetched() -> None:
            fetch()
            attack()

        self.backend.fetch = fetched  # type: ignore[method-assign]


def big_script() -> str:
    """Past the request's 1 MB: staged, and run through the wrapper."""
    return "#!/bin/bash\n" + "# padding of the staged script\n" * 40_000 + f"echo '{GENUINE}'\n"


def task(try_number: int = 1, run_id: str | None = None) -> tuple[SlurmSubmitJobOperator, dict[str, Any]]:
    """A new operator for each try, as a worker deserializes one; a new task run unless ``run_id``."""
    operator = SlurmSubmitJobOperator(
        task_id="staged", job=JOB, script=big_script(), poll_interval=0.5, output_wait=10, deferrable=False, retries=1
    )
    ti = RecordingTaskInstance(try_number=try_number, retries=1, run_id=run_id)
    ti.dag_id = "staging_attacks"
    return operator, {"ti": ti}


def run(try_number: int = 1, run_id: str | None = None) -> None:
    operator, context = task(try_number, run_id)
    operator.execute(context)


def test_a_script_replaced_in_the_bucket_after_a_run_is_staged_again_for_the_next(
    attacker: Attacker, task_log: Callable[[], str]
) -> None:
    run()
    attacker.write_bucket()
    task_log()
    run()
    log = task_log()
    assert "staged again (the object there had been changed) at" in log, log[-3000:]
    assert GENUINE in log and not attacker.ran(), log[-3000:]


def test_a_script_replaced_in_the_bucket_before_the_job_reads_it_runs_nothing(
    attacker: Attacker, task_log: Callable[[], str]
) -> None:
    run()  # staged once: the object is there before the attack
    operator, context = task()
    submit = operator.hook.submit_once

    def replaced_first(*args: Any, **kwargs: Any) -> Any:
        attacker.write_bucket()  # after Airflow staged it, before the job is submitted
        return submit(*args, **kwargs)

    operator.hook.submit_once = replaced_first  # type: ignore[method-assign]
    with pytest.raises(AirflowException) as failure:
        operator.execute(context)
    message = str(failure.value)
    assert message.startswith("The staged script gs://") and "was changed after Airflow staged it" in message, message
    assert "exit code 97" in message and "a retry of the task stages it again" in message, message
    assert not attacker.ran()


def test_a_script_replaced_on_the_mount_before_the_job_starts_runs_nothing_and_the_retry_runs_it(
    attacker: Attacker, task_log: Callable[[], str]
) -> None:
    run()
    attacker.after_the_node_sees_it(attacker.write_mount)
    run_id = f"manual__{uuid.uuid4()}"
    with pytest.raises(AirflowException, match=r"^The staged script gs://\S+ was changed after Airflow staged it"):
        run(run_id=run_id)
    assert not attacker.ran()
    attacker.stop()  # the retry's node sees what the bucket holds: Airflow's script
    task_log()
    run(try_number=2, run_id=run_id)
    log = task_log()
    assert GENUINE in log and not attacker.ran(), log[-3000:]
