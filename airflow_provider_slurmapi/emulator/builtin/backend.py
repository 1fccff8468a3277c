"""``BuiltinBackend``: a cluster of its own (scheduler, runner, settings) and the routing of each
Slurm REST call to the module that answers it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from airflow_provider_slurmapi.emulator import replies
from airflow_provider_slurmapi.emulator.backend_api import (
    CONTROL_ACTIONS,
    SLURM_PATH,
    ControlError,
    SlurmAnswer,
    SlurmBackend,
    SlurmRequest,
    is_slurm_route,
)
from airflow_provider_slurmapi.emulator.builtin.accounting import Accounting
from airflow_provider_slurmapi.emulator.builtin.answers import bad_method
from airflow_provider_slurmapi.emulator.builtin.cancel import delete_job
from airflow_provider_slurmapi.emulator.builtin.job_table import JobTable, parse_job_ref
from airflow_provider_slurmapi.emulator.builtin.live_queue import get_job, jobs_state, list_jobs
from airflow_provider_slurmapi.emulator.builtin.submit import submit
from airflow_provider_slurmapi.emulator.cluster_replies import NO_SLURMDBD, ClusterView
from airflow_provider_slurmapi.emulator.job_model import Job, epoch_seconds
from airflow_provider_slurmapi.emulator.runner import ProcessRunner
from airflow_provider_slurmapi.emulator.scheduler import (
    KILL_WAIT,
    MIN_JOB_AGE,
    REQUEUE_DELAY,
    SECONDS_PER_MINUTE,
    Scheduler,
)
from airflow_provider_slurmapi.emulator.slurm_conf import SlurmConf


class BuiltinBackend(SlurmBackend):
    """A Slurm stand-in with a node per partition (``slurm_conf``): jobs run as local processes,
    one process group each."""

    def __init__(
        self,
        cluster: str,
        state_dir: Path,
        *,
        min_job_age: float = MIN_JOB_AGE,
        seconds_per_minute: float = SECONDS_PER_MINUTE,
        kill_wait: float = KILL_WAIT,
        sched_delay: float = 0.0,
        virtual_jobs: bool = False,
        requeue_delay: float = REQUEUE_DELAY,
        job_comments: bool = True,
        slurm_conf: SlurmConf | None = None,
    ) -> None:
        self.cluster = cluster
        self.job_comments = job_comments
        self.slurm_conf = slurm_conf or SlurmConf()
        self.view = ClusterView(self.slurm_conf, cluster, epoch_seconds())
        self.scheduler = Scheduler(
            ProcessRunner(cluster, state_dir, virtual=virtual_jobs),
            min_job_age=min_job_age,
            seconds_per_minute=seconds_per_minute,
            kill_wait=kill_wait,
            sched_delay=sched_delay,
            requeue_delay=requeue_delay,
        )
        self.table = JobTable(cluster, self.scheduler, self.slurm_conf)
        self.accounting = Accounting(self.table, job_comments)

    @property
    def jobs(self) -> dict[int, Job]:
        """Every job record of the cluster, by job id."""
        return self.scheduler.jobs

    def is_known_path(self, path: str) -> bool:
        return is_slurm_route(path)

    def control(self, job_ref: str, action: str) -> dict[str, Any]:
        """Requeue, hold, release, preempt or fail (its node) the job or array task ``job_ref``.

        Acts on the one record named: ``12`` (a job, or an array's own record) or ``12_3`` (a task).
        Answers the record's job id, its state list and restart count.
        """
        if action not in CONTROL_ACTIONS:
            raise ControlError(400, f"unknown action {action!r}; allowed: {', '.join(CONTROL_ACTIONS)}")
        ref = parse_job_ref(job_ref)
        if ref is None:
            raise ControlError(400, f"{job_ref!r} is not a job id (123, or 123_4 for an array task)")
        job_id, task = ref
        job = self.jobs.get(job_id) if task is None else self.table.task_record(job_id, task)
        if job is None or not self.scheduler.in_queue(job):
            raise ControlError(404, f"job {job_ref} is not in the queue of cluster {self.cluster}")
        if task is not None and job.is_array_meta and job.pending_tasks != [task]:
            raise ControlError(
                409, f"cannot {action} job {job_ref}: the task has not started; name the array ({job_id}) instead"
            )
        self.scheduler.control(job, action, job_ref)
        return {
            "job_id": job.job_id,
            "action": action,
            "state": replies.state_list(job),
            "restart_cnt": job.restart_cnt,
        }

    async def start(self) -> None:
        await self.scheduler.start()

    async def close(self) -> None:
        await self.scheduler.close()

    async def handle(self, request: SlurmRequest) -> SlurmAnswer:
        match = SLURM_PATH.match(request.path)
        assert match, "server checks is_known_path first"
        service, version, route = match.groups()
        route = route.rstrip("/")
        if service == "slurmdb":
            if not self.slurm_conf.accounting:
                return NO_SLURMDBD
            return self._slurmdb_route(version, route, request)
        return self._slurm_route(version, route, request)

    def _slurm_route(self, version: str, route: str, request: SlurmRequest) -> SlurmAnswer:
        kind = "slurmctld"
        if route == "job/submit":
            if request.method != "POST":
                return bad_method(self.cluster, kind, version, "op_handler_job")
            return submit(self.table, version, request)
        if route.startswith("job/"):
            job_ref = route.removeprefix("job/")
            if request.method == "GET":
                return get_job(self.table, version, job_ref, request.principal)
            if request.method == "DELETE":
                return delete_job(self.table, version, job_ref, request)
            return bad_method(self.cluster, kind, version, "op_handler_job")
        if request.method != "GET":
            return bad_method(self.cluster, kind, version, "op_handler_" + route.split("/")[0])
        if route == "jobs":
            return list_jobs(self.table, version, request)
        if route == "jobs/state":
            return jobs_state(self.table, version, request)
        what, _, name = route.partition("/")
        if what in ("partitions", "partition"):
            return self.view.partitions(version, name or None)
        if what in ("nodes", "node"):
            return self.view.nodes(version, name or None, list(self.jobs.values()))
        return 200, replies.envelope(kind, version, self.cluster, {"pings": [replies.ping()]})

    def _slurmdb_route(self, version: str, route: str, request: SlurmRequest) -> SlurmAnswer:
        if request.method != "GET":
            source = "op_handler_job" if route != "jobs" else "op_handler_jobs"
            return bad_method(self.cluster, "slurmdbd", version, source)
        if route == "jobs":
            return self.accounting.jobs(version, request)
        if route == "tres":
            return self.view.tres(version)
        return self.accounting.job(version, route.removeprefix("job/"), request.principal)
