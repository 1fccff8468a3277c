"""What a training cluster gives the provider, asked of the live cluster before a first DAG runs.

Each finding says what was found, what follows for the provider and how to fix it. The quick part
reads only (the connection form's Test button); the probe job, a ``true`` of a few seconds, tells
what no read can: as whom jobs run, the default partition and whether accounting keeps comments.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from airflow_provider_slurmapi.client.api import SyncOperations
from airflow_provider_slurmapi.client.errors import (
    ClusterNotFoundError,
    InvalidArgumentError,
    PermissionDeniedError,
    SlurmJobApiError,
    UnauthenticatedError,
)
from airflow_provider_slurmapi.client.jobs import FINISHED_STATES
from airflow_provider_slurmapi.client.paths import SlurmPaths

PROBE_NAME = "airflow-cluster-check"
PROBE_SCRIPT = "#!/bin/sh\ntrue\n"
PROBE_TIMEOUT = 180.0  # seconds the probe job may take to start and end before it is cancelled
ACCOUNTING_LAG = 60.0  # seconds accounting may take to record the probe's end
RECENT = 86_400  # seconds of accounting read to see whose jobs are visible


class Status(StrEnum):
    OK = "ok"
    WARNING = "warning"  # works, with a limit the finding names
    FAILED = "failed"  # the provider cannot work until it is fixed
    UNKNOWN = "unknown"  # the cluster did not tell


@dataclass(frozen=True)
class Finding:
    topic: str
    status: Status
    found: str
    meaning: str = ""  # what follows for the provider
    fix: str = ""

    def text(self) -> str:
        lines = [f"[{self.status.value}] {self.topic}: {self.found}"]
        lines += [f"    {label}: {text}" for label, text in (("means", self.meaning), ("fix", self.fix)) if text]
        return "\n".join(lines)


@dataclass(frozen=True)
class ClusterReport:
    cluster: str
    findings: tuple[Finding, ...]

    @property
    def ok(self) -> bool:
        return all(finding.status is not Status.FAILED for finding in self.findings)

    def text(self) -> str:
        return "\n".join([f"Cluster {self.cluster}:", *(finding.text() for finding in self.findings)])

    def summary(self) -> str:
        """One line for the connection form: the findings that are not ok, else all of them."""
        shown = [f for f in self.findings if f.status is not Status.OK] or list(self.findings)
        return "; ".join(f"{f.topic} {f.status.value}: {f.found}" for f in shown)


def check_cluster(
    client: SyncOperations,
    cluster: str,
    paths: SlurmPaths,
    *,
    probe_job: bool = True,
    partition: str | None = None,
    probe_timeout: float = PROBE_TIMEOUT,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.time,
) -> ClusterReport:
    """Check the cluster ``client`` calls; with ``probe_job``, submit one tiny job (to ``partition``,
    else the default one) and read it back."""
    access = _access(client)
    if access.status is Status.FAILED:
        return ClusterReport(cluster, (access,))
    nodes = _read(client, paths.nodes(), "nodes")
    partitions = _read(client, paths.partitions(), "partitions")
    gpus = _gpu_types(nodes)
    findings = [access, _partitions(partitions, nodes), _gpus(gpus, nodes)]
    ended = _read(client, paths.accounting_jobs(start_time=int(clock()) - RECENT), "jobs")
    findings.append(_accounting(ended))
    if ended is not None:
        findings.append(_gpu_accounting(_read(client, paths.accounting_tres(), "TRES"), gpus))
    probe = (
        _probe(client, paths, partition, probe_timeout, sleep, clock, accounting=ended is not None)
        if probe_job
        else None
    )
    findings += _probe_findings(probe, accounting=ended is not None)
    queue = _read(client, paths.jobs(), "jobs")
    findings.append(_visibility(queue, ended, probe.get("user") if probe else None))
    return ClusterReport(cluster, tuple(findings))


def _access(client: SyncOperations) -> Finding:
    topic = "access"
    try:
        try:
            pings = client.ping().get("pings") or [{}]
            found = f"the API answers and forwards to slurmrestd (slurmctld {pings[0].get('pinged', 'answered')})"
        except InvalidArgumentError:  # the API may not forward /ping: a job list proves the same
            found = f"the API answers and forwards to slurmrestd ({len(client.list_jobs())} jobs in the queue)"
        return Finding(topic, Status.OK, found)
    except UnauthenticatedError as error:
        fix = "give the connection a key, a key path or workload identity that Google accepts (Connection page)"
        return Finding(topic, Status.FAILED, f"not authenticated: {error}", "nothing can be sent", fix)
    except PermissionDeniedError as error:
        fix = (
            "grant the connection's identity aiplatform.googleapis.com/modelDevelopmentClusters.run "
            "on the cluster's project (for example roles/aiplatform.user)"
        )
        return Finding(topic, Status.FAILED, f"permission denied: {error}", "nothing can be sent", fix)
    except ClusterNotFoundError as error:
        fix = "check the connection's project_id, region and cluster_id"
        return Finding(topic, Status.FAILED, f"no such cluster: {error}", "nothing can be sent", fix)
    except SlurmJobApiError as error:
        return Finding(topic, Status.FAILED, str(error), "nothing can be sent", "see the error above")


def _read(client: SyncOperations, path: str, key: str) -> list[dict[str, Any]] | None:
    """The records under ``key`` of a GET, or None when the cluster would not answer it."""
    try:
        records = client.call("GET", path).get(key)
    except SlurmJobApiError:
        return None
    return [r for r in records if isinstance(r, dict)] if isinstance(records, list) else None


def _node_gpus(node: dict[str, Any]) -> dict[str, int]:
    """``gres`` of a node (``gpu:h100:8(S:0-1),gpu:a100:2``) as ``{"h100": 8, "a100": 2}``."""
    gpus: dict[str, int] = {}
    for item in str(node.get("gres") or "").split(","):
        parts = item.split("(")[0].split(":")
        if parts[0] == "gpu" and len(parts) >= 2:
            kind, count = (parts[1], parts[2]) if len(parts) >= 3 else ("(no type)", parts[1])
            gpus[kind] = gpus.get(kind, 0) + (int(count) if count.isdigit() else 0)
    return gpus


def _gpu_types(nodes: list[dict[str, Any]] | None) -> dict[str, set[str]]:
    """GPU type -> the partitions whose nodes have it."""
    types: dict[str, set[str]] = {}
    for node in nodes or []:
        for kind in _node_gpus(node):
            types.setdefault(kind, set()).update(node.get("partitions") or [])
    return types


def _partitions(partitions: list[dict[str, Any]] | None, nodes: list[dict[str, Any]] | None) -> Finding:
    topic = "partitions"
    if partitions is None:
        return Finding(topic, Status.UNKNOWN, "the cluster did not list its partitions")
    if not partitions:
        return Finding(topic, Status.FAILED, "none", "no job can run", "the cluster needs a partition")
    described = []
    for partition in partitions:
        name = str(partition.get("name"))
        states = (partition.get("partition") or {}).get("state") or []
        count = (partition.get("nodes") or {}).get("total")
        gpus: dict[str, int] = {}  # the most of each type one node has: what tres_per_node may ask
        for node in nodes or []:
            if name in (node.get("partitions") or []):
                for kind, n in _node_gpus(node).items():
                    gpus[kind] = max(gpus.get(kind, 0), n)
        per_node = ", ".join(f"gpu:{kind}:{n}" for kind, n in gpus.items())
        extra = [f"{count} node(s)" if count is not None else "", f"{per_node} per node" if per_node else ""]
        extra += [state for state in states if state != "UP"]
        described.append(f"{name} ({'; '.join(e for e in extra if e)})")
    return Finding(topic, Status.OK, ", ".join(described))


def _gpus(types: dict[str, set[str]], nodes: list[dict[str, Any]] | None) -> Finding:
    topic = "GPUs"
    if nodes is None:
        return Finding(topic, Status.UNKNOWN, "the cluster did not list its nodes")
    if not types:
        meaning = "a job asking for GPUs (tres_per_node: gres/gpu:...) is refused by Slurm"
        return Finding(topic, Status.WARNING, "no node has gres/gpu", meaning, "ask for a GPU partition")
    found = ", ".join(
        f"{kind} in {', '.join(sorted(parts)) or 'no partition'}" for kind, parts in sorted(types.items())
    )
    return Finding(topic, Status.OK, found + ' (ask with "tres_per_node": "gres/gpu:TYPE:COUNT")')


def _accounting(ended: list[dict[str, Any]] | None) -> Finding:
    topic = "accounting"
    if ended is None:
        meaning = (
            "a job that leaves the live queue (MinJobAge, 300 s by default) is lost from sight: a wait that "
            "reads it later fails; no usage line (GPU-hours), no job events"
        )
        fix = "run slurmdbd (AccountingStorageType=accounting_storage/slurmdbd) and slurmrestd with its slurmdbd plugin"
        return Finding(topic, Status.FAILED, "/slurmdb does not answer", meaning, fix)
    return Finding(topic, Status.OK, f"answers ({len(ended)} job(s) visible in the last 24 hours)")


def _gpu_accounting(tres: list[dict[str, Any]] | None, gpus: dict[str, set[str]]) -> Finding:
    topic = "GPU accounting"
    if tres is None:
        return Finding(topic, Status.UNKNOWN, "accounting did not list its TRES")
    if any(t.get("type") == "gres" and t.get("name") == "gpu" for t in tres):
        return Finding(topic, Status.OK, "accounting tracks gres/gpu")
    if not gpus:
        return Finding(topic, Status.OK, "gres/gpu not tracked (the cluster has no GPUs)")
    meaning = "the task log's usage line says 0 GPUs and 0 GPU-hours; job events carry no GPU count"
    return Finding(
        topic, Status.WARNING, "gres/gpu is not tracked", meaning, "AccountingStorageTRES=gres/gpu in slurm.conf"
    )


def _probe(
    client: SyncOperations,
    paths: SlurmPaths,
    partition: str | None,
    timeout: float,
    sleep: Callable[[float], None],
    clock: Callable[[], float],
    *,
    accounting: bool,
) -> dict[str, Any]:
    """Submit the probe job, wait for its end, read it back: ``{"job_id", "user", "partition",
    "asked", "comment_kept", "error"}`` (what it could tell)."""
    comment = f"{PROBE_NAME} {uuid.uuid4().hex}"
    job: dict[str, Any] = {
        "name": PROBE_NAME,
        "comment": comment,
        "time_limit": 1,
        "current_working_directory": "/tmp",
        "standard_output": "/dev/null",
        "standard_error": "/dev/null",
        "environment": ["PATH=/usr/bin:/bin"],
    }
    if partition:
        job["partition"] = partition
    try:
        job_id = client.submit_job(job, PROBE_SCRIPT)
    except SlurmJobApiError as error:
        return {"error": f"the probe job was refused: {error}"}
    deadline = clock() + timeout
    probe: dict[str, Any] = {"job_id": job_id, "asked": bool(partition)}
    live: dict[str, Any] = {}
    while clock() < deadline:
        live = (_read(client, paths.job(job_id), "jobs") or [{}])[0] or live
        probe.update(user=live.get("user_name") or probe.get("user"), partition=live.get("partition"))
        status = client.find_job(job_id)
        if status is not None and status.is_finished:
            break
        sleep(2)
    else:
        client.cancel_job(job_id)
        reason = live.get("state_reason") or "unknown"
        return {**probe, "error": f"probe job {job_id} did not end within {timeout:g} s (reason {reason}); cancelled"}
    while accounting and clock() < deadline + ACCOUNTING_LAG:
        record = (_read(client, paths.accounting_job(job_id), "jobs") or [{}])[0]
        if set((record.get("state") or {}).get("current") or []) & FINISHED_STATES:
            probe.update(user=record.get("user") or probe.get("user"), partition=record.get("partition"))
            probe["comment_kept"] = (record.get("comment") or {}).get("job") == comment
            break
        sleep(2)
    return probe


def _probe_findings(probe: dict[str, Any] | None, *, accounting: bool) -> list[Finding]:
    if probe is None:
        skipped = "not checked without the probe job (slurm-job-api-check runs one)"
        return [Finding("jobs run as", Status.UNKNOWN, skipped), Finding("job comments", Status.UNKNOWN, skipped)]
    findings = []
    user, job = probe.get("user"), probe.get("job_id", "")
    if user:
        meaning = (
            f"jobs write their output as Unix user {user}: output_cluster_path must be writable by it, "
            "and job events filtered by user see jobs under that name"
        )
        where = probe.get("partition")
        partition = f"; the default partition is {where}" if where and not probe.get("asked") else ""
        findings.append(Finding("jobs run as", Status.OK, f"{user} (probe job {job}){partition}", meaning))
    else:
        findings.append(Finding("jobs run as", Status.UNKNOWN, probe.get("error") or "the probe job named no user"))
    findings.append(_comments(probe, accounting=accounting))
    return findings


def _comments(probe: dict[str, Any], *, accounting: bool) -> Finding:
    topic = "job comments"
    if not accounting:
        return Finding(topic, Status.UNKNOWN, "no accounting to keep them")
    if "comment_kept" not in probe:
        return Finding(topic, Status.UNKNOWN, probe.get("error") or "accounting did not record the probe job in time")
    if probe["comment_kept"]:
        return Finding(topic, Status.OK, f"accounting keeps them (probe job {probe['job_id']})")
    meaning = (
        "a job whose ID was never recorded (the worker died between the submit and the record) cannot be found "
        "by its key once it has left the live queue; job-event filters on comments match nothing"
    )
    fix = "AccountingStoreFlags=job_comment in slurm.conf"
    return Finding(topic, Status.WARNING, f"accounting keeps none (probe job {probe['job_id']})", meaning, fix)


def _visibility(queue: list[dict[str, Any]] | None, ended: list[dict[str, Any]] | None, user: str | None) -> Finding:
    topic = "other users' jobs"
    users = {str(j.get("user_name")) for j in queue or [] if j.get("user_name")}
    users |= {str(j.get("user")) for j in ended or [] if j.get("user")}
    others = sorted(users - {user} if user else users)
    if (user and others) or len(others) > 1:
        return Finding(topic, Status.OK, f"visible: jobs of {len(users)} users in the queue and accounting")
    whose = f"only {user}'s" if user else f"only {others[0]}'s" if others else "no"
    meaning = (
        "either no one else has run jobs lately, or Slurm hides them (PrivateData=jobs): job-event watchers "
        "then report only this user's jobs"
    )
    fix = "for watchers of other users' jobs: no jobs in PrivateData, or make the API's user a Slurm operator"
    return Finding(topic, Status.UNKNOWN, f"{whose} jobs are visible", meaning, fix)
