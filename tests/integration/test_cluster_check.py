"""The cluster check end to end: ``slurm-job-api-check`` (the module, as its console script runs it)
against the emulator set up as each kind of cluster, and against a real Slurm 24.11."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from airflow_provider_slurmapi.emulator import Emulator, EmulatorConfig
from tests.conftest import CLUSTER, PROJECT, REGION, connection_json


def run_check(emulator: Emulator, tmp_path: Path, *args: str) -> tuple[int, str]:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW_CONN_")},
        "AIRFLOW_CONN_SLURM_JOB_API_DEFAULT": connection_json(emulator),
        "AIRFLOW_HOME": str(tmp_path / "airflow-home"),
    }
    command = [sys.executable, "-m", "airflow_provider_slurmapi.check", *args]
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode in (0, 1), result.stderr[-4000:]
    return result.returncode, result.stdout


def findings(output: str) -> dict[str, tuple[str, str]]:
    """topic -> (status, what was found), from the report's lines."""
    found = re.findall(r"^\[(\w+)\] ([^:]+): (.*)$", output, flags=re.MULTILINE)
    return {topic: (status, text) for status, topic, text in found}


def emulator_with(tmp_path_factory: pytest.TempPathFactory, **settings: Any) -> Iterator[Emulator]:
    work = tmp_path_factory.mktemp("cluster-check")
    config = EmulatorConfig(key_file=work / "key.json", state_dir=work / "jobs", **settings)
    with Emulator(config) as emu:
        yield emu


@pytest.fixture(scope="module")
def gpu_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Emulator]:
    """Everything the provider relies on, a GPU partition first (the default) and a CPU one."""
    yield from emulator_with(tmp_path_factory, partitions=("a3:gpu:h100:8", "debug"))


def call(emulator: Emulator, method: str, path: str, body: Any = None, user: str = "emulator") -> dict[str, Any]:
    """One Slurm call through the API as ``user``'s service account (another one: another Unix user)."""
    cluster = f"projects/{PROJECT}/locations/{REGION}/modelDevelopmentClusters/{CLUSTER}"
    token = emulator.issue_token(f"{user}@{PROJECT}.iam.gserviceaccount.com")
    payload = {"method": f"HTTP_METHOD_{method}", "path": path, **({"body": body} if body else {})}
    response = requests.post(
        f"{emulator.url}/v1beta1/{cluster}:callSlurmRestApi",
        json=payload,
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    )
    assert response.status_code == 200 and response.json()["status"] == 200, response.text
    return response.json()["structuredBody"]


def submit_as_another_user(emulator: Emulator, user: str) -> None:
    """A held job of ``user``, in the live queue."""
    job = {"name": "someone-elses", "hold": True, "current_working_directory": "/tmp", "environment": ["PATH=/bin"]}
    call(emulator, "POST", "/slurm/v0.0.42/job/submit", {"job": job, "script": "#!/bin/sh\ntrue\n"}, user=user)


def job_ids(emulator: Emulator) -> list[int]:
    """The IDs of the jobs in the live queue (their states move on as the earlier probe ends)."""
    return sorted(job["job_id"] for job in call(emulator, "GET", "/slurm/v0.0.42/jobs/")["jobs"])


def probe_job(emulator: Emulator, output: str) -> dict[str, Any]:
    """The live record of the probe job the report names."""
    job_id = re.search(r"probe job (\d+)", output)
    assert job_id, output
    return call(emulator, "GET", f"/slurm/v0.0.42/job/{job_id.group(1)}")["jobs"][0]


def test_a_cluster_with_everything_set(gpu_cluster: Emulator, tmp_path: Path) -> None:
    submit_as_another_user(gpu_cluster, "bob")
    code, output = run_check(gpu_cluster, tmp_path)
    found = findings(output)
    assert code == 0 and {status for status, _ in found.values()} == {"ok"}, output
    assert found["partitions"][1] == "a3 (1 node(s); gpu:h100:8 per node), debug (1 node(s))"
    assert found["GPUs"][1].startswith("h100 in a3")
    assert re.fullmatch(r"emulator \(probe job \d+\); the default partition is a3", found["jobs run as"][1])
    assert re.fullmatch(r"accounting keeps them \(probe job \d+\)", found["job comments"][1])
    assert found["other users' jobs"][1].startswith("visible: jobs of 2 users")
    # the probe ran and ended: nothing of it is left in the queue
    assert probe_job(gpu_cluster, output)["job_state"] == ["COMPLETED"], output


def test_the_probe_job_goes_where_it_is_told_and_read_only_submits_nothing(
    gpu_cluster: Emulator, tmp_path: Path
) -> None:
    code, output = run_check(gpu_cluster, tmp_path, "--partition", "debug")
    assert code == 0 and "the default partition is debug" not in output, output
    assert probe_job(gpu_cluster, output)["partition"] == "debug"
    before = job_ids(gpu_cluster)
    code, output = run_check(gpu_cluster, tmp_path, "--no-probe-job")
    assert code == 0 and job_ids(gpu_cluster) == before, output
    assert findings(output)["jobs run as"][0] == "unknown"


@pytest.mark.parametrize(
    ("settings", "expected", "code"),
    [
        pytest.param({"job_comments": False}, {"job comments": "warning"}, 0, id="no-job-comments"),
        pytest.param(
            {"partitions": ("a3:gpu:h100:8",), "gpu_accounting": False},
            {"GPU accounting": "warning"},
            0,
            id="no-gpu-accounting",
        ),
        pytest.param({"private_data": True}, {"other users' jobs": "unknown"}, 0, id="private-data"),
        pytest.param({"accounting": False}, {"accounting": "failed", "job comments": "unknown"}, 1, id="no-accounting"),
        pytest.param({"partitions": ("debug",)}, {"GPUs": "warning"}, 0, id="no-gpus"),
        pytest.param(
            {"denied_principals": (f"emulator@{PROJECT}.iam.gserviceaccount.com",)},
            {"access": "failed"},
            1,
            id="denied",
        ),
    ],
)
def test_each_missing_setting_is_named_with_its_fix(
    tmp_path_factory: pytest.TempPathFactory,
    tmp_path: Path,
    settings: dict[str, Any],
    expected: dict[str, str],
    code: int,
) -> None:
    # a GPU cluster with everything set, but for the one setting
    for emulator in emulator_with(tmp_path_factory, **{"partitions": ("a3:gpu:h100:8",), **settings}):
        if settings.get("private_data"):
            submit_as_another_user(emulator, "bob")  # there, but hidden
        returned, output = run_check(emulator, tmp_path)
        found = findings(output)
        assert returned == code, output
        assert {topic: found[topic][0] for topic in expected} == expected, output
        others = {
            status for topic, (status, _) in found.items() if topic not in expected and topic != "other users' jobs"
        }
        assert others <= {"ok"}, output  # nothing else is said to be wrong
        for topic in expected:  # each finding that is not ok says what to change
            block = output.split(f"] {topic}: ", 1)[1].split("\n[", 1)[0]
            assert "    fix: " in block or topic == "job comments" and settings.get("accounting") is False, output


@pytest.mark.real_slurm
def test_the_check_on_a_real_slurm(real_slurm: Any, tmp_path_factory: pytest.TempPathFactory, tmp_path: Path) -> None:
    """Slurm 24.11 as tests/real_slurm.py sets it up: one node, two partitions, no GPUs, accounting
    keeping comments; reached through the emulator's slurmrestd backend, as the API forwards."""
    work = tmp_path_factory.mktemp("cluster-check-real")
    config = real_slurm.emulator_config(key_file=work / "key.json", state_dir=work / "jobs")
    with Emulator(config) as emulator:
        code, output = run_check(emulator, tmp_path)
    print(output)
    found = findings(output)
    assert code == 0, output
    assert found["access"][0] == "ok" and found["accounting"][0] == "ok", output
    assert re.match(r"debug \(1 node\(s\)\), urgent \(1 node\(s\)\)", found["partitions"][1]), output
    assert found["GPUs"] == ("warning", "no node has gres/gpu"), output
    assert re.fullmatch(
        rf"{real_slurm.user} \(probe job \d+\); the default partition is debug", found["jobs run as"][1]
    )
    assert re.fullmatch(r"accounting keeps them \(probe job \d+\)", found["job comments"][1]), output
