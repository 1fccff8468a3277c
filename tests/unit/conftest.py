"""Unit tests reach no metadata database nor task runner: Airflow Variables are a dict."""

from __future__ import annotations

import pytest

from tests.unit.task_fakes import FakeVariables, fake_variables


@pytest.fixture(autouse=True)
def variables(monkeypatch: pytest.MonkeyPatch) -> FakeVariables:
    return fake_variables(monkeypatch)
