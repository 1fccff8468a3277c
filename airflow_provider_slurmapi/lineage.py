"""OpenLineage facets of the submit operator and the sensor: which Slurm job ran where, how it ended
and what it used.

Imported only inside the tasks' ``get_openlineage_facets_on_*`` methods, which Airflow calls only
when the OpenLineage provider is installed and enabled: nothing here is imported at DAG parse.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow.providers.openlineage.extractors import OperatorLineage
from attrs import define, field
from openlineage.client.facet_v2 import RunFacet

if TYPE_CHECKING:
    from airflow_provider_slurmapi.client.cluster import ClusterRef
    from airflow_provider_slurmapi.client.jobs import JobStatus
    from airflow_provider_slurmapi.client.usage import JobUsage
    from airflow_provider_slurmapi.operators.waiting import SlurmWaitingOperator

# The key of the facet under the event's ``run.facets``.
FACET_KEY = "slurmJob"


@define
class SlurmJobRunFacet(RunFacet):
    """The Slurm job a task ran or watched, on which cluster, how it ended and what it used.

    :param projectId: the cluster's Google Cloud project.
    :param region: the cluster's region.
    :param clusterId: the Vertex AI training cluster.
    :param jobId: the Slurm job ID (``123``, or ``123_4`` for an array task).
    :param state: the job's final state (``COMPLETED``, ``FAILED``, ``CANCELLED``, ``TIMEOUT``...).
    :param reason: Slurm's reason for the state, when it gives one.
    :param exitCode: the batch script's return code; absent when the job did not run to an exit.
    :param exitSignal: the signal that killed the job, if one did.
    :param exitStatus: Slurm's exit status (``SUCCESS``, ``ERROR``, ``SIGNALED``...).
    :param usage: what the job used, from accounting: ``elapsed_seconds``, ``nodes``, ``cpus``,
        ``memory_mb``, ``gpus``, ``gpu_hours`` and every allocated TRES under ``tres``.
    """

    projectId: str | None = field(default=None)
    region: str | None = field(default=None)
    clusterId: str | None = field(default=None)
    jobId: str | None = field(default=None)
    state: str | None = field(default=None)
    reason: str | None = field(default=None)
    exitCode: int | None = field(default=None)
    exitSignal: int | None = field(default=None)
    exitStatus: str | None = field(default=None)
    usage: dict[str, Any] | None = field(default=None)


def slurm_job_facet(
    cluster: dict[str, str | None] | None,
    job_id: str | None,
    status: JobStatus | None,
    usage: JobUsage | None,
) -> SlurmJobRunFacet | None:
    """The facet of what is known, or None when nothing is: no cluster, no job ID, no end."""
    job_id = status.job_id if status is not None else job_id
    cluster = cluster or {}
    if not job_id and not any(cluster.values()):
        return None
    exit_code = status.effective_exit_code if status is not None else None
    return SlurmJobRunFacet(
        projectId=cluster.get("project_id"),
        region=cluster.get("region"),
        clusterId=cluster.get("cluster_id"),
        jobId=job_id or None,
        state=status.state if status is not None else None,
        reason=status.reason if status is not None else None,
        exitCode=exit_code.return_code if exit_code else None,
        exitSignal=exit_code.signal if exit_code else None,
        exitStatus=exit_code.status if exit_code else None,
        usage=usage.to_dict() if usage is not None else None,
    )


def known_cluster(task: SlurmWaitingOperator, *, job_known: bool) -> dict[str, str | None] | None:
    """The cluster the task's hook reached; else, when a job is known, the task's cluster arguments.

    Only a cluster the hook already resolved is read from it: resolving it here could read the
    connection and credentials (for the project) while the task's end is being reported. A task
    that never reached a cluster and knows no job has no cluster to name.
    """
    hook = vars(task).get("hook")  # the task's cached_property, once built
    cluster: ClusterRef | None = vars(hook).get("cluster") if hook is not None else None
    if cluster is not None:
        return {"project_id": cluster.project_id, "region": cluster.region, "cluster_id": cluster.cluster_id}
    if not job_known:
        return None
    return {name: getattr(task, name, None) or None for name in ("project_id", "region", "cluster_id")}


def task_lineage(task: SlurmWaitingOperator, job_id: str | int | None) -> OperatorLineage:
    """The task's ``OperatorLineage``: a ``slurmJob`` run facet, or nothing when nothing is known.

    ``task`` is a submit operator or a sensor. After ``report_job_end`` its ``final_status`` and
    ``final_usage`` tell how the job ended; after a failure before that (a refused submit, a
    sensor's timeout) only the cluster and the ``job_id`` given, if any, are known.
    """
    status: JobStatus | None = task.final_status
    known_id = status.job_id if status is not None else (str(job_id) if job_id not in (None, "") else None)
    facet = slurm_job_facet(known_cluster(task, job_known=known_id is not None), known_id, status, task.final_usage)
    return OperatorLineage(run_facets={FACET_KEY: facet} if facet is not None else {})
