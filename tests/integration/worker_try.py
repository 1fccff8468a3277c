"""One try of a ``SlurmSubmitJobOperator`` task in a process of its own, as a worker runs it, for
tests that kill it: ``python -m tests.integration.worker_try '<spec as JSON>'`` prints the outcome
as its last line, after ``OUTCOME``.

The try's Airflow Variables are real: on Airflow 2 they are rows of the metadata database, as a
2.11 worker writes them; on Airflow 3 they go through the Task SDK's supervisor comms to Airflow's
execution API (the in-process one that ``airflow dags test`` runs), into the same database. The
context has no task state store, as on Airflow 2.11, 3.1 and 3.2.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from typing import Any

from airflow_provider_slurmapi.version_compat import AIRFLOW_V_3_0_PLUS
from tests.integration.airflow_runtime import RecordingTaskInstance
from tests.jobs import JOB

OUTCOME = "OUTCOME"
RECORD_PREFIX = "slurm_job_id."  # the Variables the operator may keep a task run's job ID in


@contextlib.contextmanager
def task_runner_comms() -> Iterator[None]:
    """What the task runner has on Airflow 3: a supervisor to send Variable requests to."""
    if not AIRFLOW_V_3_0_PLUS:
        yield  # Airflow 2 workers reach the metadata database themselves
        return
    import os
    import uuid

    import psutil
    import structlog
    from airflow.sdk.execution_time.supervisor import (
        InProcessSupervisorComms,
        InProcessTestSupervisor,
        set_supervisor_comms,
    )

    supervisor = InProcessTestSupervisor(
        id=uuid.uuid4(),
        pid=os.getpid(),
        process=psutil.Process(),
        process_log=structlog.get_logger(),
        client=InProcessTestSupervisor._api_client(),
    )
    supervisor.comms = InProcessSupervisorComms(supervisor=supervisor)
    with set_supervisor_comms(supervisor.comms):
        yield


def recorded_job_ids() -> dict[str, str]:
    """Every Variable the operator may have left, read from the metadata database."""
    from airflow import settings
    from airflow.models import Variable

    session = settings.Session()
    try:
        rows = session.query(Variable).filter(Variable.key.startswith(RECORD_PREFIX)).all()
        return {row.key: row.val for row in rows}
    finally:
        session.close()


def run(spec: dict[str, Any]) -> dict[str, Any]:
    from airflow_provider_slurmapi.operators.job import SlurmSubmitJobOperator

    operator = SlurmSubmitJobOperator(
        task_id="t",
        job=JOB,
        script=spec["script"],
        poll_interval=spec["poll_interval"],
        deferrable=False,
        retries=spec["retries"],
    )
    ti = RecordingTaskInstance(try_number=spec["try_number"], retries=spec["retries"], run_id=spec["run_id"])
    with task_runner_comms():
        try:
            outcome: dict[str, Any] = {"job_id": operator.execute({"ti": ti})}
        except Exception as error:
            outcome = {"error": f"{type(error).__name__}: {error}"}
    return {**outcome, "xcom": ti.xcom, "recorded": recorded_job_ids()}


if __name__ == "__main__":
    print(OUTCOME, json.dumps(run(json.loads(sys.argv[1]))), flush=True)
