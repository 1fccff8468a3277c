"""slurmdbd's answers: a job's records (``job/{id}``), or those a query selects (``jobs``), one
record per run of each job."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from airflow_provider_slurmapi.emulator import replies
from airflow_provider_slurmapi.emulator.backend_api import SlurmAnswer, SlurmRequest
from airflow_provider_slurmapi.emulator.builtin.accounting_query import QUERY_REJECTED, JobsQuery, QueryRefused
from airflow_provider_slurmapi.emulator.builtin.answers import bad_method, unparsable_query
from airflow_provider_slurmapi.emulator.builtin.job_table import JobTable, parse_job_ref
from airflow_provider_slurmapi.emulator.job_model import Job, epoch_seconds


@dataclass(frozen=True)
class Accounting:
    """The slurmdbd of ``table``'s cluster; without ``job_comments`` (AccountingStoreFlags=job_comment)
    it keeps no job comment."""

    table: JobTable
    job_comments: bool

    def job(self, version: str, job_ref: str, principal: str) -> SlurmAnswer:
        table = self.table
        ref = parse_job_ref(job_ref)
        if ref is None:
            return bad_method(table.cluster, "slurmdbd", version, "op_handler_job")
        jobs = [job for job in table.accounted(*ref) if table.visible(job, principal)]
        jobs = [run for job in jobs for run in (*job.runs, job)]  # one record per run, oldest first
        now = epoch_seconds()
        warnings = [] if jobs else [self._found_nothing()]
        fields = {"jobs": [self._record(j, now) for j in jobs]}
        return 200, replies.envelope("slurmdbd", version, table.cluster, fields, warnings=warnings)

    def jobs(self, version: str, request: SlurmRequest) -> SlurmAnswer:
        """Accounting's records, like sacct: all jobs, or those the query selects (see ``JobsQuery``).

        ``skip_steps=true`` leaves the steps out; with a time window and without
        ``disable_truncate_usage_time=true`` it also cuts each record's run to the window.
        """
        cluster = self.table.cluster
        if "," in request.raw_query:
            # real slurmrestd refuses a literal comma in any parameter (an encoded one is a list)
            return unparsable_query(cluster, "slurmdbd", version, "op_handler_jobs")
        try:
            query = JobsQuery.parse(request.query, self.table.user_names(request.principal), epoch_seconds())
        except QueryRefused as refused:
            errors = [*refused.errors, replies.error(9000, replies.PARSE_ERROR, QUERY_REJECTED, "op_handler_jobs")]
            return 422, replies.envelope("slurmdbd", version, cluster, {}, errors=errors)
        records = self._selected_records(query, request.principal)
        warnings = [] if records else [self._found_nothing()]
        # slurmdbd answers what it could parse, and says which state names it could not
        status = 500 if query.state_errors else 200
        fields = {"jobs": records}
        return status, replies.envelope(
            "slurmdbd", version, cluster, fields, errors=query.state_errors, warnings=warnings
        )

    def _selected_records(self, query: JobsQuery, principal: str) -> list[dict[str, Any]]:
        """The accounting records ``query`` selects, one per run, by job ID and oldest run first."""
        table = self.table
        now = epoch_seconds()
        jobs = sorted((j for j in table.jobs.values() if table.visible(j, principal)), key=lambda j: j.job_id)
        if query.steps:
            picked = {id(job) for ref in query.steps for job in table.accounted(*ref)}
            jobs = [j for j in jobs if id(j) in picked]
        records = [(run, self._record(run, now)) for job in jobs for run in (*job.runs, job)]
        selected = [record for run, record in records if query.selects(run, record)]
        for record in selected:
            query.trim(record)
        return selected

    def _record(self, job: Job, now: int) -> dict[str, Any]:
        record = replies.slurmdb_job(job, self.table.cluster, now)
        if not self.job_comments:  # slurmdbd without AccountingStoreFlags=job_comment: the field is empty
            record["comment"]["job"] = ""
        return record

    def _found_nothing(self) -> dict[str, Any]:
        return replies.warning(f"slurmdb_jobs_get(0x{id(self):x}) found nothing", "_dump_jobs")
