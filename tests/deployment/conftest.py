"""Services the deployment tests start for one test module at a time."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.deployment.postgres import Postgres, postgres_server


@pytest.fixture(scope="module")
def postgres() -> Iterator[Postgres]:
    """A PostgreSQL server of the module's own (a module that needs Airflow 3 skips before it starts)."""
    with postgres_server() as server:
        yield server
