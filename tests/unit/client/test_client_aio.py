"""What only the async client does: bearer tokens from its token source, refreshed once on a 401,
and the aiohttp session it opens or is given. The cases both clients share are in test_clients.py."""

from __future__ import annotations

import json
import threading

import aiohttp
import pytest
from scripted_api import FAST, Tokens, async_client, cluster_at, envelope, google

from airflow_provider_slurmapi.client import envelope as envelope_module
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


async def test_a_large_reply_is_decoded_in_a_worker_thread_to_the_same_answer(api, slurm_fixture, monkeypatch):
    record = slurm_fixture("job_pending_held.json")["jobs"][0]
    queue = {**slurm_fixture("jobs_list_mixed.json"), "jobs": [{**record, "job_id": n} for n in range(1, 200)]}
    api.script = [envelope(200, queue)]
    threads: list[str] = []
    decode = envelope_module.decode_json

    def noting_decode(text: str) -> object:
        threads.append(threading.current_thread().name)
        return decode(text)

    monkeypatch.setattr(envelope_module, "decode_json", noting_decode)
    async with async_client(api.port, Tokens()) as client:
        changes = await client.queue_changes(None, ["7", "150"])
    assert [status.job_id for status in changes.jobs or []] == ["7", "150"]
    assert changes.size > envelope_module.LARGE_REPLY_CHARS
    assert threads and threading.main_thread().name not in threads  # not on the event loop's thread
    assert envelope_module.decode_json(json.dumps(queue)) == queue  # the hook changes nothing
