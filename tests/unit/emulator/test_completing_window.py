"""What a cancelled running job shows while it is COMPLETING, moment by moment.

Real Slurm 24.11, polled every few milliseconds after a cancel: [CANCELLED, COMPLETING] with exit
SUCCESS/0 (``job_cancelled_immediately.json``) until the end of the script reaches slurmctld; then
SIGNALED/TERM, still COMPLETING for 10 to 50 ms while the node cleans up; then [CANCELLED],
SIGNALED/TERM (``job_cancelled.json``). The backend runs in process here, so each moment is caught.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from airflow_provider_slurmapi.emulator import BuiltinBackend, SlurmRequest
from airflow_provider_slurmapi.emulator.job_model import State

PRINCIPAL = "tester@example.com"


async def _call(backend: BuiltinBackend, method: str, path: str, body: Any = None) -> dict[str, Any]:
    status, reply = await backend.handle(SlurmRequest(method, path, body=body, principal=PRINCIPAL))
    assert status == 200 and isinstance(reply, dict), reply
    return reply


async def _until(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    """Yield to the event loop until ``condition`` holds: it is checked after every step of the loop."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0)


def _shown(reply: dict[str, Any]) -> tuple[list[str], list[str], str]:
    (job,) = reply["jobs"]
    return job["job_state"], job["exit_code"]["status"], job["exit_code"]["signal"]["name"]


async def test_a_cancelled_job_shows_the_signal_once_its_script_ended_while_still_completing(tmp_path: Path) -> None:
    backend = BuiltinBackend("test-cluster", tmp_path)
    await backend.start()
    try:
        desc = {"name": "t", "current_working_directory": str(tmp_path), "environment": ["PATH=/bin:/usr/bin"]}
        body = {"job": desc, "script": "#!/bin/bash\nsleep 30\n"}
        submitted = await _call(backend, "POST", "/slurm/v0.0.42/job/submit", body)
        job = backend.jobs[submitted["job_id"]]
        path = f"/slurm/v0.0.42/job/{job.job_id}"
        await _until(lambda: job.state is State.RUNNING)
        await _call(backend, "DELETE", path)
        assert _shown(await _call(backend, "GET", path)) == (["CANCELLED", "COMPLETING"], ["SUCCESS"], "")
        await _until(lambda: job.exit.signal is not None)  # the end of the script is recorded
        assert _shown(await _call(backend, "GET", path)) == (["CANCELLED", "COMPLETING"], ["SIGNALED"], "TERM")
        await _until(lambda: not job.completing)
        assert _shown(await _call(backend, "GET", path)) == (["CANCELLED"], ["SIGNALED"], "TERM")
    finally:
        await backend.close()
