"""What only the async client does: bearer tokens from its token source, refreshed once on a 401,
and the aiohttp session it opens or is given. The cases both clients share are in test_clients.py."""

from __future__ import annotations

import aiohttp
import pytest
from scripted_api import FAST, Tokens, async_client, cluster_at, envelope, google

from airflow_provider_slurmapi.client.aio import AsyncSlurmJobApiClient
from airflow_provider_slurmapi.client.errors import PermissionDeniedError, UnauthenticatedError


async def test_each_request_carries_a_bearer_token(api, slurm_fixture):
    api.script = [envelope(200, slurm_fixture("job_running.json"))]
    tokens = Tokens()
    async with async_client(api.port, tokens) as client:
        assert (await client.get_job(1)).state == "RUNNING"
    (received,) = api.received
    assert received["authorization"] == "Bearer token-1"
    assert tokens.calls == [False]


async def test_permission_denied_keeps_the_token(api, slurm_fixture):
    api.script = [google(403, "PERMISSION_DENIED"), envelope(200, slurm_fixture("job_running.json"))]
    tokens = Tokens()
    async with async_client(api.port, tokens) as client:
        with pytest.raises(PermissionDeniedError):
            await client.get_job(1)
    assert tokens.calls == [False]  # a 403 is not a token problem


async def test_unauthenticated_refreshes_token_once_and_succeeds(api, slurm_fixture):
    api.script = [google(401, "UNAUTHENTICATED"), envelope(200, slurm_fixture("job_completed.json"))]
    tokens = Tokens()
    async with async_client(api.port, tokens) as client:
        status = await client.get_job(1)
    assert status.state == "COMPLETED"
    assert tokens.calls == [False, True]
    assert [r["authorization"] for r in api.received] == ["Bearer token-1", "Bearer token-2"]


async def test_unauthenticated_refresh_also_for_submit(api, slurm_fixture):
    # Google rejected the call before Slurm saw it: resending with a fresh token is safe
    api.script = [google(401, "UNAUTHENTICATED"), envelope(200, slurm_fixture("submit_response.json"))]
    tokens = Tokens()
    async with async_client(api.port, tokens) as client:
        assert await client.submit_job({}, "#!/bin/bash\n") == "1"
    assert tokens.calls == [False, True]
    assert len(api.received) == 2


async def test_unauthenticated_twice_gives_up(api, slurm_fixture):
    api.script = [google(401, "UNAUTHENTICATED")] * 5 + [envelope(200, slurm_fixture("job_running.json"))]
    tokens = Tokens()
    async with async_client(api.port, tokens) as client:
        with pytest.raises(UnauthenticatedError):
            await client.get_job(1)
    assert tokens.calls.count(True) == 1
    assert len(api.received) == 2


async def test_owned_session_is_closed_on_exit(api, slurm_fixture):
    api.script = [envelope(200, slurm_fixture("ping.json"))]
    client = async_client(api.port, Tokens())
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
