"""A throwaway Redis server for a deployment test (the Celery executor's broker): Debian's ``redis-server``.

It listens on a free port of 127.0.0.1, keeps nothing on disk and lives as long as the test module.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.deployment.airflow_services import free_port, stop_process_group, wait_for
from tests.deployment.debian import unavailable_reason
from tests.real_slurm import in_ci


def _binary() -> Path | None:
    found = shutil.which("redis-server")
    return Path(found) if found else None


def _answers(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=2) as sock:
        sock.sendall(b"PING\r\n")
        return sock.recv(16).startswith(b"+PONG")
    return False


@contextlib.contextmanager
def redis_server() -> Iterator[str]:
    """Start a server for one test module and yield its URL; fails in CI and skips elsewhere when it cannot."""
    reason = unavailable_reason("redis-server", _binary)
    if reason:
        if in_ci():
            pytest.fail(f"the Celery deployment test is mandatory in CI, but {reason}", pytrace=False)
        pytest.skip(reason)
    binary = _binary()
    assert binary
    port = free_port()
    work = Path(tempfile.mkdtemp(prefix="airflow-redis-"))
    server = subprocess.Popen(
        [
            str(binary),
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(work),
        ],
        stdout=(work / "server.log").open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        wait_for(lambda: server.poll() is None and _answers(port), 30, "Redis to answer PING")
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        stop_process_group(server)
        shutil.rmtree(work, ignore_errors=True)
