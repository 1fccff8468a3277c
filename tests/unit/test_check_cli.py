"""``slurm-job-api-check``'s arguments and exit status (the checks themselves: tests/unit/client/test_cluster_check.py)."""

from __future__ import annotations

import json

import pytest

from airflow_provider_slurmapi import check
from airflow_provider_slurmapi.client.cluster_check import ClusterReport, Finding, Status


@pytest.mark.parametrize("value", ["0", "-5", "3601", "soon"])
def test_a_probe_timeout_out_of_range_is_refused_naming_the_option(value: str, capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        check.main(["--probe-timeout", value])
    assert exit_.value.code == 2
    assert "--probe-timeout" in capsys.readouterr().err


def test_a_connection_that_cannot_be_used_exits_2_naming_the_field(monkeypatch, capsys) -> None:
    extra = {"project_id": "proj", "region": "us-central1"}  # no cluster_id
    monkeypatch.setenv("AIRFLOW_CONN_BROKEN", json.dumps({"conn_type": "slurm_job_api", "extra": extra}))
    assert check.main(["--conn-id", "broken", "--no-probe-job"]) == 2
    assert "cluster_id" in capsys.readouterr().err


@pytest.mark.parametrize(("status", "code"), [(Status.WARNING, 0), (Status.UNKNOWN, 0), (Status.FAILED, 1)])
def test_the_exit_status_is_1_only_when_a_finding_failed(status: Status, code: int, monkeypatch, capsys) -> None:
    asked: dict[str, object] = {}

    def check_cluster(self, **kwargs: object) -> ClusterReport:
        asked.update(kwargs)
        return ClusterReport("c1 (us-central1)", (Finding("access", Status.OK, "yes"), Finding("x", status, "y")))

    monkeypatch.setattr("airflow_provider_slurmapi.hooks.slurm_job_api.SlurmJobApiHook.check_cluster", check_cluster)
    monkeypatch.setenv("AIRFLOW_CONN_C1", json.dumps({"conn_type": "slurm_job_api", "extra": {"cluster_id": "c1"}}))
    assert check.main(["--conn-id", "c1", "--partition", "a3", "--probe-timeout", "30"]) == code
    assert asked == {"probe_job": True, "partition": "a3", "probe_timeout": 30.0}
    printed = capsys.readouterr().out.splitlines()  # Airflow 2 logs to stdout too: the report is at the end
    assert printed[-3:] == ["Cluster c1 (us-central1):", "[ok] access: yes", f"[{status}] x: y"]
