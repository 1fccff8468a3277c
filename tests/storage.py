"""A Cloud Storage stand-in for the tests: ``gcp-storage-emulator`` in a process of its own.

Airflow reads job output from it through the real google-cloud-storage client
(``STORAGE_EMULATOR_HOST``); the emulator's output mount writes to it (``EmulatorConfig.output_mount``).
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

BUCKET = "slurm-output"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def storage_stand_in() -> Iterator[str]:
    """Start the stand-in on a free port; yield its URL (for ``STORAGE_EMULATOR_HOST``)."""
    port = _free_port()
    command = Path(sys.executable).with_name("gcp-storage-emulator")
    process = subprocess.Popen(
        [str(command), "start", "--host", "127.0.0.1", "--port", str(port), "--in-memory"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), 1).close()
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"gcp-storage-emulator did not start (exit {process.poll()})") from None
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
