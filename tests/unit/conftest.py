"""Unit tests reach no metadata database nor task runner: Airflow Variables are a dict."""

from __future__ import annotations

import pytest

from airflow_provider_slurmapi.decorators import result_secret
from airflow_provider_slurmapi.operators import job_record
from tests.unit.task_fakes import FakeVariables


@pytest.fixture(autouse=True)
def variables(monkeypatch: pytest.MonkeyPatch) -> FakeVariables:
    fake = FakeVariables()
    monkeypatch.setattr(job_record, "_variables", lambda: fake)
    monkeypatch.setattr(result_secret, "_variables", lambda: fake)
    return fake
