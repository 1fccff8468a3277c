"""Stand-ins for what Airflow hands a task (a task instance, its state store, the context), shared
by the operator and sensor unit tests."""

from __future__ import annotations

from typing import Any

from airflow_provider_slurmapi.client.jobs import ExitCode, JobStatus


def status(
    state: str = "COMPLETED", code: int = 0, reason: str | None = None, restarts: int = 0, job_id: str = "42"
) -> JobStatus:
    exit_code = ExitCode(status="SUCCESS" if code == 0 else "ERROR", return_code=code)
    return JobStatus(job_id=job_id, state=state, exit_code=exit_code, reason=reason, restarts=restarts)


class FakeTI:
    def __init__(self, try_number: int = 1, max_tries: int = 0, map_index: int = -1, start_date: Any = None) -> None:
        self.dag_id, self.task_id, self.run_id = "dag", "task", "run1"
        self.map_index, self.try_number, self.max_tries = map_index, try_number, max_tries
        self.start_date = start_date
        self.pushes: dict[str, Any] = {}

    def xcom_push(self, key: str, value: Any) -> None:
        self.pushes[key] = value


class FakeStore:
    """A task state store (Airflow 3.3+) that records what was set and deleted."""

    def __init__(self, **values: Any) -> None:
        self.values = dict(values)
        self.sets: list[tuple[str, Any]] = []
        self.deletes: list[str] = []

    def get(self, key: str) -> Any:
        return self.values.get(key)

    def set(self, key: str, value: Any) -> None:
        self.sets.append((key, value))
        self.values[key] = value

    def delete(self, key: str) -> None:
        self.deletes.append(key)
        self.values.pop(key, None)


class FakeVariables:
    """Airflow's Variable as a dict; ``broken`` makes every call fail as an unreachable database."""

    def __init__(self, **values: str) -> None:
        self.values: dict[str, str] = dict(values)
        self.descriptions: dict[str, str | None] = {}
        self.broken = False

    def _check(self) -> None:
        if self.broken:
            raise ConnectionError("metadata database unreachable")

    def get(self, key: str, default: Any) -> Any:
        self._check()
        return self.values.get(key, default)

    def set(self, key: str, value: str, description: str | None = None) -> None:
        self._check()
        self.values[key], self.descriptions[key] = value, description

    def delete(self, key: str) -> None:
        self._check()
        self.values.pop(key, None)


def ctx(ti: FakeTI | None = None, store: FakeStore | None = None) -> dict[str, Any]:
    context: dict[str, Any] = {"ti": ti or FakeTI()}
    if store is not None:
        context["task_state_store"] = store
    return context


def fake_variables(monkeypatch: Any) -> FakeVariables:
    """Airflow's Variables as the record of a task run and the deployment's result secret read them."""
    from airflow_provider_slurmapi.decorators import result_secret
    from airflow_provider_slurmapi.operators import job_record

    fake = FakeVariables()
    monkeypatch.setattr(job_record, "_variables", lambda: fake)
    monkeypatch.setattr(result_secret, "_variables", lambda: fake)
    return fake
