"""Exceptions of the Slurm Job API client.

Two families: Google rejected the ``callSlurmRestApi`` call itself (``GoogleApiError`` and its
subclasses, one per documented status), or Slurm answered with an error (``SlurmError``).
``retryable`` says whether the same request may be sent again after a pause: Google's transient
statuses, and slurmrestd's own failures to reach its daemons (``TRANSIENT_SLURM_ERRORS``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


class SlurmJobApiError(Exception):
    """Base class of every error this client raises."""

    retryable = False


class InvalidRequestError(SlurmJobApiError, ValueError):
    """A request was refused before anything was sent: a field has a value that is not allowed."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


class RequestTooLargeError(InvalidRequestError):
    """The request is at or above the API's 1 MB limit."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(
            "request",
            f"the request is {size:,} bytes; the Slurm Job API accepts requests under {limit:,} bytes. "
            "Set output_uri and output_cluster_path (on the task or the connection) to have a large "
            "script staged there and run through a short wrapper, or put large scripts or data on the "
            "cluster's shared storage and submit a short wrapper script that calls them.",
        )
        self.size = size
        self.limit = limit


class TransportError(SlurmJobApiError):
    """The request did not get an answer: connection refused or reset, or a timeout."""

    retryable = True


class RedirectRefusedError(SlurmJobApiError):
    """The endpoint answered with a redirect, which is never followed: the request carries the
    access token and the Slurm call, and the API itself does not redirect."""

    def __init__(self, call: str, http_status: int, location: str) -> None:
        super().__init__(
            f"{call}: the endpoint answered {http_status}, a redirect to {location or '(no Location)'}, which is "
            "not followed (the request carries the access token and the Slurm call); set the connection's "
            "endpoint to the API's own URL"
        )
        self.http_status = http_status
        self.location = location


class GoogleApiError(SlurmJobApiError):
    """Google's API front end rejected the call (a ``{"error": {...}}`` envelope)."""

    def __init__(self, http_status: int, status: str, message: str) -> None:
        super().__init__(f"{status} ({http_status}): {message}")
        self.http_status = http_status
        self.status = status
        self.message = message


class PermissionDeniedError(GoogleApiError):
    """The caller has no access to the cluster (needs aiplatform.googleapis.com/modelDevelopmentClusters.run)."""


class UnauthenticatedError(GoogleApiError):
    """The access token is missing, invalid or expired."""


class ClusterNotFoundError(GoogleApiError):
    """The project, region or cluster ID names no training cluster."""


class InvalidArgumentError(GoogleApiError):
    """The path is not a valid Slurm path, or the request is too large."""


class UnavailableError(GoogleApiError):
    """The cluster or the API is temporarily unreachable; retry after a pause."""

    retryable = True


class ResourceExhaustedError(GoogleApiError):
    """A quota or rate limit was hit; retry after a pause."""

    retryable = True


class ServerError(GoogleApiError):
    """Google's front end failed (HTTP 5xx without a more specific status)."""

    retryable = True


GOOGLE_ERRORS: dict[str, type[GoogleApiError]] = {
    "PERMISSION_DENIED": PermissionDeniedError,
    "UNAUTHENTICATED": UnauthenticatedError,
    "NOT_FOUND": ClusterNotFoundError,
    "INVALID_ARGUMENT": InvalidArgumentError,
    "UNAVAILABLE": UnavailableError,
    "RESOURCE_EXHAUSTED": ResourceExhaustedError,
}


@dataclass(frozen=True)
class SlurmErrorDetail:
    """One entry of slurmrestd's ``errors`` list."""

    error_number: int | None
    error: str
    description: str
    source: str

    @classmethod
    def from_reply(cls, entry: dict[str, Any]) -> SlurmErrorDetail:
        return cls(
            error_number=entry.get("error_number"),
            error=str(entry.get("error", "")),
            description=str(entry.get("description", "")),
            source=str(entry.get("source", "")),
        )

    def __str__(self) -> str:
        text = "; ".join(part for part in (self.error, self.description) if part)
        return f"[{self.error_number}] {text}" if self.error_number is not None else text


# Slurm's error codes in a cancel's ``status[]``: a job the live queue no longer knows, and one
# that is already completing.
ERROR_INVALID_JOB_ID = 2017
ERROR_ALREADY_COMPLETING = 2021


# What slurmrestd 24.11.5 answered while slurmctld, then slurmdbd, was stopped (a controller
# failover looks the same until the backup takes over; tests/fixtures/capture_outage.py, replies in
# tests/fixtures/slurm-24.11.5/slurmctld_down_* and slurmdbd_down_*): GET job/{id} and jobs/state/
# 500 with -1, GET jobs/ and POST job/submit 502 with 1800, DELETE job/{id} 500 with 1, /slurmdb
# reads 502 with 7000. slurmrestd answers 502 for a daemon it cannot reach and 504 for a socket
# timeout; other failures are 500, so a 500 is transient only when every error number is one of these
# (numbers from slurm/slurm_errno.h). Slurm's rejections of a request (2000 "Invalid partition name
# specified", 2014, 2019, 2063, 9202...) are not: sent again, they fail again.
TRANSIENT_SLURM_STATUSES = frozenset({502, 503, 504})
TRANSIENT_SLURM_ERRORS = frozenset(
    {
        -1,  # SLURM_ERROR: the call to slurmctld failed and its reason was lost (job/{id}, jobs/state/)
        1,  # EPERM from slurm_kill_jobs(): the cancel's call failed (a refused cancel is in status[])
        11,  # EAGAIN: resource temporarily unavailable
        *range(1001, 1005),  # SLURM_COMMUNICATIONS_{CONNECTION,SEND,RECEIVE,SHUTDOWN}_ERROR
        *range(1800, 1806),  # SLURMCTLD_COMMUNICATIONS_*: slurmctld unreachable, backing off, dropped
        2027,  # ESLURM_IN_STANDBY_MODE: the controller asked is the backup, in standby
        2131,  # ESLURM_IN_STANDBY_USE_BACKUP
        *range(5003, 5006),  # incomplete packet, "Socket timed out on send/recv operation", zero bytes sent
        7000,  # ESLURM_DB_CONNECTION: slurmdbd unreachable ("Unable to connect to database")
        7008,  # ESLURM_DB_CONNECTION_INVALID
    }
)


def is_transient_slurm_failure(status: int, error_numbers: list[int]) -> bool:
    """Whether slurmrestd's answer says its daemons could not be reached for now (see above)."""
    if status in TRANSIENT_SLURM_STATUSES:
        return True
    return status >= 500 and bool(error_numbers) and all(n in TRANSIENT_SLURM_ERRORS for n in error_numbers)


class SlurmError(SlurmJobApiError):
    """slurmrestd answered with an HTTP status >= 400 or a non-empty ``errors`` list."""

    def __init__(self, status: int, errors: list[SlurmErrorDetail], path: str = "") -> None:
        details = "; ".join(str(e) for e in errors) or "no error details"
        where = f" for {path}" if path else ""
        super().__init__(f"Slurm answered {status}{where}: {details}")
        self.status = status
        self.errors = errors
        self.path = path
        self.retryable = is_transient_slurm_failure(status, self.error_numbers)

    @property
    def error_numbers(self) -> list[int]:
        return [e.error_number for e in self.errors if e.error_number is not None]


class JobNotFoundError(SlurmJobApiError):
    """Neither the live queue (/slurm) nor accounting (/slurmdb) knows the job."""

    def __init__(self, job_id: str) -> None:
        super().__init__(f"Slurm job {job_id} was found neither in the live queue nor in accounting (/slurmdb)")
        self.job_id = job_id


class JobLostError(JobNotFoundError):
    """The job stayed unknown to both the live queue and accounting for longer than the grace window."""

    def __init__(self, job_id: str, grace: float) -> None:
        SlurmJobApiError.__init__(
            self,
            f"Slurm job {job_id} is lost: for {grace:g} s neither the live queue nor accounting (/slurmdb) "
            "knew it, so its outcome is unknown (it is not assumed to have completed)",
        )
        self.job_id = job_id
        self.grace = grace


class UnknownJobStateError(SlurmJobApiError):
    """The job stayed in a state this provider does not know for longer than the grace window."""

    def __init__(self, job_id: str, state: str, grace: float) -> None:
        super().__init__(
            f"Slurm job {job_id} has been in state {state!r}, which this provider does not know, for "
            f"{grace:g} s; its outcome is unknown, so the task fails instead of waiting forever"
        )
        self.job_id = job_id
        self.state = state


class UnexpectedReplyError(SlurmJobApiError):
    """A reply this provider cannot read: a field of another type or shape than it knows (a proxy's
    answer, another slurmrestd version). Retryable: a read is repeated within the retry budget, a
    shared poller's triggers keep watching, and a submit is reconciled by its key."""

    retryable = True

    def __init__(self, call: str, shape: str, problem: str) -> None:
        super().__init__(f"{call}: a reply this provider cannot read ({problem}); the reply's shape: {shape}")
        self.call = call
        self.shape = shape
        self.problem = problem


def reply_shape(body: Any) -> str:
    """What a reply holds, without its values: the type of each top-level field (a job's
    environment or a token must never reach a log through an error message)."""

    def kind(value: Any) -> str:
        if isinstance(value, (dict, list)):
            return f"{'object' if isinstance(value, dict) else 'list'} of {len(value)}"
        return type(value).__name__

    if not isinstance(body, dict):
        return kind(body)
    fields = [f"{str(key)[:40]}: {kind(value)}" for key, value in list(body.items())[:12]]
    return "{" + ", ".join(fields) + (", ..." if len(body) > 12 else "") + "}"


class BulkStateQueryUnsupported(SlurmJobApiError):
    """The API refused a query string in ``path`` (undocumented either way): poll job by job."""


class UntrustedResultError(SlurmJobApiError):
    """What the output location holds as a job's result is not taken: it is not what that job wrote
    (forged, changed, another job's), or it cannot be checked."""

    def __init__(self, location: str, why: str) -> None:
        super().__init__(f"{location} is refused: {why}")
        self.location = location
