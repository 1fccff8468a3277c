"""``@task.slurm_python``: the decorated function, with its arguments, runs on the cluster as a
Slurm job under the given interpreter, and its return value comes back as the task's XCom.

The function's source and JSON arguments travel in the batch script (staged under the output
location when past the request limit); the job writes the return value, or the exception with
its traceback, next to its output in its try's folder, where the task reads it: the folder its
record's output path names, so that a retry that reattaches to, or adopts, an earlier try's job
reads what that job wrote. Importing this module stays cheap.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import TYPE_CHECKING, Any

from airflow.providers.common.compat.sdk import AirflowException

from airflow_provider_slurmapi.client.errors import InvalidRequestError
from airflow_provider_slurmapi.client.output import Stream, output_files
from airflow_provider_slurmapi.client.python_function import (
    RESULT_SUFFIX,
    FunctionOutcome,
    check_python,
    function_script,
)
from airflow_provider_slurmapi.decorators.slurm import SlurmDecoratedOperator, decorator_of
from airflow_provider_slurmapi.operators.job import own_output_paths

if TYPE_CHECKING:
    from airflow.providers.common.compat.sdk import Context, TaskDecorator

    from airflow_provider_slurmapi.client.jobs import JobStatus


class _SlurmPythonDecoratedOperator(SlurmDecoratedOperator):
    """The submit operator running the decorated function on the cluster.

    :param python: the interpreter on the cluster's nodes: an absolute path (a virtual
        environment's ``bin/python``) or a command name on the job's ``PATH``.
    """

    custom_operator_name: str = "@task.slurm_python"

    def __init__(
        self,
        *,
        python_callable: Callable[..., Any],
        op_args: Collection[Any] | None = None,
        op_kwargs: Mapping[str, Any] | None = None,
        python: str = "python3",
        **kwargs: Any,
    ) -> None:
        self.python = check_python(python)
        if isinstance(kwargs.get("job"), dict) and "array" in kwargs["job"]:
            raise InvalidRequestError(
                "job.array", "@task.slurm_python runs one call per job: map the task with .expand"
            )
        super().__init__(python_callable=python_callable, op_args=op_args, op_kwargs=op_kwargs, **kwargs)

    def execute(self, context: Context) -> Any:
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

    def _finish(self, context: Context, status: JobStatus) -> Any:
        """The function's return value; its exception, with the cluster-side traceback, if it raised."""
        name = self.python_callable.__name__
        outcome = self._read_outcome(context, status)
        try:  # a failure names the state and exit code, and ends with the traceback in the job's stderr
            super()._finish(context, status)
        except AirflowException as failure:
            if outcome is not None and outcome.error is not None:
                raise outcome.remote_error(name, status.job_id) from failure
            raise
        if outcome is None or outcome.error is not None:
            raise AirflowException(f"Slurm job {status.job_id} completed but {name}() left no return value")
        return outcome.value

    def _read_outcome(self, context: Context, status: JobStatus) -> FunctionOutcome | None:
        folder = self._job_result_folder(context, status.job_id)
        location = self.output_settings.location_of(f"{folder}/{status.job_id}{RESULT_SUFFIX}")
        assert location is not None  # the folder is under output_cluster_path
        try:
            data = self.hook.read_object(location, wait=self.output_settings.wait, within=self.output_settings.uri)
        except FileNotFoundError as error:
            self.log.warning("%s: the job ended without writing its outcome", error)
            return None
        return FunctionOutcome.parse(data, location)

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
    job: dict[str, Any] | None = None,
    python: str | None = None,
    deferrable: bool | None = None,
    poll_interval: float | None = None,
    timeout: float | None = None,
    output_uri: str | None = None,
    output_cluster_path: str | None = None,
    slurm_conn_id: str | None = None,
    multiple_outputs: bool | None = None,
    **kwargs: Any,
) -> TaskDecorator:
    """Run a Python function on the cluster as a Slurm job (``@task.slurm_python``).

    ``python`` is the interpreter on the nodes (default ``python3``); every argument of
    :class:`~airflow_provider_slurmapi.operators.job.SlurmSubmitJobOperator` but ``script`` is
    taken (None: the operator's default). The function's return value is the task's XCom.
    """
    given = dict(
        job=job,
        python=python,
        deferrable=deferrable,
        poll_interval=poll_interval,
        timeout=timeout,
        output_uri=output_uri,
        output_cluster_path=output_cluster_path,
        slurm_conn_id=slurm_conn_id,
    )
    return decorator_of(_SlurmPythonDecoratedOperator, python_callable, multiple_outputs, given, kwargs)
