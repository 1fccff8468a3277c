"""What the sync and async client tests share: scripted replies, a fast retry policy, a test cluster."""

from __future__ import annotations

import json
import socket

from airflow_provider_slurmapi.client.cluster import ClusterRef
from airflow_provider_slurmapi.client.retry import RetryPolicy

FAST = RetryPolicy(max_attempts=3, initial_wait=0.001, max_wait=0.005, max_elapsed=10)
URL_PATH = "/v1beta1/projects/my-project/locations/us-central1/modelDevelopmentClusters/c1:callSlurmRestApi"


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
