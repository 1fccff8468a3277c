"""``@task.slurm_python``: the decorated function, with its arguments, runs on the cluster as a
Slurm job under the given interpreter, and its return value comes back as the task's XCom.

The function's source and JSON arguments travel in the batch script (staged under the output
location when past the request limit); the job writes the return value, or the exception with
its traceback, next to its output in its try's folder, where the task reads it: the folder its
record's output path names, so that a retry that reattaches to, or adopts, an earlier try's job
reads what that job wrote. What it reads is taken only if it is signed with the key of the try
that submitted the job (a fresh one per try, in the job's environment): anyone who may write the
output location may write that file too. The key is derived from the try's nonce, which the job's
record keeps, and the deployment's secret (``result_secret``), which it does not. Importing this
module stays cheap.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import TYPE_CHECKING, Any

from airflow.providers.common.compat.sdk import AirflowException, AirflowFailException

from airflow_provider_slurmapi.client.errors import InvalidRequestError, UntrustedResultError
from airflow_provider_slurmapi.client.numbers import checked_number
from airflow_provider_slurmapi.client.output import Stream, output_files
from airflow_provider_slurmapi.client.python_function import (
    MAX_RESULT_BYTES,
    RESULT_SUFFIX,
    FunctionOutcome,
    check_python,
    function_script,
    new_result_nonce,
    result_key,
    with_result_key,
)
from airflow_provider_slurmapi.client.submission import Outcome
from airflow_provider_slurmapi.decorators.result_secret import result_secret
from airflow_provider_slurmapi.decorators.slurm import SlurmDecoratedOperator, decorator_of
from airflow_provider_slurmapi.hooks.object_store import ObjectTooLargeError
from airflow_provider_slurmapi.operators.job import own_output_paths
from airflow_provider_slurmapi.version_compat import mask_secret

if TYPE_CHECKING:
    from airflow.providers.common.compat.sdk import Context, TaskDecorator

    from airflow_provider_slurmapi.client.jobs import JobStatus
    from airflow_provider_slurmapi.client.submission import Submission
    from airflow_provider_slurmapi.operators.job_record import JobIdRecord


class _SlurmPythonDecoratedOperator(SlurmDecoratedOperator):
    """The submit operator running the decorated function on the cluster.

    :param python: the interpreter on the cluster's nodes: an absolute path (a virtual
        environment's ``bin/python``) or a command name on the job's ``PATH``.
    :param max_result_bytes: the largest result object the task reads (default 16 MiB); a larger
        one fails the task unread. The return value becomes an XCom: return a path for bulk data.
    """

    custom_operator_name: str = "@task.slurm_python"

    def __init__(
        self,
        *,
        python_callable: Callable[..., Any],
        op_args: Collection[Any] | None = None,
        op_kwargs: Mapping[str, Any] | None = None,
        python: str = "python3",
        max_result_bytes: int = MAX_RESULT_BYTES,
        **kwargs: Any,
    ) -> None:
        self.python = check_python(python)
        self.max_result_bytes = int(checked_number("max_result_bytes", max_result_bytes, low=1, whole=True))
        self._result_keys: dict[str, str | None] = {}  # job ID -> the key its result is signed with
        self._secret: str | None = None  # the deployment's, read when a key is first derived
        if isinstance(kwargs.get("job"), dict) and "array" in kwargs["job"]:
            raise InvalidRequestError(
                "job.array", "@task.slurm_python runs one call per job: map the task with .expand"
            )
        super().__init__(python_callable=python_callable, op_args=op_args, op_kwargs=op_kwargs, **kwargs)

    def execute(self, context: Context) -> Any:
        # a fresh key for the job this try may submit, in its environment, not its script (which
        # may be staged where others read it); the record keeps only the nonce it is derived from
        self._new_nonce = new_result_nonce()
        self._new_key = self._key_of(self._new_nonce)
        self.job = with_result_key(self.job, self._new_key)
        # the script is code and data, not a template: it is set after the fields were rendered
        self.script = function_script(
            self.python_callable,
            list(self.op_args),
            dict(self.op_kwargs),
            python=self.python,
            result_folder=self._result_folder(context),
        )
        return super().execute(context)

    def _result_folder(self, context: Context) -> str:
        settings = self.output_settings
        if not settings.readable:
            raise InvalidRequestError(
                "output_uri",
                "@task.slurm_python brings the return value back through the job output location: set "
                "output_uri and output_cluster_path (on the task or the connection)",
            )
        ti = context["ti"]
        return settings.per_try_folder(ti.dag_id, ti.run_id, ti.task_id, getattr(ti, "map_index", -1), ti.try_number)

    def _result_nonce(self, submission: Submission, record: JobIdRecord) -> str | None:
        """This try's nonce for the job it submitted, else the one the record keeps for an earlier
        try's job; the key it gives is kept to check the job's result."""
        if submission.outcome == Outcome.SUBMITTED:
            nonce: str | None = self._new_nonce
            key: str | None = self._new_key
        else:
            nonce = record.result_nonce_of(submission.job_id)
            key = None if nonce is None else self._key_of(nonce)
        self._result_keys[submission.job_id] = key
        return nonce

    def _key_of(self, nonce: str) -> str:
        """The result key of the try that drew ``nonce``, derived with the deployment's secret."""
        if self._secret is None:
            self._secret = result_secret()
        key = result_key(self._secret, nonce)
        mask_secret(key)
        return key

    def _finish(self, context: Context, status: JobStatus, *, live_shown: dict[str, int] | None = None) -> Any:
        """The function's return value; its exception, with the cluster-side traceback, if it raised.

        A result that is not provably the job's (or too large to read) is refused: the task fails
        naming it, and is not retried (a retry would read the same object)."""
        name = self.python_callable.__name__
        refused: UntrustedResultError | ValueError | None = None
        try:
            outcome = self._read_outcome(context, status)
        except (UntrustedResultError, ObjectTooLargeError) as error:
            outcome, refused = None, error
        try:  # a failure names the state and exit code, and ends with the traceback in the job's stderr
            super()._finish(context, status, live_shown=live_shown)
        except AirflowException as failure:
            if refused is not None:
                self.log.warning("Slurm job %s failed; %s", status.job_id, refused)
            elif outcome is not None and outcome.error is not None:
                raise outcome.remote_error(name, status.job_id) from failure
            raise
        if refused is not None:
            raise AirflowFailException(
                f"Slurm job {status.job_id} completed, but {name}()'s return value is not taken (the task is not "
                f"retried: a retry would read the same object): {refused}"
            ) from refused
        if outcome is None or outcome.error is not None:
            raise AirflowException(f"Slurm job {status.job_id} completed but {name}() left no return value")
        return outcome.value

    def _read_outcome(self, context: Context, status: JobStatus) -> FunctionOutcome | None:
        folder = self._job_result_folder(context, status.job_id)
        location = self.output_settings.location_of(f"{folder}/{status.job_id}{RESULT_SUFFIX}")
        assert location is not None  # the folder is under output_cluster_path
        try:
            data = self.hook.read_object(
                location,
                wait=self.output_settings.wait,
                max_bytes=self.max_result_bytes,
                within=self.output_settings.uri,
            )
        except FileNotFoundError as error:
            self.log.warning("%s: the job ended without writing its outcome", error)
            return None
        if status.job_id in self._result_keys:
            key = self._result_keys[status.job_id]
        else:  # a try resumed from the triggerer, or a new process: the record keeps the nonce
            nonce = self._job_record(context).result_nonce_of(status.job_id)
            key = None if nonce is None else self._key_of(nonce)
        return FunctionOutcome.verified(data, location, job_id=status.job_id, key=key)

    def _job_result_folder(self, context: Context, job_id: str) -> str:
        """Where the job wrote its outcome: the folder of the try that submitted it, which its
        record's output path names (a retry may have reattached to, or adopted, an earlier try's job).

        A job whose output is in no try folder of this task run is refused. A task that sets its
        own output paths, or a job no record names an output of, is read in this try's folder.
        """
        own = self._result_folder(context)
        written = None if own_output_paths(self.job) else self._job_output_path(job_id)
        if written is None:
            return own
        ti = context["ti"]
        map_index = getattr(ti, "map_index", -1)
        folder = self.output_settings.try_folder_holding(written, ti.dag_id, ti.run_id, ti.task_id, map_index)
        if folder is None:
            expected = self.output_settings.task_run_folder(ti.dag_id, ti.run_id, ti.task_id, map_index)
            raise AirflowException(
                f"Slurm job {job_id}'s record names its output {written}, which is in no try folder of this "
                f"task run ({expected}/try-N/): its return value is not read from there"
            )
        return folder

    def _job_output_path(self, job_id: str) -> str | None:
        """The job's stdout as its record names it (accounting's, or the live queue's); None if none does."""
        source, records = self.hook.job_records(job_id)
        paths = [
            file.cluster_path
            for file in output_files(records, source=source)
            if file.job_id == job_id and file.stream is not Stream.STDERR
        ]
        return paths[0] if paths else None


def slurm_python_task(
    python_callable: Callable[..., Any] | None = None,
    *,
    python: str | None = None,
    max_result_bytes: int | None = None,
    multiple_outputs: bool | None = None,
    **kwargs: Any,
) -> TaskDecorator:
    """Run a Python function on the cluster as a Slurm job (``@task.slurm_python``).

    ``python`` is the interpreter on the nodes (default ``python3``); ``max_result_bytes`` the
    largest result object read (default 16 MiB). The other arguments are those of
    :func:`~airflow_provider_slurmapi.decorators.slurm.slurm_task`: every argument of
    :class:`~airflow_provider_slurmapi.operators.job.SlurmSubmitJobOperator` but ``script``
    (None: the operator's default). The function's return value is the task's XCom.
    """
    given = dict(python=python, max_result_bytes=max_result_bytes)
    return decorator_of(_SlurmPythonDecoratedOperator, python_callable, multiple_outputs, given, kwargs)
