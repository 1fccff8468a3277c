"""The blocking client against a scripted local HTTP server standing in for callSlurmRestApi."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import requests
from scripted_api import FAST, URL_PATH, cluster_at, envelope, free_port, google

from airflow_provider_slurmapi.client.errors import (
    JobNotFoundError,
    PermissionDeniedError,
    RequestTooLargeError,
    ResourceExhaustedError,
    SlurmError,
    TransportError,
    UnavailableError,
)
from airflow_provider_slurmapi.client.retry import RetryPolicy
from airflow_provider_slurmapi.client.sync import SlurmJobApiClient


class ScriptedApi:
    """Answers each POST with the next scripted (http_status, text); records what it received."""

    def __init__(self) -> None:
        self.script: list[tuple[int, str]] = []
        self.received: list[dict] = []
        api = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                length = int(self.headers.get("Content-Length") or 0)
                data = self.rfile.read(length)
                api.received.append(
                    {"url": self.path, "headers": dict(self.headers), "json": json.loads(data or b"null")}
                )
                status, text = api.script.pop(0) if api.script else (500, "script exhausted")
                payload = text.encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)

    @property
    def calls(self) -> list[tuple[str, str]]:
        return [(r["json"]["method"].removeprefix("HTTP_METHOD_"), r["json"]["path"]) for r in self.received]


@pytest.fixture
def api():
    server = ScriptedApi()
    server.thread.start()
    yield server
    server.server.shutdown()
    server.server.server_close()


class CountingSession(requests.Session):
    def __init__(self) -> None:
        super().__init__()
        self.posts = 0

    def post(self, *args, **kwargs):
        self.posts += 1
        return super().post(*args, **kwargs)


def make_client(port: int, retry: RetryPolicy = FAST) -> SlurmJobApiClient:
    return SlurmJobApiClient(CountingSession(), cluster_at(port), retry=retry, timeout=5)


def test_request_shape(api, slurm_fixture):
    api.script = [envelope(200, slurm_fixture("job_running.json"))]
    status = make_client(api.port).get_job(1)
    assert status.state == "RUNNING"
    (received,) = api.received
    assert received["url"] == URL_PATH
    assert received["headers"]["Content-Type"] == "application/json"
    assert received["json"] == {"method": "HTTP_METHOD_GET", "path": "/slurm/v0.0.42/job/1"}


def test_get_retries_on_unavailable_then_succeeds(api, slurm_fixture):
    api.script = [
        google(503, "UNAVAILABLE"),
        google(503, "UNAVAILABLE"),
        envelope(200, slurm_fixture("job_completed.json")),
    ]
    status = make_client(api.port).get_job(1)
    assert status.state == "COMPLETED" and status.is_success
    assert len(api.received) == 3
    assert api.calls == [("GET", "/slurm/v0.0.42/job/1")] * 3


def test_get_retries_on_429_and_non_json_502(api, slurm_fixture):
    api.script = [
        google(429, "RESOURCE_EXHAUSTED"),
        (502, "<html>Bad Gateway</html>"),
        envelope(200, slurm_fixture("job_running.json")),
    ]
    assert make_client(api.port).get_job(1).state == "RUNNING"
    assert len(api.received) == 3


def test_get_gives_up_after_max_attempts(api):
    api.script = [google(503, "UNAVAILABLE")] * 10
    with pytest.raises(UnavailableError):
        make_client(api.port).get_job(1)
    assert len(api.received) == FAST.max_attempts


def test_cancel_is_retried(api, slurm_fixture):
    api.script = [google(503, "UNAVAILABLE"), envelope(200, slurm_fixture("delete_running.json"))]
    assert make_client(api.port).cancel_job(2) is True
    assert api.calls == [("DELETE", "/slurm/v0.0.42/job/2")] * 2


def test_submit_is_never_retried(api, slurm_fixture):
    api.script = [google(503, "UNAVAILABLE"), envelope(200, slurm_fixture("submit_response.json"))]
    with pytest.raises(UnavailableError):
        make_client(api.port).submit_job({"name": "t"}, "#!/bin/bash\necho hi\n")
    assert len(api.received) == 1
    assert api.calls == [("POST", "/slurm/v0.0.42/job/submit")]


def test_submit_not_retried_on_429_either(api, slurm_fixture):
    api.script = [google(429, "RESOURCE_EXHAUSTED"), envelope(200, slurm_fixture("submit_response.json"))]
    with pytest.raises(ResourceExhaustedError):
        make_client(api.port).submit_job({}, "#!/bin/bash\n")
    assert len(api.received) == 1


def test_submit_success(api, slurm_fixture):
    api.script = [envelope(200, slurm_fixture("submit_response.json"))]
    assert make_client(api.port).submit_job({"name": "t"}, "#!/bin/bash\necho hi\n") == "1"
    body = api.received[0]["json"]["body"]
    assert body["script"] == "#!/bin/bash\necho hi\n" and body["job"]["name"] == "t"


def test_permission_denied_is_not_retried(api, slurm_fixture):
    api.script = [google(403, "PERMISSION_DENIED"), envelope(200, slurm_fixture("job_running.json"))]
    with pytest.raises(PermissionDeniedError):
        make_client(api.port).get_job(1)
    assert len(api.received) == 1


def test_slurm_error_is_not_retried(api, slurm_fixture):
    api.script = [envelope(422, slurm_fixture("job_invalid_id.json")), envelope(200, slurm_fixture("job_running.json"))]
    with pytest.raises(SlurmError):
        make_client(api.port).call("GET", "/slurm/v0.0.42/job/abc")
    assert len(api.received) == 1


def test_get_job_falls_back_to_accounting_over_the_wire(api, slurm_fixture):
    api.script = [
        envelope(404, slurm_fixture("job_purged.json")),
        envelope(200, slurm_fixture("slurmdb_job_completed.json")),
    ]
    status = make_client(api.port).get_job(1)
    assert status.source == "slurmdb" and status.is_success
    assert api.calls == [("GET", "/slurm/v0.0.42/job/1"), ("GET", "/slurmdb/v0.0.42/job/1")]


def test_unknown_job_over_the_wire(api, slurm_fixture):
    api.script = [
        envelope(200, slurm_fixture("delete_unknown.json")),
        envelope(200, slurm_fixture("slurmdb_job_unknown.json")),
    ]
    with pytest.raises(JobNotFoundError):
        make_client(api.port).cancel_job(999999)
    assert len(api.received) == 2


def test_connection_refused_is_transport_error_after_retries():
    client = make_client(free_port())
    with pytest.raises(TransportError) as caught:
        client.get_job(1)
    assert caught.value.retryable
    assert "/slurm/v0.0.42/job/1" in str(caught.value)
    assert client.session.posts == FAST.max_attempts


def test_connection_refused_on_submit_is_not_retried():
    client = make_client(free_port())
    with pytest.raises(TransportError):
        client.submit_job({}, "#!/bin/bash\n")
    assert client.session.posts == 1


def test_too_large_request_is_never_sent(api):
    client = make_client(api.port)
    with pytest.raises(RequestTooLargeError):
        client.submit_job({}, "#!/bin/bash\n" + "x" * (1024 * 1024))
    assert api.received == []
