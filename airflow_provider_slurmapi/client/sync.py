"""Blocking transport over ``requests`` (a google-auth ``AuthorizedSession`` in production)."""

from __future__ import annotations

import time
from typing import Any

import requests

from airflow_provider_slurmapi.client.api import SlurmJobApiOperations
from airflow_provider_slurmapi.client.cluster import ClusterRef
from airflow_provider_slurmapi.client.envelope import SlurmCall, SlurmReply, read_reply
from airflow_provider_slurmapi.client.errors import SlurmJobApiError, TransportError
from airflow_provider_slurmapi.client.operations import Operation, Pause


class SlurmJobApiClient(SlurmJobApiOperations):
    """Sync client. The session adds credentials; an ``AuthorizedSession`` refreshes them on 401."""

    def __init__(self, session: requests.Session, cluster: ClusterRef, **kwargs: Any) -> None:
        super().__init__(cluster, **kwargs)
        self.session = session

    def _run(self, operation: Operation) -> Any:
        try:
            step = next(operation)
            while True:
                if isinstance(step, Pause):
                    time.sleep(step.seconds)
                    step = operation.send(None)
                    continue
                try:
                    reply = self._send(step)
                except SlurmJobApiError as error:
                    step = operation.throw(error)  # the operation may reconcile; else it re-raises
                else:
                    step = operation.send(reply)
        except StopIteration as done:
            return done.value

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
                    )
                except (requests.ConnectionError, requests.Timeout) as error:
                    raise TransportError(f"{request.method} {request.path}: {error}") from error
                return read_reply(request, response.status_code, response.text)
        raise AssertionError("unreachable")  # tenacity re-raises the last error
