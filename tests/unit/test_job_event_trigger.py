"""The job-event trigger's arguments: refused at DAG parse when wrong, serialised deterministically
(Airflow tells watcher triggers apart by their kwargs), absent with a clear error on Airflow 2."""

from __future__ import annotations

import importlib
import json
from datetime import UTC, datetime, timedelta, timezone

import pytest

from airflow_provider_slurmapi.version_compat import AIRFLOW_V_3_0_PLUS


@pytest.mark.skipif(AIRFLOW_V_3_0_PLUS, reason="Airflow 2 only")
def test_airflow_2_gets_a_clear_import_error() -> None:
    with pytest.raises(ImportError, match=r"needs Airflow 3\.1 or later"):
        importlib.import_module("airflow_provider_slurmapi.triggers.job_events")


airflow_3 = pytest.mark.skipif(not AIRFLOW_V_3_0_PLUS, reason="asset watchers are Airflow 3 only")


def _trigger(**kwargs):
    from airflow_provider_slurmapi.triggers.job_events import SlurmJobEventTrigger

    return SlurmJobEventTrigger(**kwargs)


@airflow_3
def test_serialisation_is_deterministic_and_round_trips() -> None:
    from airflow.triggers.base import BaseEventTrigger

    a = _trigger(job_name=["train-*", "eval-*"], user="alice", states=["failed", "COMPLETED"], poll_interval=30)
    b = _trigger(job_name=["eval-*", "train-*"], user=["alice"], states=["COMPLETED", "FAILED"], poll_interval=30.0)
    assert a.serialize() == b.serialize()
    classpath, kwargs = a.serialize()
    assert classpath == "airflow_provider_slurmapi.triggers.job_events.SlurmJobEventTrigger"
    json.dumps(kwargs)  # plain JSON
    again = _trigger(**kwargs)
    assert again.serialize() == a.serialize()
    assert BaseEventTrigger.hash(classpath, kwargs) == BaseEventTrigger.hash(*b.serialize())
    assert BaseEventTrigger.hash(classpath, kwargs) != BaseEventTrigger.hash(*_trigger(user="bob").serialize())


@airflow_3
def test_since_takes_datetimes_text_and_numbers_and_never_the_parse_time() -> None:
    moment = datetime(2026, 12, 1, 8, tzinfo=UTC)
    assert _trigger(since=moment).since == int(moment.timestamp())
    assert _trigger(since="2026-12-01T08:00:00").since == int(moment.timestamp())  # UTC when no zone
    assert _trigger(since=moment.astimezone(timezone(timedelta(hours=9)))).since == int(moment.timestamp())
    assert _trigger(since=1_796_000_000.7).since == 1_796_000_000
    # without since, nothing depends on when the DAG file was parsed
    assert _trigger().serialize()[1]["since"] is None


@airflow_3
@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"since": "yesterday"}, "since"),
        ({"since": -5}, "since"),
        ({"poll_interval": 1}, "poll_interval"),
        ({"poll_interval": "60"}, "poll_interval"),
        ({"states": ["RUNNING"]}, "states"),
        ({"job_name": ["ok", ""]}, "job_name"),
        ({"slurm_conn_id": ""}, "slurm_conn_id"),
    ],
)
def test_bad_arguments_fail_the_dag_parse_naming_the_field(kwargs, field) -> None:
    with pytest.raises(ValueError, match=f"^{field}: "):
        _trigger(**kwargs)


@airflow_3
def test_the_cursor_is_named_by_cluster_filter_and_since_not_by_interval() -> None:
    key = _trigger(job_name="train-*", poll_interval=30).cursor_key
    assert key == _trigger(job_name="train-*", poll_interval=60).cursor_key
    assert key.startswith("slurm_job_events.")
    assert key != _trigger(job_name="train-*", cluster_id="other").cursor_key
    assert key != _trigger(job_name="train-*", since=0).cursor_key


class _OneRead:
    """A feed whose first read gives ``jobs`` and whose next one never comes."""

    def __init__(self, jobs) -> None:
        self.jobs = jobs

    def __call__(self, hook_kwargs, interval, matches, cursor) -> _OneRead:
        self.matches, self.cursor = matches, cursor
        return self

    async def __aenter__(self) -> _OneRead:
        return self

    async def __aexit__(self, *exc_info) -> None:
        return None

    async def next(self):
        import asyncio

        from airflow_provider_slurmapi.triggers.ended_jobs import Share

        if self.jobs is None:
            await asyncio.Event().wait()
        jobs, self.jobs = self.jobs, None
        self.cursor, ended = self.cursor.take(jobs, self.matches)
        return Share(self.cursor, tuple(ended))


class _Store:
    def __init__(self) -> None:
        self.saved: list[dict] = []

    async def aget(self, key, default=None):
        return None

    async def aset(self, key, value) -> None:
        self.saved.append(value)


@airflow_3
@pytest.mark.parametrize(("count", "interval", "pauses"), [(3, 60, [3.0, 3.0, 3.0]), (20, 10, [0.5] * 19 + [3.0])])
async def test_events_come_3_s_apart_and_a_burst_within_an_interval(
    monkeypatch: pytest.MonkeyPatch, count: int, interval: float, pauses: list[float]
) -> None:
    import asyncio

    from airflow_provider_slurmapi.client.job_events import EndedJob
    from airflow_provider_slurmapi.client.jobs import JobStatus
    from airflow_provider_slurmapi.triggers import job_events

    now = 1_800_000_000
    jobs = [EndedJob(JobStatus(str(n), "COMPLETED"), None, "c", "u", "a", "p", now, now, now + n) for n in range(count)]
    monkeypatch.setattr(job_events, "EndedJobsFeed", _OneRead(jobs))
    monkeypatch.setattr(job_events.time, "time", lambda: now)
    real_sleep = asyncio.sleep
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    monkeypatch.setattr(job_events.asyncio, "sleep", sleep)
    trigger = _trigger(poll_interval=interval)
    trigger.asset_state_store = store = _Store()
    events = trigger.run()
    got = [(await events.__anext__()).payload["job"]["job_id"] for _ in range(count)]
    waiting = asyncio.ensure_future(events.__anext__())  # the pause after the last event, the save
    await real_sleep(0.05)
    waiting.cancel()
    assert got == [str(n) for n in range(count)]
    assert slept == pauses
    assert sum(slept) <= interval + 3
    # saved at the start, after each event followed by the full pause, and once at the end
    assert len(store.saved) == 1 + (count - 1 if pauses[0] == 3.0 else 0) + 1
    assert sorted(store.saved[-1]["reported"]) == sorted(f"{n}@{now + n}" for n in range(count))


@airflow_3
def test_the_trigger_takes_the_operators_connection_arguments_and_keeps_its_cursor_names() -> None:
    from airflow_provider_slurmapi.operators.base import CONNECTION_ARGUMENTS

    given = {"cluster_id": "c", "api_version": "v0.0.41", "retry_attempts": 3, "retry_max_seconds": 30.0}
    trigger = _trigger(job_name="train-*", **given)
    assert list(trigger.hook_kwargs) == list(CONNECTION_ARGUMENTS)  # one declaration, the operators'
    assert {name: trigger.hook_kwargs[name] for name in given} == given
    assert _trigger(**trigger.serialize()[1]).serialize() == trigger.serialize()
    with pytest.raises(TypeError, match="'slurm_connid'"):
        _trigger(slurm_connid="typo")
    # the API version and retries do not rename a cursor; the names are those cursors always had
    assert trigger.cursor_key == _trigger(job_name="train-*", cluster_id="c").cursor_key
    assert _trigger(job_name="train-*").cursor_key == "slurm_job_events.28465c78c2a1fd65"
    chain = "sa@p.iam.gserviceaccount.com"
    assert _trigger(job_name="train-*", impersonation_chain=chain, cluster_id="c").cursor_key == (
        "slurm_job_events.5944bd1b01cc6e4c"
    )
