"""The API's operations as methods, for the sync and the async client alike: a client only says
how a request travels and how a pause is waited (``_run``)."""

from __future__ import annotations

from typing import Any

from airflow_provider_slurmapi.client import operations
from airflow_provider_slurmapi.client.cluster import ClusterRef
from airflow_provider_slurmapi.client.operations import Operation
from airflow_provider_slurmapi.client.paths import DEFAULT_API_VERSION, SlurmPaths
from airflow_provider_slurmapi.client.retry import RetryPolicy


class SlurmJobApiOperations:
    """Each method returns the operation's result (sync client) or an awaitable of it (async client)."""

    def __init__(
        self,
        cluster: ClusterRef,
        *,
        api_version: str = DEFAULT_API_VERSION,
        timeout: float = 60.0,
        retry: RetryPolicy | None = None,
    ) -> None:
        self.cluster = cluster
        self.paths = SlurmPaths(api_version)
        self.timeout = timeout
        self.retry = retry or RetryPolicy()

    def _run(self, operation: Operation) -> Any:
        raise NotImplementedError

    def submit_job(self, job: dict[str, Any], script: str, *, key: str | None = None) -> Any:
        """Submit a batch job; the result is the new job's ID (a string).

        With a ``key`` the job carries it in its comment, and a submit whose reply was lost is
        reconciled through the key instead of being sent again blindly.
        """
        return self._run(operations.submit_job(self.paths, job, script, key=key, retry=self.retry))

    def submit_once(self, job: dict[str, Any], script: str, key: str, **options: Any) -> Any:
        """Reattach to, adopt, or submit the job of ``key``; the result is a ``Submission``.

        ``options``: ``known_job_id``, ``adopt_completed``, ``earlier_tries`` (see ``operations.submit_once``).
        """
        return self._run(operations.submit_once(self.paths, job, script, key, retry=self.retry, **options))

    def find_job_by_key(self, key: str, name: str | None = None) -> Any:
        """The newest job carrying ``key`` (``JobStatus``), or None."""
        return self._run(operations.find_job_by_key(self.paths, key, name))

    def get_job(self, job_id: str | int) -> Any:
        """The job's ``JobStatus``, from the live queue or, once it left it, from accounting."""
        return self._run(operations.get_job(self.paths, job_id))

    def describe_requeue(self, status: Any) -> Any:
        """The log line for a job (``JobStatus``) seen requeued, naming how its last run ended."""
        return self._run(operations.describe_requeue(self.paths, status))

    def job_states(self, job_ids: list[str]) -> Any:
        """``{record_id: [state, flags...]}`` of many jobs in as few calls as fit; absent if unknown."""
        return self._run(operations.job_states(self.paths, job_ids))

    def list_jobs(self) -> Any:
        """``JobStatus`` of every job in the live queue."""
        return self._run(operations.list_jobs(self.paths))

    def cancel_job(self, job_id: str | int, signal: str | int | None = None) -> Any:
        """Cancel (or signal) a job; True if it was active, False if it had already finished."""
        return self._run(operations.cancel_job(self.paths, job_id, signal))

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        """Any other Slurm REST call; the result is slurmrestd's JSON reply."""
        return self._run(operations.call(method, path, body))

    def ping(self) -> Any:
        return self._run(operations.ping(self.paths))
