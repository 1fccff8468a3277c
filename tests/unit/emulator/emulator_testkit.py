"""Helpers shared by the emulator tests (a module with a unique name, so it never clashes)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import requests

from airflow_provider_slurmapi.emulator import Emulator

PROJECT, REGION, CLUSTER = "test-project", "us-central1", "test-cluster"
FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "slurm-24.11.5"
TERMINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"}


def call_url(base: str, project: str = PROJECT, region: str = REGION, cluster: str = CLUSTER) -> str:
    return f"{base}/v1beta1/projects/{project}/locations/{region}/modelDevelopmentClusters/{cluster}:callSlurmRestApi"


def load_fixture(name: str) -> Any:
    return json.loads((FIXTURES / name).read_text())


class Api:
    """A tiny client: one callSlurmRestApi call per method, the envelope unwrapped."""

    def __init__(self, emu: Emulator, token: str | None = None) -> None:
        self.emu = emu
        self.url = call_url(emu.url)
        self.session = requests.Session()
        self.session.headers["Authorization"] = f"Bearer {token or emu.issue_token()}"

    def raw(self, method: str, path: str, body: Any = None) -> requests.Response:
        payload: dict[str, Any] = {"method": f"HTTP_METHOD_{method}", "path": path}
        if body is not None:
            payload["body"] = body
        return self.session.post(self.url, json=payload, timeout=10)

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, dict[str, Any]]:
        response = self.raw(method, path, body)
        assert response.status_code == 200, response.text
        envelope = response.json()
        reply = envelope["structuredBody"] if "structuredBody" in envelope else json.loads(envelope["body"])
        return envelope["status"], reply

    def submit(self, script: str, **job: Any) -> int:
        """Submit and return the job id; pass current_working_directory (a test's tmp dir)."""
        desc = {"name": "t", "environment": ["PATH=/bin:/usr/bin"]}
        desc.update(job)
        status, reply = self.call("POST", "/slurm/v0.0.42/job/submit", {"job": desc, "script": script})
        assert status == 200 and reply["errors"] == [], reply
        return int(reply["job_id"])

    def job(self, job_id: int | str) -> dict[str, Any]:
        status, reply = self.call("GET", f"/slurm/v0.0.42/job/{job_id}")
        assert status == 200, reply
        return reply["jobs"][0]

    def db_job(self, job_id: int | str) -> dict[str, Any]:
        status, reply = self.call("GET", f"/slurmdb/v0.0.42/job/{job_id}")
        assert status == 200 and reply["jobs"], reply
        return reply["jobs"][0]

    def wait(self, job_id: int, states: set[str] | None = None, timeout: float = 15.0) -> dict[str, Any]:
        """Poll /slurm until job_state[0] is in ``states`` (default: any terminal state, no COMPLETING)."""
        wanted = states or TERMINAL
        deadline = time.monotonic() + timeout
        while True:
            job = self.job(job_id)
            done = job["job_state"][0] in wanted
            if done and (states is not None or "COMPLETING" not in job["job_state"]):
                return job
            if time.monotonic() > deadline:
                raise AssertionError(f"job {job_id} still {job['job_state']} after {timeout}s")
            time.sleep(0.1)
