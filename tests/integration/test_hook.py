"""SlurmJobApiHook against the emulator: real HTTP, real google-auth service-account tokens."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime

import pytest

from airflow_provider_slurmapi.client.errors import (
    ClusterNotFoundError,
    InvalidRequestError,
    JobLostError,
    JobNotFoundError,
    RequestTooLargeError,
)
from airflow_provider_slurmapi.client.retry import RetryPolicy
from airflow_provider_slurmapi.emulator import Emulator
from airflow_provider_slurmapi.hooks.slurm_job_api import SlurmJobApiAsyncHook, SlurmJobApiHook
from airflow_provider_slurmapi.operators.job import SlurmSubmitJobOperator
from tests.conftest import CLUSTER, PROJECT, REGION, connection_json
from tests.jobs import JOB


def script(body: str) -> str:
    return f"#!/bin/bash\n{body}\n"


def test_submit_and_wait_completed(slurm_connection: str) -> None:
    hook = SlurmJobApiHook(slurm_connection)
    job_id = hook.submit_job(JOB, script("echo hello; sleep 1"))
    status = hook.wait_for_job(job_id, poll_interval=0.5, timeout=30)
    assert (status.state, status.is_success, status.exit_code.return_code) == ("COMPLETED", True, 0)


def test_a_job_waiting_for_its_begin_time_logs_when_it_is_expected_to_start(slurm_connection: str, task_log) -> None:
    hook = SlurmJobApiHook(slurm_connection)
    begin = int(time.time()) + 3
    job_id = hook.submit_job({**JOB, "begin_time": {"set": True, "number": begin}}, script("true"))
    task_log()  # only the wait's lines
    assert hook.wait_for_job(job_id, poll_interval=0.5, timeout=30).is_success
    waiting = [line for line in task_log().splitlines() if "reason: BeginTime" in line]
    assert len(waiting) == 1, waiting  # once, however many reads said the same
    assert f"expected start {datetime.fromtimestamp(begin, UTC):%Y-%m-%d %H:%M} UTC" in waiting[0]


def test_failed_job_reports_exit_code(slurm_connection: str) -> None:
    hook = SlurmJobApiHook(slurm_connection)
    status = hook.wait_for_job(hook.submit_job(JOB, script("exit 3")), poll_interval=0.5, timeout=30)
    assert status.state == "FAILED" and not status.is_success
    assert "exit code 3" in status.describe()


def test_defaults_fill_environment_and_working_directory(slurm_connection: str) -> None:
    hook = SlurmJobApiHook(slurm_connection)
    job_id = hook.submit_job({"name": "defaults"}, script('test -n "$PATH" && test "$(pwd)" = /tmp'))
    assert hook.wait_for_job(job_id, poll_interval=0.5, timeout=30).is_success


def test_cancel_running_then_finished(slurm_connection: str) -> None:
    hook = SlurmJobApiHook(slurm_connection)
    job_id = hook.submit_job(JOB, script("sleep 300"))
    assert hook.cancel_job(job_id) is True
    status = hook.wait_for_job(job_id, poll_interval=0.5, timeout=30)
    assert status.state == "CANCELLED"
    assert hook.cancel_job(job_id) is False  # already finished counts as success


def test_job_read_back_from_accounting_after_purge(slurm_connection: str) -> None:
    hook = SlurmJobApiHook(slurm_connection)
    job_id = hook.submit_job(JOB, script("exit 0"))
    assert hook.wait_for_job(job_id, poll_interval=0.5, timeout=30).source == "slurm"
    deadline = time.monotonic() + 20
    while hook.get_job(job_id).source == "slurm":
        assert time.monotonic() < deadline, "job never left the live queue"
        time.sleep(0.5)
    status = hook.get_job(job_id)
    assert (status.source, status.state, status.is_success) == ("slurmdb", "COMPLETED", True)
    assert hook.cancel_job(job_id) is False  # a purged, finished job cancels as a success


def test_unknown_job_is_not_found(slurm_connection: str) -> None:
    with pytest.raises(JobNotFoundError, match="424242"):
        SlurmJobApiHook(slurm_connection).get_job("424242")


def test_list_jobs_and_call(slurm_connection: str) -> None:
    hook = SlurmJobApiHook(slurm_connection)
    job_id = hook.submit_job(JOB, script("sleep 2"))
    assert job_id in {job.job_id for job in hook.list_jobs()}
    reply = hook.call("GET", f"/slurm/v0.0.42/job/{job_id}")
    assert reply["jobs"][0]["job_id"] == int(job_id)


def test_bad_input_refused_before_sending(slurm_connection: str) -> None:
    hook = SlurmJobApiHook(slurm_connection)
    before = len(hook.list_jobs())
    with pytest.raises(RequestTooLargeError, match="shared storage"):
        hook.submit_job(JOB, script("echo " + "x" * (1024 * 1024)))
    with pytest.raises(InvalidRequestError, match="job_id"):
        hook.get_job("1/../2")
    with pytest.raises(InvalidRequestError, match="api_version"):
        SlurmJobApiHook(slurm_connection, api_version="latest")
    assert len(hook.list_jobs()) == before


def test_test_connection(slurm_connection: str) -> None:
    ok, message = SlurmJobApiHook(slurm_connection).test_connection()
    assert ok, message
    assert CLUSTER in message
    ok, message = SlurmJobApiHook(slurm_connection, cluster_id="no-such-cluster").test_connection()
    assert not ok and "NOT_FOUND" in message


def test_wrong_cluster_raises_cluster_not_found(slurm_connection: str) -> None:
    with pytest.raises(ClusterNotFoundError):
        SlurmJobApiHook(slurm_connection, cluster_id="other").list_jobs()


def test_plain_google_cloud_connection_with_operator_arguments(emulator, monkeypatch: pytest.MonkeyPatch) -> None:
    """A google_cloud_platform connection (key JSON inline) works when the cluster comes from arguments."""
    conn = {
        "conn_type": "google_cloud_platform",
        "extra": {"keyfile_dict": json.dumps(emulator.service_account_info), "project": PROJECT},
    }
    monkeypatch.setenv("AIRFLOW_CONN_MY_GCP", json.dumps(conn))
    hook = SlurmJobApiHook("my_gcp", region=REGION, cluster_id=CLUSTER)
    with pytest.raises(InvalidRequestError, match="cluster_id"):
        SlurmJobApiHook("my_gcp", region=REGION, cluster_id="bad/id").cluster  # noqa: B018
    # The default endpoint is Google's; point this one at the emulator through the connection extra.
    conn["extra"]["endpoint"] = emulator.url
    monkeypatch.setenv("AIRFLOW_CONN_MY_GCP", json.dumps(conn))
    hook = SlurmJobApiHook("my_gcp", region=REGION, cluster_id=CLUSTER)
    assert hook.cluster.project_id == PROJECT
    job_id = hook.submit_job(JOB, script("exit 0"))
    assert hook.wait_for_job(job_id, poll_interval=0.5, timeout=30).is_success


def test_arguments_override_connection(emulator, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(
        "AIRFLOW_CONN_SLURM_OTHER", connection_json(emulator, cluster_id="wrong-cluster", api_version="v0.0.41")
    )
    hook = SlurmJobApiHook("slurm_other", cluster_id=CLUSTER, api_version="v0.0.42")
    assert (hook.cluster.cluster_id, hook.api_version) == (CLUSTER, "v0.0.42")
    started = time.time()
    hook.list_jobs()  # the connection's cluster would be NOT_FOUND
    assert [(call.method, call.path) for call in emulator.requests.calls(since=started)] == [
        ("GET", "/slurm/v0.0.42/jobs/")
    ]


def test_service_account_credentials_use_the_emulator_token_endpoint(slurm_connection: str, emulator) -> None:
    """The hook's credentials are real google-auth service-account credentials with the key's token_uri."""
    import google.auth.transport.requests
    from google.oauth2 import service_account

    credentials = SlurmJobApiHook(slurm_connection).get_credentials()
    assert isinstance(credentials, service_account.Credentials)
    assert credentials.service_account_email == emulator.service_account_info["client_email"]
    credentials.refresh(google.auth.transport.requests.Request())
    assert credentials.token and credentials.expiry is not None


def test_missing_cluster_coordinates_are_named(emulator, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_NO_REGION", connection_json(emulator, region=None))
    with pytest.raises(InvalidRequestError, match="region: is required"):
        SlurmJobApiHook("no_region").cluster  # noqa: B018


def test_job_array_is_watched_until_every_task_ends(slurm_connection: str) -> None:
    hook = SlurmJobApiHook(slurm_connection)
    job_id = hook.submit_job({**JOB, "array": "0-3"}, script("sleep 1; exit $(( SLURM_ARRAY_TASK_ID == 2 ? 5 : 0 ))"))
    status = hook.wait_for_job(job_id, poll_interval=0.5, timeout=60)
    assert status.job_id == job_id
    assert sorted(status.extra["tasks"]) == [f"{job_id}_{i}" for i in range(4)]
    assert status.state == "FAILED" and not status.is_success  # one task failed: the array failed
    assert "exit code 5" in status.describe()
    assert hook.get_job(f"{job_id}_1").is_success


def test_waiting_for_a_missing_job_gives_up_after_the_grace_window(slurm_connection: str) -> None:
    started = time.monotonic()
    with pytest.raises(JobLostError, match="Slurm job 424244 is lost: for 1.5 s"):
        SlurmJobApiHook(slurm_connection).wait_for_job("424244", poll_interval=0.3, lost_grace=1.5)
    assert time.monotonic() - started >= 1.5


def test_retry_policy_from_the_connection_and_overridden_by_arguments(
    emulator: Emulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(
        "AIRFLOW_CONN_SLURM_RETRY", connection_json(emulator, retry_attempts="2", retry_max_seconds="30")
    )
    assert SlurmJobApiHook("slurm_retry").retry == RetryPolicy(max_attempts=2, max_elapsed=30.0)
    assert SlurmJobApiHook("slurm_retry", retry_attempts=7).retry == RetryPolicy(max_attempts=7, max_elapsed=30.0)
    operator = SlurmSubmitJobOperator(
        task_id="t", slurm_conn_id="slurm_retry", job={}, script="#!/bin/bash\n", retry_max_seconds=5
    )
    assert operator.hook.retry == RetryPolicy(max_attempts=2, max_elapsed=5.0)
    # the trigger gets the same arguments, and builds its client from the same sync hook
    assert SlurmJobApiAsyncHook.sync_hook_class(**operator.hook_kwargs).retry == operator.hook.retry
