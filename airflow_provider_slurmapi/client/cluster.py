"""Which training cluster a client talks to, and the URL of its ``callSlurmRestApi`` method."""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from urllib.parse import urlsplit

from airflow_provider_slurmapi.client.errors import InvalidRequestError

API_PATH = "v1beta1/projects/{project}/locations/{region}/modelDevelopmentClusters/{cluster}:callSlurmRestApi"

_PATTERNS = {
    "project_id": (
        re.compile(r"[a-z][a-z0-9-]{0,61}[a-z0-9]|[a-z0-9.:-]{1,100}"),
        "a Google Cloud project ID",
    ),
    "region": (re.compile(r"[a-z]+(?:-[a-z0-9]+)+"), "a region such as us-central1"),
    "cluster_id": (re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,127}"), "a cluster ID (letters, digits, - and _)"),
}


def _check(field: str, value: object) -> str:
    pattern, what = _PATTERNS[field]
    if not isinstance(value, str) or not value:
        raise InvalidRequestError(field, "is required: set it on the connection or pass it to the operator")
    if not pattern.fullmatch(value):
        raise InvalidRequestError(field, f"{value!r} is not {what}")
    return value


def _check_endpoint(endpoint: str) -> None:
    url = urlsplit(endpoint)
    if url.scheme not in ("https", "http") or not url.hostname:
        raise InvalidRequestError("endpoint", f"{endpoint!r} is not allowed; expected an https:// base URL")
    # plain http would send the bearer token in clear text; only a local emulator may use it
    if url.scheme == "http" and not _is_loopback(url.hostname):
        raise InvalidRequestError(
            "endpoint",
            f"{endpoint!r} uses plain http to a host that is not this machine, which would leak the access "
            "token; use https://, or http:// only to localhost / 127.0.0.1 / ::1",
        )


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class ClusterRef:
    """A Vertex AI training cluster, addressed by project, region and cluster ID."""

    project_id: str
    region: str
    cluster_id: str
    endpoint: str | None = None  # base URL; default https://{region}-aiplatform.googleapis.com

    def __post_init__(self) -> None:
        for field in ("project_id", "region", "cluster_id"):
            _check(field, getattr(self, field))
        if self.endpoint is not None:
            _check_endpoint(self.endpoint)

    @property
    def base_url(self) -> str:
        return (self.endpoint or f"https://{self.region}-aiplatform.googleapis.com").rstrip("/")

    @property
    def url(self) -> str:
        path = API_PATH.format(project=self.project_id, region=self.region, cluster=self.cluster_id)
        return f"{self.base_url}/{path}"
