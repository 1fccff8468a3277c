"""The callSlurmRestApi envelope: request encoding, reply shapes, Slurm errors, Google errors."""

from __future__ import annotations

import json
import logging

import pytest

from airflow_provider_slurmapi.client.envelope import SlurmCall, read_reply
from airflow_provider_slurmapi.client.errors import (
    ClusterNotFoundError,
    GoogleApiError,
    InvalidArgumentError,
    InvalidRequestError,
    PermissionDeniedError,
    RequestTooLargeError,
    ResourceExhaustedError,
    ServerError,
    SlurmError,
    SlurmJobApiError,
    UnauthenticatedError,
    UnavailableError,
)

ONE_MB = 1024 * 1024  # the documented limit: the whole request must be under 1 MB

GET_JOB = SlurmCall("GET", "/slurm/v0.0.42/job/1")
SUBMIT = SlurmCall("POST", "/slurm/v0.0.42/job/submit", {"job": {}, "script": "#!/bin/bash\n"})


def structured(status: int, body: dict) -> str:
    return json.dumps({"status": status, "structuredBody": body})


def stringly(status: int, body: dict | str) -> str:
    text = body if isinstance(body, str) else json.dumps(body).replace("/", "\\/")  # slurmrestd escapes /
    return json.dumps({"status": status, "body": text})


SHAPES = pytest.mark.parametrize("wrap", [structured, stringly], ids=["structuredBody", "body-string"])


def google(code: int, status: str, message: str = "boom") -> str:
    return json.dumps({"error": {"code": code, "message": message, "status": status}})


# --------------------------------------------------------------------------- replies


@SHAPES
@pytest.mark.parametrize("name", ["job_running.json", "slurmdb_job_completed.json", "delete_completed.json"])
def test_read_reply_both_shapes(slurm_fixture, wrap, name):
    body = slurm_fixture(name)
    reply = read_reply(GET_JOB, 200, wrap(200, body))
    assert reply.status == 200
    assert reply.body == body


@SHAPES
def test_slurm_404_is_slurm_error_with_2017(slurm_fixture, wrap):
    body = slurm_fixture("job_unknown.json")
    request = SlurmCall("GET", "/slurm/v0.0.42/job/999999")
    with pytest.raises(SlurmError) as caught:
        read_reply(request, 200, wrap(404, body))
    assert caught.value.status == 404
    assert caught.value.error_numbers == [2017]
    assert "/slurm/v0.0.42/job/999999" in str(caught.value)
    assert "Invalid job id specified" in str(caught.value)
    assert not caught.value.retryable


@SHAPES
def test_slurm_404_accepted_when_listed(slurm_fixture, wrap):
    body = slurm_fixture("job_purged.json")
    request = SlurmCall("GET", "/slurm/v0.0.42/job/1", accept_status=(404,))
    reply = read_reply(request, 200, wrap(404, body))
    assert reply.status == 404
    assert reply.body["errors"][0]["error_number"] == 2017


def test_accept_status_does_not_accept_other_statuses(slurm_fixture):
    request = SlurmCall("GET", "/slurm/v0.0.42/job/abc", accept_status=(404,))
    with pytest.raises(SlurmError) as caught:
        read_reply(request, 200, structured(422, slurm_fixture("job_invalid_id.json")))
    assert caught.value.status == 422 and caught.value.error_numbers == [9000]


@pytest.mark.parametrize(
    ("name", "number"),
    [
        ("submit_error_bad_partition.json", 2000),
        ("submit_error_too_many_cpus.json", 2014),
        ("submit_no_environment.json", 2019),
        ("submit_no_cwd.json", 2063),
        ("submit_error_wrong_type_time_limit.json", 9202),
        ("submit_error_no_script.json", 9000),
        ("submit_error_empty_body.json", 9000),
        ("job_invalid_id.json", 9000),
        ("auth_bad_token.json", 1007),
        ("slurmdb_auth_bad_token.json", 7000),
    ],
)
def test_slurm_error_statuses_from_captures(slurm_fixture, fixture_index, name, number):
    status = int(fixture_index[name]["http_status"])
    assert status >= 400
    with pytest.raises(SlurmError) as caught:
        read_reply(SUBMIT, 200, structured(status, slurm_fixture(name)))
    assert caught.value.status == status
    assert caught.value.error_numbers == [number]
    assert slurm_fixture(name)["errors"][0]["error"] in str(caught.value)


def test_200_with_errors_raises(slurm_fixture):
    body = slurm_fixture("auth_bad_token.json")  # non-empty errors list
    with pytest.raises(SlurmError) as caught:
        read_reply(GET_JOB, 200, structured(200, body))
    assert caught.value.status == 200
    assert caught.value.error_numbers == [1007]


@SHAPES
def test_warnings_are_logged_and_do_not_raise(slurm_fixture, wrap, caplog):
    body = slurm_fixture("submit_error_wrong_type.json")
    assert body["warnings"] and not body["errors"]
    with caplog.at_level(logging.WARNING):
        reply = read_reply(SUBMIT, 200, wrap(200, body))
    assert reply.warnings == body["warnings"]
    messages = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(messages) == 1
    assert "minimum_nodes" in messages[0]  # the warning's source (#/job/minimum_nodes/)
    assert "abc" in messages[0]  # ... and its description
    assert SUBMIT.path in messages[0]


def test_every_warning_is_logged(slurm_fixture, caplog):
    body = slurm_fixture("submit_unknown_field.json")
    body = {**body, "warnings": body["warnings"] * 2}
    with caplog.at_level(logging.WARNING):
        reply = read_reply(SUBMIT, 200, structured(200, body))
    assert reply.body["job_id"] == 13
    assert len([r for r in caplog.records if "bogus_field" in r.getMessage()]) == 2


def test_no_warning_logged_for_clean_reply(slurm_fixture, caplog):
    with caplog.at_level(logging.WARNING):
        read_reply(GET_JOB, 200, structured(200, slurm_fixture("job_running.json")))
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


@pytest.mark.parametrize(
    ("name", "text"),
    [("submit_error_invalid_json.txt", "Unable to parse query."), ("unknown_path.txt", "Unable find requested URL")],
)
def test_text_plain_slurm_error_in_body_string(fixture_index, name, text):
    status = int(fixture_index[name]["http_status"])
    raw = text  # slurmrestd answered text/plain; the envelope carries it as the body string
    with pytest.raises(SlurmError) as caught:
        read_reply(SUBMIT, 200, json.dumps({"status": status, "body": raw}))
    assert caught.value.status == status
    assert text in str(caught.value)


def test_status_missing_defaults_to_success(slurm_fixture):
    body = slurm_fixture("ping.json")
    reply = read_reply(SlurmCall("GET", "/slurm/v0.0.42/ping"), 200, json.dumps({"structuredBody": body}))
    assert reply.status == 200 and reply.body == body


# --------------------------------------------------------------------------- Google errors

GOOGLE_CASES = [
    (403, "PERMISSION_DENIED", PermissionDeniedError, False),
    (401, "UNAUTHENTICATED", UnauthenticatedError, False),
    (404, "NOT_FOUND", ClusterNotFoundError, False),
    (400, "INVALID_ARGUMENT", InvalidArgumentError, False),
    (503, "UNAVAILABLE", UnavailableError, True),
    (429, "RESOURCE_EXHAUSTED", ResourceExhaustedError, True),
    (500, "INTERNAL", ServerError, True),
]


@pytest.mark.parametrize(("code", "status", "cls", "retryable"), GOOGLE_CASES)
def test_google_error_envelopes(code, status, cls, retryable):
    with pytest.raises(cls) as caught:
        read_reply(GET_JOB, code, google(code, status, "the message"))
    error = caught.value
    assert type(error) is cls  # the class for that status itself, not a subclass of it
    assert issubclass(cls, GoogleApiError) and not issubclass(cls, SlurmError)  # no `except SlurmError` catches it
    assert error.retryable is retryable
    assert error.http_status == code
    assert error.status == status
    assert error.message == "the message"
    assert "the message" in str(error) and status in str(error)


@pytest.mark.parametrize("code", [429, 500, 502, 503, 504])
def test_transient_http_statuses_are_retryable_without_a_status(code):
    with pytest.raises(GoogleApiError) as caught:
        read_reply(GET_JOB, code, json.dumps({"error": {"code": code, "message": "x"}}))
    assert caught.value.retryable
    assert caught.value.http_status == code


@pytest.mark.parametrize("code", [500, 502, 503])
def test_non_json_5xx_is_retryable(code):
    html = "<html><body>502 Bad Gateway</body></html>"
    with pytest.raises(GoogleApiError) as caught:
        read_reply(GET_JOB, code, html)
    assert caught.value.retryable
    assert caught.value.http_status == code
    assert "Bad Gateway" in str(caught.value)


def test_non_json_502_text():
    with pytest.raises(SlurmJobApiError) as caught:
        read_reply(GET_JOB, 502, "upstream connect error or disconnect/reset before headers")
    assert isinstance(caught.value, GoogleApiError)
    assert caught.value.retryable
    assert "upstream connect error" in str(caught.value)


@pytest.mark.parametrize(("code", "cls"), [(401, UnauthenticatedError), (403, PermissionDeniedError)])
def test_non_json_auth_failures_by_http_code(code, cls):
    with pytest.raises(cls) as caught:
        read_reply(GET_JOB, code, "denied")
    assert not caught.value.retryable


def test_non_json_400_is_not_retryable():
    with pytest.raises(GoogleApiError) as caught:
        read_reply(GET_JOB, 400, "bad request")
    assert not caught.value.retryable


def test_error_envelope_wins_over_http_200():
    with pytest.raises(PermissionDeniedError):
        read_reply(GET_JOB, 200, google(403, "PERMISSION_DENIED"))


def test_non_object_json_is_an_error():
    with pytest.raises(GoogleApiError):
        read_reply(GET_JOB, 200, "[1, 2]")


# --------------------------------------------------------------------------- requests


def test_envelope_fields():
    assert GET_JOB.envelope() == {"method": "HTTP_METHOD_GET", "path": "/slurm/v0.0.42/job/1"}
    assert json.loads(SUBMIT.encode()) == {
        "method": "HTTP_METHOD_POST",
        "path": "/slurm/v0.0.42/job/submit",
        "body": {"job": {}, "script": "#!/bin/bash\n"},
    }
    assert SlurmCall("DELETE", "/slurm/v0.0.42/job/2").envelope()["method"] == "HTTP_METHOD_DELETE"


@pytest.mark.parametrize("method", ["get", "FETCH", ""])
def test_unknown_method_refused(method):
    with pytest.raises(InvalidRequestError) as caught:
        SlurmCall(method, "/slurm/v0.0.42/ping").encode()
    assert caught.value.field == "method"


@pytest.mark.parametrize("path", ["/openapi/v3", "slurm/v0.0.42/ping", "https://evil/slurm/", "/slurmx/v0.0.42/"])
def test_path_must_be_a_slurm_path(path):
    with pytest.raises(InvalidRequestError) as caught:
        SlurmCall("GET", path).encode()
    assert caught.value.field == "path"


def _submit_of_size(size: int) -> SlurmCall:
    """A submit whose encoded envelope is exactly ``size`` bytes (padding with 1-byte characters)."""
    head = "#!/bin/bash\n"
    empty = SlurmCall("POST", "/slurm/v0.0.42/job/submit", {"job": {"name": "big"}, "script": head})
    overhead = len(json.dumps(empty.envelope(), separators=(",", ":")).encode())
    script = head + "x" * (size - overhead)
    request = SlurmCall("POST", "/slurm/v0.0.42/job/submit", {"job": {"name": "big"}, "script": script})
    assert len(json.dumps(request.envelope(), separators=(",", ":")).encode()) == size
    return request


def test_encode_accepts_just_under_1_mb():
    request = _submit_of_size(ONE_MB - 1)
    data = request.encode()
    assert len(data) == ONE_MB - 1
    assert json.loads(data) == request.envelope()


@pytest.mark.parametrize("size", [ONE_MB, ONE_MB + 1, 3 * ONE_MB])
def test_encode_refuses_1_mb_and_more(size):
    with pytest.raises(RequestTooLargeError) as caught:
        _submit_of_size(size).encode()
    error = caught.value
    assert isinstance(error, InvalidRequestError)
    assert not error.retryable
    assert error.size == size
    text = str(error)
    assert f"the request is {size:,} bytes" in text  # with thousands separators: 1,048,576
    assert f"under {ONE_MB:,} bytes" in text
    assert "shared storage" in text
    assert "wrapper script" in text


def test_encode_counts_bytes_not_characters():
    # 600,000 characters, but at least 1.2 MB however 'é' is encoded (UTF-8 or a \u00e9 escape)
    script = "#!/bin/bash\n" + "é" * 600_000
    with pytest.raises(RequestTooLargeError):
        SlurmCall("POST", "/slurm/v0.0.42/job/submit", {"job": {}, "script": script}).encode()
