"""Hooks for the Slurm Job API: an Airflow connection turned into a client.

Credentials come from the Google provider's base hooks, so every credential option of a
``google_cloud_platform`` connection (key file, key JSON, workload identity federation config,
impersonation chain, ADC) works here too, under the same extra keys.
"""

from __future__ import annotations

import asyncio
import posixpath
import time
from collections.abc import Callable
from dataclasses import replace
from functools import cached_property
from typing import TYPE_CHECKING, Any

import google.auth.transport.requests
from airflow.providers.google.common.hooks.base_google import GoogleBaseAsyncHook, GoogleBaseHook
from asgiref.sync import sync_to_async
from google.auth.transport.requests import AuthorizedSession

from airflow_provider_slurmapi.client.aio import AsyncSlurmJobApiClient
from airflow_provider_slurmapi.client.api import SyncOperations
from airflow_provider_slurmapi.client.cluster import ClusterRef
from airflow_provider_slurmapi.client.errors import SlurmJobApiError
from airflow_provider_slurmapi.client.jobs import JobStatus, RecordSource
from airflow_provider_slurmapi.client.operations import JobRecords
from airflow_provider_slurmapi.client.output import OutputSettings, OutputTail, output_files
from airflow_provider_slurmapi.client.paths import DEFAULT_API_VERSION, validate_api_version
from airflow_provider_slurmapi.client.retry import RetryPolicy
from airflow_provider_slurmapi.client.steps import ApiSettings, Operation, T
from airflow_provider_slurmapi.client.sync import SlurmJobApiClient
from airflow_provider_slurmapi.client.usage import JobUsage
from airflow_provider_slurmapi.client.wait_policy import LOST_JOB_GRACE, JobWaitPolicy
from airflow_provider_slurmapi.client.waiting import follow, run_wait
from airflow_provider_slurmapi.get_provider_info import CONN_TYPE, DEFAULT_CONN_ID
from airflow_provider_slurmapi.version_compat import mask_secret

if TYPE_CHECKING:
    from airflow.providers.google.cloud.hooks.gcs import GCSHook

    from airflow_provider_slurmapi.client.cluster_check import ClusterReport
    from airflow_provider_slurmapi.client.live_output import LiveOutputSettings
    from airflow_provider_slurmapi.client.staging import StagedScript
    from airflow_provider_slurmapi.hooks.object_store import ObjectStore


class TokenMasker:
    """Registers each new access token with Airflow's secrets masker, so that a log line, an error
    or a job's output that repeats it shows ``***``."""

    def __init__(self) -> None:
        self._last: str | None = None

    def __call__(self, token: object) -> None:
        if isinstance(token, str) and token and token != self._last:
            mask_secret(token)
            self._last = token


class MaskingAuthorizedSession(AuthorizedSession):
    """google-auth's ``AuthorizedSession`` (it adds the token, refreshes it on 401), whose tokens
    are registered with the secrets masker as soon as a request that carried one returns or fails."""

    def __init__(self, credentials: Any, **kwargs: Any) -> None:
        super().__init__(credentials, **kwargs)
        self._mask_token = TokenMasker()

    def request(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().request(*args, **kwargs)
        finally:
            self._mask_token(getattr(self.credentials, "token", None))


class SlurmJobApiHook(GoogleBaseHook, SyncOperations):
    """Submit, read and cancel Slurm jobs on a Vertex AI training cluster through ``callSlurmRestApi``.

    The hook has every operation of :class:`~airflow_provider_slurmapi.client.api.SlurmJobApiOperations`
    (``submit_once``, ``get_job``, ``find_job``, ``cancel_job``, ``call``...), run through its client.

    :param slurm_conn_id: connection of type ``slurm_job_api`` (or ``google_cloud_platform``).
    :param project_id: overrides the connection's project.
    :param region: overrides the connection's region.
    :param cluster_id: overrides the connection's cluster.
    :param api_version: Slurm REST version in paths, ``v0.0.NN``; default ``v0.0.42``.
    :param impersonation_chain: service account(s) to impersonate, as in the Google provider.
    :param retry: how transient failures of reads and cancels are retried; by default the
        connection's ``retry_attempts`` / ``retry_max_seconds``, which these two arguments override.
    """

    conn_name_attr = "slurm_conn_id"
    default_conn_name = DEFAULT_CONN_ID
    conn_type = CONN_TYPE
    hook_name = "Google Cloud Slurm Job API"

    def __init__(
        self,
        slurm_conn_id: str = DEFAULT_CONN_ID,
        *,
        project_id: str | None = None,
        region: str | None = None,
        cluster_id: str | None = None,
        api_version: str | None = None,
        impersonation_chain: str | list[str] | None = None,
        retry: RetryPolicy | None = None,
        retry_attempts: int | None = None,
        retry_max_seconds: float | None = None,
        timeout: float = 60.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(gcp_conn_id=slurm_conn_id, impersonation_chain=impersonation_chain, **kwargs)
        self.slurm_conn_id = slurm_conn_id
        self._overrides = {"project_id": project_id, "region": region, "cluster_id": cluster_id}
        self.api_version = validate_api_version(api_version or self._get_field("api_version") or DEFAULT_API_VERSION)
        self.retry = retry or RetryPolicy.from_settings(
            retry_attempts if retry_attempts is not None else self._get_field("retry_attempts"),
            retry_max_seconds if retry_max_seconds is not None else self._get_field("retry_max_seconds"),
            self._get_field("submit_settle_seconds"),
        )
        self.timeout = timeout

    @cached_property
    def cluster(self) -> ClusterRef:
        """The cluster this hook talks to: operator arguments first, then the connection."""
        project = (
            self._overrides["project_id"]
            or self._get_field("project_id")
            or self._get_field("project")  # a google_cloud_platform connection's key
            or self.get_credentials_and_project_id()[1]
            or ""  # ClusterRef says which field is missing
        )
        return ClusterRef(
            project_id=project,
            region=self._overrides["region"] or self._get_field("region") or "",
            cluster_id=self._overrides["cluster_id"] or self._get_field("cluster_id") or "",
            endpoint=self._get_field("endpoint") or None,
        )

    def get_client(self) -> SlurmJobApiClient:
        session = MaskingAuthorizedSession(self.get_credentials())
        return SlurmJobApiClient(
            session, self.cluster, api_version=self.api_version, timeout=self.timeout, retry=self.retry
        )

    @cached_property
    def client(self) -> SlurmJobApiClient:
        return self.get_client()

    @property
    def settings(self) -> ApiSettings:
        return self.client.settings

    def _run(self, operation: Operation[T]) -> T:
        return self.client._run(operation)

    def wait_for_job(
        self,
        job_id: str | int,
        *,
        poll_interval: float = 30.0,
        timeout: float | None = None,
        lost_grace: float = LOST_JOB_GRACE,
        on_poll: Callable[[JobStatus | None], object] | None = None,
    ) -> JobStatus:
        """Poll until the job finishes and return its final status; TimeoutError after ``timeout`` s.
        ``on_poll`` is called with each status read (None: the job was not found), e.g. to show its
        live output.

        A job missing from both the live queue and accounting is looked for ``lost_grace`` s (accounting
        can lag) before ``JobLostError``; a state this provider does not know is waited out as long
        before ``UnknownJobStateError``. A requeued job is waited for until its last run ends; each
        requeue is logged once, a hold when first seen and then every 10 minutes, and each change of
        the job's state, reason or expected start in one line.
        """
        deadline = None if timeout is None else time.time() + timeout
        policy = JobWaitPolicy(str(job_id), lost_grace=lost_grace, deadline=deadline)
        return run_wait(
            follow(policy, poll_interval, self.log, timeout=timeout),
            read=(lambda: _observed(self.find_job(job_id), on_poll)) if on_poll else (lambda: self.find_job(job_id)),
            describe_requeue=self.describe_requeue,
            sleep=time.sleep,
        )

    def get_job_usage(self, job_id: str | int, records: JobRecords | None = None) -> JobUsage | None:
        """Elapsed time, allocated TRES and GPU-hours from accounting; None without accounting.

        ``records``: what ``job_records`` already gave for this job, so it is not read again.
        """
        source, records_read = records or self.job_records(job_id)
        if source != RecordSource.ACCOUNTING:
            self.log.info("No accounting record of Slurm job %s: its usage is unknown", job_id)
            return None
        return JobUsage.from_accounting(str(job_id), records_read)

    def resolve_output_settings(self, **overrides: Any) -> OutputSettings:
        """The connection's ``output_uri`` and ``output_cluster_path``, then ``overrides`` (any
        ``OutputSettings`` field: ``uri``, ``cluster_path``, ``tail_lines``...) where not None; validated."""
        connection = OutputSettings(
            uri=self._get_field("output_uri") or None,
            cluster_path=self._get_field("output_cluster_path") or None,
            staged_retention_days=self._get_field("output_staged_retention_days") or None,
        )
        return replace(connection, **{name: value for name, value in overrides.items() if value is not None})

    def resolve_live_output(self, **task: Any) -> LiveOutputSettings:
        """Live output as the task asks (``live_output``, ``live_output_period``... where not None),
        over the connection's extras of the same names, over the defaults (on); validated."""
        from airflow_provider_slurmapi.client.live_output import LIVE_OUTPUT_FIELDS, LiveOutputSettings

        return LiveOutputSettings.resolve({name: self._get_field(name) for name in LIVE_OUTPUT_FIELDS}, task)

    def read_job_output(
        self,
        job_id: str | int,
        settings: OutputSettings | None = None,
        records: JobRecords | None = None,
        **overrides: Any,
    ) -> list[OutputTail]:
        """The last lines of the job's stdout and stderr (the failed array tasks' first).

        ``settings`` default to the connection's (see ``resolve_output_settings``, which ``overrides``
        feed); ``records`` is what ``job_records`` already gave. A file Airflow cannot read, a
        missing object or a refused read becomes the tail's ``problem``; this never raises for them.
        """
        from airflow_provider_slurmapi.hooks.output_reader import OutputReader

        settings = settings or self.resolve_output_settings(**overrides)
        source, records_read = records or self.job_records(job_id)
        reader = OutputReader(settings, gcs_hook=self._gcs_hook, principal=self._principal)
        return reader.tails(output_files(records_read, source=source))

    def fit_script(
        self, job: dict[str, Any], script: str, settings: OutputSettings, *, dag_id: str | None = None
    ) -> str:
        """The script to submit: itself when the request stays under the API's limit; otherwise
        staged under ``settings``' output location, which the nodes see, in the DAG's own folder
        (``staged/<dag_id>/<sha256>.script``), and a short wrapper that runs a checked copy of it.
        An object changed since an earlier staging is staged again; the DAG's scripts not staged
        for ``staged_retention_days`` are removed, but those a job in the live queue runs (a job
        carries the mark of the script it runs in its comment: ``staging.with_staged_mark``).
        Without an output location, the submit's own error (which names the two settings) is
        raised now, before anything is sent."""
        from airflow_provider_slurmapi.client.staging import StagedScript, submit_call
        from airflow_provider_slurmapi.hooks.object_store import Staged

        call = submit_call(job, script, self.settings.paths)
        if call.fits() or not settings.readable:
            call.encode()  # too large and nowhere to stage it: the error, before anything is sent
            return script
        staged = StagedScript.plan(script, settings, dag_id)
        store = self._object_store()
        found = store.stage(staged.location, staged.data, within=str(settings.uri))
        (self.log.warning if found is Staged.REPLACED else self.log.info)(
            "The batch script (%s bytes) is too large for the request: %s %s; submitting a wrapper that runs %s",
            f"{len(staged.data):,}",
            found.value,
            staged.location,
            staged.cluster_file,
        )
        self._remove_old_staged(store, staged, settings)
        return staged.wrapper

    def _remove_old_staged(self, store: ObjectStore, staged: StagedScript, settings: OutputSettings) -> None:
        """The retention: never a reason to fail the submit (the scripts wait for the next staging)."""
        max_age = settings.staged_retention_seconds
        if max_age is None:
            return
        try:
            removed = store.remove_older(
                staged.folder, max_age, keep=lambda old: self._staged_still_needed(staged, old)
            )
        except Exception as error:
            self.log.warning("Could not remove old staged scripts under %s: %s", staged.folder, error)
            return
        if removed:
            self.log.info(
                "Removed %d staged script(s) under %s not staged for %g days",
                len(removed),
                staged.folder,
                max_age / 86400,
            )

    def _staged_still_needed(self, staged: StagedScript, old: list[str]) -> set[str]:
        """Of ``old`` (names of the DAG's scripts past the retention), those to keep: the one staged
        now, and those a job in the live queue runs (pending, held, running, suspended, requeued, or
        just ended: Slurm can still requeue it). All of them when the queue cannot be read."""
        from airflow_provider_slurmapi.client.staging import scripts_in_use

        current = posixpath.basename(staged.location)
        if not set(old) - {current}:
            return set(old)
        try:
            comments = [job.comment for job in self.list_jobs()]
        except Exception as error:
            self.log.warning(
                "Kept the old staged scripts under %s: the live queue, which tells the jobs that may still run "
                "them, could not be read: %s",
                staged.folder,
                error,
            )
            return set(old)
        in_use = scripts_in_use(old, comments)
        if in_use - {current}:
            self.log.info(
                "Kept %d staged script(s) under %s past the retention: a job in the queue runs them",
                len(in_use - {current}),
                staged.folder,
            )
        return in_use | {current}

    def read_object(self, location: str, wait: float, max_bytes: int, *, within: str | None = None) -> bytes:
        """A whole object at the output location (``gs://`` or ``file://``), waited for up to ``wait`` s;
        ``ObjectTooLargeError``, before it is read, if it is larger than ``max_bytes``.

        ``within``: the ``output_uri`` a ``file://`` location is under; no link is followed below it.
        """
        return self._object_store().read(location, wait, max_bytes, within=within)

    def _object_store(self) -> ObjectStore:
        from airflow_provider_slurmapi.hooks.object_store import ObjectStore

        return ObjectStore(gcs_hook=self._gcs_hook, principal=self._principal)

    def _gcs_hook(self) -> GCSHook:
        from airflow.providers.google.cloud.hooks.gcs import GCSHook

        return GCSHook(gcp_conn_id=self.slurm_conn_id, impersonation_chain=self.impersonation_chain)

    def _principal(self) -> str:
        chain = self.impersonation_chain
        if chain:
            return chain if isinstance(chain, str) else chain[-1]
        email = getattr(self.get_credentials(), "service_account_email", None)
        return email if isinstance(email, str) and "@" in email else "the connection's principal"

    def check_cluster(
        self, *, probe_job: bool = True, partition: str | None = None, probe_timeout: float | None = None
    ) -> ClusterReport:
        """What the cluster gives the provider (access, partitions, GPUs, accounting, job comments, the
        jobs' Unix user, other users' jobs), each finding with what follows and how to fix it.
        ``probe_job`` submits one job of a few seconds (to ``partition``, else the default one)."""
        from airflow_provider_slurmapi.client.cluster_check import PROBE_TIMEOUT, check_cluster

        name = f"{self.cluster.cluster_id} ({self.cluster.region})"
        timeout = PROBE_TIMEOUT if probe_timeout is None else probe_timeout
        return check_cluster(
            self, name, self.settings.paths, probe_job=probe_job, partition=partition, probe_timeout=timeout
        )

    def test_connection(self) -> tuple[bool, str]:
        """The cluster check without its probe job (the connection form's Test button)."""
        try:
            report = self.check_cluster(probe_job=False)
            return report.ok, f"{'Connected to' if report.ok else 'Cannot use'} {report.cluster}: {report.summary()}"
        except (SlurmJobApiError, ValueError) as error:
            return False, str(error)
        except Exception as error:  # credentials problems come in many types
            return False, f"{type(error).__name__}: {error}"

    @classmethod
    def get_connection_form_widgets(cls) -> dict[str, Any]:
        """Form fields for Airflow 2.x; Airflow 3.2+ reads ``conn-fields`` from the provider info."""
        from flask_appbuilder.fieldwidgets import BS3PasswordFieldWidget, BS3TextFieldWidget
        from flask_babel import lazy_gettext
        from wtforms import PasswordField, StringField

        from airflow_provider_slurmapi.get_provider_info import CONN_FIELDS

        widgets: dict[str, Any] = {}
        for name, spec in CONN_FIELDS.items():
            secret = spec["schema"].get("format") == "password"
            field_class, widget = (
                (PasswordField, BS3PasswordFieldWidget) if secret else (StringField, BS3TextFieldWidget)
            )
            widgets[name] = field_class(lazy_gettext(spec["label"]), widget=widget(), description=spec["description"])
        return widgets

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        from airflow_provider_slurmapi.get_provider_info import UI_FIELD_BEHAVIOUR

        return {
            "hidden_fields": UI_FIELD_BEHAVIOUR["hidden-fields"],
            "relabeling": UI_FIELD_BEHAVIOUR["relabeling"],
            "placeholders": UI_FIELD_BEHAVIOUR.get("placeholders", {}),
        }


class SlurmJobApiAsyncHook(GoogleBaseAsyncHook):
    """The async twin of :class:`SlurmJobApiHook`, for triggers.

    Credentials and cluster coordinates are read once (in a thread) from the sync hook; tokens are
    refreshed from the credentials' real expiry, so waits of many hours survive short-lived tokens.
    """

    sync_hook_class = SlurmJobApiHook

    def __init__(self, slurm_conn_id: str = DEFAULT_CONN_ID, **kwargs: Any) -> None:
        super().__init__(slurm_conn_id=slurm_conn_id, **kwargs)
        self._hook_kwargs.pop("gcp_conn_id", None)
        self._refresh_lock = asyncio.Lock()

    async def get_client(self) -> AsyncSlurmJobApiClient:
        sync_hook: SlurmJobApiHook = await self.get_sync_hook()
        cluster = await sync_to_async(lambda: sync_hook.cluster)()
        credentials = await sync_to_async(sync_hook.get_credentials)()
        mask_token = TokenMasker()

        def refresh() -> None:  # in a thread: the masker may call Airflow's supervisor synchronously
            credentials.refresh(google.auth.transport.requests.Request())
            mask_token(credentials.token)

        await sync_to_async(mask_token)(credentials.token)  # a token the credentials already hold

        async def token_source(force: bool) -> str:
            async with self._refresh_lock:
                if force or not credentials.valid:  # valid is False shortly before the real expiry
                    await sync_to_async(refresh)()
                token = credentials.token
                if token is None:  # refresh() sets a token or raises
                    raise RuntimeError("the Google credentials gave no access token")
                return str(token)

        return AsyncSlurmJobApiClient(
            cluster,
            token_source,
            api_version=sync_hook.api_version,
            timeout=sync_hook.timeout,
            retry=sync_hook.retry,
        )


def _observed(status: JobStatus | None, on_poll: Callable[[JobStatus | None], object]) -> JobStatus | None:
    on_poll(status)
    return status
