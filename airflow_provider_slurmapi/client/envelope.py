"""The ``callSlurmRestApi`` envelope: what a request looks like and how a reply is read."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any

from airflow_provider_slurmapi.client.errors import (
    GOOGLE_ERRORS,
    GoogleApiError,
    InvalidRequestError,
    RedirectRefusedError,
    RequestTooLargeError,
    ServerError,
    SlurmError,
    SlurmErrorDetail,
)

log = logging.getLogger(__name__)

# The API refuses a request of 1 MB or more; checked here so nothing that large is ever sent.
MAX_REQUEST_BYTES = 1024 * 1024

METHODS = ("GET", "POST", "PUT", "DELETE", "PATCH")

# A reply longer than this (a queue of a few hundred jobs) is decoded off the event loop, by
# ``decode_json`` (see there).
LARGE_REPLY_CHARS = 256 * 1024


@dataclass(frozen=True)
class SlurmCall:
    """One Slurm REST call, before it is wrapped in the envelope."""

    method: str
    path: str
    body: dict[str, Any] | None = None
    # Slurm statuses that are an answer, not an error (404 on a job that left the live queue).
    accept_status: tuple[int, ...] = ()
    # The start of a warning that is an answer too ("No job changes since"): logged at debug level.
    expected_warning: str | None = None

    def envelope(self) -> dict[str, Any]:
        if self.method not in METHODS:
            raise InvalidRequestError("method", f"{self.method!r} is not one of {', '.join(METHODS)}")
        if not self.path.startswith(("/slurm/", "/slurmdb/")):
            raise InvalidRequestError("path", f"{self.path!r} must start with /slurm/ or /slurmdb/")
        request: dict[str, Any] = {"method": f"HTTP_METHOD_{self.method}", "path": self.path}
        if self.body is not None:
            request["body"] = self.body
        return request

    def encode(self) -> bytes:
        """The request body as sent, refused when it reaches the API's size limit."""
        data = self._bytes()
        if len(data) >= MAX_REQUEST_BYTES:
            raise RequestTooLargeError(len(data), MAX_REQUEST_BYTES)
        return data

    def fits(self) -> bool:
        """Whether the request stays under the API's size limit."""
        return len(self._bytes()) < MAX_REQUEST_BYTES

    def _bytes(self) -> bytes:
        return json.dumps(self.envelope(), separators=(",", ":")).encode()


@dataclass(frozen=True)
class SlurmReply:
    """slurmrestd's answer as forwarded by the API."""

    status: int
    body: dict[str, Any] = field(default_factory=dict)
    call: str = ""  # the request it answers, "GET /slurm/v0.0.42/jobs", for errors that name it
    size: int = 0  # characters of the answer (what a poller's byte budget counts)

    @property
    def warnings(self) -> list[dict[str, Any]]:
        return list(self.body.get("warnings") or [])


def refuse_redirect(request: SlurmCall, http_status: int, location: str | None) -> None:
    """Raise for a 3xx answer: both transports send with redirects off, and a redirect is an error."""
    if 300 <= http_status < 400:
        raise RedirectRefusedError(f"{request.method} {request.path}", http_status, location or "")


def read_reply(request: SlurmCall, http_status: int, text: str) -> SlurmReply:
    """Turn an HTTP answer of ``callSlurmRestApi`` into a reply, or raise the matching error."""
    try:
        payload = decode_json(text) if text else {}
    except ValueError:
        payload = None
    if http_status >= 400 or not isinstance(payload, dict) or "error" in payload:
        raise google_error(http_status, payload, text)
    if "structuredBody" in payload:
        body = payload["structuredBody"]
    elif isinstance(payload.get("body"), str):  # the documented older shape: the reply as a JSON string
        body = _parse_body_string(payload["body"])
    else:
        body = payload.get("body") or {}
    reply = SlurmReply(
        status=int(payload.get("status", 200)),
        body=body if isinstance(body, dict) else {},
        call=f"{request.method} {request.path}",
        size=len(text),
    )
    for warning in reply.warnings:
        expected = request.expected_warning and str(warning.get("description", "")).startswith(request.expected_warning)
        log.log(
            logging.DEBUG if expected else logging.WARNING,
            "Slurm warning for %s %s: %s (%s)",
            request.method,
            request.path,
            warning.get("description", ""),
            warning.get("source", ""),
        )
    errors = [SlurmErrorDetail.from_reply(e) for e in reply.body.get("errors") or [] if isinstance(e, dict)]
    if reply.status in request.accept_status:
        return reply
    if reply.status >= 400 or errors:
        if not errors and not isinstance(body, dict):
            errors = [SlurmErrorDetail(None, str(body)[:500], "", "")]
        raise SlurmError(reply.status, errors, path=request.path)
    return reply


def decode_json(text: str) -> Any:
    """``json.loads``; a large text with a Python-level hook per object. The C decoder holds the
    GIL for the whole text (half a second for a queue of 6,000 jobs): run in a worker thread, the
    hook lets the interpreter hand the GIL back to the event loop between objects."""
    if len(text) <= LARGE_REPLY_CHARS:
        return json.loads(text)
    return json.loads(text, object_hook=_as_is)


def _as_is(obj: dict[str, Any]) -> dict[str, Any]:
    return obj


def _parse_body_string(body: str) -> Any:
    try:
        return decode_json(body) if body else {}
    except ValueError:
        return body  # slurmrestd answers some errors as text/plain


def google_error(http_status: int, payload: Any, text: str = "") -> GoogleApiError:
    """The exception for a Google error envelope (or a non-JSON failure of the front end)."""
    error = payload.get("error") if isinstance(payload, dict) else None
    if isinstance(error, dict):
        status = str(error.get("status") or "")
        message = str(error.get("message") or "")
        code = int(error.get("code") or http_status)
    else:
        status, message, code = "", text[:500] or "no error details", http_status
    if not status:
        status = {
            401: "UNAUTHENTICATED",
            403: "PERMISSION_DENIED",
            429: "RESOURCE_EXHAUSTED",
            503: "UNAVAILABLE",
        }.get(code, "")
    cls = GOOGLE_ERRORS.get(status)
    if cls is None:
        cls = ServerError if code >= 500 else GoogleApiError
    return cls(code, status or f"HTTP {code}", message)
