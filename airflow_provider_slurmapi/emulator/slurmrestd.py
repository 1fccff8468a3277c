"""``SlurmrestdBackend``: forward every call to a real slurmrestd, as the Google API does."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import yarl

from airflow_provider_slurmapi.emulator.backend_api import (
    BODY_METHODS,
    BackendUnavailable,
    ControlError,
    SlurmAnswer,
    SlurmBackend,
    SlurmRequest,
    is_slurm_route,
)

# what a Slurm admin runs for each control action
_SCONTROL = {
    "requeue": "scontrol requeue {job}",
    "requeuehold": "scontrol requeuehold {job}",
    "hold": "scontrol hold {job}",
    "release": "scontrol release {job}",
    "preempt": "a job in a partition of higher PriorityTier (PreemptMode=REQUEUE)",
    "node_fail": "scontrol update nodename=<the job's node> state=down reason=test",
}


class SlurmrestdBackend(SlurmBackend):
    """Sends each call to ``url`` as ``user`` with a JWT ``token`` (slurmrestd's auth/jwt headers)."""

    def __init__(self, url: str, user: str, token: str, timeout: float = 60) -> None:
        self.url = url.rstrip("/")
        self.user = user
        self.token = token
        self.timeout = timeout
        self._session: aiohttp.ClientSession | None = None

    def is_known_path(self, path: str) -> bool:
        # the same routes as the builtin backend, so Google-side validation does not depend on the backend
        return is_slurm_route(path)

    def control(self, job_ref: str, action: str) -> dict[str, Any]:
        # the job lives in a real Slurm: only its own tools can requeue, hold or fail it
        how = _SCONTROL.get(action, "scontrol").format(job=job_ref)
        raise ControlError(501, f"the slurmrestd backend forwards to a real Slurm: on the cluster, use {how}")

    async def start(self) -> None:
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.timeout))

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def handle(self, request: SlurmRequest) -> SlurmAnswer:
        assert self._session is not None, "start() opens the session"
        target = self.url + request.path + (f"?{request.raw_query}" if request.raw_query else "")
        headers = {"X-SLURM-USER-NAME": self.user, "X-SLURM-USER-TOKEN": self.token}
        body = request.body if request.method in BODY_METHODS else None
        try:
            # encoded=True: the query reaches slurmrestd byte for byte, as the caller wrote it
            async with self._session.request(
                request.method, yarl.URL(target, encoded=True), headers=headers, json=body
            ) as response:
                status, raw = response.status, await response.read()
        except TimeoutError as exc:  # asyncio's timeout is the builtin TimeoutError since 3.11
            raise BackendUnavailable(f"slurmrestd at {self.url} did not answer within {self.timeout}s") from exc
        except aiohttp.ClientError as exc:
            raise BackendUnavailable(f"slurmrestd at {self.url} is unreachable: {exc}") from exc
        return status, _reply(raw.decode("utf-8", errors="replace"))


def _reply(text: str) -> dict[str, Any] | str:
    """A JSON object as a dict; anything else (slurmrestd's text/plain errors) as the text itself."""
    try:
        reply = json.loads(text)
    except ValueError:
        return text
    return reply if isinstance(reply, dict) else text
