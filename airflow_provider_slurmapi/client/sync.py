"""Blocking transport over ``requests`` (a google-auth ``AuthorizedSession`` in production)."""

from __future__ import annotations

from typing import Any

import requests

from airflow_provider_slurmapi.client.base import ClientBase
from airflow_provider_slurmapi.client.cluster import ClusterRef
from airflow_provider_slurmapi.client.envelope import SlurmReply, SlurmRequest, read_reply
from airflow_provider_slurmapi.client.errors import TransportError
from airflow_provider_slurmapi.client.operations import Operation


class SlurmJobApiClient(ClientBase):
    """Sync client. The session adds credentials; an ``AuthorizedSession`` refreshes them on 401."""

    def __init__(self, session: requests.Session, cluster: ClusterRef, **kwargs: Any) -> None:
        super().__init__(cluster, **kwargs)
        self.session = session

    def _run(self, operation: Operation) -> Any:
        try:
            request = next(operation)
            while True:
                request = operation.send(self._send(request))
        except StopIteration as done:
            return done.value

    def _send(self, request: SlurmRequest) -> SlurmReply:
        data = request.encode()
        for attempt in self.retry.retrying(request):
            with attempt:
                try:
                    response = self.session.post(
                        self.cluster.url,
                        data=data,
                        headers={"Content-Type": "application/json"},
                        timeout=self.timeout,
                    )
                except (requests.ConnectionError, requests.Timeout) as error:
                    raise TransportError(f"{request.method} {request.path}: {error}") from error
                return read_reply(request, response.status_code, response.text)
        raise AssertionError("unreachable")  # tenacity re-raises the last error
