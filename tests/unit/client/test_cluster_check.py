"""Unit tests of the cluster check's reading of replies: a fake cluster behind the real operations."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from airflow_provider_slurmapi.client.api import SyncOperations
from airflow_provider_slurmapi.client.cluster_check import Status, check_cluster
from airflow_provider_slurmapi.client.envelope import SlurmReply
from airflow_provider_slurmapi.client.errors import PermissionDeniedError, SlurmJobApiError
from airflow_provider_slurmapi.client.paths import SlurmPaths
from airflow_provider_slurmapi.client.steps import ApiSettings, Operation, T
from tests.unit.scripted_operations import run_answered

V = "v0.0.42"
NOT_FOUND = SlurmReply(404, {"errors": [{"error_number": 9001, "description": "Unable to find requested URL"}]})


@dataclass
class FakeCluster(SyncOperations):
    """A cluster whose replies the test sets: GET paths (without query) to bodies, the probe job's life."""

    replies: dict[str, Any] = field(default_factory=dict)
    user: str = "alice"
    keeps_comments: bool = True
    probe_states: list[str] = field(default_factory=lambda: ["PENDING", "RUNNING", "COMPLETED"])
    submits: list[dict[str, Any]] = field(default_factory=list)
    cancels: list[str] = field(default_factory=list)
    settings: ApiSettings = field(default_factory=ApiSettings)

    def _answer(self, method: str, path: str, body: Any) -> SlurmReply | SlurmJobApiError:
        route = path.split("?")[0]
        if method == "POST":
            self.submits.append(body)
            return SlurmReply(200, {"job_id": 7})
        if method == "DELETE":
            self.cancels.append(route.rsplit("/", 1)[-1])
            return SlurmReply(200, {"status": []})
        if route == f"/slurm/{V}/job/7":
            state = self.probe_states.pop(0) if len(self.probe_states) > 1 else self.probe_states[0]
            job = {"job_id": 7, "job_state": [state], "user_name": self.user, "partition": "debug"}
            return SlurmReply(200, {"jobs": [{**job, "state_reason": "Priority" if state == "PENDING" else "None"}]})
        if route == f"/slurmdb/{V}/job/7":
            comment = self.submits[-1]["job"]["comment"] if self.keeps_comments else ""
            record = {"job_id": 7, "state": {"current": ["COMPLETED"]}, "user": self.user, "partition": "debug"}
            return SlurmReply(200, {"jobs": [{**record, "comment": {"job": comment}}]})
        answer = self.replies.get(route, NOT_FOUND)
        return answer if isinstance(answer, (SlurmJobApiError, SlurmReply)) else SlurmReply(200, answer)

    def _run(self, operation: Operation[T]) -> T:
        return run_answered(operation, lambda step: self._answer(step.method, step.path, step.body))


def gpu_cluster(**kwargs: Any) -> FakeCluster:
    replies = {
        f"/slurm/{V}/ping": {"pings": [{"pinged": "UP"}]},
        f"/slurm/{V}/partitions/": {
            "partitions": [
                {"name": "a3", "nodes": {"total": 2}, "partition": {"state": ["UP"]}},
                {"name": "debug", "nodes": {"total": 1}, "partition": {"state": ["UP", "DRAIN"]}},
            ]
        },
        f"/slurm/{V}/nodes/": {
            "nodes": [
                {"name": "a3-0", "gres": "gpu:h100:8(S:0-1)", "partitions": ["a3"]},
                {"name": "a3-1", "gres": "gpu:h100:8(S:0-1)", "partitions": ["a3"]},
                {"name": "cpu-0", "gres": "", "partitions": ["debug"]},
            ]
        },
        f"/slurmdb/{V}/jobs/": {"jobs": [{"job_id": 1, "user": "alice"}, {"job_id": 2, "user": "bob"}]},
        f"/slurmdb/{V}/tres/": {"TRES": [{"type": "cpu", "id": 1}, {"type": "gres", "name": "gpu", "id": 1001}]},
        f"/slurm/{V}/jobs/": {"jobs": [{"job_id": 3, "user_name": "carol"}]},
    }
    return FakeCluster(replies=replies, **kwargs)


def check(cluster: FakeCluster, **kwargs: Any) -> dict[str, Any]:
    clock = iter(range(0, 100_000, 1))
    report = check_cluster(
        cluster, "c1", SlurmPaths(V), sleep=lambda _: None, clock=lambda: float(next(clock)), **kwargs
    )
    return {finding.topic: finding for finding in report.findings} | {"ok": report.ok, "text": report.text()}


def test_a_gpu_cluster_with_everything_set_is_ok_and_described() -> None:
    cluster = gpu_cluster()
    found = check(cluster)
    assert found["ok"] and not cluster.cancels
    statuses = {topic: f.status for topic, f in found.items() if topic not in ("ok", "text")}
    assert set(statuses.values()) == {Status.OK}, found["text"]
    assert found["partitions"].found == "a3 (2 node(s); gpu:h100:8 per node), debug (1 node(s); DRAIN)"
    assert found["GPUs"].found.startswith("h100 in a3")
    assert found["jobs run as"].found == "alice (probe job 7); the default partition is debug"
    assert found["job comments"].found == "accounting keeps them (probe job 7)"
    assert found["other users' jobs"].found == "visible: jobs of 3 users in the queue and accounting"
    probe = cluster.submits[0]
    assert probe["job"]["name"] == "airflow-cluster-check" and "partition" not in probe["job"]


def test_the_probe_goes_to_the_partition_asked_for() -> None:
    cluster = gpu_cluster()
    check(cluster, partition="a3")
    assert cluster.submits[0]["job"]["partition"] == "a3"


def test_comments_not_kept_and_gpus_not_accounted_are_warnings_with_their_fix() -> None:
    cluster = gpu_cluster(keeps_comments=False)
    cluster.replies[f"/slurmdb/{V}/tres/"] = {"TRES": [{"type": "cpu", "id": 1}]}
    found = check(cluster)
    assert found["ok"]  # the provider works, with limits
    assert found["job comments"].status is Status.WARNING
    assert found["job comments"].fix == "AccountingStoreFlags=job_comment in slurm.conf"
    assert found["GPU accounting"].status is Status.WARNING
    assert "0 GPU-hours" in found["GPU accounting"].meaning
    assert found["GPU accounting"].fix == "AccountingStorageTRES=gres/gpu in slurm.conf"


def test_no_accounting_fails_and_skips_what_needs_it() -> None:
    cluster = gpu_cluster()
    for route in (f"/slurmdb/{V}/jobs/", f"/slurmdb/{V}/tres/"):
        del cluster.replies[route]
    found = check(cluster)
    assert not found["ok"] and found["accounting"].status is Status.FAILED
    assert "lost from sight" in found["accounting"].meaning
    assert "GPU accounting" not in found
    assert found["job comments"].status is Status.UNKNOWN
    assert found["jobs run as"].found.startswith("alice")  # read from the live record


def test_only_the_callers_own_jobs_visible_is_unknown_naming_private_data() -> None:
    cluster = gpu_cluster()
    cluster.replies[f"/slurmdb/{V}/jobs/"] = {"jobs": [{"job_id": 1, "user": "alice"}]}
    cluster.replies[f"/slurm/{V}/jobs/"] = {"jobs": [{"job_id": 7, "user_name": "alice"}]}
    finding = check(cluster)["other users' jobs"]
    assert finding.status is Status.UNKNOWN and finding.found == "only alice's jobs are visible"
    assert "PrivateData=jobs" in finding.meaning


def test_without_the_probe_job_nothing_is_submitted_and_its_findings_say_so() -> None:
    cluster = gpu_cluster()
    found = check(cluster, probe_job=False)
    assert not cluster.submits
    assert found["jobs run as"].status is Status.UNKNOWN and "probe job" in found["jobs run as"].found
    assert found["other users' jobs"].status is Status.OK  # alice, bob and carol


def test_a_probe_job_that_never_starts_is_cancelled() -> None:
    cluster = gpu_cluster(probe_states=["PENDING"])
    found = check(cluster, probe_timeout=30)
    assert cluster.cancels == ["7"]
    assert found["jobs run as"].status is Status.OK  # the live record named the user
    assert found["job comments"].found == "probe job 7 did not end within 30 s (reason Priority); cancelled"


def test_a_cluster_without_gpus_warns_that_gpu_jobs_are_refused() -> None:
    cluster = gpu_cluster()
    cluster.replies[f"/slurm/{V}/nodes/"] = {"nodes": [{"name": "n", "gres": "", "partitions": ["debug"]}]}
    cluster.replies[f"/slurmdb/{V}/tres/"] = {"TRES": [{"type": "cpu", "id": 1}]}
    found = check(cluster)
    assert found["GPUs"].status is Status.WARNING and "refused" in found["GPUs"].meaning
    assert found["GPU accounting"].status is Status.OK


@pytest.mark.parametrize(
    ("gres", "expected"),
    [("gpu:h100:8(S:0-1),gpu:a100:2", "a100 in a3, h100 in a3"), ("gpu:4", "(no type) in a3"), ("tmpdisk:1", "")],
)
def test_node_gres_strings_are_read_as_slurm_writes_them(gres: str, expected: str) -> None:
    cluster = gpu_cluster()
    cluster.replies[f"/slurm/{V}/nodes/"] = {"nodes": [{"name": "n", "gres": gres, "partitions": ["a3"]}]}
    found = check(cluster, probe_job=False)["GPUs"].found
    assert found.startswith(expected) if expected else found == "no node has gres/gpu"


def test_a_refused_permission_ends_the_check_with_the_fix() -> None:
    cluster = gpu_cluster()
    cluster.replies[f"/slurm/{V}/ping"] = PermissionDeniedError(403, "PERMISSION_DENIED", "no access to c1")
    found = check(cluster)
    assert not found["ok"] and list(found) == ["access", "ok", "text"]
    assert "modelDevelopmentClusters.run" in found["access"].fix and not cluster.submits
