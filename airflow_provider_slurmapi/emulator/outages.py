"""Replies of a slurmrestd whose Slurm daemons fail, for the fault kinds ``slurmctld_unreachable``
and ``slurm_internal``: Google's envelope is 200, slurmrestd's status and errors are inside it.

Played back from what real slurmrestd 24.11.5 answered with slurmctld, then slurmdbd, stopped
(``tests/fixtures/capture_outage.py``; ``tests/fixtures/slurm-24.11.5/slurmctld_down_*`` and
``slurmdbd_down_*``). Neither kind reaches the backend: a submit creates no job, as the real one
did not, and a cancel cancels nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from airflow_provider_slurmapi.emulator import replies
from airflow_provider_slurmapi.emulator.backend_api import SLURM_PATH, SlurmAnswer, SlurmRequest

OUTAGE_KINDS = ("slurmctld_unreachable", "slurm_internal")

UNSPECIFIED = (-1, "Unspecified error")  # the RPC failed and slurmrestd kept no error number
_EPERM = (1, "Operation not permitted")
_CONTROLLER = (1800, "Unable to contact slurm controller (connect failure)")
_DATABASE = (7000, "Unable to connect to database")
_NOTHING = {"set": True, "infinite": False, "number": 0}
_NO_JOBS = {"jobs": [], "last_backfill": _NOTHING, "last_update": _NOTHING}


@dataclass(frozen=True)
class _Failure:
    """How slurmrestd answered one kind of call with its daemon unreachable (the capture's file)."""

    status: int
    error: tuple[int, str]
    description: str
    source: str
    fields: dict[str, Any]


_FAILURES = {
    "GET job": _Failure(500, UNSPECIFIED, "Unable to query JobId={job}", "_handle_job_get", _NO_JOBS),  # job_get
    "GET jobs": _Failure(502, _CONTROLLER, "Unable to query jobs", "slurm_load_jobs()", _NO_JOBS),  # jobs_list
    "GET jobs/state": _Failure(  # jobs_state
        500, UNSPECIFIED, "Unable to query job states", "slurm_load_job_state()", {"jobs": None}
    ),
    "POST job/submit": _Failure(  # submit
        502, _CONTROLLER, "Batch job submission failed", "slurm_submit_batch_job()", {}
    ),
    "DELETE job": _Failure(500, _EPERM, "Signal request failed", "slurm_kill_jobs()", {"status": []}),  # delete
    # /slurmdb: slurmdbd unreachable (slurmdbd_down_slurmdb_job); slurmctld's outage leaves it readable
    "slurmdb": _Failure(502, _DATABASE, "Failed to open slurmdbd connection", "openapi_get_db_conn", {}),
    # any other /slurm call (not captured): what the client library says when it cannot connect
    "slurm": _Failure(502, _CONTROLLER, "Unable to contact slurm controller", "slurmrestd", {}),
}


def outage_answer(kind: str, call: SlurmRequest, cluster: str) -> SlurmAnswer:
    """slurmrestd's status and reply to ``call`` under ``kind`` (one of ``OUTAGE_KINDS``)."""
    match = SLURM_PATH.match(call.path)
    service, version, route = match.groups() if match else ("slurm", "v0.0.42", "")
    meta_kind = "slurmdbd" if service == "slurmdb" else "slurmctld"
    if kind == "slurmctld_unreachable" and service == "slurm" and route.rstrip("/") == "ping":
        down = {**replies.ping(), "pinged": "DOWN", "responding": False}  # slurmctld_down_ping: 200
        return 200, replies.envelope(meta_kind, version, cluster, {"pings": [down]})
    failure = _FAILURES[_call_kind(call.method, service, route)]
    status, (number, text) = failure.status, failure.error
    if kind == "slurm_internal":  # slurmrestd's own 500, the cause's number lost
        status, (number, text) = 500, UNSPECIFIED
    job = route.partition("/")[2]
    error = replies.error(number, text, failure.description.format(job=job), failure.source)
    return status, replies.envelope(meta_kind, version, cluster, dict(failure.fields), errors=[error])


def _call_kind(method: str, service: str, route: str) -> str:
    if service == "slurmdb":
        return "slurmdb"
    route = route.rstrip("/")
    if route == "job/submit":
        name = "job/submit"
    elif route.startswith("job/"):
        name = "job"
    else:
        name = route
    key = f"{method} {name}"
    return key if key in _FAILURES else "slurm"
