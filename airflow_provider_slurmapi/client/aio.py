"""Non-blocking transport over ``aiohttp``, for triggers."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Self

import aiohttp

from airflow_provider_slurmapi.client.api import AsyncOperations, ClusterClient
from airflow_provider_slurmapi.client.cluster import ClusterRef
from airflow_provider_slurmapi.client.envelope import (
    LARGE_REPLY_CHARS,
    SlurmCall,
    SlurmReply,
    read_reply,
    refuse_redirect,
)
from airflow_provider_slurmapi.client.errors import SlurmJobApiError, TransportError, UnauthenticatedError
from airflow_provider_slurmapi.client.paths import DEFAULT_API_VERSION
from airflow_provider_slurmapi.client.retry import RetryPolicy
from airflow_provider_slurmapi.client.steps import Operation, Pause, StepResult, T, advance

# Returns a valid access token; with force=True it must fetch a new one.
TokenSource = Callable[[bool], Awaitable[str]]


class AsyncSlurmJobApiClient(ClusterClient, AsyncOperations):
    """Async client. Tokens come from ``token_source``; a rejected token is refreshed once."""

    def __init__(
        self,
        cluster: ClusterRef,
        token_source: TokenSource,
        *,
        session: aiohttp.ClientSession | None = None,
        api_version: str = DEFAULT_API_VERSION,
        timeout: float = 60.0,
        retry: RetryPolicy | None = None,
    ) -> None:
        super().__init__(cluster, api_version=api_version, timeout=timeout, retry=retry)
        self.token_source = token_source
        self._session = session
        self._owns_session = session is None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._owns_session and self._session is not None:
            await self._session.close()
            self._session = None

    def _client_session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.timeout))
            self._owns_session = True
        return self._session

    async def _run(self, operation: Operation[T]) -> T:
        outcome: StepResult = None
        try:
            while True:
                step = advance(operation, outcome)
                outcome = await (self._sleep(step) if isinstance(step, Pause) else self._try_send(step))
        except StopIteration as done:
            result: T = done.value
            return result

    @staticmethod
    async def _sleep(pause: Pause) -> None:
        await asyncio.sleep(pause.seconds)

    async def _try_send(self, request: SlurmCall) -> SlurmReply | SlurmJobApiError:
        try:
            return await self._send(request)
        except SlurmJobApiError as error:
            return error  # for the operation to reconcile, or raise

    async def _send(self, request: SlurmCall) -> SlurmReply:
        data = request.encode()
        async for attempt in self.retry.async_retrying(request):
            with attempt:
                try:
                    return await self._post(request, data, force_token=False)
                except UnauthenticatedError:
                    # The token expired during a long wait: fetch a new one and try once more.
                    return await self._post(request, data, force_token=True)
        raise AssertionError("unreachable")  # tenacity re-raises the last error

    async def _post(self, request: SlurmCall, data: bytes, *, force_token: bool) -> SlurmReply:
        token = await self.token_source(force_token)
        headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        try:
            # a redirect would take the call (and its credentials) elsewhere: it is an error, not followed
            session = self._client_session()
            async with session.post(self.cluster.url, data=data, headers=headers, allow_redirects=False) as response:
                refuse_redirect(request, response.status, response.headers.get("Location"))
                text = await response.text()
        except (TimeoutError, aiohttp.ClientError) as error:
            raise TransportError(f"{request.method} {request.path}: {describe_failure(error)}") from error
        if len(text) > LARGE_REPLY_CHARS:  # decoding it here would stall every trigger of the loop
            return await asyncio.to_thread(read_reply, request, response.status, text)
        return read_reply(request, response.status, text)


def describe_failure(error: BaseException) -> str:
    """What went wrong, without the request: the repr of aiohttp's ``ClientResponseError`` holds the
    request's headers, the bearer token among them, so it is never used."""
    if isinstance(error, aiohttp.ClientResponseError):
        return f"{type(error).__name__}: HTTP {error.status} {error.message}".rstrip()
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
