"""Triggerer at scale with pending, held and requeued jobs: what shared polling costs per interval
(calls, bytes, CPU) and how soon a trigger reports a hold, a release and a requeue.

Each phase runs in a fresh process against a fresh emulator process whose jobs run no processes
(``--virtual-jobs``); pending jobs wait for a ``begin_time`` an hour away, as jobs wait for GPUs.

- ``startup``: a triggerer starts with N pending jobs;
- ``holds``: N pending jobs, a tenth of them held, later released;
- ``requeue storm``: N running jobs, a fifth of them requeued at once;
- ``pending + running``: N pending and N running jobs;
- ``busy queue``: N pending jobs of ours in a queue of Q jobs, one more submitted every interval
  (so the queue changes every interval, as on a busy cluster).

    python -m benchmarks.triggerer_pending                  # N = 1000, Q = 5000, 5 s interval
    python -m benchmarks.triggerer_pending --quick          # N = 30, Q = 150, 1 s interval
    python -m benchmarks.triggerer_pending --phases holds --modes shared
    python -m benchmarks.triggerer_pending --modes shared baseline --baseline-ref 2114bb4

Modes: ``shared`` and ``per-job`` polling of this tree's provider; ``baseline``, shared polling of
the provider as committed at ``--baseline-ref``, measured in the same run. The longest stall is how
late a 10 ms timer in the triggers' event loop fired, over the measured intervals; "outside GC"
leaves out the time of the interpreter's garbage collection passes, which scan the whole process.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

from benchmarks.common import (
    CLUSTER,
    PROJECT,
    REGION,
    StallProbe,
    machine_line,
    markdown_table,
    provider_at,
    use_private_airflow_home,
)
from benchmarks.triggerer_scale import percentile, start_emulator

PHASES = ("startup", "holds", "requeue storm", "pending + running", "busy queue")
MEASURED_INTERVALS = 8  # per phase, after the triggers started
HOLDS_INTERVALS = 16  # the holds phase: long enough for a queue read every 6 intervals to see both
EVENT_AT = 3  # the interval at which holds or requeues are played
RELEASE_AT = 10  # the interval at which the held jobs are released


# --- one phase, in its own process ---------------------------------------------------------------


def submit(count: int, *, pending: bool, name: str = "bench") -> list[str]:
    from airflow_provider_slurmapi.hooks.slurm_job_api import SlurmJobApiHook

    hook = SlurmJobApiHook()
    job: dict[str, Any] = {"name": name, "current_working_directory": "/tmp", "environment": ["EMULATOR_RUNTIME=36000"]}
    if pending:
        job["begin_time"] = {"set": True, "number": int(time.time()) + 3600}
    return [hook.submit_job(job, "#!/bin/bash\ntrue\n") for _ in range(count)]


def control(emulator_url: str, job_ids: list[str], action: str) -> dict[str, float]:
    """Play ``action`` on each job; when each was played."""
    played = {}
    for job_id in job_ids:
        url = f"{emulator_url}/emulator/v1/{PROJECT}/{REGION}/{CLUSTER}/jobs/{job_id}:{action}"
        urllib.request.urlopen(urllib.request.Request(url, data=b"", method="POST"), timeout=30).read()
        played[job_id] = time.time()
    return played


class Meter:
    """Counts the API calls and reply bytes of the event loop's client, and when each job's
    trigger judged it held, released or requeued."""

    def __init__(self) -> None:
        from airflow_provider_slurmapi.client import aio, wait_policy

        self.calls: list[tuple[float, int, int | None]] = []  # (when, reply bytes, shared poller's tick)
        self.seen: dict[tuple[str, str], float] = {}  # (job, "held" / "released" / "requeued") -> when
        read_reply, judge = aio.read_reply, wait_policy.JobWaitPolicy.judge

        def counting_read_reply(request: Any, status: int, text: str) -> Any:
            self.calls.append((time.time(), len(text.encode()), None))
            return read_reply(request, status, text)

        def noting_judge(policy: Any, status: Any, now: float) -> Any:
            verdict = judge(policy, status, now)
            if status is not None:
                if verdict.report_held:
                    self.seen.setdefault((policy.job_id, "held"), time.time())
                elif (policy.job_id, "held") in self.seen and not status.held and status.source != "state":
                    self.seen.setdefault((policy.job_id, "released"), time.time())
                if verdict.requeued:
                    self.seen.setdefault((policy.job_id, "requeued"), time.time())
            return verdict

        aio.read_reply = counting_read_reply  # type: ignore[assignment]
        wait_policy.JobWaitPolicy.judge = noting_judge  # type: ignore[method-assign]

    def per_interval(self, start: float, end: float, interval: float) -> tuple[float, float, float, float]:
        """Mean calls and bytes per interval in [start, end), and the most calls and bytes in one
        interval (counted from ``start``)."""
        inside = [(t, b) for t, b, _ in self.calls if start <= t < end]
        intervals = max((end - start) / interval, 1e-9)
        calls: Counter[int] = Counter()
        size: Counter[int] = Counter()
        for t, b in inside:
            calls[int((t - start) // interval)] += 1
            size[int((t - start) // interval)] += b
        mean_bytes = sum(b for _, b in inside) / intervals
        return len(inside) / intervals, mean_bytes, max(calls.values(), default=0), max(size.values(), default=0)

    def delays(self, kind: str, played: dict[str, float]) -> list[float]:
        return [self.seen[(j, kind)] - at for j, at in played.items() if (j, kind) in self.seen]


async def watch_phase(phase: str, count: int, others: int, interval: float, shared: bool) -> dict[str, Any]:
    from airflow_provider_slurmapi.triggers.job import SlurmJobTrigger

    emulator_url = json.loads(os.environ["AIRFLOW_CONN_SLURM_JOB_API_DEFAULT"])["extra"]["endpoint"]
    loop = asyncio.get_running_loop()
    pending = await loop.run_in_executor(None, lambda: submit(count if phase != "requeue storm" else 0, pending=True))
    running = await loop.run_in_executor(
        None, lambda: submit(count if phase in ("requeue storm", "pending + running") else 0, pending=False)
    )
    if phase == "busy queue":  # a cluster's other jobs, half of them running
        await loop.run_in_executor(None, lambda: submit(others // 2, pending=True, name="other"))
        await loop.run_in_executor(None, lambda: submit(others - others // 2, pending=False, name="other"))
    watched = pending + running
    meter = Meter()
    probe = StallProbe()
    probe.start()
    triggers = [SlurmJobTrigger(j, poll_interval=interval, shared_polling=shared, lost_grace=600) for j in watched]
    runs = [t.run() for t in triggers]
    waits = [asyncio.ensure_future(r.__anext__()) for r in runs]
    start, cpu_start = time.time(), time.process_time()
    played: dict[str, dict[str, float]] = {}  # action -> job -> when
    targets = pending[::10] if phase == "holds" else running[::5] if phase == "requeue storm" else []
    intervals = HOLDS_INTERVALS if phase == "holds" else MEASURED_INTERVALS
    for n in range(intervals):
        await asyncio.sleep(max(0.0, start + (n + 1) * interval - time.time()))
        if phase == "busy queue":
            await loop.run_in_executor(None, lambda: submit(1, pending=True, name="other"))
        action = {("holds", EVENT_AT): "hold", ("holds", RELEASE_AT): "release"}.get((phase, n + 1))
        action = action or ("requeue" if (phase, n + 1) == ("requeue storm", EVENT_AT) else None)
        if action:
            played[action] = await loop.run_in_executor(None, control, emulator_url, targets, action)
    end, cpu_used = time.time(), time.process_time() - cpu_start
    window_start = loop.time() - (end - start) + interval
    stall = probe.longest(window_start)
    stall_without_gc, gc_pass = probe.longest(window_start, without_gc=True), probe.longest_gc_pass(window_start)
    await probe.stop()
    for wait in waits:
        wait.cancel()
    await asyncio.gather(*waits, return_exceptions=True)
    for run in runs:
        await run.aclose()
    calls, size, worst, most_bytes = meter.per_interval(start + interval, end, interval)  # the first: set-up
    figures: dict[str, Any] = {
        "calls": calls, "bytes": size, "worst": worst, "most_bytes": most_bytes, "stall": stall,
        "stall_without_gc": stall_without_gc, "gc_pass": gc_pass,
        "cpu": cpu_used / intervals, "delays": {},
    }  # fmt: skip
    for action, kind in (("hold", "held"), ("release", "released"), ("requeue", "requeued")):
        if action in played:
            delays = meter.delays(kind, played[action])
            figures["delays"][kind] = {
                "seen": len(delays), "of": len(targets),
                "p50": percentile(delays, 50), "max": max(delays, default=float("nan")),
            }  # fmt: skip
    return figures


# --- the driver ------------------------------------------------------------------------------------


def measure(phase: str, count: int, others: int, interval: float, mode: str, baseline_ref: str) -> dict[str, Any]:
    with (
        tempfile.TemporaryDirectory(prefix="bench-pending-") as work,
        provider_at(baseline_ref if mode == "baseline" else None) as provider,
    ):
        emulator, connection = start_emulator(Path(work))
        try:
            env = {**os.environ, "AIRFLOW_CONN_SLURM_JOB_API_DEFAULT": connection}
            args = ["--child", phase, str(count), str(others), str(interval), mode]
            result = subprocess.run(
                [sys.executable, "-m", "benchmarks.triggerer_pending", *args],
                env=env, cwd=provider, capture_output=True, text=True, check=False,
            )  # fmt: skip
            if result.returncode != 0:
                raise RuntimeError(f"measuring {phase} failed:\n{result.stderr[-3000:]}")
            return json.loads(result.stdout.strip().splitlines()[-1])
        finally:
            emulator.terminate()
            emulator.wait(30)


def delay_cell(figures: dict[str, Any], kind: str, interval: float) -> str:
    found = figures["delays"].get(kind)
    if not found:
        return "-"
    return f"{found['p50']:.1f} / {found['max']:.1f} s ({found['seen']}/{found['of']})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="N = 30, Q = 150 at a 1 s interval")
    parser.add_argument("-n", type=int, default=None, help="jobs of ours per phase (default 1000)")
    parser.add_argument("--queue", type=int, default=None, help="other jobs in the busy queue (default 5000)")
    parser.add_argument("--interval", type=float, default=None, help="poll interval, seconds (default 5)")
    parser.add_argument("--phases", nargs="+", choices=PHASES, default=PHASES)
    parser.add_argument("--modes", nargs="+", choices=("shared", "per-job", "baseline"), default=("shared", "per-job"))
    parser.add_argument("--baseline-ref", default="HEAD", help="the commit the baseline mode measures (default HEAD)")
    parser.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args()
    use_private_airflow_home()
    if args.child:
        phase, count, others, interval, mode = args.child
        figures = asyncio.run(watch_phase(phase, int(count), int(others), float(interval), mode != "per-job"))
        print(json.dumps(figures))
        return
    count = args.n or (30 if args.quick else 1000)
    others = args.queue or (150 if args.quick else 5000)
    interval = args.interval or (1.0 if args.quick else 5.0)
    rows, shared_worst, unseen = [], 0, 0
    for phase in args.phases:
        for mode in args.modes:
            figures = measure(phase, count, others, interval, mode, args.baseline_ref)
            if mode == "shared":
                shared_worst = max(shared_worst, int(figures["worst"]))
                unseen += sum(found["of"] - found["seen"] for found in figures["delays"].values())
            rows.append(
                [
                    phase,
                    mode if mode != "baseline" else f"shared, {args.baseline_ref}",
                    f"{figures['calls']:.1f}",
                    f"{figures['worst']:.0f}",
                    f"{figures['bytes'] / 1e6:.2f}",
                    f"{figures['most_bytes'] / 1e6:.2f}",
                    f"{figures['stall'] * 1000:.0f}",
                    f"{figures['stall_without_gc'] * 1000:.0f}",
                    f"{figures['gc_pass'] * 1000:.0f}",
                    f"{figures['cpu']:.3f}",
                    delay_cell(figures, "held", interval),
                    delay_cell(figures, "released", interval),
                    delay_cell(figures, "requeued", interval),
                ]
            )
            print(f"measured {phase} {mode}", file=sys.stderr, flush=True)
    headers = [
        "phase", "polling", "API calls / interval", "most calls in an interval", "MB / interval",
        "most MB in an interval", "longest stall (ms)", "longest stall outside GC (ms)",
        "longest GC pass (ms)", "CPU s / interval", "hold seen after (p50 / max)", "release seen after", "requeue seen after",
    ]  # fmt: skip
    print(
        f"Pending, held and requeued jobs: {count:,} jobs of ours per phase (busy queue: {others:,} others), "
        f"poll interval {interval:g} s, {MEASURED_INTERVALS} intervals each ({HOLDS_INTERVALS} for holds: "
        f"held at the {EVENT_AT}rd, released at the {RELEASE_AT}th)\n"
    )
    print(markdown_table(headers, rows))
    print()
    if "shared" in args.modes:
        verdict = "held" if shared_worst <= 2 else "NOT held"
        print(f"Limit: shared polling API calls per interval <= 2 in every phase: {verdict} (at most {shared_worst})")
        verdict = "held" if unseen == 0 else "NOT held"
        print(f"Limit: every hold, release and requeue reported by shared polling: {verdict} ({unseen} missed)")
    print(machine_line())


if __name__ == "__main__":
    main()
