"""The aiohttp application: Google's side of the Slurm Job API.

It does what Google's front end does before a call reaches the cluster (bearer token, cluster
lookup, IAM, size and argument checks, error envelopes) and wraps the backend's answer as
``{"status": ..., "structuredBody": ...}`` (or the older ``{"status": ..., "body": "<json>"}``); a
text/plain answer of slurmrestd is always ``{"status": ..., "body": "<text>"}``. A valid call may
get an injected fault instead (see ``faults.py``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import socket
import struct
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs

from aiohttp import web

from airflow_provider_slurmapi.emulator import auth
from airflow_provider_slurmapi.emulator.backend_api import (
    BODY_METHODS,
    HTTP_METHODS,
    BackendUnavailable,
    ControlError,
    SlurmBackend,
    SlurmRequest,
)
from airflow_provider_slurmapi.emulator.exposure import loopback_only
from airflow_provider_slurmapi.emulator.faults import FAULT_HEADER, FaultInjector, unexpected_body
from airflow_provider_slurmapi.emulator.outages import OUTAGE_KINDS, outage_answer
from airflow_provider_slurmapi.emulator.request_log import RequestLog

log = logging.getLogger(__name__)

MAX_REQUEST_BYTES = 1024 * 1024  # "the whole request must be under 1 MB"
# the API's names for the HTTP methods, e.g. HTTP_METHOD_GET
SLURM_METHODS = {f"HTTP_METHOD_{method}": method for method in HTTP_METHODS}
_CALL_PATH = re.compile(
    r"^/v1beta1/projects/(?P<project>[^/]+)/locations/(?P<region>[^/]+)"
    r"/modelDevelopmentClusters/(?P<cluster>[^/:]+):callSlurmRestApi$"
)
_GOOGLE_STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    405: "UNIMPLEMENTED",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}

ClusterKey = tuple[str, str, str]  # (project, region, cluster)

# the emulator's own control, outside Google's API: POST .../jobs/12:requeue (no token: a local test
# tool, answered only to callers on this machine, see exposure.py)
CONTROL_PATH = "/emulator/v1/{project}/{region}/{cluster}/jobs/{job_ref:[^/:]+}:{action:[^/:]+}"


@dataclass
class ServerState:
    """Everything the handlers need; owned by the Emulator."""

    backends: dict[ClusterKey, SlurmBackend]
    tokens: auth.TokenStore
    key_info: dict[str, Any]
    public_pem: bytes
    token_uri: Callable[[], str]  # known only once the port is bound
    reply_shape: str = "structured"
    denied_principals: frozenset[str] = field(default_factory=frozenset)
    query_strings: bool = True  # False: refuse a query string in ``path`` (the API does not say)
    faults: FaultInjector = field(default_factory=FaultInjector)
    requests: RequestLog = field(default_factory=RequestLog)
    landing_late: set[asyncio.Task[web.Response]] = field(default_factory=set)  # calls a "late_landing" fault delayed


STATE_KEY: web.AppKey[ServerState] = web.AppKey("emulator_state", ServerState)

UNAUTHENTICATED_MESSAGE = (
    "Request had invalid authentication credentials. Expected OAuth 2 access "
    "token, login cookie or other valid authentication credential."
)


def google_error(code: int, message: str) -> web.Response:
    body = {"error": {"code": code, "message": message, "status": _GOOGLE_STATUS.get(code, "UNKNOWN")}}
    headers = {"WWW-Authenticate": 'Bearer realm="emulator"'} if code == 401 else None
    return web.json_response(body, status=code, headers=headers)


async def token_endpoint(request: web.Request) -> web.Response:
    """OAuth 2.0 JWT-bearer grant, as google-auth's service_account.Credentials.refresh() uses it."""
    state = request.app[STATE_KEY]
    form = await request.post()
    if form.get("grant_type") != auth.JWT_BEARER_GRANT:
        return web.json_response(
            {"error": "unsupported_grant_type", "error_description": "Only the JWT bearer grant is supported."},
            status=400,
        )
    assertion = form.get("assertion")
    if not isinstance(assertion, str) or not assertion:
        return web.json_response({"error": "invalid_request", "error_description": "Missing assertion."}, status=400)
    try:
        principal = auth.verify_assertion(
            assertion, state.public_pem, state.token_uri(), state.key_info["client_email"]
        )
    except auth.InvalidAssertion as exc:
        log.info("token request refused: %s", exc)
        return web.json_response({"error": "invalid_grant", "error_description": "Invalid JWT Signature."}, status=400)
    token = state.tokens.issue(principal)
    log.info("issued an access token for %s", principal)
    return web.json_response({"access_token": token, "expires_in": int(state.tokens.lifetime), "token_type": "Bearer"})


def _principal(request: web.Request, state: ServerState) -> str | None:
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return state.tokens.principal_for(token.strip())


class _Refused(Exception):
    """A call Google's front end refuses before it reaches the cluster: ``response`` is its reply."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.response = google_error(code, message)


async def call_slurm_rest_api(request: web.Request) -> web.Response:
    state = request.app[STATE_KEY]
    try:
        principal, backend, resource = _caller_and_cluster(request, state)
        # the body is read only once the caller may call this cluster
        payload = _payload(await request.read())
        slurm_request = _slurm_request(payload, principal, backend, state.query_strings)
    except _Refused as refused:
        return refused.response
    return await _answer_with_faults(request, state, backend, slurm_request, resource)


def _caller_and_cluster(request: web.Request, state: ServerState) -> tuple[str, SlurmBackend, str]:
    """The caller's principal, the backend of the cluster it calls, and the cluster's resource name."""
    match = _CALL_PATH.match(request.path)
    if match is None:
        raise _Refused(404, f"The requested URL {request.path} was not found on this server.")
    if request.method != "POST":
        raise _Refused(405, f"Method {request.method} is not allowed; callSlurmRestApi takes POST.")
    principal = _principal(request, state)
    if principal is None:
        raise _Refused(401, UNAUTHENTICATED_MESSAGE)
    key: ClusterKey = (match["project"], match["region"], match["cluster"])
    resource = f"projects/{key[0]}/locations/{key[1]}/modelDevelopmentClusters/{key[2]}"
    backend = state.backends.get(key)
    if backend is None:
        raise _Refused(404, f"ModelDevelopmentCluster {resource} not found.")
    if principal in state.denied_principals:
        raise _Refused(
            403,
            "Permission 'aiplatform.googleapis.com/modelDevelopmentClusters.run' "
            f"denied on resource '//aiplatform.googleapis.com/{resource}' "
            "(or it may not exist).",
        )
    return principal, backend, resource


def _payload(raw: bytes) -> dict[str, Any]:
    """The request body: a JSON object under the size limit."""
    if len(raw) >= MAX_REQUEST_BYTES:
        raise _Refused(
            400,
            f"Request size {len(raw)} bytes exceeds the limit: the request must be "
            f"under {MAX_REQUEST_BYTES} bytes (1 MB).",
        )
    try:
        payload = json.loads(raw or b"{}")
    except ValueError:
        raise _Refused(400, "Invalid JSON payload received.") from None
    if not isinstance(payload, dict):
        raise _Refused(400, "Invalid JSON payload received: expected an object.")
    return payload


def _slurm_request(payload: dict[str, Any], principal: str, backend: SlurmBackend, query_strings: bool) -> SlurmRequest:
    """The Slurm REST call the payload asks for: its method, a path the backend knows, its body."""
    method = payload.get("method")
    if method not in SLURM_METHODS:
        raise _Refused(400, f"Invalid value for method: {method!r}; expected one of " + ", ".join(SLURM_METHODS) + ".")
    full_path = payload.get("path")
    if not isinstance(full_path, str):
        raise _Refused(400, "path is required and must be a string.")
    path, _, raw_query = full_path.partition("?")
    if raw_query and not query_strings:
        raise _Refused(400, f"Invalid value at 'path': a query string is not allowed: {full_path!r}.")
    if not path.startswith(("/slurm/", "/slurmdb/")) or not backend.is_known_path(path):
        raise _Refused(400, f"path {full_path!r} is not a valid Slurm REST path.")
    body = payload.get("body")
    if body is not None and not isinstance(body, dict):
        raise _Refused(400, "body must be a JSON object.")
    return SlurmRequest(
        method=SLURM_METHODS[method],
        path=path,
        query=parse_qs(raw_query, keep_blank_values=True),
        raw_query=raw_query,
        body=body if SLURM_METHODS[method] in BODY_METHODS else None,
        principal=principal,
    )


async def _answer_with_faults(
    request: web.Request, state: ServerState, backend: SlurmBackend, call: SlurmRequest, resource: str
) -> web.Response:
    asked = request.headers.get(FAULT_HEADER)
    refusal = loopback_only(f"The header {FAULT_HEADER}", request.remote) if asked is not None else None
    if refusal:
        return google_error(403, refusal)
    try:
        fault = state.faults.pick(call.method, call.path, asked, comment=_comment(call))
    except ValueError as exc:  # an unknown kind in the header
        return google_error(400, str(exc))
    if fault is None:
        return await _answer(state, backend, call, resource)
    log.info("injecting fault %s on %s %s", fault, call.method, call.path)
    if fault == "latency":
        await asyncio.sleep(state.faults.latency)
    elif fault == "reset_before":
        return _reset_connection(request)
    elif fault == "late_landing":
        _land_late(state, _answer(state, backend, call, resource))
        return google_error(504, "Deadline exceeded.")
    elif fault in _FAULT_REPLIES:
        return _FAULT_REPLIES[fault]()
    elif fault in OUTAGE_KINDS:
        cluster = getattr(backend, "cluster", resource.rsplit("/", 1)[-1])  # the name Slurm's meta gives
        return _slurm_reply(state, *outage_answer(fault, call, cluster))
    response = await _answer(state, backend, call, resource)
    if fault == "unexpected_reply":  # the backend has finished; its reply comes reshaped
        return _reshaped(response)
    # reset_after: the backend has finished (a submitted job exists), only the reply is lost
    return _reset_connection(request) if fault == "reset_after" else response


def _comment(call: SlurmRequest) -> str:
    job = (call.body or {}).get("job")
    return str(job.get("comment") or "") if isinstance(job, dict) else ""


def _land_late(state: ServerState, answer: Coroutine[Any, Any, web.Response]) -> None:
    """Run the call ``state.faults.latency`` seconds from now; its reply goes nowhere."""

    async def later() -> web.Response:
        await asyncio.sleep(state.faults.latency)
        return await answer

    task = asyncio.ensure_future(later())
    state.landing_late.add(task)  # a reference, so that the task is not collected before it runs
    task.add_done_callback(state.landing_late.discard)


async def _answer(
    state: ServerState, backend: SlurmBackend, slurm_request: SlurmRequest, resource: str
) -> web.Response:
    principal, path = slurm_request.principal, slurm_request.path
    try:
        status, reply = await backend.handle(slurm_request)
    except BackendUnavailable as exc:
        log.warning("%s %s %s -> unavailable: %s", principal, slurm_request.method, path, exc)
        return google_error(503, f"The cluster {resource} is unavailable: {exc}")
    except Exception:  # an emulator bug: answered like Google's INTERNAL, and logged where tests look
        log.exception("%s %s %s -> internal error", principal, slurm_request.method, path)
        state.requests.record(slurm_request.method, path, slurm_request.query, 500)
        return google_error(500, "Internal error encountered.")
    log.info("%s %s %s -> %s", principal, slurm_request.method, path, status)
    state.requests.record(slurm_request.method, path, slurm_request.query, status)
    return _slurm_reply(state, status, reply)


def _slurm_reply(state: ServerState, status: int, reply: dict[str, Any] | str) -> web.Response:
    """slurmrestd's answer in Google's 200 envelope."""
    if isinstance(reply, str):  # a text/plain answer has no structured form
        return web.json_response({"status": status, "body": reply})
    if state.reply_shape == "body":
        return web.json_response({"status": status, "body": json.dumps(reply)})
    return web.json_response({"status": status, "structuredBody": reply})


def _control_error(code: int, message: str) -> web.Response:
    return web.json_response({"error": {"code": code, "message": message}}, status=code)


async def control_endpoint(request: web.Request) -> web.Response:
    """Requeue, hold, release, preempt or fail a job: see ``BuiltinBackend.control``."""
    refusal = loopback_only("The emulator's job control", request.remote)
    if refusal:
        return _control_error(403, refusal)
    if request.method != "POST":
        return _control_error(405, f"Method {request.method} is not allowed; the control takes POST.")
    state = request.app[STATE_KEY]
    info = request.match_info
    key: ClusterKey = (info["project"], info["region"], info["cluster"])
    backend = state.backends.get(key)
    if backend is None:
        return _control_error(404, f"no cluster {'/'.join(key)} in this emulator")
    try:
        result = backend.control(info["job_ref"], info["action"])
    except ControlError as exc:
        log.info("control %s %s on %s refused: %s", info["action"], info["job_ref"], key[2], exc.message)
        return _control_error(exc.status, exc.message)
    log.info("control %s %s on %s: %s", info["action"], info["job_ref"], key[2], result["state"])
    return web.json_response(result)


def _load_balancer_error(code: int, reason: str) -> web.Response:
    """Google's front end answers some failures itself, with an HTML page instead of an error envelope."""
    page = (
        "<!DOCTYPE html>\n<html lang=en>\n  <meta charset=utf-8>\n"
        f"  <title>Error {code} ({reason})!!1</title>\n"
        f"  <p><b>{code}.</b> <ins>That\u2019s an error.</ins>\n"
        "  <p>The server encountered a temporary error and could not complete your request."
        "<p>Please try again in 30 seconds.  <ins>That\u2019s all we know.</ins>\n"
    )
    return web.Response(status=code, text=page, content_type="text/html")


_FAULT_REPLIES: dict[str, Callable[[], web.Response]] = {
    "unavailable": lambda: google_error(503, "The service is currently unavailable."),
    "resource_exhausted": lambda: google_error(429, "Resource has been exhausted (e.g. check quota)."),
    "internal": lambda: google_error(500, "Internal error encountered."),
    "bad_gateway": lambda: _load_balancer_error(502, "Server Error"),
    "gateway_timeout": lambda: _load_balancer_error(504, "Gateway Timeout"),
    # Google may reject a token the emulator itself would accept: same reply as for a bad token
    "token_rejected": lambda: google_error(401, UNAUTHENTICATED_MESSAGE),
}


def _reshaped(response: web.Response) -> web.Response:
    """The answer with its Slurm body in the shape an "unexpected_reply" fault gives (``unexpected_body``)."""
    envelope = json.loads(response.text or "{}")
    if isinstance(envelope.get("structuredBody"), dict):
        envelope["structuredBody"] = unexpected_body(envelope["structuredBody"])
    elif isinstance(envelope.get("body"), str) and envelope["body"].startswith("{"):  # not a text/plain answer
        envelope["body"] = json.dumps(unexpected_body(json.loads(envelope["body"])))
    return web.json_response(envelope, status=response.status)


def _reset_connection(request: web.Request) -> web.Response:
    """Drop the connection with a TCP RST and no reply, as a failing network or proxy does.

    SO_LINGER 0 turns close() into a reset. The transport is closing, so aiohttp cannot write the
    returned response: it takes the failed write for a client that went away and sends nothing.
    """
    transport = request.transport
    if transport is not None:
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        transport.abort()
    return web.Response(status=499)  # never sent


async def _start_backends(app: web.Application) -> None:
    for backend in app[STATE_KEY].backends.values():
        await backend.start()


async def _close_backends(app: web.Application) -> None:
    for backend in app[STATE_KEY].backends.values():
        await backend.close()


def make_app(state: ServerState) -> web.Application:
    # allow bigger bodies than aiohttp's 1 MiB default so we can answer INVALID_ARGUMENT ourselves
    app = web.Application(client_max_size=64 * MAX_REQUEST_BYTES)
    app[STATE_KEY] = state
    app.router.add_post("/token", token_endpoint)
    app.router.add_route("*", CONTROL_PATH, control_endpoint)
    app.router.add_route("*", "/{tail:.*}", call_slurm_rest_api)
    app.on_startup.append(_start_backends)
    app.on_cleanup.append(_close_backends)
    return app
