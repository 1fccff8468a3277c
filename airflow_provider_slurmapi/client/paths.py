"""Slurm REST paths, built only from validated values so that nothing but an ID lands in a path."""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import urlencode

from airflow_provider_slurmapi.client.errors import InvalidRequestError

DEFAULT_API_VERSION = "v0.0.42"
API_VERSION_PATTERN = r"v0\.0\.\d{2}"  # also the connection form's check
# Longest bulk state query path, about 3,200 seven-digit job IDs; longer lists are split. Real
# slurmrestd 24.11 answered a 60 KB path (4,000 IDs) and refused a 90 KB one (400).
MAX_STATE_QUERY_CHARS = 49_152


class JobId(str):
    """A job ID that passed ``validate_job_id``: the only kind a path is built from, checked once."""


_API_VERSION = re.compile(API_VERSION_PATTERN)
# Plain (123), array task (123_4) or heterogeneous component (123+1).
_JOB_ID = re.compile(r"[1-9]\d{0,9}(?:_\d{1,10}|\+\d{1,5})?")
_SIGNAL = re.compile(r"(?:SIG)?[A-Z][A-Z0-9]{0,9}|\d{1,2}")


def validate_api_version(api_version: str) -> str:
    if not isinstance(api_version, str) or not _API_VERSION.fullmatch(api_version):
        raise InvalidRequestError(
            "api_version", f"{api_version!r} is not a Slurm REST version; expected v0.0.NN, e.g. v0.0.42"
        )
    return api_version


def validate_job_id(job_id: object) -> JobId:
    """Return the job ID as a string, or refuse it. Accepts ints and plain, array and het IDs."""
    if isinstance(job_id, JobId):
        return job_id
    text = str(job_id).strip() if isinstance(job_id, (str, int)) and not isinstance(job_id, bool) else None
    if text is None or not _JOB_ID.fullmatch(text):
        raise InvalidRequestError(
            "job_id",
            f"{job_id!r} is not a Slurm job ID; expected a number (123), an array task (123_4) "
            "or a heterogeneous job component (123+1)",
        )
    return JobId(text)


def base_job_id(job_id: str) -> str:
    """The ID the submit returned, for a record of an array task (``86_2``) or a het component."""
    for separator in ("_", "+"):
        job_id = job_id.partition(separator)[0]
    return job_id


def validate_signal(signal: str | int) -> str:
    text = str(signal).strip().upper()
    if not _SIGNAL.fullmatch(text):
        raise InvalidRequestError("signal", f"{signal!r} is not a signal name (KILL, TERM, USR1) or number")
    return text


def validate_batch_only(batch_only: object) -> bool:
    if not isinstance(batch_only, bool):
        raise InvalidRequestError("batch_only", f"{batch_only!r} is not True or False")
    return batch_only


@dataclass(frozen=True)
class SlurmPaths:
    """The Slurm REST paths this provider uses, for one API version."""

    api_version: str = DEFAULT_API_VERSION

    def __post_init__(self) -> None:
        validate_api_version(self.api_version)

    def submit(self) -> str:
        return f"/slurm/{self.api_version}/job/submit"

    def job(self, job_id: object) -> str:
        return f"/slurm/{self.api_version}/job/{validate_job_id(job_id)}"

    def cancel(self, job_id: object, signal: str | int | None = None, batch_only: bool = False) -> str:
        """``batch_only``: the signal goes to the batch shell alone (``scancel --batch``)."""
        path = self.job(job_id)
        query = {} if signal is None else {"signal": validate_signal(signal)}
        if validate_batch_only(batch_only):
            query["flags"] = "BATCH_JOB"
        return f"{path}?{urlencode(query)}" if query else path

    def jobs(self, update_time: int | None = None) -> str:
        since = "" if update_time is None else f"?update_time={int(update_time)}"
        return f"/slurm/{self.api_version}/jobs/{since}"

    def accounting_job(self, job_id: object) -> str:
        return f"/slurmdb/{self.api_version}/job/{validate_job_id(job_id)}"

    def job_states(self, job_ids: list[JobId]) -> str:
        # the parameter is repeated: slurmrestd refuses a comma-separated list
        return f"/slurm/{self.api_version}/jobs/state/?" + urlencode([("job_id", validate_job_id(j)) for j in job_ids])

    def job_state_queries(self, job_ids: list[str]) -> list[str]:
        """``job_states`` paths for all of ``job_ids``, split so that none is longer than
        ``MAX_STATE_QUERY_CHARS``."""
        chunks: list[list[JobId]] = [[]]
        length = len(self.job_states([]))
        for job_id in map(validate_job_id, job_ids):
            extra = len(f"job_id={job_id}&")
            if chunks[-1] and length + extra > MAX_STATE_QUERY_CHARS:
                chunks.append([])
                length = len(self.job_states([]))
            chunks[-1].append(job_id)
            length += extra
        return [self.job_states(chunk) for chunk in chunks if chunk]

    def accounting_jobs_of(self, job_ids: list[object]) -> str:
        """Accounting's records of ``job_ids`` (``sacct -j``): every run of each, without steps."""
        # repeated like job_states: real slurmrestd answers 400 to a comma-separated list; without
        # show_duplicates a requeued job's ended runs are left out
        ids = [("step", validate_job_id(j)) for j in job_ids]
        flags = [("skip_steps", "true"), ("show_duplicates", "true")]
        return f"/slurmdb/{self.api_version}/jobs/?" + urlencode([*ids, *flags])

    def accounting_jobs(self, name: str | None = None, start_time: int | None = None) -> str:
        """Accounting's records of the jobs named ``name``; from ``start_time`` on, those that had
        not ended by then (without ``state``, slurmdbd selects jobs eligible or running in the window)."""
        query = {"job_name": name} if name else {}
        if start_time is not None:
            query["start_time"] = str(int(start_time))
        path = f"/slurmdb/{self.api_version}/jobs/"
        return f"{path}?{urlencode(query)}" if query else path

    def accounting_ended_jobs(self, start_time: int, end_time: int, states: list[str]) -> str:
        """Accounting's records of the jobs that ended in [start_time, end_time] in one of ``states``."""
        # with ``state``, slurmdbd selects by end time; ``state`` is repeated (a comma list is refused);
        # without disable_truncate_usage_time the start and elapsed time are cut to the window
        query = [("start_time", int(start_time)), ("end_time", int(end_time)), *(("state", s) for s in states)]
        flags = [("skip_steps", "true"), ("disable_truncate_usage_time", "true")]
        return f"/slurmdb/{self.api_version}/jobs/?" + urlencode([*query, *flags])

    def ping(self) -> str:
        return f"/slurm/{self.api_version}/ping"

    def partitions(self) -> str:
        return f"/slurm/{self.api_version}/partitions/"

    def nodes(self) -> str:
        return f"/slurm/{self.api_version}/nodes/"

    def accounting_tres(self) -> str:
        return f"/slurmdb/{self.api_version}/tres/"
