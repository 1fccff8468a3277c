"""What each API operation sends and how it reads the answers, without doing any I/O (``steps``).

Every operation takes the client's ``ApiSettings`` first; ``SlurmJobApiOperations`` binds them
to the sync and async clients and to the hook.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection
from typing import Any, NamedTuple

from airflow_provider_slurmapi.client.arrays import select_job
from airflow_provider_slurmapi.client.envelope import SlurmCall, SlurmReply
from airflow_provider_slurmapi.client.errors import (
    ERROR_ALREADY_COMPLETING,
    ERROR_INVALID_JOB_ID,
    BulkStateQueryUnsupported,
    InvalidArgumentError,
    JobNotFoundError,
    SlurmError,
    SlurmErrorDetail,
    SlurmJobApiError,
    UnexpectedReplyError,
    reply_shape,
)
from airflow_provider_slurmapi.client.job_description import submission_body
from airflow_provider_slurmapi.client.job_events import END_STATES, EndedJob
from airflow_provider_slurmapi.client.jobs import FINISHED_STATES, JobStatus, RecordSource
from airflow_provider_slurmapi.client.paths import JobId, base_job_id, validate_job_id
from airflow_provider_slurmapi.client.records import live_record_id
from airflow_provider_slurmapi.client.requeue import describe_requeue as requeue_line
from airflow_provider_slurmapi.client.requeue import latest_runs, run_that_ended
from airflow_provider_slurmapi.client.steps import ApiSettings, Operation, Pause, request
from airflow_provider_slurmapi.client.submission import Outcome, Submission, carries_key, with_key

log = logging.getLogger(__name__)

# Where a job's records are looked for first: the live queue while it may still run (accounting
# lags behind it), accounting once it has finished (its final run and its usage are there).
WHILE_ACTIVE = (RecordSource.LIVE, RecordSource.ACCOUNTING)
ONCE_FINISHED = (RecordSource.ACCOUNTING, RecordSource.LIVE)
# How far back accounting is searched for a key's job when the caller does not say when the task
# run could first have submitted one (``since``): older jobs of the name are not read.
KEY_SEARCH_DAYS = 30
# Taken off ``since``: Airflow's clock and the cluster's, which stamps the jobs, may differ.
CLOCK_SKEW_SECONDS = 3_600


class JobRecords(NamedTuple):
    """A job's raw records (one per array task) and where they were read."""

    source: RecordSource
    records: list[dict[str, Any]]


def submit_job(api: ApiSettings, job: dict[str, Any], script: str, *, key: str | None = None) -> Operation[str]:
    """Submit a batch job and return its ID.

    With a ``key`` (put in the job's comment), a submit that failed in a way that may hide a job
    Slurm created or is still creating (reply lost, 503, 504, reset, timeout) is reconciled: after
    a pause long enough for a submit still under way to land (``RetryPolicy.submit_settle``), the
    job is looked up by its key and adopted if found, and only if it is not is the submit sent
    again at once, as often and as long as the client's retry policy allows.
    """
    body = submission_body(with_key(job, key) if key else job, script, api.paths.api_version)
    return (yield from _send_submission(api, body, key))


def _send_submission(
    api: ApiSettings, body: dict[str, Any], key: str | None, since: float | None = None
) -> Operation[str]:
    pauses = api.retry.resubmit_pauses() if key else iter(())
    while True:
        try:
            reply = yield from request(SlurmCall("POST", api.paths.submit(), body))
            return _submitted_job_id(reply, api)
        except SlurmJobApiError as error:
            pause = next(pauses, None) if error.retryable else None
            if pause is None:
                raise
            log.warning(
                "Submit failed (%s); looking for the job by its key in %.0f s, once a submit still under way "
                "has landed, before submitting again",
                error,
                pause,
            )
            yield Pause(pause)
            # (a short job that submit created may have ended and left the live queue meanwhile)
            found = yield from find_job_by_key(api, key or "", body["job"].get("name"), since=since)
            if found is not None:
                log.info("The submit had reached Slurm: %s", found.describe())
                return found.job_id


def _submitted_job_id(reply: SlurmReply, api: ApiSettings) -> str:
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
        raise SlurmError(reply.status, details, path=api.paths.submit())
    if isinstance(job_id, bool) or not isinstance(job_id, (int, str)) or not str(job_id).isdigit():
        # the job was most likely created: reconciled by its key like a lost reply
        raise UnexpectedReplyError(reply.call, reply_shape(reply.body), f"job_id is {type(job_id).__name__}")
    return str(job_id)


def _records(reply: SlurmReply, name: str = "jobs") -> list[dict[str, Any]]:
    """The reply's ``jobs`` (or ``name``): a list of objects (none when absent), else the reply is unreadable."""
    records = reply.body.get(name)
    if records is None:
        return []
    if not isinstance(records, list) or not all(isinstance(record, dict) for record in records):
        raise UnexpectedReplyError(reply.call, reply_shape(reply.body), f"{name} is not a list of objects")
    return records


def find_job_by_key(
    api: ApiSettings, key: str, name: str | None = None, *, accounting: bool = True, since: float | None = None
) -> Operation[JobStatus | None]:
    """The newest job carrying ``key``: from the live queue, else from accounting; or None.

    Accounting is asked for the jobs of the same ``name`` (the key itself cannot be queried) that
    had not ended by ``since`` (epoch seconds: the earliest a job of the key could have been
    submitted) less ``CLOCK_SKEW_SECONDS``; without ``since``, over the last ``KEY_SEARCH_DAYS``.
    """
    reply = yield from request(SlurmCall("GET", api.paths.jobs()))
    keyed = [JobStatus.from_slurm(j) for j in _records(reply)]
    keyed = [job for job in keyed if carries_key(job, key)]
    if not keyed and accounting:
        start = since - CLOCK_SKEW_SECONDS if since is not None else time.time() - KEY_SEARCH_DAYS * 86_400
        reply = yield from request(SlurmCall("GET", api.paths.accounting_jobs(name, start_time=int(start))))
        listed = [JobStatus.from_slurmdb(j) for j in latest_runs(_records(reply))]
        keyed = [job for job in listed if carries_key(job, key)]
        if listed and not any(job.comment for job in listed):
            log.warning(
                "Accounting keeps no job comments (slurm.conf has no AccountingStoreFlags=job_comment): "
                "an earlier try's job that left the live queue is recognised only by the job ID its try recorded"
            )
    if not keyed:
        return None
    newest = max({base_job_id(job.job_id) for job in keyed}, key=int)
    return (yield from get_job(api, newest))


def submit_once(
    api: ApiSettings,
    job: dict[str, Any],
    script: str,
    key: str,
    *,
    known_job_id: str | None = None,
    adopt_completed: bool = False,
    earlier_tries: bool = True,
    replace_active: bool = False,
    since: float | None = None,
) -> Operation[Submission]:
    """Submit the job unless an earlier attempt's job (with the same key) makes that wrong.

    A job still pending or running is reattached, or, with ``replace_active`` (a user cleared the
    task to run it again), cancelled and submitted anew; one that completed successfully is
    adopted when ``adopt_completed``; one that failed or was cancelled (even while Slurm still
    cleans it up, COMPLETING) is submitted anew. ``known_job_id`` (an ID recorded by an earlier
    attempt) names a job taken only if the cluster shows it is the key's (``why_not_the_keys_job``),
    and saves the search while that job is active; ``earlier_tries=False`` (a first try) skips the
    search. Accounting, which holds only finished jobs that left the live queue, is asked only when
    such a job could be adopted, for jobs that had not ended by ``since`` (the earliest an earlier
    try could have submitted, see ``find_job_by_key``).
    """
    body = submission_body(with_key(job, key), script, api.paths.api_version)  # bad input fails first
    previous = None
    if known_job_id:
        previous = yield from find_job(api, known_job_id)
        mismatch = why_not_the_keys_job(previous, key, body["job"].get("name"), since) if previous else None
        if mismatch:
            log.warning("The recorded Slurm job %s is not this task run's (%s): not taken", known_job_id, mismatch)
            previous = None
    if (earlier_tries or known_job_id) and (previous is None or not previous.is_active):
        # a newer job of this key may exist if the recorded ID was not the last one
        found = yield from find_job_by_key(api, key, body["job"].get("name"), accounting=adopt_completed, since=since)
        previous = found or previous
    if previous is not None and previous.is_active and previous.state not in FINISHED_STATES:
        if not replace_active:
            return Submission(previous.job_id, Outcome.REATTACHED, previous)
        log.info("The task was cleared to run again: cancelling the earlier attempt's %s", previous.describe())
        yield from cancel_job(api, previous.job_id)
    elif previous is not None and previous.is_success and adopt_completed:
        return Submission(previous.job_id, Outcome.ADOPTED, previous)
    elif previous is not None:
        log.info("An earlier attempt's job will not be reused: %s", previous.describe())
    job_id = yield from _send_submission(api, body, key, since)
    return Submission(job_id, Outcome.SUBMITTED)


def why_not_the_keys_job(job: JobStatus, key: str, name: str | None, since: float | None) -> str | None:
    """Why a job recorded by its ID cannot be ``key``'s job, or None when it can: an ID alone proves
    nothing (a rebuilt cluster numbers its jobs anew). Its comment must carry the key; where
    accounting keeps no comments (no ``AccountingStoreFlags=job_comment``), its name must be the
    job's and it must have been submitted after ``since``, less ``CLOCK_SKEW_SECONDS``, as the key
    search reads accounting."""
    if job.comment or job.source is RecordSource.LIVE:  # the live queue always shows the comment
        return None if carries_key(job, key) else "its comment has no key of this task run"
    if name and job.name != name:
        return f"it is named {job.name!r}, not {name!r}"
    if since is not None and job.submit_time is not None and job.submit_time < since - CLOCK_SKEW_SECONDS:
        return "it was submitted before this DAG run could start"
    return None


def get_job(api: ApiSettings, job_id: object) -> Operation[JobStatus]:
    """The job's status: from the live queue, or from accounting once it left it.
    ``JobNotFoundError`` when neither knows it (``find_job`` gives None instead)."""
    return (yield from _get_job(api, validate_job_id(job_id), WHILE_ACTIVE))


def find_job(api: ApiSettings, job_id: object) -> Operation[JobStatus | None]:
    """Like ``get_job``, but None for a job found in neither the live queue nor accounting."""
    try:
        return (yield from get_job(api, job_id))
    except JobNotFoundError:
        return None


def _get_job(api: ApiSettings, job_id: JobId, sources: tuple[RecordSource, ...]) -> Operation[JobStatus]:
    for source in sources:
        records = yield from _read_records(api, job_id, source)
        found = select_job(job_id, [JobStatus.from_record(record, source) for record in records])
        if found is not None:
            return found
        if source is RecordSource.LIVE:
            log.info("Slurm job %s is not in the live queue; reading it from accounting (/slurmdb)", job_id)
    raise JobNotFoundError(job_id)


def job_records(api: ApiSettings, job_id: object) -> Operation[JobRecords]:
    """A finished job's raw records, for its usage and output: accounting's (its final run), or the
    live queue's where accounting has none or cannot be read; none if neither can tell."""
    job_id = validate_job_id(job_id)
    for source in ONCE_FINISHED:
        try:
            records = yield from _read_records(api, job_id, source)
        except SlurmJobApiError as error:
            log.info("The %s cannot tell about Slurm job %s: %s", source.label, job_id, error)
            continue
        if records:
            return JobRecords(source, records)
    return JobRecords(RecordSource.LIVE, [])


class JobHistory(NamedTuple):
    """All Slurm keeps of a job: the live queue's records (none once the job left it) and every one
    of accounting's (one per run of a requeued job, oldest first); why accounting could not be read."""

    live: list[dict[str, Any]]
    accounting: list[dict[str, Any]]
    accounting_problem: str | None = None


def job_history(api: ApiSettings, job_id: object) -> Operation[JobHistory]:
    """The job's live records and all its runs in accounting: two reads, whatever its state.
    ``JobNotFoundError`` when neither knows it."""
    job_id = validate_job_id(job_id)
    live = yield from _read_records(api, job_id, RecordSource.LIVE)
    try:
        reply = yield from request(SlurmCall("GET", api.paths.accounting_job(job_id)))
    except SlurmJobApiError as error:  # accounting lags, or the cluster has none: the live record still tells
        if not live:
            raise
        return JobHistory(live, [], str(error))
    accounting = list(_records(reply))
    if not live and not accounting:
        raise JobNotFoundError(job_id)
    return JobHistory(live, accounting)


def _read_records(api: ApiSettings, job_id: JobId, source: RecordSource) -> Operation[list[dict[str, Any]]]:
    """The job's records in one place: a job the live queue no longer knows has none there."""
    if source is RecordSource.ACCOUNTING:
        reply = yield from request(SlurmCall("GET", api.paths.accounting_job(job_id)))
        return latest_runs(_records(reply))  # a requeued job's last run
    reply = yield from request(SlurmCall("GET", api.paths.job(job_id), accept_status=(404,)))
    return [] if reply.status == 404 else list(_records(reply))


def describe_requeue(api: ApiSettings, status: JobStatus) -> Operation[str]:
    """The log line for a job seen requeued, naming how its last run ended (see ``requeue``).

    The live record keeps no trace of why; accounting's record of the run that ended does. When
    accounting lags or cannot be read the cause is left out: a log line never fails a wait.
    """
    job_id = validate_job_id(status.job_id)
    try:
        reply = yield from request(SlurmCall("GET", api.paths.accounting_job(job_id)))
    except SlurmJobApiError as error:
        log.debug("No requeue cause for Slurm job %s: %s", job_id, error)
        return requeue_line(status, None)
    return requeue_line(status, run_that_ended(_records(reply), job_id, status.restarts))


def requeue_lines(api: ApiSettings, statuses: list[JobStatus]) -> Operation[dict[str, str]]:
    """``describe_requeue`` for many jobs at once, with one accounting read for all (by job ID)."""
    try:
        reply = yield from request(SlurmCall("GET", api.paths.accounting_jobs_of([s.job_id for s in statuses])))
        records = list(_records(reply))
    except SlurmJobApiError as error:
        log.debug("No requeue causes for Slurm jobs %s: %s", [s.job_id for s in statuses], error)
        records = []
    return {s.job_id: requeue_line(s, run_that_ended(records, s.job_id, s.restarts)) for s in statuses}


def job_states(api: ApiSettings, job_ids: list[str]) -> Operation[dict[str, list[str]]]:
    """The states of many jobs in as few calls as fit: ``{record_id: ["RUNNING", ...]}``.

    A job the controller no longer knows is absent. An array's tasks come under their own IDs.
    """
    states: dict[str, list[str]] = {}
    for path in api.paths.job_state_queries(job_ids):
        try:
            reply = yield from request(SlurmCall("GET", path))
        except (InvalidArgumentError, SlurmError) as error:
            if isinstance(error, SlurmError) and error.status != 400:
                raise
            raise BulkStateQueryUnsupported(f"the bulk job state query was refused: {error}") from error
        for job in _records(reply):
            state = job.get("state")
            states[str(job.get("job_id"))] = [state] if isinstance(state, str) else [str(s) for s in state or []]
    return states


class QueueChanges(NamedTuple):
    """The live queue as ``GET jobs/?update_time=`` gives it: every job (``jobs``) and the stamp
    to ask from next time, or ``jobs`` None when nothing changed since (slurmctld answers all or
    nothing); ``size``, the answer's characters."""

    last_update: int
    jobs: list[JobStatus] | None
    size: int = 0


def queue_changes(
    api: ApiSettings, since: int | None = None, job_ids: Collection[str] | None = None
) -> Operation[QueueChanges]:
    """The live queue if anything in it changed since ``since`` (a ``last_update`` of an earlier
    answer); with ``job_ids``, only the records of those jobs (their array tasks and het components
    too): the others are not read further."""
    call = SlurmCall("GET", api.paths.jobs(update_time=since), expected_warning="No job changes since")
    reply = yield from request(call)
    stamp = int((reply.body.get("last_update") or {}).get("number") or 0)
    if since is not None and not stamp:  # "No job changes since update_time[...]": last_update 0, no jobs
        return QueueChanges(since, None, reply.size)
    records = _records(reply)
    if job_ids is not None:
        wanted = {base_job_id(job_id) for job_id in job_ids}
        records = [job for job in records if base_job_id(live_record_id(job)) in wanted]
    return QueueChanges(stamp, [JobStatus.from_slurm(j) for j in records], reply.size)


def ended_jobs(api: ApiSettings, start_time: int, end_time: int) -> Operation[list[EndedJob]]:
    """Every job that ended between ``start_time`` and ``end_time`` (epoch seconds, both included),
    with its final status and usage, from accounting in one call (a requeued job: its last run)."""
    path = api.paths.accounting_ended_jobs(start_time, end_time, list(END_STATES))
    # an empty window is an answer, not a problem: "slurmdb_jobs_get(0x...) found nothing"
    reply = yield from request(SlurmCall("GET", path, expected_warning="slurmdb_jobs_get("))
    return [EndedJob.from_slurmdb(record) for record in _records(reply)]


def list_jobs(api: ApiSettings) -> Operation[list[JobStatus]]:
    """Every job in the live queue."""
    changes = yield from queue_changes(api)
    return changes.jobs or []


def cancel_job(
    api: ApiSettings, job_id: object, signal: str | int | None = None, batch_only: bool = False
) -> Operation[bool]:
    """Ask Slurm to cancel (or signal) a job. A job that already finished counts as success.

    With ``batch_only`` (``scancel --batch``) the signal (KILL if none) goes to the job's batch
    shell alone and does not cancel the job, though the shell may die of it.

    Returns True when the request was accepted for a job still active, False when it had already
    finished. DELETE always answers 200; failures are inside ``status[]``.
    """
    job_id = validate_job_id(job_id)
    path = api.paths.cancel(job_id, signal, batch_only)
    reply = yield from request(SlurmCall("DELETE", path))
    codes = [(entry.get("error") or {}).get("code", 0) for entry in _records(reply, "status")]
    failures = [code for code in codes if code not in (0, ERROR_ALREADY_COMPLETING, ERROR_INVALID_JOB_ID)]
    if failures:
        raise SlurmError(reply.status, [_status_detail(e) for e in reply.body["status"]], path=path)
    if ERROR_INVALID_JOB_ID in codes:
        # Unknown to the live queue: finished and purged (fine), or never existed (an error).
        status = yield from _get_job(api, job_id, (RecordSource.ACCOUNTING,))
        log.info("Slurm job %s had already left the live queue: %s", job_id, status.describe())
        return False
    if ERROR_ALREADY_COMPLETING in codes:
        log.info("Slurm job %s had already finished; nothing to cancel", job_id)
        return False
    return True


def _status_detail(entry: dict[str, Any]) -> SlurmErrorDetail:
    error = entry.get("error") or {}
    return SlurmErrorDetail(error.get("code"), str(error.get("string", "")), str(error.get("message", "")), "")


def call(api: ApiSettings, method: str, path: str, body: dict[str, Any] | None = None) -> Operation[dict[str, Any]]:
    """Any other Slurm REST call, e.g. ``call("GET", "/slurm/v0.0.42/nodes")``; slurmrestd's JSON reply."""
    reply = yield from request(SlurmCall(method.upper(), path, body))
    return reply.body


def ping(api: ApiSettings) -> Operation[dict[str, Any]]:
    """slurmrestd's ping of its controllers."""
    reply = yield from request(SlurmCall("GET", api.paths.ping()))
    return reply.body
