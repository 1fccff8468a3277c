"""The sync and the async client against a scripted local HTTP server standing in for
callSlurmRestApi: every case here runs on both, which share the operations and the retry policy.
What only one transport does (the async client's tokens and session) is in test_client_aio.py."""

from __future__ import annotations

import pytest
from scripted_api import CLIENT_KINDS, FAST, URL_PATH, EitherClient, envelope, free_port, google

from airflow_provider_slurmapi.client.errors import (
    JobNotFoundError,
    PermissionDeniedError,
    RequestTooLargeError,
    ResourceExhaustedError,
    SlurmError,
    TransportError,
    UnavailableError,
)

pytestmark = pytest.mark.parametrize("kind", CLIENT_KINDS)


def test_request_shape(kind, api, slurm_fixture):
    api.script = [envelope(200, slurm_fixture("job_running.json"))]
    status = EitherClient(kind, api.port).get_job(1)
    assert status.state == "RUNNING"
    (received,) = api.received
    assert received["url"] == URL_PATH
    assert received["content_type"] == "application/json"
    assert received["json"] == {"method": "HTTP_METHOD_GET", "path": "/slurm/v0.0.42/job/1"}


def test_get_retries_on_unavailable_then_succeeds(kind, api, slurm_fixture):
    api.script = [
        google(503, "UNAVAILABLE"),
        google(503, "UNAVAILABLE"),
        envelope(200, slurm_fixture("job_completed.json")),
    ]
    status = EitherClient(kind, api.port).get_job(1)
    assert (status.state, status.is_success, status.exit_code.return_code) == ("COMPLETED", True, 0)
    assert api.calls == [("GET", "/slurm/v0.0.42/job/1")] * 3


def test_get_retries_on_429_and_non_json_502(kind, api, slurm_fixture):
    api.script = [
        google(429, "RESOURCE_EXHAUSTED"),
        (502, "<html>Bad Gateway</html>"),
        envelope(200, slurm_fixture("job_running.json")),
    ]
    assert EitherClient(kind, api.port).get_job(1).state == "RUNNING"
    assert len(api.received) == 3


def test_get_gives_up_after_max_attempts(kind, api):
    api.script = [google(503, "UNAVAILABLE")] * 10
    with pytest.raises(UnavailableError):
        EitherClient(kind, api.port).get_job(1)
    assert len(api.received) == FAST.max_attempts


def test_cancel_is_retried(kind, api, slurm_fixture):
    api.script = [google(503, "UNAVAILABLE"), envelope(200, slurm_fixture("delete_running.json"))]
    assert EitherClient(kind, api.port).cancel_job(2) is True
    assert api.calls == [("DELETE", "/slurm/v0.0.42/job/2")] * 2


def test_cancel_completed_job(kind, api, slurm_fixture):
    api.script = [envelope(200, slurm_fixture("delete_completed.json"))]
    assert EitherClient(kind, api.port).cancel_job(1) is False


def test_submit_success(kind, api, slurm_fixture):
    api.script = [envelope(200, slurm_fixture("submit_response.json"))]
    assert EitherClient(kind, api.port).submit_job({"name": "t"}, "#!/bin/bash\necho hi\n") == "1"
    body = api.received[0]["json"]["body"]
    assert body["script"] == "#!/bin/bash\necho hi\n" and body["job"]["name"] == "t"


def test_submit_is_never_retried(kind, api, slurm_fixture):
    api.script = [google(503, "UNAVAILABLE"), envelope(200, slurm_fixture("submit_response.json"))]
    with pytest.raises(UnavailableError):
        EitherClient(kind, api.port).submit_job({"name": "t"}, "#!/bin/bash\necho hi\n")
    assert api.calls == [("POST", "/slurm/v0.0.42/job/submit")]


def test_submit_not_retried_on_429_either(kind, api, slurm_fixture):
    api.script = [google(429, "RESOURCE_EXHAUSTED"), envelope(200, slurm_fixture("submit_response.json"))]
    with pytest.raises(ResourceExhaustedError):
        EitherClient(kind, api.port).submit_job({}, "#!/bin/bash\n")
    assert len(api.received) == 1


def test_permission_denied_is_not_retried(kind, api, slurm_fixture):
    api.script = [google(403, "PERMISSION_DENIED"), envelope(200, slurm_fixture("job_running.json"))]
    with pytest.raises(PermissionDeniedError):
        EitherClient(kind, api.port).get_job(1)
    assert len(api.received) == 1


def test_slurm_error_is_not_retried(kind, api, slurm_fixture):
    api.script = [envelope(422, slurm_fixture("job_invalid_id.json")), envelope(200, slurm_fixture("job_running.json"))]
    with pytest.raises(SlurmError):
        EitherClient(kind, api.port).call("GET", "/slurm/v0.0.42/job/abc")
    assert len(api.received) == 1


def test_get_job_falls_back_to_accounting(kind, api, slurm_fixture):
    api.script = [
        envelope(404, slurm_fixture("job_purged.json")),
        envelope(200, slurm_fixture("slurmdb_job_completed.json")),
    ]
    status = EitherClient(kind, api.port).get_job(1)
    assert status.source == "slurmdb" and status.is_success
    assert api.calls == [("GET", "/slurm/v0.0.42/job/1"), ("GET", "/slurmdb/v0.0.42/job/1")]


def test_get_job_unknown_in_the_queue_and_in_accounting(kind, api, slurm_fixture):
    api.script = [
        envelope(404, slurm_fixture("job_unknown.json")),
        envelope(200, slurm_fixture("slurmdb_job_unknown.json")),
    ]
    with pytest.raises(JobNotFoundError):
        EitherClient(kind, api.port).get_job(999999)
    assert api.calls == [("GET", "/slurm/v0.0.42/job/999999"), ("GET", "/slurmdb/v0.0.42/job/999999")]


def test_cancel_unknown_job(kind, api, slurm_fixture):
    api.script = [
        envelope(200, slurm_fixture("delete_unknown.json")),
        envelope(200, slurm_fixture("slurmdb_job_unknown.json")),
    ]
    with pytest.raises(JobNotFoundError):
        EitherClient(kind, api.port).cancel_job(999999)
    assert len(api.received) == 2


def test_connection_refused_is_transport_error_after_retries(kind):
    client = EitherClient(kind, free_port())
    with pytest.raises(TransportError) as caught:
        client.get_job(1)
    assert caught.value.retryable
    assert "/slurm/v0.0.42/job/1" in str(caught.value)
    assert client.attempts == FAST.max_attempts


def test_connection_refused_on_submit_is_not_retried(kind):
    client = EitherClient(kind, free_port())
    with pytest.raises(TransportError):
        client.submit_job({}, "#!/bin/bash\n")
    assert client.attempts == 1


def test_too_large_request_is_never_sent(kind, api):
    with pytest.raises(RequestTooLargeError):
        EitherClient(kind, api.port).submit_job({}, "#!/bin/bash\n" + "x" * (1024 * 1024))
    assert api.received == []
