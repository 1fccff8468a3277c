"""A sensor that waits for a Slurm job to finish, poking from a worker or deferred to the triggerer."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow.providers.common.compat.sdk import AirflowException, AirflowSensorTimeout, BaseSensorOperator, conf

from airflow_provider_slurmapi.client.errors import JobNotFoundError
from airflow_provider_slurmapi.client.jobs import MissingJobWatch
from airflow_provider_slurmapi.operators.job import (
    CONNECTION_TEMPLATE_FIELDS,
    DEFAULT_CONN_ID,
    SlurmJobApiMixin,
    status_from_event,
)

if TYPE_CHECKING:
    from airflow.providers.common.compat.sdk import Context


class SlurmJobSensor(SlurmJobApiMixin, BaseSensorOperator):
    """Succeeds when the Slurm job ends COMPLETED with exit code 0; fails with the reason otherwise.

    :param job_id: the job to watch. Templated.
    :param slurm_conn_id: connection of type ``slurm_job_api``.
    :param deferrable: wait in the triggerer; default from ``[operators] default_deferrable``.
    :param shared_polling: while deferred, read the job's state through the poller the triggerer
        shares among all jobs of the cluster (default); False polls this job by itself.
    """

    template_fields: Sequence[str] = ("job_id", *CONNECTION_TEMPLATE_FIELDS)
    ui_color = "#c7f4d6"

    def __init__(
        self,
        *,
        job_id: str | int,
        slurm_conn_id: str = DEFAULT_CONN_ID,
        project_id: str | None = None,
        region: str | None = None,
        cluster_id: str | None = None,
        api_version: str | None = None,
        impersonation_chain: str | Sequence[str] | None = None,
        retry_attempts: int | None = None,
        retry_max_seconds: float | None = None,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        shared_polling: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.job_id = job_id
        self.set_connection_arguments(slurm_conn_id, project_id, region, cluster_id, api_version, impersonation_chain)
        self.retry_attempts, self.retry_max_seconds = retry_attempts, retry_max_seconds
        self.deferrable = deferrable
        self.shared_polling = shared_polling
        self._missing = MissingJobWatch()

    def execute(self, context: Context) -> Any:
        if not self.deferrable:
            return super().execute(context)
        if not self.poke(context):
            self.defer_until_finished(context, str(self.job_id), poll_interval=self.poke_interval, timeout=self.timeout)
        return None

    def poke(self, context: Context) -> bool:
        try:
            status = self.hook.get_job(str(self.job_id))
        except JobNotFoundError:
            # accounting can lag behind the live queue: fail only once the grace window is over
            self._missing.missing(str(self.job_id), time.monotonic())
            self.log.warning("Slurm job %s is in neither queue nor accounting yet; still looking", self.job_id)
            return False
        self._missing.seen(status, time.monotonic())
        if not status.is_finished:
            self.log.info("%s", status.describe())
            return False
        if not status.is_success:
            raise AirflowException(status.describe())
        self.log.info("%s", status.describe())
        return True

    def execute_complete(self, context: Context, event: dict[str, Any] | None = None) -> None:
        if event and event.get("status") == "timeout":
            raise AirflowSensorTimeout(f"{event.get('message')} (sensor timeout {self.timeout} s)")
        status = status_from_event(event)
        if not status.is_success:
            raise AirflowException(status.describe())
        self.log.info("%s", status.describe())
