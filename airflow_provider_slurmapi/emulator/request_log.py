"""The calls that reached the cluster, in order: what a test reads to see what its DAGs sent."""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass, field


@dataclass(frozen=True)
class LoggedCall:
    """One Slurm REST call the backend answered."""

    at: float  # wall-clock time (epoch seconds) of the answer
    method: str  # "GET", "POST", "DELETE", ...
    path: str  # the Slurm path, without the query string
    query: dict[str, list[str]] = field(default_factory=dict)
    status: int = 200


class RequestLog:
    """Thread-safe: the server appends from its event loop while a test reads from its own thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._calls: list[LoggedCall] = []

    def record(self, method: str, path: str, query: dict[str, list[str]], status: int) -> None:
        with self._lock:
            self._calls.append(LoggedCall(time.time(), method, path, query, status))

    def calls(self, method: str | None = None, path: str | None = None, since: float = 0.0) -> list[LoggedCall]:
        """The calls answered at or after ``since``, of ``method`` and whose path ``path`` (a regex) searches."""
        pattern = re.compile(path) if path is not None else None
        with self._lock:
            calls = list(self._calls)
        return [
            call
            for call in calls
            if call.at >= since
            and (method is None or call.method == method)
            and (pattern is None or pattern.search(call.path))
        ]
