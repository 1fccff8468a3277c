"""Operators that submit and cancel Slurm jobs on a Vertex AI training cluster.

Importing this module stays cheap (it is imported at every DAG parse): the hook, the trigger and
their HTTP and Google libraries are imported only when a task runs.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from airflow.providers.common.compat.sdk import AirflowException, conf

from airflow_provider_slurmapi.client.jobs import JobStatus
from airflow_provider_slurmapi.client.live_output import LiveOutputSettings
from airflow_provider_slurmapi.client.output import OutputSettings, expand_pattern
from airflow_provider_slurmapi.client.submission import Outcome, Submission, submission_key, with_key
from airflow_provider_slurmapi.operators.base import CONNECTION_TEMPLATE_FIELDS, SlurmBaseOperator
from airflow_provider_slurmapi.operators.job_record import STATE_STORE_KEY as STATE_STORE_KEY
from airflow_provider_slurmapi.operators.job_record import JobIdRecord, TaskTry
from airflow_provider_slurmapi.operators.waiting import SlurmWaitingOperator, check_seconds
from airflow_provider_slurmapi.triggers.events import status_from_event
from airflow_provider_slurmapi.version_compat import mask_secret

if TYPE_CHECKING:
    from airflow.providers.common.compat.sdk import Context

    from airflow_provider_slurmapi.client.waiting import Log


class ReuseCompletedJob(StrEnum):
    """When a finished, successful job of an earlier try may stand for this try's job."""

    ON_RETRY = "on_retry"  # when the try is an automatic retry, not a user's clear
    ALWAYS = "always"
    NEVER = "never"


def is_automatic_retry(ti: TaskTry, retries: int | None) -> bool:
    """Whether this try follows a failed try of the same round, not a user's clear.

    Clearing a task sets ``max_tries`` to the last try number plus ``retries``, so the first try of
    every round is ``max_tries - retries + 1`` (the rule Airflow itself uses for reschedules).
    """
    return ti.try_number > ti.max_tries - (retries or 0) + 1


def dag_run_start_bound(context: Context) -> float | None:
    """The earliest time (epoch seconds) any try of this task run can have submitted its job.

    No run starts before its ``run_after`` (Airflow 3) or, on Airflow 2, its logical date; neither
    moves when a task is cleared, unlike the run's ``queued_at`` and ``start_date``. None when the
    context has no DAG run.
    """
    dag_run = context.get("dag_run")
    for name in ("run_after", "logical_date", "execution_date"):
        when = getattr(dag_run, name, None)
        if when is not None:
            return float(when.timestamp())
    return None


def mask_environment(job: dict[str, Any]) -> None:
    """Register the job's environment values as secrets: logs and rendered fields show ***."""
    environment = job.get("environment") if isinstance(job, dict) else None
    if isinstance(environment, dict):
        values = [str(value) for value in environment.values()]
    elif isinstance(environment, list):
        values = [str(item).partition("=")[2] for item in environment]
    else:
        return
    shortest = conf.getint("logging", "min_length_masked_secret", fallback=5)  # Airflow ignores shorter
    for value in values:
        if len(value) >= shortest:
            mask_secret(value)


def own_output_paths(job: dict[str, Any]) -> list[str]:
    """The ``standard_output`` / ``standard_error`` the job description sets itself (then no per-try path is set)."""
    return [str(job[name]) for name in ("standard_output", "standard_error") if job.get(name)]


def with_output_paths(job: dict[str, Any], settings: OutputSettings, ti: TaskTry, log: Log) -> dict[str, Any]:
    """The job description with a per-try ``standard_output`` / ``standard_error`` under
    ``output_cluster_path``, when output is readable and the description sets neither."""
    if not settings.readable:
        return job
    given = own_output_paths(job)
    if not given:
        out, err = settings.per_try_paths(
            ti.dag_id, ti.run_id, ti.task_id, getattr(ti, "map_index", -1), ti.try_number, array="array" in job
        )
        return {**job, "standard_output": out, "standard_error": err}
    for path in given:
        if not settings.is_under_cluster_path(path):
            log.warning(
                "standard_output/standard_error %s is not under output_cluster_path %s: "
                "Airflow will not be able to show this job's output",
                path,
                settings.cluster_path,
            )
    return job


class SlurmSubmitJobOperator(SlurmWaitingOperator):
    """Submit a Slurm batch job through the Slurm Job API and, by default, wait for it to finish.

    The task's return value (XCom ``return_value``) is the job ID; it also pushes ``job_state`` and
    ``exit_code``. The task fails, naming the state, the reason and the exit code, unless the job
    ends COMPLETED with exit code 0.

    :param job: the Slurm job description (``v0.0.42_job_desc_msg``), e.g. ``{"name": "train",
        "partition": "a3", "time_limit": 120}``. Templated. Missing ``environment`` defaults to a
        standard ``PATH``; missing ``current_working_directory`` defaults to ``/tmp``.
    :param script: the batch script's text, or a ``.sh``/``.sbatch``/``.bash`` file next to the DAG,
        rendered with Jinja. Templated.
    :param wait_for_completion: wait until the job finishes (default) or return right after submit.
    :param poll_interval: seconds between status reads.
    :param timeout: seconds to wait for the job; then the task fails (and the job is cancelled,
        unless ``cancel_on_kill=False``).
    :param cancel_on_kill: cancel the job when the task is killed or times out (default True).
    :param live_output: show the job's stdout and stderr in the task log while it runs, read from
        the pieces the job publishes under ``{output_uri}/live/``, by the trigger of a deferred task
        or the waiting worker. None (default): the connection's ``live_output`` extra, else on
        wherever it can work (``output_uri`` and ``output_cluster_path`` set, the operator's own
        ``standard_output``, a script with a ``#!`` line). True where it cannot work is refused
        before anything is sent; False turns it off.
    :param live_output_period: whole seconds between two pieces the job publishes (2-3600);
        None: the connection's extra, else 10.
    :param live_output_max_lines: lines of a stream shown per poll (1-100000); past it, a note.
    :param live_output_max_bytes: bytes of a stream read per poll (1 KiB-16 MiB); past it, a note.
    :param reuse_completed_job: what a new try does when the job of an earlier try of the same task
        run (found by the key in its comment) already COMPLETED with exit code 0: ``"on_retry"``
        (default) takes it as this try's job when the try is an automatic retry, and runs the job
        again when a user cleared the task; ``"always"`` always takes it; ``"never"`` always runs
        the job again. A job still pending or running is always reattached, never submitted twice;
        a failed or cancelled one is always submitted anew.

    The connection and cluster arguments (``slurm_conn_id``, ``project_id``...) are those of
    :class:`~airflow_provider_slurmapi.operators.base.SlurmBaseOperator`; ``deferrable``,
    ``shared_polling``, ``lost_grace`` and the output arguments (``output_uri``...) those of
    :class:`~airflow_provider_slurmapi.operators.waiting.SlurmWaitingOperator`. With
    ``output_uri`` and ``output_cluster_path`` set and no ``standard_output`` / ``standard_error``
    in ``job``, each try writes its output under
    ``{output_cluster_path}/{dag}/{run}/{task}[/map-{index}]/try-{n}/{job ID}.out`` / ``.err``.
    """

    template_fields: Sequence[str] = ("job", "script", *CONNECTION_TEMPLATE_FIELDS)
    template_ext: Sequence[str] = (".sh", ".sbatch", ".bash")
    template_fields_renderers = {"job": "json", "script": "bash"}
    ui_color = "#c7e3f4"

    def __init__(
        self,
        *,
        job: dict[str, Any],
        script: str,
        wait_for_completion: bool = True,
        poll_interval: float = 30.0,
        timeout: float | None = None,
        cancel_on_kill: bool = True,
        reuse_completed_job: str = ReuseCompletedJob.ON_RETRY,
        live_output: bool | None = None,
        live_output_period: int | None = None,
        live_output_max_lines: int | None = None,
        live_output_max_bytes: int | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.live_output_arguments = {
            "live_output": live_output,
            "live_output_period": live_output_period,
            "live_output_max_lines": live_output_max_lines,
            "live_output_max_bytes": live_output_max_bytes,
        }
        # refused when the DAG is parsed, naming the argument; the connection's extras come at run time
        self.live_output = LiveOutputSettings.resolve({}, self.live_output_arguments)
        if reuse_completed_job not in tuple(ReuseCompletedJob):
            allowed = ", ".join(repr(v.value) for v in ReuseCompletedJob)
            raise ValueError(f"reuse_completed_job must be one of {allowed}, got {reuse_completed_job!r}")
        check_seconds("poll_interval", poll_interval)
        check_seconds("timeout", timeout, optional=True)
        self.reuse_completed_job = ReuseCompletedJob(reuse_completed_job)
        self.job = job
        self.script = script
        self.wait_for_completion = wait_for_completion
        self.poll_interval = poll_interval
        self.timeout = timeout
        self.cancel_on_kill = cancel_on_kill
        self.job_id: str | None = None

    def render_template_fields(self, context: Context, jinja_env: Any = None) -> None:
        super().render_template_fields(context, jinja_env)
        mask_environment(self.job)  # before Airflow stores or logs the rendered fields

    def execute(self, context: Context) -> str:
        with self._job_record(context).kept_until_over(self.retries) as record:
            return self._submit_and_wait(context, record)

    def _submit_and_wait(self, context: Context, record: JobIdRecord) -> str:
        submission = self._submit_once(context, record)
        if submission.status is not None and submission.outcome == Outcome.ADOPTED:
            return self._finish(context, submission.status)
        if not self.wait_for_completion:
            return submission.job_id
        submitted = self._submitted_at(submission)
        reader = self._live_reader(submission.job_id, submitted) if submission.outcome == Outcome.SUBMITTED else None
        if self.deferrable:
            self.defer_until_finished(
                context,
                submission.job_id,
                poll_interval=self.poll_interval,
                timeout=self.timeout,
                cancel_on_kill=self.cancel_on_kill,
                live_output=reader and reader.trigger_spec(),
            )
        live = {"on_poll": lambda _status: reader.show_new(self.log)} if reader else {}
        try:
            status = self.hook.wait_for_job(
                submission.job_id,
                poll_interval=self.poll_interval,
                timeout=self.timeout,
                lost_grace=self.lost_grace,
                **live,
            )
        except TimeoutError as error:
            self._cancel_after_timeout()
            raise AirflowException(str(error)) from error
        if reader is None:
            return self._finish(context, status)
        reader.show_last(self.log)
        return self._finish(context, status, live_shown=reader.follower.shown_bytes())

    @staticmethod
    def _job_record(context: Context) -> JobIdRecord:
        ti = context["ti"]
        return JobIdRecord(context, submission_key(ti.dag_id, ti.task_id, ti.run_id, getattr(ti, "map_index", -1)))

    def _submit_once(self, context: Context, record: JobIdRecord) -> Submission:
        """Submit this task run's job, or reattach to (or adopt) an earlier try's; record its ID
        (before the try waits or defers: a retry finds it there whatever accounting keeps)."""
        ti = context["ti"]
        mask_environment(self.job)
        key = record.key
        job = with_output_paths({"name": ti.task_id, **self.job}, self.output_settings, ti, self.log)
        # a script too large for the request is staged by itself (one object per content, whatever
        # the try), and the wrapper that runs it submitted; live output wraps what is submitted
        job, fitted = self._fit(job, key, self.script, ti.dag_id)
        self.script = self._with_live_output(job, fitted)
        if self.script != fitted:  # the live wrapper's few lines may take a script just past the limit
            job, self.script = self._fit(job, key, self.script, ti.dag_id)
        # the first try, or the first after a user's clear: the job runs afresh
        new_round = not is_automatic_retry(ti, self.retries)
        adopt_completed = self._may_adopt_completed_job(ti)
        self._before_submit = time.time()  # no piece of a job this try submits is older
        submission = self.hook.submit_once(
            job,
            self.script,
            key,
            known_job_id=record.read(afresh=new_round and not adopt_completed),
            adopt_completed=adopt_completed,
            earlier_tries=ti.try_number > 1,  # every attempt has a try number of its own
            replace_active=new_round,
            since=dag_run_start_bound(context),
        )
        self.job_id = submission.job_id
        record.write(self.job_id, self._result_nonce(submission, record))
        cluster = self.hook.cluster.cluster_id
        self.log.info("Slurm job %s on cluster %s: %s (%s)", self.job_id, cluster, submission.outcome, key)
        self.show_job(context, self.job_id)
        if submission.outcome == Outcome.SUBMITTED and "array" not in job and job.get("standard_output"):
            # the link works while the job runs (a reattached job wrote where an earlier try said)
            self.show_output_link(
                context, self.output_settings.location_of(expand_pattern(job["standard_output"], job_id=self.job_id))
            )
        return submission

    def _fit(self, job: dict[str, Any], key: str, script: str, dag_id: str) -> tuple[dict[str, Any], str]:
        """The job and the script to submit: a script staged for its size is run by a wrapper, and
        the job's comment carries its mark (the retention keeps it while the job may run it)."""
        from airflow_provider_slurmapi.client.staging import with_staged_mark

        fitted = self.hook.fit_script(with_key(job, key), script, self.output_settings, dag_id=dag_id)
        if fitted == script:
            return job, script
        return with_staged_mark(job, script), fitted

    def _with_live_output(self, job: dict[str, Any], script: str) -> str:
        """The script, run by the live-output wrapper when live output is on and can work; the
        live folder and the try's output folder are remembered for the wait."""
        self._live_folders: tuple[str, str] | None = None
        self.live_output = self.hook.resolve_live_output(**self.live_output_arguments)
        if not self.live_output.enabled:
            return script
        from airflow_provider_slurmapi.client.errors import InvalidRequestError
        from airflow_provider_slurmapi.client.live_output import LIVE_FOLDER
        from airflow_provider_slurmapi.client.live_wrapper import live_script

        settings = self.output_settings
        if not settings.readable:
            if self.live_output.explicit:
                raise InvalidRequestError(
                    "live_output", "needs output_uri and output_cluster_path (on the task or the connection)"
                )
            return script  # on by default only where it can work
        out, err = str(job.get("standard_output") or ""), str(job.get("standard_error") or "")
        folder = out.rsplit("/", 1)[0]
        if not (out.endswith(("/%j.out", "/%A_%a.out")) and err == out[:-4] + ".err") or not script.startswith("#!"):
            self.log.log(
                logging.WARNING if self.live_output.explicit else logging.INFO,
                "No live output for this job: it needs the operator's own standard_output and "
                "standard_error and a script starting with #!; its output is shown when it ends",
            )
            return script
        live = f"{str(settings.cluster_path).rstrip('/')}/{LIVE_FOLDER}"
        self._live_folders = (live, folder)
        return live_script(
            script, try_folder=folder, live_folder=live, period=self.live_output.period, array="array" in job
        )

    def _submitted_at(self, submission: Submission) -> float:
        """When the job was submitted (epoch seconds): Slurm's submit time of a job found, else the
        time just before this try submitted it."""
        submit_time = submission.status.submit_time if submission.status is not None else None
        return float(submit_time) if submit_time else self._before_submit

    def _live_reader(self, job_id: str, submitted_at: float) -> Any:
        """What shows the job's published lines at each poll (from its submission on); None without live output."""
        if not getattr(self, "_live_folders", None):
            return None
        from airflow_provider_slurmapi.client.live_output import LiveFollower, folder_tag
        from airflow_provider_slurmapi.hooks.live_reader import LiveOutputReader

        _, folder = self._live_folders  # type: ignore[misc]
        follower = LiveFollower.from_submission(job_id, folder_tag(folder), submitted_at)
        settings = self.output_settings
        output_folder = settings.location_of(folder)  # the try's own files, named when lines are skipped
        return LiveOutputReader(self.hook._object_store(), str(settings.uri), self.live_output, follower, output_folder)

    def _result_nonce(self, submission: Submission, record: JobIdRecord) -> str | None:
        """What the key to the job's result is derived from, recorded with its ID (``@task.slurm_python``);
        a plain job has none."""
        return None

    def _may_adopt_completed_job(self, ti: TaskTry) -> bool:
        if self.reuse_completed_job is ReuseCompletedJob.ON_RETRY:
            return is_automatic_retry(ti, self.retries)
        return self.reuse_completed_job is ReuseCompletedJob.ALWAYS

    def execute_complete(
        self, context: Context, event: dict[str, Any] | None = None, deferred_in_try: int | None = None
    ) -> str:
        if self.resumed_by_an_earlier_try(context, deferred_in_try):
            return self.execute(context)
        with self._job_record(context).kept_until_over(self.retries):
            return self._finish(context, status_from_event(event), live_shown=(event or {}).get("live_shown"))

    def _finish(self, context: Context, status: JobStatus, *, live_shown: dict[str, int] | None = None) -> str:
        ti = context["ti"]
        ti.xcom_push(key="job_state", value=status.state)
        exit_code = status.effective_exit_code
        ti.xcom_push(key="exit_code", value=exit_code.return_code if exit_code else None)
        self.finish_job(context, status, live_shown=live_shown)
        return status.job_id

    def _cancel_after_timeout(self) -> None:
        if self.job_id and self.cancel_on_kill:
            self.hook.cancel_job(self.job_id)
            self.log.warning("Cancelled Slurm job %s after the %s s timeout", self.job_id, self.timeout)

    def on_kill(self) -> None:
        if self.job_id and self.cancel_on_kill:
            self.log.info("Task killed: cancelling Slurm job %s", self.job_id)
            self.hook.cancel_job(self.job_id)


class SlurmCancelJobOperator(SlurmBaseOperator):
    """Cancel a Slurm job (or send it a signal) and wait until it has stopped.

    A job that already finished counts as cancelled. Returns the job's final state.

    :param job_id: the job to cancel. Templated.
    :param signal: send this signal (``KILL``, ``USR1``...) instead of a plain cancel. A signal that
        does not end the job (``USR1``) leaves it running: set ``wait_for_completion=False`` then.
    :param wait_for_completion: wait until the job reads CANCELLED or another finished state.
    :param poll_interval: seconds between status reads while waiting.
    :param timeout: seconds to wait for the job to stop.

    The connection and cluster arguments are those of
    :class:`~airflow_provider_slurmapi.operators.base.SlurmBaseOperator`.
    """

    template_fields: Sequence[str] = ("job_id", "signal", *CONNECTION_TEMPLATE_FIELDS)
    ui_color = "#f4d6c7"

    def __init__(
        self,
        *,
        job_id: str | int,
        signal: str | None = None,
        wait_for_completion: bool = True,
        poll_interval: float = 5.0,
        timeout: float | None = 600.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        check_seconds("poll_interval", poll_interval)
        check_seconds("timeout", timeout, optional=True)
        self.job_id = job_id
        self.signal = signal
        self.wait_for_completion = wait_for_completion
        self.poll_interval = poll_interval
        self.timeout = timeout

    def execute(self, context: Context) -> str:
        job_id = str(self.job_id)
        if self.hook.cancel_job(job_id, self.signal):
            self.log.info("Cancel of Slurm job %s accepted", job_id)
        if not self.wait_for_completion:
            return self.hook.get_job(job_id).state
        try:
            status = self.hook.wait_for_job(job_id, poll_interval=self.poll_interval, timeout=self.timeout)
        except TimeoutError as error:
            raise AirflowException(str(error)) from error
        self.log.info("%s", status.describe())
        return status.state
