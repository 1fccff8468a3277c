"""Submitting once, without I/O: the key, and the submit operation driven by hand."""

from __future__ import annotations

import datetime
import types
from typing import Any

import pytest

from airflow_provider_slurmapi.client import operations
from airflow_provider_slurmapi.client.envelope import SlurmCall, SlurmReply
from airflow_provider_slurmapi.client.errors import InvalidArgumentError, TransportError, UnavailableError
from airflow_provider_slurmapi.client.jobs import JobStatus, RecordSource
from airflow_provider_slurmapi.client.paths import SlurmPaths, base_job_id
from airflow_provider_slurmapi.client.retry import SUBMIT_SETTLE_SECONDS, RetryPolicy
from airflow_provider_slurmapi.client.steps import ApiSettings, Pause
from airflow_provider_slurmapi.client.submission import Outcome, submission_key, with_key
from airflow_provider_slurmapi.operators.job import is_automatic_retry
from airflow_provider_slurmapi.operators.waiting import task_deadline
from tests.jobs import JOB

PATHS = SlurmPaths()
API = ApiSettings(PATHS)
RETRY = RetryPolicy(max_attempts=3, initial_wait=1.0, max_wait=4.0)
API_RETRYING = ApiSettings(PATHS, RETRY)
SCRIPT = "#!/bin/bash\ntrue\n"
KEY = submission_key("dag", "train", "manual__1", -1)


def test_the_key_names_the_task_run_not_the_try() -> None:
    assert KEY == submission_key("dag", "train", "manual__1", -1) == submission_key("dag", "train", "manual__1", None)
    assert KEY.startswith("airflow-key=") and len(KEY) == len("airflow-key=") + 24
    others = {
        submission_key("dag2", "train", "manual__1", -1),
        submission_key("dag", "train2", "manual__1", -1),
        submission_key("dag", "train", "manual__2", -1),
        submission_key("dag", "train", "manual__1", 0),
        submission_key("da", "gtrain", "manual__1", -1),  # fields cannot run into each other
    }
    assert KEY not in others and len(others) == 5


def test_the_key_joins_the_users_comment_once() -> None:
    assert with_key({}, KEY)["comment"] == KEY
    assert with_key({"comment": "nightly"}, KEY)["comment"] == f"nightly {KEY}"
    keyed = with_key({"comment": "nightly"}, KEY)
    assert with_key(keyed, KEY) == keyed
    assert with_key({"comment": 5}, KEY) == {"comment": 5}  # the schema check names the bad type


@pytest.mark.parametrize(("record", "base"), [("86", "86"), ("86_2", "86"), ("86_[2-3]", "86"), ("90+1", "90")])
def test_base_job_id(record: str, base: str) -> None:
    assert base_job_id(record) == base


def reply(body: dict[str, Any]) -> SlurmReply:
    return SlurmReply(200, body)


def keyed_job(job_id: int, state: str = "RUNNING") -> dict[str, Any]:
    return {"job_id": job_id, "job_state": [state], "comment": f"x {KEY}", "name": JOB["name"]}


def test_a_failed_submit_waits_for_a_late_landing_then_looks_for_the_key_then_submits_again() -> None:
    op = operations.submit_job(API_RETRYING, JOB, SCRIPT, key=KEY)
    first = next(op)
    assert (first.method, first.path, first.body["job"]["comment"]) == ("POST", PATHS.submit(), KEY)
    # the failed submit may still be creating its job: it is looked for only once it would have landed
    pause = op.throw(UnavailableError(503, "UNAVAILABLE", "try later"))
    assert isinstance(pause, Pause) and pause.seconds == RETRY.submit_settle == SUBMIT_SETTLE_SECONDS
    live = op.send(None)
    assert (live.method, live.path) == ("GET", PATHS.jobs())
    # not in the live queue: a short job may have ended and left it meanwhile, so accounting is asked
    accounting = op.send(reply({"jobs": [{"job_id": 5, "job_state": ["RUNNING"], "comment": "other"}]}))
    assert (accounting.method, accounting.path.partition("&start_time=")[0]) == (
        "GET",
        PATHS.accounting_jobs(JOB["name"]),
    )  # (bounded in time, see the accounting search's own tests)
    again = op.send(reply({"jobs": []}))
    assert again == first
    with pytest.raises(StopIteration) as done:
        op.send(reply({"job_id": 7}))
    assert done.value.value == "7"


def test_a_submit_whose_reply_was_lost_adopts_the_job_it_created() -> None:
    op = operations.submit_job(API_RETRYING, JOB, SCRIPT, key=KEY)
    next(op)
    assert isinstance(op.throw(TransportError("connection reset by peer")), Pause)
    op.send(None)  # the live queue, after the pause
    read = op.send(reply({"jobs": [keyed_job(41, "PENDING"), {"job_id": 42, "job_state": ["RUNNING"]}]}))
    assert (read.method, read.path) == ("GET", PATHS.job("41"))  # no second POST
    with pytest.raises(StopIteration) as done:
        op.send(reply({"jobs": [keyed_job(41, "PENDING")]}))
    assert done.value.value == "41"


def test_a_backoff_longer_than_the_settle_is_kept() -> None:
    slow = RetryPolicy(max_attempts=5, initial_wait=60.0, max_wait=60.0, max_elapsed=3600, submit_settle=1.0)
    pauses = list(slow.resubmit_pauses())
    assert len(pauses) == 4 and all(1.0 <= pause <= 60.0 for pause in pauses)
    assert list(RetryPolicy(max_attempts=3, max_elapsed=5.0).resubmit_pauses()) == []  # the settle passes the limit


def test_a_permanent_error_is_not_retried_nor_reconciled() -> None:
    op = operations.submit_job(API_RETRYING, JOB, SCRIPT, key=KEY)
    next(op)
    with pytest.raises(InvalidArgumentError):
        op.throw(InvalidArgumentError(400, "INVALID_ARGUMENT", "bad path"))


def test_the_submit_gives_up_after_its_attempts() -> None:
    op = operations.submit_job(API_RETRYING, JOB, SCRIPT, key=KEY)
    step: SlurmCall | Pause = next(op)
    posts = 0
    with pytest.raises(UnavailableError):
        while True:
            if isinstance(step, Pause):
                step = op.send(None)
            elif step.method == "POST":
                posts += 1
                step = op.throw(UnavailableError(503, "UNAVAILABLE", "down"))
            else:
                step = op.send(reply({"jobs": []}))
    assert posts == RETRY.max_attempts


def test_without_a_key_a_submit_is_never_repeated() -> None:
    op = operations.submit_job(API_RETRYING, JOB, SCRIPT)
    next(op)
    with pytest.raises(TransportError):
        op.throw(TransportError("reset"))


@pytest.mark.parametrize(
    ("try_number", "max_tries", "retries", "automatic"),
    [
        (1, 3, 3, False),  # the first try of a run
        (2, 3, 3, True),  # an automatic retry
        (4, 3, 3, True),  # the last automatic retry
        (5, 7, 3, False),  # the first try after a user cleared try 4
        (6, 7, 3, True),  # a retry after that
        (1, 0, 0, False),  # no retries configured
        (2, 1, 0, False),  # cleared once, no retries configured
    ],
)
def test_an_automatic_retry_is_told_from_a_clear(
    try_number: int, max_tries: int, retries: int, automatic: bool
) -> None:
    ti = types.SimpleNamespace(try_number=try_number, max_tries=max_tries)
    assert is_automatic_retry(ti, retries) is automatic


def test_the_deadline_is_the_earlier_of_timeout_and_execution_timeout() -> None:
    started = datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=100)
    context: Any = {"ti": types.SimpleNamespace(start_date=started)}
    now = datetime.datetime.now(datetime.UTC).timestamp()
    assert task_deadline(context, None, None) is None
    assert task_deadline(context, 50, None) == pytest.approx(now + 50, abs=1)
    assert task_deadline(context, None, datetime.timedelta(seconds=160)) == pytest.approx(now + 60, abs=1)
    assert task_deadline(context, 50, datetime.timedelta(seconds=160)) == pytest.approx(now + 50, abs=1)
    assert task_deadline(context, 500, datetime.timedelta(seconds=160)) == pytest.approx(now + 60, abs=1)


def test_a_first_try_submits_straight_away() -> None:
    op = operations.submit_once(API, JOB, SCRIPT, KEY, earlier_tries=False)
    assert next(op).method == "POST"  # no earlier try can have left a job
    with pytest.raises(StopIteration) as done:
        op.send(reply({"job_id": 3}))
    assert (done.value.value.job_id, done.value.value.outcome) == ("3", "submitted")


def test_accounting_is_asked_only_when_a_finished_job_could_be_adopted() -> None:
    for adopt, expected in ((False, ["GET /slurm", "POST"]), (True, ["GET /slurm", "GET /slurmdb", "POST"])):
        op = operations.submit_once(API, JOB, SCRIPT, KEY, adopt_completed=adopt)
        step, seen = next(op), []
        with pytest.raises(StopIteration):
            while True:
                seen.append(f"{step.method} {step.path.split('/v0')[0]}" if step.method == "GET" else step.method)
                step = op.send(reply({"jobs": []} if step.method == "GET" else {"job_id": 9}))
        assert seen == expected


def _accounting_query(op: Any) -> dict[str, list[str]]:
    """Drive ``find_job_by_key`` past an empty live queue; the query of its accounting read."""
    from urllib.parse import parse_qs, urlsplit

    live = next(op)
    assert (live.method, live.path) == ("GET", PATHS.jobs())
    read = op.send(reply({"jobs": []}))
    assert read.method == "GET" and read.path.startswith("/slurmdb/v0.0.42/jobs/?")
    return parse_qs(urlsplit(read.path).query)


def test_accounting_is_searched_from_when_the_task_run_began_less_a_clock_margin() -> None:
    query = _accounting_query(operations.find_job_by_key(API, KEY, "train", since=1_800_000_000.5))
    assert query == {"job_name": ["train"], "start_time": ["1799996400"]}  # an hour earlier


def test_without_a_start_accounting_is_searched_over_the_last_30_days() -> None:
    now = datetime.datetime.now(datetime.UTC).timestamp()
    query = _accounting_query(operations.find_job_by_key(API, KEY, "train"))
    assert query["job_name"] == ["train"]
    assert int(query["start_time"][0]) == pytest.approx(now - 30 * 86_400, abs=5)


def test_submit_once_passes_the_start_to_the_accounting_search() -> None:
    op = operations.submit_once(API, JOB, SCRIPT, KEY, adopt_completed=True, since=1_800_000_000)
    assert _accounting_query(op)["start_time"] == ["1799996400"]


SINCE = 1_800_000_000  # when the DAG run could start


def test_the_submit_time_is_read_from_either_record() -> None:
    live = {"job_id": 7, "job_state": ["RUNNING"], "submit_time": {"set": True, "infinite": False, "number": 5}}
    assert JobStatus.from_slurm(live).submit_time == 5
    assert JobStatus.from_slurmdb({"job_id": 7, "time": {"submission": 6}}).submit_time == 6
    assert JobStatus.from_slurmdb({"job_id": 7, "time": None}).submit_time is None


def accounted(name: str = JOB["name"], submitted: int = SINCE + 60, comment: str = "") -> JobStatus:
    return JobStatus(
        "7", "COMPLETED", name=name, comment=comment, submit_time=submitted, source=RecordSource.ACCOUNTING
    )


@pytest.mark.parametrize(
    ("job", "taken"),
    [
        (JobStatus("7", "RUNNING", comment=f"nightly {KEY}", name="other"), True),  # the key says it all
        (JobStatus("7", "RUNNING", comment="nightly"), False),
        (JobStatus("7", "RUNNING", comment="", name=JOB["name"]), False),  # the live queue shows every comment
        (accounted(comment="nightly"), False),
        # accounting without AccountingStoreFlags=job_comment: the name and the submit time
        (accounted(), True),
        (accounted(name="other"), False),
        (accounted(submitted=SINCE - 7200), False),
        (accounted(submitted=SINCE - 60), True),  # within the margin for clocks that differ
    ],
)
def test_a_recorded_job_is_taken_only_if_the_cluster_shows_it_is_the_task_runs(job: JobStatus, taken: bool) -> None:
    assert (operations.why_not_the_keys_job(job, KEY, JOB["name"], SINCE) is None) is taken


def _run(op: Any, replies: dict[str, SlurmReply]) -> tuple[list[str], Any]:
    """Drive ``op``, answering each call by its path's start; the calls made and the result."""
    calls: list[str] = []
    step = next(op)
    try:
        while True:
            calls.append(f"{step.method} {step.path}")
            answer = next(r for prefix, r in replies.items() if f"{step.method} {step.path}".startswith(prefix))
            step = op.send(answer)
    except StopIteration as done:
        return calls, done.value


def test_a_recorded_job_of_another_task_run_is_not_reattached() -> None:
    op = operations.submit_once(API, JOB, SCRIPT, KEY, known_job_id="7", since=SINCE)
    replies = {
        f"GET {PATHS.job('7')}": reply({"jobs": [{"job_id": 7, "job_state": ["RUNNING"], "comment": "someone's"}]}),
        f"GET {PATHS.jobs()}": reply({"jobs": []}),
        "POST": reply({"job_id": 8}),
    }
    calls, submission = _run(op, replies)
    assert (submission.job_id, submission.outcome) == ("8", Outcome.SUBMITTED)
    assert calls == [f"GET {PATHS.job('7')}", f"GET {PATHS.jobs()}", f"POST {PATHS.submit()}"]


def test_a_recorded_job_that_accounting_keeps_without_its_comment_is_adopted() -> None:
    record = {"job_id": 7, "name": JOB["name"], "state": {"current": ["COMPLETED"]}, "time": {"submission": SINCE}}
    record |= {"comment": {"job": ""}, "exit_code": {"status": ["SUCCESS"], "return_code": {"set": True, "number": 0}}}
    op = operations.submit_once(API, JOB, SCRIPT, KEY, known_job_id="7", adopt_completed=True, since=SINCE)
    replies = {
        f"GET {PATHS.job('7')}": SlurmReply(404, {"jobs": []}),  # it left the live queue
        f"GET {PATHS.accounting_job('7')}": reply({"jobs": [record]}),
        f"GET {PATHS.jobs()}": reply({"jobs": []}),
        "GET /slurmdb": reply({"jobs": [record]}),  # the key search: no comment carries the key
    }
    calls, submission = _run(op, replies)
    assert (submission.job_id, submission.outcome) == ("7", Outcome.ADOPTED)
    assert not any(call.startswith("POST") for call in calls)
