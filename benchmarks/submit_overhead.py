"""Submit overhead: our hook against Google's plain ``AuthorizedSession`` helper, same emulator.

The emulator runs in its own process, so this process's CPU time is the client's alone. Jobs
stay PENDING (a long scheduler delay), so no job processes compete for the CPU while we measure.
The cases run round-robin (each round starting one case later) so drift affects all alike.

    .venv/bin/python -m benchmarks.submit_overhead [--quick] [-n SUBMITS]
"""

from __future__ import annotations

import os
import secrets
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.common import (
    CLUSTER,
    PROJECT,
    REGION,
    EmulatorProcess,
    connection_json,
    emulator_process,
    machine_line,
    markdown_table,
    median,
    p95,
    parse_args,
    use_private_airflow_home,
)

JOB = {"name": "bench", "current_working_directory": "/tmp", "environment": ["PATH=/usr/bin:/bin"]}
SCRIPT = "#!/bin/bash\ntrue\n"
SCOPES = ["https://www.googleapis.com/auth/cloud-platform"]
SCHED_DELAY = 3600  # seconds: longer than any run, so jobs never start
WARMUP = 3  # untimed submits per case: token fetch, connection lookup, connection pool


@dataclass
class Case:
    name: str
    submit: Callable[[], Any]
    session: Any  # a requests.Session, to count HTTP calls
    http_calls: int = 0
    latency_s: list[float] = field(default_factory=list)
    cpu_s: list[float] = field(default_factory=list)


def baseline_case(emu: EmulatorProcess) -> Case:
    """The guide's helper: a service-account ``AuthorizedSession`` posting the envelope itself."""
    import google.auth.transport.requests
    from google.oauth2 import service_account

    credentials = service_account.Credentials.from_service_account_file(str(emu.key_file), scopes=SCOPES)
    session = google.auth.transport.requests.AuthorizedSession(credentials)
    url = f"{emu.url}/v1beta1/projects/{PROJECT}/locations/{REGION}/modelDevelopmentClusters/{CLUSTER}:callSlurmRestApi"

    def call_slurm(method: str, path: str, body: dict[str, Any] | None = None) -> tuple[Any, Any]:
        request: dict[str, Any] = {"method": method, "path": path}
        if body is not None:
            request["body"] = body
        response = session.post(url, json=request)
        response.raise_for_status()
        envelope = response.json()
        return envelope["status"], envelope.get("structuredBody", {})

    def submit() -> str:
        _, result = call_slurm("HTTP_METHOD_POST", "/slurm/v0.0.42/job/submit", {"job": JOB, "script": SCRIPT})
        return result["job_id"]

    return Case("(a) `AuthorizedSession` helper (baseline)", submit, session)


def new_key() -> str:
    return "airflow-key=" + secrets.token_hex(12)


def hook_cases() -> list[Case]:
    """Our hook, one instance reused by all three cases (steady state, like a long-lived worker)."""
    from airflow_provider_slurmapi.hooks.slurm_job_api import SlurmJobApiHook

    hook = SlurmJobApiHook()

    def submit_once() -> str:
        submission = hook.submit_once(JOB, SCRIPT, new_key())
        if submission.outcome != "submitted":
            raise RuntimeError(f"expected a new job, got {submission}")
        return submission.job_id

    session = hook.client.session
    return [
        Case("(b) `hook.submit_job(job, script)`", lambda: hook.submit_job(JOB, SCRIPT), session),
        Case("(c) `hook.submit_job(..., key=...)`", lambda: hook.submit_job(JOB, SCRIPT, key=new_key()), session),
        Case("(d) `hook.submit_once(job, script, key)`", submit_once, session),
    ]


def count_http_calls(case: Case) -> int:
    """HTTP calls of one submit, counted on the session (token fetches use their own session)."""
    calls = []
    counter = case.session.hooks["response"]
    counter.append(lambda response, *args, **kwargs: calls.append(response.url))
    try:
        case.submit()
    finally:
        counter.pop()
    return len(calls)


def run(cases: list[Case], submits: int) -> None:
    for case in cases:
        for _ in range(WARMUP):
            case.submit()
        case.http_calls = count_http_calls(case)
    for r in range(submits):
        shift = r % len(cases)
        for case in cases[shift:] + cases[:shift]:
            cpu0, t0 = time.process_time(), time.perf_counter()
            case.submit()
            t1, cpu1 = time.perf_counter(), time.process_time()
            case.latency_s.append(t1 - t0)
            case.cpu_s.append(cpu1 - cpu0)


def table(cases: list[Case]) -> str:
    base = cases[0]
    base_median, base_cpu = median(base.latency_s), sum(base.cpu_s) / len(base.cpu_s)
    rows = []
    for case in cases:
        latency, cpu = median(case.latency_s), sum(case.cpu_s) / len(case.cpu_s)
        rows.append(
            [
                case.name,
                case.http_calls,
                f"{latency * 1000:.2f}",
                f"{p95(case.latency_s) * 1000:.2f}",
                f"{cpu * 1000:.2f}",
                f"{latency / base_median:.2f}",
                f"{cpu / base_cpu:.2f}",
            ]
        )
    headers = [
        "Case",
        "HTTP calls",
        "Median (ms)",
        "p95 (ms)",
        "CPU/submit (ms)",
        "Median ÷ baseline",
        "CPU ÷ baseline",
    ]
    return markdown_table(headers, rows)


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], full=200, quick=20, what="timed submits per case")
    use_private_airflow_home()
    with (
        tempfile.TemporaryDirectory(prefix="bench-emulator-") as workdir,
        emulator_process(Path(workdir), f"--sched-delay={SCHED_DELAY}") as emu,
    ):
        os.environ["AIRFLOW_CONN_SLURM_JOB_API_DEFAULT"] = connection_json(emu)
        cases = [baseline_case(emu), *hook_cases()]
        run(cases, args.n)
    before = len(cases) * (WARMUP + 1)  # warm-up and counting submits
    mid, end = before + len(cases) * args.n // 2, before + len(cases) * args.n
    print(f"### Submit overhead: {args.n} timed submits per case against the emulator\n")
    print(table(cases))
    print()
    print(
        "Latency: wall time of one submit, from the call to the returned job ID, including the "
        "emulator's work. CPU/submit: this process's CPU time per submit (the emulator runs in its "
        "own process, so this is the client alone). HTTP calls: requests one submit makes, counted "
        f"once after {WARMUP} untimed warm-up submits per case (token fetches excluded). (d) is what "
        "a retry does (a first try submits like (c)): it lists the live queue to find an earlier "
        "try's job, then submits. Every submit adds a PENDING job, so the queue grows during the run, "
        f"from {before} to {end} jobs; (d)'s median is at about {mid}, and its cost grows with that size."
    )
    print()
    print(machine_line())


if __name__ == "__main__":
    main()
