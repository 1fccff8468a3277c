"""A throwaway PostgreSQL server for a deployment test: Debian's ``postgresql``, run as ``postgres``.

The server gets a data directory of its own in /tmp, a free port on 127.0.0.1, trust
authentication and no durability (``fsync=off``): it lives as long as the test module.
"""

from __future__ import annotations

import contextlib
import glob
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.deployment.airflow_services import free_port, wait_for
from tests.deployment.debian import unavailable_reason
from tests.real_slurm import in_ci

DATABASE = USER = "airflow"


def _binaries() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return Path(found[-1]).parent if found else None


@dataclass(frozen=True)
class Postgres:
    port: int

    @property
    def url(self) -> str:
        """SQLAlchemy's URL for Airflow (psycopg2; Airflow 3.3 derives its asyncpg URL from it)."""
        return f"postgresql+psycopg2://{USER}@127.0.0.1:{self.port}/{DATABASE}"

    def query(self, sql: str, *args: object, database: str = DATABASE) -> list[tuple]:
        import psycopg2  # a test dependency; only the deployment tests use it

        with contextlib.closing(psycopg2.connect(host="127.0.0.1", port=self.port, user=USER, dbname=database)) as db:
            with db.cursor() as cursor:
                cursor.execute(sql, args)
                return cursor.fetchall()


@contextlib.contextmanager
def postgres_server() -> Iterator[Postgres]:
    """Start a server for one test module; fails in CI and skips elsewhere when the machine cannot."""
    reason = unavailable_reason("postgresql", _binaries)
    if reason:
        if in_ci():
            pytest.fail(f"the PostgreSQL deployment test is mandatory in CI, but {reason}", pytrace=False)
        pytest.skip(reason)
    binaries = _binaries()
    assert binaries
    # the postgres user must reach the directory: pytest's own temp dirs are private to root
    data = Path(tempfile.mkdtemp(prefix="airflow-postgres-"))
    shutil.chown(data, "postgres", "postgres")
    as_postgres = ["runuser", "-u", "postgres", "--"]
    subprocess.run(
        [*as_postgres, str(binaries / "initdb"), "-D", str(data / "db"), "-U", USER, "--auth=trust", "-E", "UTF8"],
        capture_output=True,
        check=True,
        timeout=120,
    )
    port = free_port()
    server = subprocess.Popen(
        [
            *as_postgres,
            str(binaries / "postgres"),
            "-D",
            str(data / "db"),
            "-p",
            str(port),
            "-k",
            str(data),
            "-c",
            "listen_addresses=127.0.0.1",
            "-c",
            "max_connections=300",
            "-c",
            "fsync=off",
            "-c",
            "synchronous_commit=off",
            "-c",
            "full_page_writes=off",
        ],  # fmt: skip
        stdout=(data / "server.log").open("wb"),
        stderr=subprocess.STDOUT,
    )
    try:
        pg = Postgres(port)

        def ready() -> bool:
            if server.poll() is not None:
                raise AssertionError(f"postgres exited: {(data / 'server.log').read_text()[-2000:]}")
            try:
                return bool(pg.query("SELECT 1", database="postgres"))
            except Exception:
                return False

        wait_for(ready, 60, "PostgreSQL to accept connections")
        # initdb made the superuser "airflow"; Airflow wants a database of that name too
        subprocess.run(
            [*as_postgres, str(binaries / "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", USER, DATABASE],
            capture_output=True,
            check=True,
            timeout=60,
        )
        yield pg
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=10)
        shutil.rmtree(data, ignore_errors=True)
