"""The seam between the server and a backend that answers the Slurm REST call callSlurmRestApi forwards.

The server validates the Google side (auth, cluster, envelope) and hands a ``SlurmRequest`` to a
``SlurmBackend``, which answers ``(slurmrestd HTTP status, reply)``:

- ``BuiltinBackend`` (``builtin/``) emulates slurmctld + slurmdbd with local processes.
- ``SlurmrestdBackend`` (``slurmrestd.py``) forwards every call to a real slurmrestd.
"""

from __future__ import annotations

import abc
import re
from dataclasses import dataclass, field
from typing import Any

HTTP_METHODS = ("GET", "POST", "PUT", "DELETE", "PATCH")  # what callSlurmRestApi can forward
BODY_METHODS = ("POST", "PUT", "PATCH")  # the methods whose call carries a body


@dataclass(frozen=True)
class SlurmRequest:
    """One Slurm REST call, as unwrapped from callSlurmRestApi."""

    method: str  # one of HTTP_METHODS
    path: str  # without the query string
    query: dict[str, list[str]] = field(default_factory=dict)  # decoded, repeated keys kept
    raw_query: str = ""  # undecoded, for checks that depend on the literal text
    body: Any = None
    principal: str = ""


# a JSON reply, or the text of one slurmrestd answers as text/plain (e.g. "Authentication failure")
SlurmAnswer = tuple[int, dict[str, Any] | str]


# what the emulator's control endpoint can do to a job (see Scheduler.control)
CONTROL_ACTIONS = ("requeue", "requeuehold", "hold", "release", "preempt", "node_fail")


class ControlError(Exception):
    """A control action refused: the HTTP status to answer (400, 404, 409, 501) and why."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


class BackendUnavailable(Exception):
    """The backend cannot answer at all (e.g. slurmrestd is unreachable); the server says UNAVAILABLE."""


class SlurmBackend(abc.ABC):
    """What the server needs from something that can answer Slurm REST calls for one cluster."""

    @abc.abstractmethod
    def is_known_path(self, path: str) -> bool:
        """Whether ``path`` (no query string) is a Slurm REST route; unknown ones are INVALID_ARGUMENT."""

    @abc.abstractmethod
    async def handle(self, request: SlurmRequest) -> SlurmAnswer:
        """Answer one call with slurmrestd's HTTP status and reply; raise ``BackendUnavailable`` if none."""

    def control(self, job_ref: str, action: str) -> dict[str, Any]:
        """Play ``action`` (one of ``CONTROL_ACTIONS``) on job ``job_ref``; raise ``ControlError`` if refused."""
        raise ControlError(501, f"this backend cannot {action} a job")

    async def start(self) -> None:  # noqa: B027 - optional hook
        """Called in the server's event loop before the first request."""

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Called in the server's event loop on shutdown."""


SLURM_PATH = re.compile(r"^/(slurm|slurmdb)/(v0\.0\.4[0-2])/(.*)$")  # (service, version, route)
_SLURM_ROUTES = re.compile(
    r"^(job/submit|job/[^/]+|jobs/?|jobs/state/?|ping/?|partitions/?|partition/[^/]+|nodes/?|node/[^/]+)$"
)
_SLURMDB_ROUTES = re.compile(r"^(job/[^/]+|jobs/?|tres/?)$")


def is_slurm_route(path: str) -> bool:
    """Whether ``path`` (no query string) is a Slurm REST route the API forwards."""
    match = SLURM_PATH.match(path)
    if not match:
        return False
    routes = _SLURM_ROUTES if match.group(1) == "slurm" else _SLURMDB_ROUTES
    return bool(routes.match(match.group(3)))
