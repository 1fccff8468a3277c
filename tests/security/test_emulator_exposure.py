"""Attacks on the emulator as a test tool shipped in the wheel: reached from another machine, its
unauthenticated job control and fault header; its key where others may read it."""

from __future__ import annotations

import json
import logging
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from airflow_provider_slurmapi.emulator import Emulator, EmulatorConfig
from airflow_provider_slurmapi.emulator.cli import config_from_args, describe
from airflow_provider_slurmapi.emulator.faults import FAULT_HEADER
from tests.conftest import CLUSTER, PROJECT, REGION
from tests.jobs import JOB

CALL = f"/v1beta1/projects/{PROJECT}/locations/{REGION}/modelDevelopmentClusters/{CLUSTER}:callSlurmRestApi"


def this_machines_network_address() -> str | None:
    """An address of this machine that is not loopback (the interface its outbound traffic would
    take; nothing is sent), or None without one."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # TEST-NET-1: a route, never a packet
        except OSError:
            return None
        address = str(probe.getsockname()[0])
    return None if address.startswith("127.") or address == "0.0.0.0" else address


NETWORK_ADDRESS = this_machines_network_address()
needs_a_network_address = pytest.mark.skipif(NETWORK_ADDRESS is None, reason="this machine has no non-loopback address")


@pytest.fixture(scope="module")
def exposed_emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Emulator]:
    """An emulator listening on this machine's network address: a caller there is not loopback."""
    assert NETWORK_ADDRESS is not None
    work = tmp_path_factory.mktemp("exposed")
    # jobs stay PENDING for the module's length: what the control did is visible, nothing races
    config = EmulatorConfig(host=NETWORK_ADDRESS, key_file=work / "key.json", state_dir=work / "jobs", sched_delay=600)
    with Emulator(config) as emu:
        yield emu


def slurm_call(emu: Emulator, method: str, path: str, body: dict | None = None, **headers: str) -> requests.Response:
    payload = {"method": f"HTTP_METHOD_{method}", "path": path, **({"body": body} if body else {})}
    return requests.post(
        emu.url + CALL,
        data=json.dumps(payload),
        headers={"Authorization": f"Bearer {emu.issue_token()}", "Content-Type": "application/json", **headers},
        timeout=30,
    )


def test_starting_the_emulator_on_every_interface_warns(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Someone starts the emulator with ``--host 0.0.0.0``: anyone on the network may then call it."""
    config = config_from_args(["--host", "0.0.0.0", "--port", "0", "--key-file", str(tmp_path / "key.json")])
    caplog.set_level(logging.WARNING)
    with Emulator(config) as emu:
        banner = describe(emu)
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and "0.0.0.0" in r.getMessage()]
    assert warnings and "other machines may call it" in warnings[0], caplog.text
    assert any(line.startswith("WARNING") and "0.0.0.0" in line for line in banner), banner


@needs_a_network_address
def test_a_caller_on_another_machine_cannot_hold_a_job_through_the_control_endpoint(
    exposed_emulator: Emulator,
) -> None:
    """The control endpoint takes no token: from the network, it would let anyone hold (or
    requeue, preempt, fail) any job of the cluster."""
    submitted = slurm_call(
        exposed_emulator,
        "POST",
        "/slurm/v0.0.42/job/submit",
        {"job": {**JOB, "name": "exposed"}, "script": "#!/bin/bash\nexit 0\n"},
    )
    job_id = submitted.json()["structuredBody"]["job_id"]
    url = f"{exposed_emulator.url}/emulator/v1/{PROJECT}/{REGION}/{CLUSTER}/jobs/{job_id}:hold"
    refused = requests.post(url, timeout=30)
    assert refused.status_code == 403, refused.text
    assert "loopback" in refused.json()["error"]["message"] and NETWORK_ADDRESS in refused.json()["error"]["message"]
    [job] = slurm_call(exposed_emulator, "GET", f"/slurm/v0.0.42/job/{job_id}").json()["structuredBody"]["jobs"]
    assert job["job_state"] == ["PENDING"] and "JobHeld" not in str(job.get("state_reason")), job  # not held
    slurm_call(exposed_emulator, "DELETE", f"/slurm/v0.0.42/job/{job_id}")


@needs_a_network_address
def test_a_caller_on_another_machine_cannot_inject_a_fault_with_the_header(exposed_emulator: Emulator) -> None:
    """``X-Emulator-Fault`` makes any call fail as asked (or, with ``late_landing``, take effect
    later): from the network, a way to make someone else's test see what is not there."""
    injected_before = dict(exposed_emulator.faults.injected)
    answer = slurm_call(exposed_emulator, "GET", "/slurm/v0.0.42/jobs", **{FAULT_HEADER: "internal"})
    assert answer.status_code == 403, answer.text
    assert FAULT_HEADER in answer.json()["error"]["message"]
    assert dict(exposed_emulator.faults.injected) == injected_before


def test_the_key_file_by_default_is_private_and_outside_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``slurm-job-api-emulator`` started without ``--key-file`` in a shared folder: the key of a
    service account its tokens are issued for must not land there for others to read."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SLURM_JOB_API_EMULATOR_KEY_FILE", raising=False)
    config = config_from_args(["--port", "0"])
    with Emulator(config) as emu:
        key = Path(str(emu.key_file))
        assert list(tmp_path.iterdir()) == [], list(tmp_path.iterdir())
        assert tmp_path not in key.parents
        assert key.stat().st_mode & 0o777 == 0o600
        assert key.parent.stat().st_mode & 0o077 == 0  # the folder, too, is the user's alone
        assert any(line == f"Key file: {key}" for line in describe(emu))
