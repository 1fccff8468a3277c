"""The ``slurmJob`` OpenLineage run facet of the submit operator and the sensor, built from what the
task knows when it ends; and the lineage code staying out of DAG parsing."""

from __future__ import annotations

import json
from typing import Any

import pytest

pytest.importorskip("airflow.providers.openlineage", reason="the OpenLineage provider is not installed")

from airflow.providers.openlineage.extractors import OperatorLineage  # noqa: E402
from airflow.providers.openlineage.extractors.base import DefaultExtractor  # noqa: E402
from airflow.providers.openlineage.extractors.manager import ExtractorManager  # noqa: E402
from openlineage.client.facet_v2 import RunFacet  # noqa: E402
from openlineage.client.serde import Serde  # noqa: E402

from airflow_provider_slurmapi.client.jobs import ExitCode, JobStatus  # noqa: E402
from airflow_provider_slurmapi.client.usage import JobUsage  # noqa: E402
from airflow_provider_slurmapi.lineage import SlurmJobRunFacet  # noqa: E402
from airflow_provider_slurmapi.operators.job import SlurmSubmitJobOperator  # noqa: E402
from airflow_provider_slurmapi.sensors.job import SlurmJobSensor  # noqa: E402

CONNECTION = {
    "conn_type": "slurm_job_api",
    "extra": {"project_id": "proj", "region": "europe-west4", "cluster_id": "train-a3"},
}
USAGE = JobUsage(
    job_id="42",
    elapsed_seconds=75,
    nodes=2,
    cpus=16,
    memory_mb=4096,
    gpus=4,
    gpu_hours=0.0833,
    tres={"cpu": 16, "mem": 4096, "node": 2, "gres/gpu": 4},
)


@pytest.fixture(autouse=True)
def connection(monkeypatch: pytest.MonkeyPatch) -> None:
    """A connection naming the cluster: the hook resolves it without any network call."""
    monkeypatch.setenv("AIRFLOW_CONN_SLURM_JOB_API_DEFAULT", json.dumps(CONNECTION))


def submit_op(**kwargs: Any) -> SlurmSubmitJobOperator:
    return SlurmSubmitJobOperator(task_id="train", job={"name": "train"}, script="#!/bin/bash\n", **kwargs)


def ended(op: Any, state: str, exit_code: ExitCode | None, usage: JobUsage | None = USAGE, **more: Any) -> Any:
    """The task as ``report_job_end`` leaves it, after the hook reached the cluster."""
    assert op.hook.cluster.cluster_id  # resolved, as every API call does
    op.final_status = JobStatus(job_id="42", state=state, exit_code=exit_code, **more)
    op.final_usage = usage
    return op


def facet_json(lineage: OperatorLineage) -> dict[str, Any]:
    """The facet as it goes into the event: serialised by OpenLineage's own Serde."""
    facet = lineage.run_facets["slurmJob"]
    assert isinstance(facet, RunFacet) and isinstance(facet, SlurmJobRunFacet)
    return json.loads(Serde.to_json(facet))


def test_completed_job_names_cluster_job_state_exit_code_and_usage() -> None:
    op = ended(submit_op(), "COMPLETED", ExitCode())
    op.job_id = "42"
    facet = facet_json(op.get_openlineage_facets_on_complete(None))
    assert facet.pop("_producer") and facet.pop("_schemaURL").startswith("https://")
    assert facet == {
        "projectId": "proj",
        "region": "europe-west4",
        "clusterId": "train-a3",
        "jobId": "42",
        "state": "COMPLETED",
        "exitCode": 0,
        "exitStatus": "SUCCESS",
        "usage": USAGE.to_dict(),
    }


def test_failed_job_names_its_exit_code_and_reason() -> None:
    op = ended(submit_op(), "FAILED", ExitCode(status="ERROR", return_code=3), reason="NonZeroExitCode")
    facet = facet_json(op.get_openlineage_facets_on_failure(None))
    assert (facet["jobId"], facet["state"], facet["exitCode"], facet["exitStatus"]) == ("42", "FAILED", 3, "ERROR")
    assert facet["reason"] == "NonZeroExitCode" and facet["usage"]["elapsed_seconds"] == 75


def test_signalled_job_names_the_signal() -> None:
    killed = ExitCode(status="SIGNALED", return_code=0, signal=9, signal_name="KILL")
    facet = facet_json(ended(submit_op(), "FAILED", killed).get_openlineage_facets_on_failure(None))
    assert (facet["exitSignal"], facet["exitStatus"]) == (9, "SIGNALED")


def test_cancelled_job_has_no_exit_code_and_missing_usage_is_left_out() -> None:
    """Slurm's placeholder SUCCESS/0 of a cancelled job is no exit code; usage unread is absent."""
    op = ended(submit_op(), "CANCELLED", ExitCode(), usage=None)
    facet = facet_json(op.get_openlineage_facets_on_failure(None))
    assert facet["state"] == "CANCELLED" and facet["jobId"] == "42"
    assert "exitCode" not in facet and "exitStatus" not in facet and "usage" not in facet


def test_sensor_names_the_job_it_watched() -> None:
    sensor = ended(SlurmJobSensor(task_id="watch", job_id=42), "COMPLETED", ExitCode())
    facet = facet_json(sensor.get_openlineage_facets_on_complete(None))
    assert (facet["clusterId"], facet["jobId"], facet["state"], facet["exitCode"]) == ("train-a3", "42", "COMPLETED", 0)


def test_sensor_failing_before_the_job_ended_names_the_job_and_its_cluster_arguments() -> None:
    """A deferred sensor's timeout: the job and the task's cluster arguments are known, no end."""
    sensor = SlurmJobSensor(task_id="watch", job_id="77", region="us-east5", cluster_id="other")
    facet = facet_json(sensor.get_openlineage_facets_on_failure(None))
    assert (facet["jobId"], facet["region"], facet["clusterId"]) == ("77", "us-east5", "other")
    assert "projectId" not in facet and "state" not in facet and "usage" not in facet
    assert "hook" not in vars(sensor)  # naming what is known did not build the hook


def test_refused_submit_names_the_cluster_but_no_job() -> None:
    op = submit_op(cluster_id="train-b")
    assert op.hook.cluster.cluster_id == "train-b"  # the submit reached the cluster, which refused it
    facet = facet_json(op.get_openlineage_facets_on_failure(None))
    assert (facet["projectId"], facet["region"], facet["clusterId"]) == ("proj", "europe-west4", "train-b")
    assert "jobId" not in facet and "state" not in facet


def test_submitted_job_that_did_not_end_names_the_job() -> None:
    """A wait that timed out: the job was submitted; its end is unknown."""
    op = submit_op()
    assert op.hook.cluster
    op.job_id = "9"
    facet = facet_json(op.get_openlineage_facets_on_failure(None))
    assert (facet["jobId"], facet["clusterId"]) == ("9", "train-a3") and "state" not in facet


@pytest.mark.parametrize("method", ["get_openlineage_facets_on_complete", "get_openlineage_facets_on_failure"])
def test_nothing_known_gives_an_empty_lineage(method: str) -> None:
    """Failed before reaching any cluster (say, a bad job description): no facet at all."""
    op = submit_op(cluster_id="train-a3")  # an argument alone is no cluster the task reached
    lineage = getattr(op, method)(None)
    assert isinstance(lineage, OperatorLineage) and lineage.run_facets == {} and lineage == OperatorLineage()
    assert "hook" not in vars(op)


def test_openlineage_provider_extracts_through_the_task_methods() -> None:
    """The provider's own extractor finds the methods; a failure goes through on_failure."""
    op = ended(submit_op(), "FAILED", ExitCode(status="ERROR", return_code=3))
    assert ExtractorManager().get_extractor_class(op) is DefaultExtractor
    extractor = DefaultExtractor(op)
    assert extractor.extract() == OperatorLineage()  # nothing at start
    failed = extractor.extract_on_failure(None)
    assert failed is not None and failed.run_facets["slurmJob"].exitCode == 3
    assert extractor.extract_on_complete(None) == failed
