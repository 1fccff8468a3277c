"""A Cloud Storage stand-in for the tests, the docs' examples and the benchmarks:
``gcp-storage-emulator`` in a process of its own.

Airflow reads job output from it through the real google-cloud-storage client
(``STORAGE_EMULATOR_HOST``); the emulator's output mount writes to it (``EmulatorConfig.output_mount``).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BUCKET = "slurm-output"


@dataclass(frozen=True)
class StandIn:
    url: str  # for STORAGE_EMULATOR_HOST
    log: Path  # what it printed: one line per request it answered
    pid: int


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def storage_stand_in(
    log: Path | None = None, *, data_dir: Path | None = None, bucket: str | None = None
) -> Iterator[StandIn]:
    """Start the stand-in on a free port and stop it afterwards.

    Objects stay in memory, or under ``data_dir`` (for objects too big for memory); ``bucket`` is
    created at start. Its output goes to ``log`` (a temporary file if None).
    """
    port = _free_port()
    command = [str(Path(sys.executable).with_name("gcp-storage-emulator")), "start", "--host", "127.0.0.1"]
    command += ["--port", str(port)] + (["--default-bucket", bucket] if bucket else [])
    env = dict(os.environ)
    if data_dir is None:
        command.append("--in-memory")
    else:
        env["STORAGE_BASE"] = str(data_dir)
    with ExitStack() as stack:
        if log is None:
            log = Path(stack.enter_context(tempfile.TemporaryDirectory())) / "storage.log"
        with log.open("wb") as out:
            process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=data_dir)
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), 1).close()
                    break
                except OSError:
                    if process.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError(f"gcp-storage-emulator did not start:\n{log.read_text()}") from None
                    time.sleep(0.1)
            yield StandIn(f"http://127.0.0.1:{port}", log, process.pid)
        finally:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@contextmanager
def emulator_publishing_output(work: Path, storage_host: str, output_uri: str) -> Iterator[tuple[Any, str]]:
    """The emulator whose jobs write under a mount it publishes to the storage stand-in at
    ``output_uri``, as a Cloud Storage FUSE mount does; and the connection JSON that reads it there."""
    from airflow_provider_slurmapi.emulator import Emulator, EmulatorConfig
    from tests.conftest import connection_json

    mount = work / "cluster-output"
    mount.mkdir()
    config = EmulatorConfig(
        min_job_age=1.0, key_file=work / "key.json", state_dir=work / "jobs",
        output_mount=f"{mount}={output_uri}", storage_host=storage_host,
    )  # fmt: skip
    with Emulator(config) as emu:
        yield emu, connection_json(emu, output_uri=output_uri, output_cluster_path=str(mount))
