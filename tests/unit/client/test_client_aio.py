"""The async client against a scripted aiohttp.web server on 127.0.0.1 (AppRunner + TCPSite, port 0)."""

from __future__ import annotations

import json

import aiohttp
import pytest
from aiohttp import web
from scripted_api import FAST, URL_PATH, cluster_at, envelope, free_port, google

from airflow_provider_slurmapi.client.aio import AsyncSlurmJobApiClient
from airflow_provider_slurmapi.client.errors import (
    JobNotFoundError,
    PermissionDeniedError,
    TransportError,
    UnauthenticatedError,
    UnavailableError,
)
from airflow_provider_slurmapi.client.retry import RetryPolicy


class ScriptedApi:
    def __init__(self) -> None:
        self.script: list[tuple[int, str]] = []
        self.received: list[dict] = []
        self.port = 0

    async def handle(self, request: web.Request) -> web.Response:
        self.received.append(
            {
                "url": request.path,
                "authorization": request.headers.get("Authorization"),
                "content_type": request.headers.get("Content-Type"),
                "json": json.loads(await request.read() or b"null"),
            }
        )
        status, text = self.script.pop(0) if self.script else (500, "script exhausted")
        return web.Response(status=status, text=text, content_type="application/json")

    @property
    def calls(self) -> list[tuple[str, str]]:
        return [(r["json"]["method"].removeprefix("HTTP_METHOD_"), r["json"]["path"]) for r in self.received]


@pytest.fixture
async def api():
    server = ScriptedApi()
    app = web.Application()
    app.router.add_post(URL_PATH, server.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    server.port = runner.addresses[0][1]
    yield server
    await runner.cleanup()


class Tokens:
    """A token source that hands out a new token whenever it is forced to."""

    def __init__(self) -> None:
        self.calls: list[bool] = []
        self.generation = 1

    async def __call__(self, force: bool) -> str:
        self.calls.append(force)
        if force:
            self.generation += 1
        return f"token-{self.generation}"


def make_client(port: int, tokens: Tokens, retry: RetryPolicy = FAST) -> AsyncSlurmJobApiClient:
    return AsyncSlurmJobApiClient(cluster_at(port), tokens, retry=retry, timeout=5)


async def test_request_shape_and_bearer_token(api, slurm_fixture):
    api.script = [envelope(200, slurm_fixture("job_running.json"))]
    tokens = Tokens()
    async with make_client(api.port, tokens) as client:
        status = await client.get_job(1)
    assert status.state == "RUNNING"
    (received,) = api.received
    assert received["url"] == URL_PATH
    assert received["authorization"] == "Bearer token-1"
    assert received["content_type"] == "application/json"
    assert received["json"] == {"method": "HTTP_METHOD_GET", "path": "/slurm/v0.0.42/job/1"}
    assert tokens.calls == [False]


async def test_get_retries_on_unavailable_then_succeeds(api, slurm_fixture):
    api.script = [
        google(503, "UNAVAILABLE"),
        google(503, "UNAVAILABLE"),
        envelope(200, slurm_fixture("job_failed.json")),
    ]
    async with make_client(api.port, Tokens()) as client:
        status = await client.get_job(8)
    assert status.state == "FAILED" and status.exit_code.return_code == 3
    assert api.calls == [("GET", "/slurm/v0.0.42/job/8")] * 3


async def test_get_gives_up_after_max_attempts(api):
    api.script = [google(503, "UNAVAILABLE")] * 10
    async with make_client(api.port, Tokens()) as client:
        with pytest.raises(UnavailableError):
            await client.get_job(1)
    assert len(api.received) == FAST.max_attempts


async def test_submit_is_never_retried(api, slurm_fixture):
    api.script = [google(503, "UNAVAILABLE"), envelope(200, slurm_fixture("submit_response.json"))]
    async with make_client(api.port, Tokens()) as client:
        with pytest.raises(UnavailableError):
            await client.submit_job({"name": "t"}, "#!/bin/bash\necho hi\n")
    assert api.calls == [("POST", "/slurm/v0.0.42/job/submit")]


async def test_permission_denied_is_not_retried(api, slurm_fixture):
    api.script = [google(403, "PERMISSION_DENIED"), envelope(200, slurm_fixture("job_running.json"))]
    tokens = Tokens()
    async with make_client(api.port, tokens) as client:
        with pytest.raises(PermissionDeniedError):
            await client.get_job(1)
    assert len(api.received) == 1
    assert tokens.calls == [False]  # a 403 is not a token problem


async def test_unauthenticated_refreshes_token_once_and_succeeds(api, slurm_fixture):
    api.script = [google(401, "UNAUTHENTICATED"), envelope(200, slurm_fixture("job_completed.json"))]
    tokens = Tokens()
    async with make_client(api.port, tokens) as client:
        status = await client.get_job(1)
    assert status.state == "COMPLETED"
    assert tokens.calls == [False, True]
    assert [r["authorization"] for r in api.received] == ["Bearer token-1", "Bearer token-2"]


async def test_unauthenticated_refresh_also_for_submit(api, slurm_fixture):
    # Google rejected the call before Slurm saw it: resending with a fresh token is safe
    api.script = [google(401, "UNAUTHENTICATED"), envelope(200, slurm_fixture("submit_response.json"))]
    tokens = Tokens()
    async with make_client(api.port, tokens) as client:
        assert await client.submit_job({}, "#!/bin/bash\n") == "1"
    assert tokens.calls == [False, True]
    assert len(api.received) == 2


async def test_unauthenticated_twice_gives_up(api, slurm_fixture):
    api.script = [google(401, "UNAUTHENTICATED")] * 5 + [envelope(200, slurm_fixture("job_running.json"))]
    tokens = Tokens()
    async with make_client(api.port, tokens) as client:
        with pytest.raises(UnauthenticatedError):
            await client.get_job(1)
    assert tokens.calls.count(True) == 1
    assert len(api.received) == 2


async def test_fallback_to_accounting_and_not_found(api, slurm_fixture):
    api.script = [
        envelope(404, slurm_fixture("job_unknown.json")),
        envelope(200, slurm_fixture("slurmdb_job_unknown.json")),
    ]
    async with make_client(api.port, Tokens()) as client:
        with pytest.raises(JobNotFoundError):
            await client.get_job(999999)
    assert api.calls == [("GET", "/slurm/v0.0.42/job/999999"), ("GET", "/slurmdb/v0.0.42/job/999999")]


async def test_cancel_completed_job(api, slurm_fixture):
    api.script = [envelope(200, slurm_fixture("delete_completed.json"))]
    async with make_client(api.port, Tokens()) as client:
        assert await client.cancel_job(1) is False


async def test_connection_refused_is_transport_error_after_retries():
    tokens = Tokens()
    async with make_client(free_port(), tokens) as client:
        with pytest.raises(TransportError) as caught:
            await client.get_job(1)
    assert caught.value.retryable
    assert len(tokens.calls) == FAST.max_attempts  # one POST attempt per token fetch


async def test_connection_refused_on_submit_is_not_retried():
    tokens = Tokens()
    async with make_client(free_port(), tokens) as client:
        with pytest.raises(TransportError):
            await client.submit_job({}, "#!/bin/bash\n")
    assert len(tokens.calls) == 1


async def test_owned_session_is_closed_on_exit(api, slurm_fixture):
    api.script = [envelope(200, slurm_fixture("ping.json"))]
    client = make_client(api.port, Tokens())
    async with client:
        await client.ping()
        session = client._session
        assert session is not None and not session.closed
    assert session.closed


async def test_caller_session_is_not_closed(api, slurm_fixture):
    api.script = [envelope(200, slurm_fixture("ping.json"))]
    async with aiohttp.ClientSession() as session:
        async with AsyncSlurmJobApiClient(cluster_at(api.port), Tokens(), session=session, retry=FAST) as client:
            await client.ping()
        assert not session.closed
    assert len(api.received) == 1
