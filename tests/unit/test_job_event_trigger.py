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
