"""What the sync and async client tests share: a scripted local HTTP server standing in for
callSlurmRestApi, a fast retry policy, a test cluster, and the two clients called alike."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import requests

from airflow_provider_slurmapi.client.aio import AsyncSlurmJobApiClient
from airflow_provider_slurmapi.client.cluster import ClusterRef
from airflow_provider_slurmapi.client.retry import RetryPolicy
from airflow_provider_slurmapi.client.sync import SlurmJobApiClient

FAST = RetryPolicy(max_attempts=3, initial_wait=0.001, max_wait=0.005, max_elapsed=10)
URL_PATH = "/v1beta1/projects/my-project/locations/us-central1/modelDevelopmentClusters/c1:callSlurmRestApi"
CLIENT_KINDS = ("sync", "async")


def cluster_at(port: int) -> ClusterRef:
    return ClusterRef("my-project", "us-central1", "c1", endpoint=f"http://127.0.0.1:{port}")


def envelope(status: int, body: dict) -> tuple[int, str]:
    return 200, json.dumps({"status": status, "structuredBody": body})


def google(code: int, status: str) -> tuple[int, str]:
    return code, json.dumps({"error": {"code": code, "message": f"{status} from test", "status": status}})


def free_port() -> int:
    """A port with nothing listening on it (connection refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ScriptedApi:
    """An HTTP server in its own thread (so the sync and the async client alike can call it) that
    answers each POST with the next scripted (http_status, text) and records what it received."""

    def __init__(self) -> None:
        self.script: list[tuple[int, str]] = []
        self.received: list[dict[str, Any]] = []
        api = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                data = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                api.received.append(
                    {
                        "url": self.path,
                        "authorization": self.headers.get("Authorization"),
                        "content_type": self.headers.get("Content-Type"),
                        "json": json.loads(data or b"null"),
                    }
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

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    @property
    def calls(self) -> list[tuple[str, str]]:
        return [(r["json"]["method"].removeprefix("HTTP_METHOD_"), r["json"]["path"]) for r in self.received]


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


class CountingSession(requests.Session):
    def __init__(self) -> None:
        super().__init__()
        self.posts = 0

    def post(self, *args, **kwargs):
        self.posts += 1
        return super().post(*args, **kwargs)


def async_client(port: int, tokens: Tokens, retry: RetryPolicy = FAST) -> AsyncSlurmJobApiClient:
    return AsyncSlurmJobApiClient(cluster_at(port), tokens, retry=retry, timeout=5)


class EitherClient:
    """The sync or the async client (``kind``) of the API at ``port``, called alike:
    ``client.get_job(1)`` returns what the operation returns or raises what it raises. The async
    client runs in a new event loop, inside ``async with`` (which closes the session it opened)."""

    def __init__(self, kind: str, port: int) -> None:
        assert kind in CLIENT_KINDS, kind
        self.kind, self.port = kind, port
        self.session = CountingSession()
        self.tokens = Tokens()

    def __getattr__(self, operation: str) -> Callable[..., Any]:
        if operation.startswith("_"):
            raise AttributeError(operation)

        def run(*args: Any) -> Any:
            if self.kind == "sync":
                client = SlurmJobApiClient(self.session, cluster_at(self.port), retry=FAST, timeout=5)
                return getattr(client, operation)(*args)
            return asyncio.run(self._run_async(operation, args))

        return run

    async def _run_async(self, operation: str, args: tuple[Any, ...]) -> Any:
        async with async_client(self.port, self.tokens) as client:
            return await getattr(client, operation)(*args)

    @property
    def attempts(self) -> int:
        """How many POSTs the client tried, answered or not: the sync client's session counts
        them; the async client fetches a token for each."""
        return self.session.posts if self.kind == "sync" else len(self.tokens.calls)
