"""Which of slurmrestd's failures are transient, read from the replies real slurmrestd 24.11.5 gave
(``_index.tsv`` has each one's HTTP status), and what a submit does with them."""

from __future__ import annotations

import json

import pytest

from airflow_provider_slurmapi.client import operations
from airflow_provider_slurmapi.client.envelope import SlurmCall, SlurmReply, read_reply
from airflow_provider_slurmapi.client.errors import SlurmError, SlurmErrorDetail
from airflow_provider_slurmapi.client.paths import SlurmPaths
from airflow_provider_slurmapi.client.retry import RetryPolicy
from airflow_provider_slurmapi.client.steps import ApiSettings, Pause
from airflow_provider_slurmapi.client.submission import submission_key
from tests.jobs import JOB

PATHS = SlurmPaths("v0.0.42")
API = ApiSettings(PATHS, RetryPolicy(max_attempts=3, initial_wait=1.0, max_wait=4.0))
KEY = submission_key("dag", "train", "manual__1", -1)

OUTAGES = [
    "slurmctld_down_job_get.json",
    "slurmctld_down_jobs_list.json",
    "slurmctld_down_jobs_update_time.json",
    "slurmctld_down_jobs_state.json",
    "slurmctld_down_submit.json",
    "slurmctld_down_delete.json",
    "slurmdbd_down_slurmdb_job.json",
    "slurmdbd_down_slurmdb_jobs_by_name.json",
]
REJECTIONS = [  # real-slurm.md section 6: sent again, they fail again
    "submit_error_bad_partition.json",  # 500, 2000
    "submit_error_too_many_cpus.json",  # 500, 2014
    "submit_error_wrong_type_time_limit.json",  # 500, 9202
    "submit_no_environment.json",  # 500, 2019
    "submit_no_cwd.json",  # 500, 2063
    "submit_error_no_script.json",  # 422, 9000
    "job_invalid_id.json",  # 422, 9000
    "auth_bad_token.json",  # 511, 1007
]


def error_of(name: str, slurm_fixture, fixture_index) -> SlurmError:
    row = fixture_index[name]
    text = json.dumps({"status": int(row["http_status"]), "structuredBody": slurm_fixture(name)})
    with pytest.raises(SlurmError) as caught:
        read_reply(SlurmCall(row["method"], row["path"]), 200, text)
    return caught.value


@pytest.mark.parametrize("name", OUTAGES)
def test_a_daemon_slurmrestd_cannot_reach_is_transient(name: str, slurm_fixture, fixture_index) -> None:
    error = error_of(name, slurm_fixture, fixture_index)
    assert error.status in (500, 502) and error.retryable, error


@pytest.mark.parametrize("name", REJECTIONS)
def test_slurms_rejections_stay_permanent(name: str, slurm_fixture, fixture_index) -> None:
    error = error_of(name, slurm_fixture, fixture_index)
    assert error.error_numbers and not error.retryable, error


@pytest.mark.parametrize(
    ("status", "numbers", "retryable"),
    [
        (504, [5004], True),  # slurmrestd's answer to "Socket timed out on send/recv operation"
        (503, [], True),
        (500, [2027], True),  # the controller asked was the backup, in standby
        (500, [1800, 2000], False),  # a rejection among them: not sent again
        (500, [], False),  # no number: nothing says it would pass next time
        (404, [-1], False),
    ],
)
def test_transient_by_status_and_every_error_number(status: int, numbers: list[int], retryable: bool) -> None:
    errors = [SlurmErrorDetail(n, "", "", "") for n in numbers]
    assert SlurmError(status, errors).retryable is retryable


def test_a_submit_that_met_slurmctld_unreachable_looks_for_its_job_before_sending_again(
    slurm_fixture, fixture_index
) -> None:
    op = operations.submit_job(API, JOB, "#!/bin/bash\ntrue\n", key=KEY)
    first = next(op)
    assert (first.method, first.path) == ("POST", PATHS.submit())
    # never resent blindly: once a submit still under way would have landed, the key is looked for
    assert isinstance(op.throw(error_of("slurmctld_down_submit.json", slurm_fixture, fixture_index)), Pause)
    lookup = op.send(None)
    assert (lookup.method, lookup.path) == ("GET", PATHS.jobs())
    accounting = op.send(SlurmReply(200, slurm_fixture("jobs_list_mixed.json")))  # no job carries the key
    assert accounting.path.startswith(PATHS.accounting_jobs(JOB["name"]))
    assert op.send(SlurmReply(200, {"jobs": []})) == first
    with pytest.raises(StopIteration) as done:
        op.send(SlurmReply(200, slurm_fixture("submit_response.json")))
    assert done.value.value == str(slurm_fixture("submit_response.json")["job_id"])


def test_a_submit_slurm_rejected_is_not_sent_again(slurm_fixture, fixture_index) -> None:
    op = operations.submit_job(API, JOB, "#!/bin/bash\ntrue\n", key=KEY)
    next(op)
    rejection = error_of("submit_error_bad_partition.json", slurm_fixture, fixture_index)
    with pytest.raises(SlurmError, match="Invalid partition name specified"):
        op.throw(rejection)
