"""The I/O-free operations, driven by hand with the captured slurmrestd replies.

Each reply goes through ``read_reply`` with the HTTP status slurmrestd really gave (``_index.tsv``),
so a request that forgets ``accept_status`` fails just as it would over the wire.
"""

from __future__ import annotations

import json
import logging

import pytest

from airflow_provider_slurmapi.client import operations
from airflow_provider_slurmapi.client.envelope import SlurmCall, SlurmReply, read_reply
from airflow_provider_slurmapi.client.errors import (
    ClusterNotFoundError,
    InvalidRequestError,
    JobNotFoundError,
    SlurmError,
)
from airflow_provider_slurmapi.client.job_description import submission_body
from airflow_provider_slurmapi.client.jobs import JobStatus
from airflow_provider_slurmapi.client.paths import SlurmPaths
from airflow_provider_slurmapi.client.steps import ApiSettings

PATHS = SlurmPaths("v0.0.42")
API = ApiSettings(PATHS)


class Driver:
    """Runs an operation generator, answering each request with the next scripted fixture."""

    def __init__(self, slurm_fixture, fixture_index):
        self._load = slurm_fixture
        self._index = fixture_index
        self.requests: list[SlurmCall] = []

    def reply(self, request: SlurmCall, name: str) -> SlurmReply:
        status = int(self._index[name]["http_status"])
        text = json.dumps({"status": status, "structuredBody": self._load(name)})
        return read_reply(request, 200, text)

    def run(self, operation, *names: str):
        request = next(operation)
        self.requests.append(request)
        for name in names:
            try:
                request = operation.send(self.reply(request, name))
            except StopIteration as done:
                return done.value
            self.requests.append(request)
        raise AssertionError(f"the operation sent more requests than scripted: {self.requests}")

    @property
    def calls(self) -> list[tuple[str, str]]:
        return [(r.method, r.path) for r in self.requests]


@pytest.fixture
def driver(slurm_fixture, fixture_index):
    return Driver(slurm_fixture, fixture_index)


# --------------------------------------------------------------------------- get_job


def test_get_job_from_live_queue(driver):
    status = driver.run(operations.get_job(API, 1), "job_running.json")
    assert isinstance(status, JobStatus)
    assert status.state == "RUNNING" and status.source == "slurm" and status.job_id == "1"
    assert driver.calls == [("GET", "/slurm/v0.0.42/job/1")]


def test_get_job_404_falls_back_to_accounting(driver, fixture_index):
    assert fixture_index["job_purged.json"]["http_status"] == "404"
    status = driver.run(operations.get_job(API, "1"), "job_purged.json", "slurmdb_job_completed.json")
    assert driver.calls == [("GET", "/slurm/v0.0.42/job/1"), ("GET", "/slurmdb/v0.0.42/job/1")]
    assert status.source == "slurmdb"
    assert status.job_id == "1"
    assert status.state == "COMPLETED" and status.is_success


def test_get_job_404_then_accounting_failure_keeps_its_details(driver):
    status = driver.run(operations.get_job(API, 8), "job_purged.json", "slurmdb_job_failed.json")
    assert status.state == "FAILED" and status.exit_code.return_code == 3


def test_get_job_unknown_everywhere(driver):
    with pytest.raises(JobNotFoundError) as caught:
        driver.run(operations.get_job(API, 999999), "job_unknown.json", "slurmdb_job_unknown.json")
    assert caught.value.job_id == "999999"
    assert "999999" in str(caught.value)
    assert driver.calls[-1] == ("GET", "/slurmdb/v0.0.42/job/999999")


def test_get_job_other_slurm_error_is_not_swallowed(driver):
    # a 422 is not "left the queue": it raises, with no accounting lookup
    with pytest.raises(SlurmError) as caught:
        driver.run(operations.get_job(API, 1), "job_invalid_id.json", "slurmdb_job_completed.json")
    assert caught.value.status == 422
    assert driver.calls == [("GET", "/slurm/v0.0.42/job/1")]


def test_get_job_empty_jobs_list_falls_back(driver, slurm_fixture):
    op = operations.get_job(API, 1)
    next(op)
    follow_up = op.send(SlurmReply(200, {"jobs": [], "errors": [], "warnings": []}))
    assert (follow_up.method, follow_up.path) == ("GET", "/slurmdb/v0.0.42/job/1")


def test_get_job_refuses_bad_id_before_sending():
    with pytest.raises(InvalidRequestError) as caught:
        next(operations.get_job(API, "1/../2"))
    assert caught.value.field == "job_id"


def test_get_job_google_not_found_is_not_a_fallback(driver):
    # Google's NOT_FOUND means a wrong cluster: it must surface, not turn into a /slurmdb lookup
    request = next(operations.get_job(API, 1))
    with pytest.raises(ClusterNotFoundError):
        read_reply(request, 404, json.dumps({"error": {"code": 404, "status": "NOT_FOUND", "message": "x"}}))


# --------------------------------------------------------------------------- cancel_job


def test_cancel_running_job(driver, slurm_fixture):
    assert slurm_fixture("delete_running.json")["status"] == []
    assert driver.run(operations.cancel_job(API, 2), "delete_running.json") is True
    assert driver.calls == [("DELETE", "/slurm/v0.0.42/job/2")]


def test_cancel_pending_job(driver):
    assert driver.run(operations.cancel_job(API, 3), "delete_pending.json") is True


def test_cancel_with_signal(driver):
    assert driver.run(operations.cancel_job(API, 6, "KILL"), "delete_running_signal_kill.json") is True
    assert driver.calls == [("DELETE", "/slurm/v0.0.42/job/6?signal=KILL")]


def test_cancel_with_a_signal_to_the_batch_shell_alone(driver):
    assert driver.run(operations.cancel_job(API, 6, "USR1", batch_only=True), "delete_running.json") is True
    assert driver.calls == [("DELETE", "/slurm/v0.0.42/job/6?signal=USR1&flags=BATCH_JOB")]


def test_cancel_completed_job_is_success_false(driver, slurm_fixture, caplog):
    assert slurm_fixture("delete_completed.json")["status"][0]["error"]["code"] == 2021
    with caplog.at_level(logging.INFO):
        assert driver.run(operations.cancel_job(API, 1), "delete_completed.json") is False
    assert driver.calls == [("DELETE", "/slurm/v0.0.42/job/1")]  # no extra lookup


def test_cancel_purged_job_found_in_accounting(driver):
    result = driver.run(operations.cancel_job(API, 1), "delete_purged.json", "slurmdb_job_completed.json")
    assert result is False
    assert driver.calls == [("DELETE", "/slurm/v0.0.42/job/1"), ("GET", "/slurmdb/v0.0.42/job/1")]


def test_cancel_unknown_job_raises_not_found(driver):
    with pytest.raises(JobNotFoundError) as caught:
        driver.run(operations.cancel_job(API, 999999), "delete_unknown.json", "slurmdb_job_unknown.json")
    assert caught.value.job_id == "999999"
    assert driver.calls == [("DELETE", "/slurm/v0.0.42/job/999999"), ("GET", "/slurmdb/v0.0.42/job/999999")]


def test_cancel_purged_then_unknown_in_accounting_raises(driver):
    with pytest.raises(JobNotFoundError):
        driver.run(operations.cancel_job(API, 1), "delete_purged.json", "slurmdb_job_unknown.json")


def test_cancel_other_status_error_raises():
    op = operations.cancel_job(API, 2)
    next(op)
    body = {
        "status": [{"error": {"code": 2002, "string": "Access/permission denied", "message": "denied"}}],
        "errors": [],
        "warnings": [],
    }
    with pytest.raises(SlurmError) as caught:
        op.send(SlurmReply(200, body))
    assert caught.value.error_numbers == [2002]
    assert "Access/permission denied" in str(caught.value)


def test_cancel_refuses_bad_signal_before_sending():
    with pytest.raises(InvalidRequestError) as caught:
        next(operations.cancel_job(API, 2, "KILL&x=1"))
    assert caught.value.field == "signal"


# --------------------------------------------------------------------------- submit


def test_submission_body_fills_required_defaults():
    # real-slurm.md 6: without environment -> 500/2019, without current_working_directory -> 500/2063
    body = submission_body({"name": "t"}, "#!/bin/bash\necho hi\n")
    assert body["script"] == "#!/bin/bash\necho hi\n"
    job = body["job"]
    assert job["name"] == "t"
    env = job["environment"]
    assert isinstance(env, list) and env
    assert all(isinstance(e, str) and "=" in e for e in env)
    assert any(e.startswith("PATH=") and "/bin" in e for e in env)
    cwd = job["current_working_directory"]
    assert isinstance(cwd, str) and cwd.startswith("/")


def test_submission_body_keeps_user_values_and_does_not_mutate():
    job = {"name": "t", "environment": ["A=1"], "current_working_directory": "/home/u", "partition": "p"}
    original = json.loads(json.dumps(job))
    body = submission_body(job, "#!/bin/sh\ntrue\n")
    assert body["job"] == original
    assert job == original  # the caller's dict is untouched


def test_submission_body_does_not_share_default_environment_between_calls():
    first = submission_body({}, "#!/bin/sh\n")
    first["job"]["environment"].append("X=1")
    second = submission_body({}, "#!/bin/sh\n")
    assert "X=1" not in second["job"]["environment"]


@pytest.mark.parametrize("job", [None, [], "name=t", 1, ({"name": "t"},)])
def test_submission_body_refuses_non_dict_job(job):
    with pytest.raises(InvalidRequestError) as caught:
        submission_body(job, "#!/bin/bash\n")
    assert caught.value.field == "job"


@pytest.mark.parametrize("script", ["", "   \n", None, b"#!/bin/bash\n"])
def test_submission_body_refuses_empty_script(script):
    with pytest.raises(InvalidRequestError) as caught:
        submission_body({}, script)
    assert caught.value.field == "script"


@pytest.mark.parametrize("script", ["echo hi\n", " #!/bin/bash\n", "\n#!/bin/bash\n", "/tmp/run.sh"])
def test_submission_body_refuses_script_without_shebang(script):
    with pytest.raises(InvalidRequestError) as caught:
        submission_body({}, script)
    assert caught.value.field == "script"
    assert "#!" in str(caught.value)


def test_submission_body_refuses_script_inside_job():
    with pytest.raises(InvalidRequestError):
        submission_body({"script": "#!/bin/bash\n"}, "#!/bin/bash\n")


def test_submit_job(driver):
    job_id = driver.run(operations.submit_job(API, {"name": "t"}, "#!/bin/bash\necho hi\n"), "submit_response.json")
    assert job_id == "1"
    request = driver.requests[0]
    assert (request.method, request.path) == ("POST", "/slurm/v0.0.42/job/submit")
    assert request.body["script"] == "#!/bin/bash\necho hi\n"
    assert "environment" in request.body["job"] and "current_working_directory" in request.body["job"]


def test_submit_with_warning_returns_job_id(driver, caplog):
    with caplog.at_level(logging.WARNING):
        job_id = driver.run(operations.submit_job(API, {"name": "x"}, "#!/bin/bash\n"), "submit_unknown_field.json")
    assert job_id == "13"
    assert any("bogus_field" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(
    ("name", "number"), [("submit_error_bad_partition.json", 2000), ("submit_error_too_many_cpus.json", 2014)]
)
def test_submit_slurm_errors(driver, name, number):
    with pytest.raises(SlurmError) as caught:
        driver.run(operations.submit_job(API, {}, "#!/bin/bash\n"), name)
    assert caught.value.error_numbers == [number]


def test_submit_200_without_job_id_raises_and_says_why(driver, slurm_fixture):
    warning = slurm_fixture("submit_error_wrong_type.json")["warnings"][0]
    with pytest.raises(SlurmError) as caught:
        driver.run(operations.submit_job(API, {"name": "x"}, "#!/bin/bash\n"), "submit_error_wrong_type.json")
    assert "no job_id in the reply" in str(caught.value)
    assert warning["description"] in str(caught.value)  # Slurm's warning: why there is no job


# --------------------------------------------------------------------------- list, call, ping


def test_list_jobs(driver):
    statuses = driver.run(operations.list_jobs(API), "jobs_list_mixed.json")
    assert driver.calls == [("GET", "/slurm/v0.0.42/jobs/")]
    assert len(statuses) == 5
    assert {s.state for s in statuses} == {"RUNNING", "PENDING", "COMPLETED"}


def test_list_jobs_nothing_changed(driver):
    assert driver.run(operations.list_jobs(API), "jobs_update_time_unchanged.json") == []


def test_call_returns_the_reply_body(driver, slurm_fixture):
    body = driver.run(operations.call(API, "get", "/slurm/v0.0.42/jobs/"), "jobs_list_one_running.json")
    assert body == slurm_fixture("jobs_list_one_running.json")
    assert driver.calls == [("GET", "/slurm/v0.0.42/jobs/")]


def test_ping(driver, slurm_fixture):
    assert driver.run(operations.ping(API), "ping.json") == slurm_fixture("ping.json")
    assert driver.calls == [("GET", "/slurm/v0.0.42/ping")]


@pytest.mark.parametrize(
    ("job", "field"),
    [
        ({"minimum_nodes": "abc"}, "job.minimum_nodes"),  # real slurmrestd coerces it with a warning
        ({"bogus_field": 1}, "job.bogus_field"),  # real slurmrestd drops it with a warning
        ({"time_limit": "five"}, "job.time_limit"),
        ({"flags": ["NOT_A_FLAG"]}, "job.flags[0]"),
    ],
)
def test_submit_refuses_bad_fields_before_sending(driver, job, field):
    with pytest.raises(InvalidRequestError) as caught:
        driver.run(operations.submit_job(API, job, "#!/bin/bash\n"), "submit_response.json")
    assert caught.value.field == field
    assert driver.calls == []


def test_submit_accepts_lenient_forms_real_slurm_accepts():
    body = submission_body({"time_limit": 5, "environment": {"A": "1"}}, "#!/bin/bash\n")
    assert body["job"]["time_limit"] == 5
    assert body["job"]["environment"] == ["A=1"]


def test_queue_changes_gives_the_whole_queue_and_its_stamp(driver):
    changes = driver.run(operations.queue_changes(API), "jobs_list_held_pending_running.json")
    assert driver.calls == [("GET", "/slurm/v0.0.42/jobs/")]
    assert changes.last_update == 1796247641
    held = {s.job_id: s.reason for s in changes.jobs or [] if s.held}
    assert held == {"1": "JobHeldUser", "7": "JobHeldAdmin"}


def test_queue_changes_says_when_nothing_changed(driver):
    changes = driver.run(operations.queue_changes(API, 1796247641), "jobs_list_update_time_unchanged_held.json")
    assert driver.calls == [("GET", "/slurm/v0.0.42/jobs/?update_time=1796247641")]
    assert (changes.last_update, changes.jobs) == (1796247641, None)  # the stamp stays, no jobs


def test_queue_changes_reads_only_the_records_of_the_jobs_asked_for(driver):
    changes = driver.run(operations.queue_changes(API, None, ["7", "404"]), "jobs_list_held_pending_running.json")
    assert [s.job_id for s in changes.jobs or []] == ["7"]


def test_queue_changes_logs_no_warning_when_nothing_changed(driver, caplog):
    with caplog.at_level("INFO"):
        driver.run(operations.queue_changes(API, 1796247641), "jobs_list_update_time_unchanged_held.json")
    assert caplog.records == []  # an answer, said every interval: not a warning


def test_requeue_lines_read_the_causes_of_many_jobs_at_once(driver):
    # real Slurm: 59 requeued (scontrol requeue) and pending again, 60 running; 61 not in accounting yet
    requeued = [JobStatus(j, "PENDING", restarts=1) for j in ("59", "61")]
    lines = driver.run(operations.requeue_lines(API, requeued), "slurmdb_jobs_by_id_requeued.json")
    assert driver.calls == [("GET", "/slurmdb/v0.0.42/jobs/?step=59&step=61&skip_steps=true&show_duplicates=true")]
    assert lines == {
        "59": "Slurm job 59 was requeued (restart 1): REQUEUED on node1; it will run again from the start",
        "61": "Slurm job 61 was requeued (restart 1); it will run again from the start",
    }
