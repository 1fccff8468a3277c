"""Which ended jobs a watcher reports, and its cursor: each job once, none from before it started."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from airflow_provider_slurmapi.client import operations
from airflow_provider_slurmapi.client.errors import InvalidRequestError
from airflow_provider_slurmapi.client.job_events import (
    END_STATES,
    SETTLE_SECONDS,
    EndedJob,
    EventCursor,
    JobEventFilter,
)
from airflow_provider_slurmapi.client.paths import SlurmPaths
from airflow_provider_slurmapi.client.steps import ApiSettings

EVERYTHING = JobEventFilter.of()


@pytest.fixture
def record(slurm_fixture):
    """A real accounting record of a COMPLETED job, with the given name, state, end time and owner."""
    (base,) = slurm_fixture("slurmdb_job_completed.json")["jobs"]

    def make(job_id: int, end: int, *, name: str = "train", state: str = "COMPLETED", **fields: Any) -> EndedJob:
        raw = copy.deepcopy(base)
        raw.update(job_id=job_id, name=name, **fields)
        raw["state"]["current"] = [state]
        raw["time"]["end"] = end
        return EndedJob.from_slurmdb(raw)

    return make


def test_a_real_record_gives_status_usage_and_owner(record) -> None:
    job = record(41, 1_000, user="alice", partition="a3", account="ml")
    assert (job.status.job_id, job.status.state, job.status.source) == ("41", "COMPLETED", "slurmdb")
    assert (job.user, job.partition, job.account, job.end_time) == ("alice", "a3", "ml", 1_000)
    assert job.usage is not None and job.usage.cpus >= 1
    assert EndedJob.from_payload(job.to_payload()) == job  # what a downstream task reads back


@pytest.mark.parametrize(
    ("options", "name", "state", "matched"),
    [
        ({"job_name": "train-*"}, "train-llama", "COMPLETED", True),
        ({"job_name": "train-*"}, "eval-llama", "COMPLETED", False),
        ({"job_name": ["eval-*", "train-?"]}, "train-7", "COMPLETED", True),
        ({"states": ["FAILED", "TIMEOUT"]}, "x", "COMPLETED", False),
        ({"states": "failed"}, "x", "FAILED", True),
        ({"user": "alice", "partition": ["a3", "a4"]}, "x", "COMPLETED", True),
        ({"user": "bob"}, "x", "COMPLETED", False),
        ({"account": "ml", "comment_contains": "sweep=7"}, "x", "COMPLETED", True),
        ({"comment_contains": "sweep=8"}, "x", "COMPLETED", False),
    ],
)
def test_the_filter_needs_every_condition_given(record, options, name, state, matched) -> None:
    job = record(
        1, 10, name=name, state=state, user="alice", partition="a4", account="ml", comment={"job": "a sweep=7 run"}
    )
    assert JobEventFilter.of(**options).matches(job) is matched


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"states": ["COMPLETED", "RUNNING"]}, "states"),
        ({"states": []}, "states"),
        ({"job_name": ""}, "job_name"),
        ({"user": ["alice", 3]}, "user"),
        ({"partition": {"a3": 1}}, "partition"),
        ({"comment_contains": ""}, "comment_contains"),
    ],
)
def test_bad_filters_are_refused_naming_the_field(options, field) -> None:
    with pytest.raises(InvalidRequestError, match=f"^{field}: ") as refused:
        JobEventFilter.of(**options)
    assert refused.value.field == field


def test_equal_filters_have_one_form() -> None:
    assert JobEventFilter.of(user="alice", states=["failed", "COMPLETED"]) == JobEventFilter.of(
        user=["alice", "alice"], states=["COMPLETED", "FAILED"]
    )
    assert JobEventFilter.of().states == list(END_STATES)


def test_each_job_is_reported_once_and_nothing_from_before_the_start(record) -> None:
    cursor = EventCursor.starting(1_000)
    before = record(1, 999)
    first = [before, record(2, 1_000), record(3, 1_010)]
    cursor, new = cursor.take(first, EVERYTHING)
    assert [j.status.job_id for j in new] == ["2", "3"]
    assert cursor.high_water == 1_010
    # the next read starts before the high water again (late records): the reported ones are skipped
    assert cursor.read_from == 1_010 - SETTLE_SECONDS
    late = record(4, 1_005)  # ended before job 3, reached accounting after it
    cursor, new = cursor.take([*first[1:], late, record(5, 1_020)], EVERYTHING)
    assert [j.status.job_id for j in new] == ["4", "5"]
    cursor, new = cursor.take([late, record(5, 1_020)], EVERYTHING)
    assert new == []


def test_a_job_ending_again_after_a_requeue_is_a_new_end(record) -> None:
    cursor, _ = EventCursor.starting(0).take([record(7, 100)], EVERYTHING)
    cursor, new = cursor.take([record(7, 130)], EVERYTHING)
    assert [(j.status.job_id, j.end_time) for j in new] == [("7", 130)]


def test_the_reported_list_keeps_only_the_settle_window(record) -> None:
    cursor, _ = EventCursor.starting(0).take([record(n, n) for n in range(1, 200)], EVERYTHING)
    assert set(cursor.reported) == {f"{n}@{n}" for n in range(199 - SETTLE_SECONDS, 200)}


def test_a_shared_read_from_earlier_does_not_report_what_this_cursor_already_passed(record) -> None:
    cursor, _ = EventCursor.starting(0).take([record(1, 100), record(2, 500)], EVERYTHING)
    # another watcher needed the window from 0: job 1 is outside this one's settle window
    cursor, new = cursor.take([record(1, 100), record(2, 500), record(3, 501)], EVERYTHING)
    assert [j.status.job_id for j in new] == ["3"]


def test_jobs_that_do_not_match_still_move_the_cursor(record) -> None:
    cursor, new = EventCursor.starting(0).take([record(1, 300, name="other")], JobEventFilter.of(job_name="train"))
    assert new == [] and cursor.high_water == 300 and cursor.reported == {}


def test_a_closed_window_moves_the_cursor_to_its_end_even_when_nothing_ended_in_it(record) -> None:
    cursor = EventCursor.starting(1_000)
    # a catch-up read of [read_from, 5_000]: everything that ended in it has been read
    cursor, new = cursor.take([record(1, 2_000)], EVERYTHING, window_end=5_000)
    assert [j.status.job_id for j in new] == ["1"] and cursor.high_water == 5_000
    cursor, new = cursor.take([], EVERYTHING, window_end=9_000)
    assert new == [] and cursor.high_water == 9_000 and cursor.read_from == 9_000 - SETTLE_SECONDS
    # a read for another watcher that ended before this cursor does not move it back
    cursor, _ = cursor.take([], EVERYTHING, window_end=3_000)
    assert cursor.high_water == 9_000


def test_an_open_window_moves_the_cursor_only_to_the_latest_end_it_holds(record) -> None:
    # the cluster's clock decides what has ended: the cursor does not guess a time past it
    cursor, _ = EventCursor.starting(1_000).take([record(1, 2_000)], EVERYTHING, window_end=None)
    assert cursor.high_water == 2_000
    cursor, _ = cursor.take([], EVERYTHING)
    assert cursor.high_water == 2_000


def test_the_cursor_round_trips_and_refuses_other_shapes() -> None:
    cursor = EventCursor(since=5, high_water=9, reported={"3@9": 9})
    assert EventCursor.from_dict(cursor.to_dict()) == cursor
    assert EventCursor.from_dict(None) is None
    assert EventCursor.from_dict({"since": "x"}) is None


def test_one_accounting_call_asks_for_every_end_state_in_the_window(slurm_fixture) -> None:
    api = ApiSettings(SlurmPaths("v0.0.42"))
    operation = operations.ended_jobs(api, 100, 200)
    request = next(operation)
    assert request.method == "GET"
    path, _, query = request.path.partition("?")
    assert path == "/slurmdb/v0.0.42/jobs/"
    pairs = [tuple(part.split("=")) for part in query.split("&")]
    assert ("start_time", "100") in pairs and ("end_time", "200") in pairs
    assert sorted(value for key, value in pairs if key == "state") == sorted(END_STATES)
    assert ("disable_truncate_usage_time", "true") in pairs and ("skip_steps", "true") in pairs


def test_a_cursor_saved_midway_through_a_read_skips_what_was_reported(record) -> None:
    cursor = EventCursor.starting(0)
    read = [record(1, 10), record(2, 11)]
    _, ended = cursor.take(read, EVERYTHING)
    midway = cursor.with_reported(ended[:1])  # saved after the first event; then a restart
    _, again = midway.take(read, EVERYTHING)
    assert [j.status.job_id for j in again] == ["2"]
