"""The bulk state query: repeated parameters, split when too long, refusals recognised."""

from __future__ import annotations

import pytest

from airflow_provider_slurmapi.client import operations
from airflow_provider_slurmapi.client.arrays import summaries
from airflow_provider_slurmapi.client.envelope import SlurmReply
from airflow_provider_slurmapi.client.errors import (
    BulkStateQueryUnsupported,
    InvalidArgumentError,
    SlurmError,
    SlurmErrorDetail,
    UnavailableError,
)
from airflow_provider_slurmapi.client.paths import MAX_STATE_QUERY_CHARS, SlurmPaths
from airflow_provider_slurmapi.client.steps import ApiSettings

PATHS = SlurmPaths()
API = ApiSettings(PATHS)


def test_one_call_repeats_the_parameter() -> None:
    op = operations.job_states(API, ["1", "2", "3_4"])
    request = next(op)
    assert request.path == "/slurm/v0.0.42/jobs/state/?job_id=1&job_id=2&job_id=3_4"
    with pytest.raises(StopIteration) as done:
        op.send(SlurmReply(200, {"jobs": [{"job_id": "1", "state": ["RUNNING"]}, {"job_id": "2", "state": "PENDING"}]}))
    assert done.value.value == {"1": ["RUNNING"], "2": ["PENDING"]}  # 3_4 is unknown: absent


def test_a_long_list_is_split_into_calls_that_fit() -> None:
    job_ids = [str(1_000_000 + n) for n in range(7500)]
    op = operations.job_states(API, job_ids)
    request, asked = next(op), []
    while True:
        assert len(request.path) <= MAX_STATE_QUERY_CHARS
        asked += [part.removeprefix("job_id=") for part in request.path.split("?")[1].split("&")]
        try:
            request = op.send(SlurmReply(200, {"jobs": []}))
        except StopIteration:
            break
    assert asked == job_ids  # each once, in order, in 3 calls
    assert len(PATHS.job_state_queries(job_ids)) == 3


@pytest.mark.parametrize(
    "refusal",
    [
        InvalidArgumentError(400, "INVALID_ARGUMENT", "query strings are not allowed"),
        SlurmError(400, [SlurmErrorDetail(None, "Unable to parse query.", "", "")]),
    ],
)
def test_a_refused_query_is_recognised(refusal: Exception) -> None:
    op = operations.job_states(API, ["1"])
    next(op)
    with pytest.raises(BulkStateQueryUnsupported):
        op.throw(refusal)


def test_a_transient_failure_is_not_a_refusal() -> None:
    op = operations.job_states(API, ["1"])
    next(op)
    with pytest.raises(UnavailableError):
        op.throw(UnavailableError(503, "UNAVAILABLE", "later"))


def test_what_an_answer_says_of_each_job() -> None:
    states = {
        "5": ["RUNNING"],
        "6": ["COMPLETED"],
        "7_0": ["COMPLETED"],
        "7_1": ["RUNNING"],
        "8": ["COMPLETED", "COMPLETING"],
    }
    jobs = summaries(states)
    assert jobs["5"].state == "RUNNING"
    assert jobs["6"].is_finished
    assert jobs["7"].state == "RUNNING"  # an array is active while a task is
    assert not jobs["8"].is_finished  # still COMPLETING
    assert set(jobs) == {"5", "6", "7", "8"}  # absent jobs and array tasks are read by themselves
