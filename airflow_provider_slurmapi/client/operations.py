"""What each API operation sends and how it reads the answers, without doing any I/O.

Each operation is a generator: it yields a ``SlurmCall`` and receives the ``SlurmReply`` (or
has the request's error thrown into it), may yield a ``Pause``, and finally returns its result.
The sync and async clients drive the same generators, so they differ only in how bytes travel
and how they wait.
"""

from __future__ import annotations

import logging
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

from airflow_provider_slurmapi.client.envelope import SlurmCall, SlurmReply
from airflow_provider_slurmapi.client.errors import (
    BulkStateQueryUnsupported,
    InvalidArgumentError,
    InvalidRequestError,
    JobNotFoundError,
    SlurmError,
    SlurmErrorDetail,
    SlurmJobApiError,
)
from airflow_provider_slurmapi.client.jobs import JobStatus, latest_runs, run_that_ended, select_job
from airflow_provider_slurmapi.client.paths import DEFAULT_API_VERSION, JobId, SlurmPaths, base_job_id, validate_job_id
from airflow_provider_slurmapi.client.retry import NO_RETRY, RetryPolicy
from airflow_provider_slurmapi.client.submission import Outcome, Submission, carries_key, with_key
from airflow_provider_slurmapi.client.validation import validate_job_description

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Pause:
    """Yielded by an operation that must wait before its next request."""

    seconds: float


Operation = Generator["SlurmCall | Pause", "SlurmReply | None", Any]
# What a client hands back to an operation: the reply to its request, the request's error, or
# None (to start it, and after a pause).
StepResult = SlurmReply | SlurmJobApiError | None


def advance(operation: Operation, outcome: StepResult) -> SlurmCall | Pause:
    """The operation's next step after ``outcome``; StopIteration carries its result.

    An error is thrown into the operation, which may reconcile it (a submit) or let it out.
    """
    if isinstance(outcome, SlurmJobApiError):
        return operation.throw(outcome)
    return operation.send(outcome)


def _request(request: SlurmCall) -> Generator[SlurmCall | Pause, SlurmReply | None, SlurmReply]:
    """Send one request; the driver answers a request with its reply (only a Pause gets None)."""
    reply = yield request
    if reply is None:
        raise TypeError(f"no reply to {request.method} {request.path}")
    return reply


# slurmrestd refuses a submit without these (errors 2019 and 2063); documented defaults.
DEFAULT_ENVIRONMENT = ("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",)
DEFAULT_WORKING_DIRECTORY = "/tmp"

ERROR_INVALID_JOB_ID = 2017
ERROR_ALREADY_COMPLETING = 2021


def submission_body(job: dict[str, Any], script: str, api_version: str = DEFAULT_API_VERSION) -> dict[str, Any]:
    """The submit request body, checked against the version's schema, with the defaults real
    slurmrestd needs filled in. An ``environment`` dict becomes Slurm's ``["K=V", ...]`` list."""
    if not isinstance(job, dict):
        raise InvalidRequestError("job", f"must be a dict (a Slurm job description), got {type(job).__name__}")
    if not isinstance(script, str) or not script.strip():
        raise InvalidRequestError("script", "must be the non-empty text of a batch script")
    if not script.startswith("#!"):
        raise InvalidRequestError("script", "must start with a shebang line such as #!/bin/bash")
    if "script" in job:
        raise InvalidRequestError("job.script", "pass the batch script as `script`, not inside `job`")
    job = dict(job)
    if isinstance(job.get("environment"), dict):
        job["environment"] = [f"{key}={value}" for key, value in job["environment"].items()]
    job.setdefault("environment", list(DEFAULT_ENVIRONMENT))
    job.setdefault("current_working_directory", DEFAULT_WORKING_DIRECTORY)
    validate_job_description(job, api_version)
    return {"job": job, "script": script}


def submit_job(
    paths: SlurmPaths, job: dict[str, Any], script: str, *, key: str | None = None, retry: RetryPolicy = NO_RETRY
) -> Operation:
    """Submit a batch job and return its ID.

    With a ``key`` (put in the job's comment), a submit that failed in a way that may hide a job
    Slurm created (reply lost, 503, reset) is reconciled: the job is looked up by its key and
    adopted if found, and only if it is not is the submit sent again, after a pause, as often and
    as long as ``retry`` allows.
    """
    body = submission_body(with_key(job, key) if key else job, script, paths.api_version)
    return (yield from _send_submission(paths, body, key, retry))


def _send_submission(paths: SlurmPaths, body: dict[str, Any], key: str | None, retry: RetryPolicy) -> Operation:
    pauses = retry.resubmit_pauses() if key else iter(())
    while True:
        try:
            reply = yield from _request(SlurmCall("POST", paths.submit(), body))
        except SlurmJobApiError as error:
            pause = next(pauses, None) if error.retryable else None
            if pause is None:
                raise
            log.warning("Submit failed (%s); looking for the job by its key before submitting again", error)
            # a job this submit created is in the live queue: accounting need not be asked
            found = yield from find_job_by_key(paths, key or "", accounting=False)
            if found is not None:
                log.info("The submit had reached Slurm: %s", found.describe())
                return found.job_id
            yield Pause(pause)
            continue
        return _submitted_job_id(reply, paths)


def _submitted_job_id(reply: SlurmReply, paths: SlurmPaths) -> str:
    job_id = reply.body.get("job_id")
    if job_id is None:
        # Real slurmrestd does this when it coerced a bad field: the job may exist without an ID.
        details = [
            SlurmErrorDetail(
                None,
                "no job_id in the reply; the job may have been submitted",
                str(w.get("description", "")),
                str(w.get("source", "")),
            )
            for w in reply.warnings
        ] or [SlurmErrorDetail(None, "no job_id in the reply; the job may have been submitted", "", "")]
        raise SlurmError(reply.status, details, path=paths.submit())
    return str(job_id)


def find_job_by_key(paths: SlurmPaths, key: str, name: str | None = None, *, accounting: bool = True) -> Operation:
    """The newest job carrying ``key``: from the live queue, else from accounting; or None.

    Accounting is asked for jobs of the same ``name`` (the key itself cannot be queried).
    """
    reply = yield from _request(SlurmCall("GET", paths.jobs()))
    keyed = [JobStatus.from_slurm(j) for j in reply.body.get("jobs") or []]
    keyed = [job for job in keyed if carries_key(job, key)]
    if not keyed and accounting:
        reply = yield from _request(SlurmCall("GET", paths.accounting_jobs(name)))
        listed = [JobStatus.from_slurmdb(j) for j in latest_runs(reply.body.get("jobs") or [])]
        keyed = [job for job in listed if carries_key(job, key)]
        if listed and not any(job.comment for job in listed):
            log.warning(
                "Accounting keeps no job comments (slurm.conf needs AccountingStoreFlags=job_comment): "
                "an earlier try's job that left the live queue cannot be recognised there"
            )
    if not keyed:
        return None
    newest = max({base_job_id(job.job_id) for job in keyed}, key=int)
    return (yield from get_job(paths, newest))


def submit_once(
    paths: SlurmPaths,
    job: dict[str, Any],
    script: str,
    key: str,
    *,
    known_job_id: str | None = None,
    adopt_completed: bool = False,
    earlier_tries: bool = True,
    retry: RetryPolicy = NO_RETRY,
) -> Operation:
    """Submit the job unless an earlier attempt's job (with the same key) makes that wrong.

    A job still pending or running is reattached; one that completed successfully is adopted when
    ``adopt_completed``; one that failed or was cancelled is submitted anew. ``known_job_id`` (an
    ID recorded by an earlier attempt) saves the search; ``earlier_tries=False`` (a first try)
    skips it. Accounting, which holds only finished jobs that left the live queue, is asked only
    when such a job could be adopted.
    """
    body = submission_body(with_key(job, key), script, paths.api_version)  # bad input fails first
    previous = None
    if known_job_id:
        try:
            previous = yield from get_job(paths, known_job_id)
        except JobNotFoundError:
            previous = None
    if (earlier_tries or known_job_id) and (previous is None or not previous.is_active):
        # a newer job of this key may exist if the recorded ID was not the last one
        found = yield from find_job_by_key(paths, key, body["job"].get("name"), accounting=adopt_completed)
        previous = found or previous
    if previous is not None and previous.is_active:
        return Submission(previous.job_id, Outcome.REATTACHED, previous)
    if previous is not None and previous.is_success and adopt_completed:
        return Submission(previous.job_id, Outcome.ADOPTED, previous)
    if previous is not None:
        log.info("An earlier attempt's job will not be reused: %s", previous.describe())
    job_id = yield from _send_submission(paths, body, key, retry)
    return Submission(job_id, Outcome.SUBMITTED)


def get_job(paths: SlurmPaths, job_id: object) -> Operation:
    """Status from the live queue; a job that left it is read from accounting."""
    job_id = validate_job_id(job_id)
    reply = yield from _request(SlurmCall("GET", paths.job(job_id), accept_status=(404,)))
    if reply.status != 404:
        found = select_job(job_id, [JobStatus.from_slurm(j) for j in reply.body.get("jobs") or []])
        if found is not None:
            return found
    log.info("Slurm job %s is not in the live queue; reading it from accounting (/slurmdb)", job_id)
    return (yield from get_accounting_job(paths, job_id))


def get_accounting_job(paths: SlurmPaths, job_id: JobId) -> Operation:
    reply = yield from _request(SlurmCall("GET", paths.accounting_job(job_id)))
    found = select_job(job_id, [JobStatus.from_slurmdb(j) for j in latest_runs(reply.body.get("jobs") or [])])
    if found is None:
        raise JobNotFoundError(job_id)
    return found


def describe_requeue(paths: SlurmPaths, status: JobStatus) -> Operation:
    """The log line for a job seen requeued: ``Slurm job 12 was requeued (restart 1): NODE_FAIL on node1``.

    The live record keeps no trace of why; accounting's record of the run that ended does. When
    accounting lags or cannot be read the cause is left out: a log line never fails a wait.
    """
    job_id = validate_job_id(status.job_id)
    line = f"Slurm job {job_id} was requeued (restart {status.restarts})"
    try:
        reply = yield from _request(SlurmCall("GET", paths.accounting_job(job_id)))
    except SlurmJobApiError as error:
        log.debug("No requeue cause for Slurm job %s: %s", job_id, error)
        reply = None
    cause = run_that_ended(reply.body.get("jobs") or [], job_id, status.restarts) if reply else None
    if cause:
        line += f": {cause}"
    if status.held:
        return f"{line}; it is held ({status.reason}) and runs again only once released (scontrol release {job_id})"
    return f"{line}; it {'ran' if status.is_finished else 'will run'} again from the start"


# Longest bulk state query path; about 1,000 seven-digit job IDs. Longer lists are split.
MAX_STATE_QUERY_CHARS = 16_384


def job_states(paths: SlurmPaths, job_ids: list[str]) -> Operation:
    """The states of many jobs in as few calls as fit: ``{record_id: ["RUNNING", ...]}``.

    A job the controller no longer knows is absent. An array's tasks come under their own IDs.
    """
    states: dict[str, list[str]] = {}
    for chunk in _chunks(paths, [validate_job_id(job_id) for job_id in job_ids]):
        try:
            reply = yield from _request(SlurmCall("GET", paths.job_states(chunk)))
        except (InvalidArgumentError, SlurmError) as error:
            if isinstance(error, SlurmError) and error.status != 400:
                raise
            raise BulkStateQueryUnsupported(f"the bulk job state query was refused: {error}") from error
        for job in reply.body.get("jobs") or []:
            state = job.get("state")
            states[str(job.get("job_id"))] = [state] if isinstance(state, str) else [str(s) for s in state or []]
    return states


def _chunks(paths: SlurmPaths, job_ids: list[JobId]) -> list[list[JobId]]:
    chunks: list[list[JobId]] = [[]]
    length = len(paths.job_states([]))
    for job_id in job_ids:
        extra = len(f"job_id={job_id}&")
        if chunks[-1] and length + extra > MAX_STATE_QUERY_CHARS:
            chunks.append([])
            length = len(paths.job_states([]))
        chunks[-1].append(job_id)
        length += extra
    return [chunk for chunk in chunks if chunk]


def list_jobs(paths: SlurmPaths) -> Operation:
    reply = yield from _request(SlurmCall("GET", paths.jobs()))
    return [JobStatus.from_slurm(j) for j in reply.body.get("jobs") or []]


def cancel_job(paths: SlurmPaths, job_id: object, signal: str | int | None = None) -> Operation:
    """Ask Slurm to cancel (or signal) a job. A job that already finished counts as success.

    Returns True when the request was accepted for a job still active, False when it had already
    finished. DELETE always answers 200; failures are inside ``status[]``.
    """
    job_id = validate_job_id(job_id)
    path = paths.cancel(job_id, signal)
    reply = yield from _request(SlurmCall("DELETE", path))
    codes = [
        (entry.get("error") or {}).get("code", 0) for entry in reply.body.get("status") or [] if isinstance(entry, dict)
    ]
    failures = [code for code in codes if code not in (0, ERROR_ALREADY_COMPLETING, ERROR_INVALID_JOB_ID)]
    if failures:
        raise SlurmError(reply.status, [_status_detail(e) for e in reply.body["status"]], path=path)
    if ERROR_INVALID_JOB_ID in codes:
        # Unknown to the live queue: finished and purged (fine), or never existed (an error).
        status = yield from get_accounting_job(paths, job_id)
        log.info("Slurm job %s had already left the live queue: %s", job_id, status.describe())
        return False
    if ERROR_ALREADY_COMPLETING in codes:
        log.info("Slurm job %s had already finished; nothing to cancel", job_id)
        return False
    return True


def _status_detail(entry: dict[str, Any]) -> SlurmErrorDetail:
    error = entry.get("error") or {}
    return SlurmErrorDetail(error.get("code"), str(error.get("string", "")), str(error.get("message", "")), "")


def call(method: str, path: str, body: dict[str, Any] | None = None) -> Operation:
    """Any other Slurm REST call; returns slurmrestd's JSON reply."""
    reply = yield from _request(SlurmCall(method.upper(), path, body))
    return reply.body


def ping(paths: SlurmPaths) -> Operation:
    reply = yield from _request(SlurmCall("GET", paths.ping()))
    return reply.body
