"""Triggerer at scale: N SlurmJobTriggers waiting at once in one event loop, as a triggerer runs them.

Shared polling (one bulk state call per interval for all jobs) against per-job polling, side by
side. Each configuration runs in a fresh process against a fresh emulator process whose jobs
run no processes (``--virtual-jobs``) and end at spread, known times.

    python -m benchmarks.triggerer_scale                  # N = 100, 1000, 5000 at a 10 s interval
    python -m benchmarks.triggerer_scale --quick          # N = 50 at a 1 s interval (CI smoke run)
    python -m benchmarks.triggerer_scale --sizes 1000 --interval 10 --modes shared
    python -m benchmarks.triggerer_scale --sizes 1000 --modes shared baseline --baseline-ref 2114bb4

Mode ``baseline`` is shared polling with the provider as committed at ``--baseline-ref``,
measured in the same run. The longest stall is how late the 50 ms probe timer woke, at worst.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import machine_line, markdown_table, provider_at, use_private_airflow_home

SPREAD_INTERVALS = 2.0  # jobs end spread over this many intervals
WAIT_INTERVALS = 3.0  # after every trigger started, this many intervals pass before the first job ends
LAG_PROBE_SECONDS = 0.05


def rss_kib(field: str) -> int:
    """VmRSS (now) or VmHWM (peak) of this process, in KiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def percentile(values: list[float], q: int) -> float:
    if len(values) < 2:
        return values[0] if values else float("nan")
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


# --- one configuration, in its own process ------------------------------------------------------


def submit_jobs(count: int, interval: float) -> tuple[list[str], list[float], float]:
    """Submit ``count`` virtual jobs that end at spread times after the watch starts."""
    from airflow_provider_slurmapi.hooks.slurm_job_api import SlurmJobApiHook

    hook = SlurmJobApiHook()
    job = {"name": "bench", "current_working_directory": "/tmp"}
    started = time.time()
    hook.submit_job({**job, "environment": ["EMULATOR_RUNTIME=3600"]}, "#!/bin/bash\ntrue\n")  # warm up
    per_submit = time.time() - started
    watch_start = time.time() + count * per_submit * 2 + 3  # all submitted (and triggers built) by then
    job_ids, ends = [], []
    for n in range(count):
        end = watch_start + (WAIT_INTERVALS + SPREAD_INTERVALS * n / count) * interval
        runtime = max(0.0, end - time.time())
        environment = [f"EMULATOR_RUNTIME={runtime:.3f}", "PATH=/usr/bin:/bin"]
        job_ids.append(hook.submit_job({**job, "environment": environment}, "#!/bin/bash\ntrue\n"))
        ends.append(end)
    return job_ids, ends, watch_start


async def watch(job_ids: list[str], ends: list[float], interval: float, shared: bool) -> dict[str, Any]:
    from airflow_provider_slurmapi.client.aio import AsyncSlurmJobApiClient
    from airflow_provider_slurmapi.triggers.job import SlurmJobTrigger

    calls: list[float] = []  # when each API request was sent
    send = AsyncSlurmJobApiClient._post

    async def counting_post(self: Any, request: Any, data: bytes, *, force_token: bool) -> Any:
        calls.append(time.time())
        return await send(self, request, data, force_token=force_token)

    AsyncSlurmJobApiClient._post = counting_post  # type: ignore[method-assign]
    loop = asyncio.get_running_loop()
    lags: list[float] = []
    cpu_samples: list[tuple[float, float]] = []  # (wall time, CPU time) every probe
    detected: dict[int, float] = {}
    done = asyncio.Event()

    async def probe_lag() -> None:
        while not done.is_set():
            before = loop.time()
            await asyncio.sleep(LAG_PROBE_SECONDS)
            lags.append(loop.time() - before - LAG_PROBE_SECONDS)
            cpu_samples.append((time.time(), time.process_time()))

    async def run_trigger(n: int, trigger: SlurmJobTrigger) -> None:
        events = trigger.run()
        try:
            event = await events.__anext__()
        finally:
            await events.aclose()  # what the triggerer does after the first event
        assert event.payload["status"] == "finished", event.payload
        detected[n] = time.time()

    idle_rss = rss_kib("VmRSS")
    triggers = [
        SlurmJobTrigger(job_id, poll_interval=interval, shared_polling=shared, lost_grace=600) for job_id in job_ids
    ]
    lag_task = asyncio.ensure_future(probe_lag())
    started, cpu_started = time.time(), time.process_time()
    await asyncio.gather(*(run_trigger(n, t) for n, t in enumerate(triggers)))
    finished, cpu_used = time.time(), time.process_time() - cpu_started
    done.set()
    await lag_task
    # the steady state: from one interval after the start until the first job ends
    window = (started + interval, min(ends))
    steady_intervals = max((window[1] - window[0]) / interval, 1e-9)
    steady_calls = [c for c in calls if window[0] <= c < window[1]]
    delays = [detected[n] - ends[n] for n in range(len(job_ids))]
    intervals = (finished - started) / interval
    return {
        "calls_per_interval_waiting": len(steady_calls) / steady_intervals,
        "calls_per_interval_overall": len(calls) / intervals,
        "cpu_per_interval_waiting": (cpu_at(cpu_samples, window[1]) - cpu_at(cpu_samples, window[0]))
        / steady_intervals,
        "cpu_per_interval_overall": cpu_used / intervals,
        "rss_above_idle_mb": (rss_kib("VmHWM") - idle_rss) / 1024,
        "lag_p99_ms": percentile(lags, 99) * 1000,
        "stall_ms": max(lags, default=0.0) * 1000,
        "delay_p50": percentile(delays, 50),
        "delay_p99": percentile(delays, 99),
    }


def cpu_at(samples: list[tuple[float, float]], moment: float) -> float:
    """The process's CPU time at ``moment``, from the probe's sample nearest to it."""
    return min(samples, key=lambda sample: abs(sample[0] - moment))[1]


def run_configuration(count: int, interval: float, shared: bool) -> dict[str, Any]:
    job_ids, ends, watch_start = submit_jobs(count, interval)
    time.sleep(max(0.0, watch_start - time.time()))
    return asyncio.run(watch(job_ids, ends, interval, shared))


# --- the driver: one emulator and one measuring process per configuration ----------------------


def start_emulator(work: Path) -> tuple[subprocess.Popen[str], str]:
    command = [
        sys.executable, "-m", "airflow_provider_slurmapi.emulator.cli", "--port", "0", "--virtual-jobs",
        "--sched-delay", "0", "--min-job-age", "3600", "--key-file", str(work / "key.json"),
        "--state-dir", str(work / "state"),
    ]  # fmt: skip
    emulator = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert emulator.stdout is not None
    for line in emulator.stdout:
        match = re.match(r"AIRFLOW_CONN_SLURM_JOB_API_DEFAULT='(.*)'$", line.strip())
        if match:
            return emulator, match.group(1)
    raise RuntimeError("the emulator did not start")


def measure(count: int, interval: float, mode: str, baseline_ref: str) -> dict[str, Any]:
    with (
        tempfile.TemporaryDirectory(prefix="bench-triggerer-") as work,
        provider_at(baseline_ref if mode == "baseline" else None) as provider,
    ):
        emulator, connection = start_emulator(Path(work))
        try:
            env = {**os.environ, "AIRFLOW_CONN_SLURM_JOB_API_DEFAULT": connection}
            args = ["--child", str(count), str(interval), mode]
            result = subprocess.run(
                [sys.executable, "-m", "benchmarks.triggerer_scale", *args],
                env=env, cwd=provider, capture_output=True, text=True, check=False,
            )  # fmt: skip
            if result.returncode != 0:
                raise RuntimeError(f"measuring N={count} failed:\n{result.stderr[-3000:]}")
            return json.loads(result.stdout.strip().splitlines()[-1])
        finally:
            emulator.terminate()
            emulator.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="N = 50 at a 1 s interval, for CI")
    parser.add_argument("--sizes", type=int, nargs="+", default=None, help="numbers of triggers")
    parser.add_argument("--interval", type=float, default=None, help="poll interval, seconds (default 10)")
    parser.add_argument("--modes", nargs="+", choices=("shared", "per-job", "baseline"), default=("shared", "per-job"))
    parser.add_argument("--baseline-ref", default="HEAD", help="the commit the baseline mode measures (default HEAD)")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    use_private_airflow_home()
    if args.child:
        count, interval, mode = int(args.child[0]), float(args.child[1]), args.child[2]
        print(json.dumps(run_configuration(count, interval, mode != "per-job")))
        return
    sizes = args.sizes or ([50] if args.quick else [100, 1000, 5000])
    interval = args.interval or (1.0 if args.quick else 10.0)
    rows = []
    for count in sizes:
        for mode in args.modes:
            figures = measure(count, interval, mode, args.baseline_ref)
            rows.append(
                [
                    f"{count:,}",
                    mode if mode != "baseline" else f"shared, {args.baseline_ref}",
                    f"{figures['calls_per_interval_waiting']:.1f}",
                    f"{figures['calls_per_interval_overall']:.1f}",
                    f"{figures['cpu_per_interval_waiting']:.3f}",
                    f"{figures['cpu_per_interval_waiting'] / interval * 100:.2f}%",
                    f"{figures['cpu_per_interval_overall']:.3f}",
                    f"{figures['rss_above_idle_mb']:.1f}",
                    f"{figures['lag_p99_ms']:.1f}",
                    f"{figures['stall_ms']:.0f}",
                    f"{figures['delay_p50']:.2f}",
                    f"{figures['delay_p99']:.2f}",
                ]
            )
            print(f"measured N={count} {mode}", file=sys.stderr, flush=True)
    headers = [
        "triggers", "polling", "API calls / interval, waiting", "API calls / interval, overall",
        "CPU s / interval, waiting", "CPU, waiting (% of a core)", "CPU s / interval, overall",
        "peak RSS above idle (MB)", "loop lag p99 (ms)", "longest stall (ms)", "detection delay p50 (s)", "detection delay p99 (s)",
    ]  # fmt: skip
    print(f"Triggerer at scale: poll interval {interval:g} s; jobs end over {SPREAD_INTERVALS:g} intervals\n")
    print(markdown_table(headers, rows))
    print()
    print(machine_line())


if __name__ == "__main__":
    main()
