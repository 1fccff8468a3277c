"""``@task.slurm``: the decorated function returns the batch script, which runs as the submit
operator's ``script`` (submitted once, cancelled on kill, output in the log). The returned script
is not a template: the function already has the context, and rendering its text would evaluate
Jinja that reaches it as data (a run's conf, an XCom, a job name from an event).

Importing this module stays cheap (it is imported at every DAG parse that uses the decorator).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from airflow.providers.common.compat.sdk import DecoratedOperator, context_merge, task_decorator_factory

from airflow_provider_slurmapi.client.errors import InvalidRequestError
from airflow_provider_slurmapi.operators.job import SlurmSubmitJobOperator
from airflow_provider_slurmapi.version_compat import determine_kwargs

if TYPE_CHECKING:
    from airflow.providers.common.compat.sdk import Context, TaskDecorator

# The script until the task runs and its function returns it (shown as such before that).
SCRIPT_WHEN_RUN = "#!/bin/bash\n# set when the task runs: the decorated function's return value\n"


class SlurmDecoratedOperator(DecoratedOperator, SlurmSubmitJobOperator):
    """The submit operator made by a decorator: its ``script`` is set when the task runs."""

    template_fields: Sequence[str] = (*DecoratedOperator.template_fields, *SlurmSubmitJobOperator.template_fields)
    template_fields_renderers: ClassVar[dict[str, str]] = {
        **DecoratedOperator.template_fields_renderers,
        **SlurmSubmitJobOperator.template_fields_renderers,
    }

    def __init__(
        self,
        *,
        python_callable: Callable[..., Any],
        op_args: Collection[Any] | None = None,
        op_kwargs: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            python_callable=python_callable, op_args=op_args, op_kwargs=op_kwargs, script=SCRIPT_WHEN_RUN, **kwargs
        )


class _SlurmDecoratedOperator(SlurmDecoratedOperator):
    """The submit operator whose ``script`` is what the decorated function returns."""

    custom_operator_name: str = "@task.slurm"

    def execute(self, context: Context) -> Any:
        context_merge(context, self.op_kwargs)
        script = self.python_callable(*self.op_args, **determine_kwargs(self.python_callable, self.op_args, context))
        if not isinstance(script, str) or not script.strip():
            raise InvalidRequestError(
                f"{self.python_callable.__name__}() return value",
                f"a @task.slurm function must return the batch script's text (a non-empty str), got {script!r:.80}",
            )
        # Not rendered (Airflow rendered the templated arguments once, before the function ran):
        # rendering now would evaluate Jinja inside the values the function embeds.
        self.script = script
        return super().execute(context)


def slurm_task(
    python_callable: Callable[..., str] | None = None,
    *,
    job: dict[str, Any] | None = None,
    deferrable: bool | None = None,
    poll_interval: float | None = None,
    timeout: float | None = None,
    output_uri: str | None = None,
    output_cluster_path: str | None = None,
    slurm_conn_id: str | None = None,
    multiple_outputs: bool | None = None,
    **kwargs: Any,
) -> TaskDecorator:
    """Make a function that returns a batch script a Slurm job task (``@task.slurm``).

    Every argument of :class:`~airflow_provider_slurmapi.operators.job.SlurmSubmitJobOperator`
    but ``script`` is taken; those named here are the common ones (None: the operator's default).
    The task's return value is the job ID, as the operator's.
    """
    given = dict(
        job=job,
        deferrable=deferrable,
        poll_interval=poll_interval,
        timeout=timeout,
        output_uri=output_uri,
        output_cluster_path=output_cluster_path,
        slurm_conn_id=slurm_conn_id,
    )
    return decorator_of(_SlurmDecoratedOperator, python_callable, multiple_outputs, given, kwargs)


# The arguments slurm_task names, read from its signature so that they are named once.
SLURM_TASK_ARGUMENTS = frozenset(
    name
    for name, parameter in inspect.signature(slurm_task).parameters.items()
    if parameter.kind is parameter.KEYWORD_ONLY and name != "multiple_outputs"
)


def decorator_of(
    operator_class: type[SlurmDecoratedOperator],
    python_callable: Callable[..., Any] | None,
    multiple_outputs: bool | None,
    named: dict[str, Any],
    kwargs: dict[str, Any],
) -> TaskDecorator:
    """The TaskFlow decorator of ``operator_class``: the arguments a decorator names (``named``,
    and those ``slurm_task`` names, which ``@task.slurm_python`` takes in ``kwargs``) left as None
    take the operator's defaults."""
    defaulted = {*named, *SLURM_TASK_ARGUMENTS}
    return task_decorator_factory(
        python_callable=python_callable,
        multiple_outputs=multiple_outputs,
        decorated_operator_class=operator_class,
        **{name: value for name, value in {**named, **kwargs}.items() if value is not None or name not in defaulted},
    )
