"""A submit task run in a process of its own whose logging is set up as Airflow sets up a task's:
the secrets masker in the chain (Airflow 3: structlog's ``mask_logs``, as the supervisor writes the
task log). ``python -m tests.security.job_output_support``.

The job prints the password of the connection ``secret_conn`` and the value of the Variable
``api_key``, read the way a task reads them (which registers them with the masker), then fails.
"""

from __future__ import annotations


def configure_task_logging() -> None:
    from airflow.sdk.log import configure_logging

    configure_logging(colored_console_log=False)  # sending_to_supervisor=False: it masks, as the supervisor does


def main() -> None:
    configure_task_logging()
    from airflow.providers.common.compat.sdk import AirflowException, BaseHook

    try:
        from airflow.sdk import Variable
    except ImportError:  # Airflow 2.x
        from airflow.models import Variable

    from airflow_provider_slurmapi.operators.job import SlurmSubmitJobOperator
    from tests.integration.airflow_runtime import context
    from tests.jobs import JOB

    password = BaseHook.get_connection("secret_conn").password
    api_key = Variable.get("api_key")
    script = f"#!/bin/bash\necho 'password={password}'\necho 'api key {api_key} in stderr' >&2\nexit 1\n"
    operator = SlurmSubmitJobOperator(
        task_id="prints_secrets", job=JOB, script=script, poll_interval=0.3, deferrable=False, output_wait=5
    )
    try:
        operator.execute(context())
    except AirflowException as failure:
        operator.log.error("Task failed with exception: %s", failure)  # as the task runner logs it


if __name__ == "__main__":
    main()
