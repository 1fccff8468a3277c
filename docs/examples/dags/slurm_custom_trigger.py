"""A deferrable operator of your own that waits for its Slurm job with SlurmJobTrigger."""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

from airflow.exceptions import AirflowException
from airflow.sdk import DAG, BaseOperator

from airflow_provider_slurmapi.client.jobs import JobStatus
from airflow_provider_slurmapi.client.submission import submission_key
from airflow_provider_slurmapi.hooks.slurm_job_api import SlurmJobApiHook
from airflow_provider_slurmapi.triggers.job import SlurmJobTrigger


class TrainAndRegisterOperator(BaseOperator):
    """Submits a training job, waits for it in the triggerer, then registers the model."""

    def __init__(self, *, model: str, slurm_conn_id: str = "slurm_job_api_default", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.model = model
        self.slurm_conn_id = slurm_conn_id

    def execute(self, context: Any) -> None:
        ti = context["ti"]
        hook = SlurmJobApiHook(self.slurm_conn_id)
        # The key (kept in the job's comment) lets a retry find this run's job instead of submitting another.
        key = submission_key(ti.dag_id, ti.task_id, ti.run_id, ti.map_index)
        submission = hook.submit_once(
            {"name": f"train-{self.model}", "time_limit": 60},
            "#!/bin/bash\nsrun sleep 2\n",
            key,
            earlier_tries=ti.try_number > 1,
        )
        self.defer(
            trigger=SlurmJobTrigger(
                submission.job_id,
                poll_interval=2,
                deadline=time.time() + 2 * 3600,  # epoch seconds: give up (and cancel) after 2 hours
                hook_kwargs={"slurm_conn_id": self.slurm_conn_id},
                cancel_on_kill=True,
            ),
            method_name="execute_complete",
        )

    def execute_complete(self, context: Any, event: dict[str, Any]) -> str:
        if event["status"] != "finished":  # "timeout" or "error"
            raise AirflowException(event["message"])
        status = JobStatus.from_dict(event["job"])
        if not status.is_success:
            raise AirflowException(status.describe())
        self.log.info("%s; registering %s", status.describe(), self.model)
        return status.job_id


with DAG(dag_id="slurm_custom_trigger", start_date=datetime(2026, 1, 1), schedule=None):
    TrainAndRegisterOperator(task_id="train_and_register", model="resnet50")
