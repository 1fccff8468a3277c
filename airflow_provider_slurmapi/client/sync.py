"""Blocking transport over ``requests`` (a google-auth ``AuthorizedSession`` in production)."""

from __future__ import annotations

import time

import requests

from airflow_provider_slurmapi.client.api import ClusterClient, SyncOperations
from airflow_provider_slurmapi.client.cluster import ClusterRef
from airflow_provider_slurmapi.client.envelope import SlurmCall, SlurmReply, read_reply, refuse_redirect
from airflow_provider_slurmapi.client.errors import SlurmJobApiError, TransportError
from airflow_provider_slurmapi.client.paths import DEFAULT_API_VERSION
from airflow_provider_slurmapi.client.retry import RetryPolicy
from airflow_provider_slurmapi.client.steps import Operation, Pause, StepResult, T, advance


class SlurmJobApiClient(ClusterClient, SyncOperations):
    """Sync client. The session adds credentials; an ``AuthorizedSession`` refreshes them on 401."""

    def __init__(
        self,
        session: requests.Session,
        cluster: ClusterRef,
        *,
        api_version: str = DEFAULT_API_VERSION,
        timeout: float = 60.0,
        retry: RetryPolicy | None = None,
    ) -> None:
        super().__init__(cluster, api_version=api_version, timeout=timeout, retry=retry)
        self.session = session

    def _run(self, operation: Operation[T]) -> T:
        outcome: StepResult = None
        try:
            while True:
                step = advance(operation, outcome)
                outcome = self._sleep(step) if isinstance(step, Pause) else self._try_send(step)
        except StopIteration as done:
            result: T = done.value
            return result

    @staticmethod
    def _sleep(pause: Pause) -> None:
        time.sleep(pause.seconds)

    def _try_send(self, request: SlurmCall) -> SlurmReply | SlurmJobApiError:
        try:
            return self._send(request)
        except SlurmJobApiError as error:
            return error  # for the operation to reconcile, or raise

    def _send(self, request: SlurmCall) -> SlurmReply:
        data = request.encode()
        for attempt in self.retry.retrying(request):
            with attempt:
                try:
                    response = self.session.post(
                        self.cluster.url,
                        data=data,
                        headers={"Content-Type": "application/json"},
                        timeout=self.timeout,
                        allow_redirects=False,  # a redirect would take the call (and its credentials) elsewhere
                    )
                except (requests.ConnectionError, requests.Timeout) as error:
                    raise TransportError(f"{request.method} {request.path}: {error}") from error
                refuse_redirect(request, response.status_code, response.headers.get("Location"))
                return read_reply(request, response.status_code, response.text)
        raise AssertionError("unreachable")  # tenacity re-raises the last error
