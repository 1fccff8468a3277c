"""Job-event watchers: what N ``SlurmJobEventTrigger``s cost the triggerer and the API while jobs end.

The real triggers in one event loop, as the triggerer runs them, in three configurations side by
side: sharing one accounting read per interval (``shared``), the same with the provider as
committed at ``--baseline-ref`` (``baseline``, measured in the same run), and each watcher reading
by itself (``per-watcher``: the real trigger, each with a ``poll_interval`` a nanosecond apart, so
that no two share a read). Each configuration runs in a fresh process against a fresh emulator
process whose jobs run no processes (``--virtual-jobs``): M jobs of various names, comments and
exit codes are submitted outside the watchers before they start and end at spread, known times
while they run; each watcher has a different filter (job name globs, states, comment, user), so
each must receive a known subset, each job once. A few jobs that ended just before the watchers
started must reach none. A watcher reports one event per ``EVENT_SPACING_SECONDS`` (3 s): each
filter matches at most as many jobs as it can report within the run (``--max-matches``; a broader
one falls behind, which ``--max-matches 500`` shows).

The stall is how late a 10 ms timer fires while the watchers run (Airflow's triggerer warns past
200 ms), in all and without the interpreter's garbage collection passes in it (a full pass scans
every object of the process, whoever's allocation set it off). Cursor writes are the stores' ``aset`` calls but each watcher's first-start save (each a
write to Airflow's database in a real triggerer), with the idle-save period shortened to
``--idle-save-seconds`` so that the run crosses it.

    python -m benchmarks.job_events                   # N = 10, 100, 1000 watchers, M = 500 jobs, 10 s
    python -m benchmarks.job_events --quick           # N = 10, M = 20, 5 s interval, 4 intervals, shared (CI)
    python -m benchmarks.job_events --sizes 1000 --modes shared baseline -m 2000
"""

from __future__ import annotations

import argparse
import asyncio
import fnmatch
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from benchmarks.common import (
    StallProbe,
    machine_line,
    markdown_table,
    provider_at,
    use_private_airflow_home,
)
from benchmarks.triggerer_scale import percentile, rss_kib, start_emulator

MODES = ("shared", "baseline", "per-watcher")
BASELINE_REF = "2114bb4"  # the provider before the stall, write and catch-up fixes of the watchers
FAMILIES = ("train", "eval", "sweep", "etl", "infer")
TEAMS = ("vision", "speech", "nlp", "infra", "research", "ads", "search")
SEEDS = 11
USER = "emulator"  # the emulator's service account: every job's Unix user
FIRST_END = 1.0  # the first job ends this many intervals after the watchers started
TAIL_INTERVALS = 2.0  # the last job ends this many intervals before the measured window closes
GRACE_INTERVALS = 3  # after the window, how long to wait at most for events still due
SUBMIT_MARGIN = 3.0  # seconds between the last submit and the watchers' start
STALL_LIMIT_MS = 50


# --- the jobs and the filters: who must receive what -----------------------------------------------


def job_plan(index: int) -> dict[str, Any]:
    """Job ``index``'s name, comment and exit code (0: COMPLETED, else FAILED)."""
    return {
        "name": f"bench-{FAMILIES[index % len(FAMILIES)]}-{index:04d}",
        "comment": f"team={TEAMS[index % len(TEAMS)]}/seed={index % SEEDS:02d};",
        "exit_code": 0 if index % 3 else 1 + (index // 3) % 5,
    }


def state_of(plan: dict[str, Any]) -> str:
    return "COMPLETED" if plan["exit_code"] == 0 else "FAILED"


def make_filters(count: int, jobs: int, cap: int, seed: int = 7) -> list[dict[str, Any]]:
    """``count`` different filters, random mixes of the four kinds (the n-th has at least kind n % 4),
    each matching at most ``cap`` of the ``jobs`` (a few, none)."""
    from airflow_provider_slurmapi.client.job_events import JobEventFilter

    rng = random.Random(seed)
    plans = {str(n): job_plan(n) for n in range(jobs)}

    def name() -> Any:
        family, digit = rng.choice(FAMILIES), rng.randrange(10)
        return rng.choice(
            [
                f"bench-{family}-*",
                f"bench-*-*{digit}",
                f"bench-*-*{rng.randrange(100):02d}",
                f"bench-{family}-*{digit}",
                sorted({f"bench-{family}-*{digit}", f"bench-*-*{rng.randrange(100):02d}"}),
                job_plan(rng.randrange(jobs))["name"],
                "other-*",
            ]
        )

    draw = {
        "job_name": name,
        "states": lambda: rng.choice([["COMPLETED"], ["FAILED"], ["FAILED", "TIMEOUT"]]),
        "comment_contains": lambda: rng.choice([f"team={rng.choice(TEAMS)}/", f"seed={rng.randrange(SEEDS):02d};"]),
        "user": lambda: rng.choice([USER, ["alice", USER], "alice"]),
    }
    kinds = list(draw)
    filters: list[dict[str, Any]] = []
    seen = set()
    while len(filters) < count:
        forced = kinds[len(filters) % len(kinds)]
        chosen = {kind: make() for kind, make in draw.items() if kind == forced or rng.random() < 0.5}
        matched = len(expected_jobs(chosen, plans))
        if matched > cap or (matched == 0 and rng.random() > 0.1):  # a few match nothing
            continue
        if matched < cap / 4 and rng.random() < 0.5:  # more of the broader ones
            continue
        identity = json.dumps(JobEventFilter.of(**chosen).to_dict(), sort_keys=True)
        if identity not in seen:
            seen.add(identity)
            filters.append(chosen)
    return filters


def expected_jobs(conditions: dict[str, Any], plans: dict[str, dict[str, Any]]) -> set[str]:
    """The jobs a filter must report, worked out here, apart from the provider's own matching."""

    def listed(value: Any) -> list[str]:
        return [value] if isinstance(value, str) else list(value)

    chosen = set()
    for job_id, plan in plans.items():
        if "job_name" in conditions and not any(
            fnmatch.fnmatchcase(plan["name"], glob) for glob in listed(conditions["job_name"])
        ):
            continue
        if "states" in conditions and state_of(plan) not in conditions["states"]:
            continue
        if "comment_contains" in conditions and conditions["comment_contains"] not in plan["comment"]:
            continue
        if "user" in conditions and USER not in listed(conditions["user"]):
            continue
        chosen.add(job_id)
    return chosen


def submit_jobs(count: int, interval: float, intervals: int) -> tuple[dict[str, dict[str, Any]], list[str], float]:
    """Submit a few jobs that end at once (before the watchers start), then ``count`` that end
    spread over the run; the plans of the latter by job ID (with their planned end), the IDs of
    the former, and when the watchers start."""
    from airflow_provider_slurmapi.hooks.slurm_job_api import SlurmJobApiHook

    hook = SlurmJobApiHook()
    script = "#!/bin/bash\ntrue\n"

    def submit(plan: dict[str, Any], runtime: float) -> str:
        environment = [
            f"EMULATOR_RUNTIME={runtime:.3f}",
            f"EMULATOR_EXIT_CODE={plan['exit_code']}",
            "PATH=/usr/bin:/bin",
        ]
        job = {
            "name": plan["name"],
            "comment": plan["comment"],
            "current_working_directory": "/tmp",
            "environment": environment,
        }
        return str(hook.submit_job(job, script))

    early_count = max(3, count // 20)
    started = time.time()
    early = [submit(job_plan(count + n), 0.0) for n in range(early_count)]  # also warms the hook up
    per_submit = (time.time() - started) / early_count
    watch_start = time.time() + count * per_submit * 2 + SUBMIT_MARGIN
    last_end = intervals - TAIL_INTERVALS
    plans = {}
    for n in range(count):
        plan = job_plan(n)
        plan["end"] = watch_start + (FIRST_END + (last_end - FIRST_END) * n / max(count - 1, 1)) * interval
        plans[submit(plan, max(0.0, plan["end"] - time.time()))] = plan
    if time.time() > watch_start - 1:
        raise RuntimeError("submitting took longer than planned: the jobs would end too early")
    return plans, early, watch_start


# --- what the event loop does and costs -------------------------------------------------------------


class AssetStateStore:
    """What Airflow 3.3 injects into a watcher trigger (``asset_state_store``), in memory and
    answering after a turn of the event loop, as a database would; it notes when each write came
    and why: the watcher's first-start save, one after a report (the cursor names jobs it did not
    before), or an idle one (only the high water moved)."""

    writes: list[tuple[float, str]] = []  # of every store in the process: (when, "first", "report" or "idle")

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}

    async def aget(self, key: str, default: Any = None) -> Any:
        await asyncio.sleep(0)
        return self.values.get(key, default)

    async def aset(self, key: str, value: Any) -> None:
        await asyncio.sleep(0)
        before = self.values.get(key)
        kind = "first" if before is None else "report" if set(value["reported"]) - set(before["reported"]) else "idle"
        AssetStateStore.writes.append((time.time(), kind))
        self.values[key] = value


class Meter:
    """Counts the client's API calls (by path) and the bytes of their replies."""

    def __init__(self) -> None:
        from airflow_provider_slurmapi.client import aio

        self.calls: list[tuple[float, str]] = []
        self.replies: list[tuple[float, int]] = []
        send, read_reply = aio.AsyncSlurmJobApiClient._post, aio.read_reply

        async def counting_post(client: Any, request: Any, data: bytes, *, force_token: bool) -> Any:
            self.calls.append((time.time(), request.path))
            return await send(client, request, data, force_token=force_token)

        def counting_read_reply(request: Any, status: int, text: str) -> Any:
            self.replies.append((time.time(), len(text.encode())))
            return read_reply(request, status, text)

        aio.AsyncSlurmJobApiClient._post = counting_post  # type: ignore[method-assign]
        aio.read_reply = counting_read_reply  # type: ignore[assignment]

    def in_window(self, start: float, end: float, interval: float) -> dict[str, Any]:
        calls = [(t, path) for t, path in self.calls if start <= t < end]
        times = [t for t, _ in calls]
        span = 0.9 * interval  # the most calls in any span shorter than an interval
        return {
            "calls": len(calls) / ((end - start) / interval),
            "calls_max": max((sum(1 for u in times if t <= u < t + span) for t in times), default=0),
            "other_calls": sum(1 for _, path in calls if not path.startswith("/slurmdb/")),
            "bytes": sum(size for t, size in self.replies if start <= t < end) / ((end - start) / interval),
        }


def writes_in_window(start: float, end: float, interval: float) -> dict[str, float]:
    """Cursor writes per interval but first-start saves (mean, most in one), and of those the idle
    ones; and how many first-start saves there were."""
    figures: dict[str, float] = {}
    for name, kinds in (("writes", ("report", "idle")), ("idle_writes", ("idle",))):
        writes = [at for at, kind in AssetStateStore.writes if start <= at < end and kind in kinds]
        per = Counter(int((at - start) // interval) for at in writes)
        figures[name] = len(writes) / ((end - start) / interval)
        figures[f"{name}_max"] = max(per.values(), default=0)
    figures["first_saves"] = sum(1 for _, kind in AssetStateStore.writes if kind == "first")
    return figures


def shorten_idle_saves(seconds: int) -> None:
    """Set the watchers' idle-save period, wherever the provider under test keeps it."""
    from airflow_provider_slurmapi.triggers import cursor_store, job_events

    for module in (cursor_store, job_events):
        if hasattr(module, "IDLE_SAVE_SECONDS"):
            module.IDLE_SAVE_SECONDS = seconds  # type: ignore[attr-defined]


async def watch(
    plans: dict[str, dict[str, Any]],
    early: list[str],
    filters: list[dict[str, Any]],
    interval: float,
    intervals: int,
    shared: bool,
) -> dict[str, Any]:
    from airflow_provider_slurmapi.triggers import ended_jobs
    from airflow_provider_slurmapi.triggers.job_events import SlurmJobEventTrigger

    meter = Meter()
    loop = asyncio.get_running_loop()
    received: list[list[tuple[float, dict[str, Any]]]] = [[] for _ in filters]
    expected = [expected_jobs(conditions, plans) for conditions in filters]
    probe = StallProbe(0.01)

    async def consume(n: int, trigger: SlurmJobEventTrigger) -> None:
        async for event in trigger.run():
            received[n].append((time.time(), event.payload))

    triggers = []  # made before the clock starts, as Airflow's triggerer makes them
    for n, conditions in enumerate(filters):
        # unshared: each watcher's interval a nanosecond apart, so that each has a poller of its own
        poll_interval = interval if shared else interval + n * 1e-9
        trigger = SlurmJobEventTrigger(poll_interval=poll_interval, **conditions)
        trigger.asset_state_store = AssetStateStore()
        triggers.append(trigger)
    idle_rss = rss_kib("VmRSS")
    probe.start()
    await asyncio.sleep(0.1)
    start, loop_start, cpu_start = time.time(), loop.time(), time.process_time()
    tasks = []
    for n, trigger in enumerate(triggers):  # one per turn of the loop, as Airflow's TriggerRunner starts them
        tasks.append(asyncio.ensure_future(consume(n, trigger)))
        await asyncio.sleep(0)
    await asyncio.sleep(1.0)
    pollers = len(ended_jobs.active_ended_jobs_pollers())
    end = start + intervals * interval
    await asyncio.sleep(max(0.0, end - time.time()))
    stall, stall_without_gc, gc_pass = (  # the window's, before the figures below are worked out
        probe.longest(loop_start),
        probe.longest(loop_start, without_gc=True),
        probe.longest_gc_pass(loop_start),
    )
    cpu_used = time.process_time() - cpu_start
    peak_rss = rss_kib("VmHWM")

    def all_in() -> bool:
        return all(len(got) >= len(want) for got, want in zip(received, expected, strict=True))

    grace_end = end + GRACE_INTERVALS * interval
    while not all_in() and time.time() < grace_end:
        await asyncio.sleep(0.2)
    await asyncio.sleep(0.5)  # anything more would be a duplicate
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await probe.stop()

    delays, unexpected, duplicates, missing, wrong, watchers_ok = [], 0, 0, 0, 0, 0
    early_reported = 0
    for got, want in zip(received, expected, strict=True):
        ids = Counter(str(payload["job"]["job_id"]) for _, payload in got)
        early_reported += sum(1 for job_id in ids if job_id in early)
        unexpected += sum(1 for job_id in ids if job_id not in want)
        duplicates += sum(count - 1 for count in ids.values())
        missing += len(want - set(ids))
        for at, payload in got:
            plan = plans.get(str(payload["job"]["job_id"]))
            if plan is None:
                continue
            delays.append(at - plan["end"])
            exit_code = (payload["job"].get("exit_code") or {}).get("return_code")
            if (payload["job"]["state"], exit_code, payload["user"]) != (state_of(plan), plan["exit_code"], USER):
                wrong += 1
        watchers_ok += int(set(ids) == want and all(count == 1 for count in ids.values()))
    return {
        **meter.in_window(start, end, interval),
        **writes_in_window(start, end, interval),
        "pollers": pollers,
        "cpu": cpu_used / intervals,
        "rss_mb": peak_rss / 1024,
        "rss_above_idle_mb": (peak_rss - idle_rss) / 1024,
        "stall_ms": stall * 1000,
        "stall_without_gc_ms": stall_without_gc * 1000,
        "gc_pass_ms": gc_pass * 1000,
        "delay_p50": percentile(delays, 50),
        "delay_max": max(delays, default=float("nan")),
        "events_expected": sum(len(want) for want in expected),
        "events": sum(len(got) for got in received),
        "watchers_ok": watchers_ok,
        "unexpected": unexpected,
        "early_reported": early_reported,
        "duplicates": duplicates,
        "missing": missing,
        "wrong": wrong,
    }


def event_spacing() -> float:
    """Seconds a watcher waits after each event (``EVENT_SPACING_SECONDS`` of the trigger)."""
    from airflow_provider_slurmapi.triggers import job_events

    return float(getattr(job_events, "EVENT_SPACING_SECONDS", 0.0))


def deliverable(interval: float, intervals: int) -> int:
    """The most events one watcher can give between the first job's end and the window's end."""
    spacing = event_spacing()
    return int((intervals - FIRST_END - 1) * interval / spacing) if spacing else 1_000_000


def run_configuration(
    watchers: int, jobs: int, interval: float, intervals: int, cap: int, shared: bool, idle_save_seconds: int
) -> dict[str, Any]:
    shorten_idle_saves(idle_save_seconds)
    filters = make_filters(watchers, jobs, cap)
    plans, early, watch_start = submit_jobs(jobs, interval, intervals)
    time.sleep(max(0.0, watch_start - time.time()))
    return asyncio.run(watch(plans, early, filters, interval, intervals, shared))


# --- the driver: one emulator and one measuring process per configuration --------------------------


def measure(mode: str, baseline_ref: str, *settings: Any) -> dict[str, Any]:
    with (
        tempfile.TemporaryDirectory(prefix="bench-job-events-") as work,
        provider_at(baseline_ref if mode == "baseline" else None) as provider,
    ):
        emulator, connection = start_emulator(Path(work))
        try:
            env = {**os.environ, "AIRFLOW_CONN_SLURM_JOB_API_DEFAULT": connection}
            args = ["--child", mode, *(str(value) for value in settings)]
            result = subprocess.run(
                [sys.executable, "-m", "benchmarks.job_events", *args],
                env=env, cwd=provider, capture_output=True, text=True, check=False,
            )  # fmt: skip
            if result.returncode != 0:
                raise RuntimeError(f"measuring {mode} {settings} failed:\n{result.stderr[-3000:]}")
            return json.loads(result.stdout.strip().splitlines()[-1])
        finally:
            emulator.terminate()
            emulator.wait(30)


def correctness_cell(figures: dict[str, Any], watchers: int) -> str:
    faults = [
        f"{figures[key]:,} {label}"
        for key, label in (("missing", "missing"), ("duplicates", "twice"), ("unexpected", "unmatched"))
        if figures[key]
    ]
    if figures["wrong"]:
        faults.append(f"{figures['wrong']:,} wrong state")
    return f"{figures['watchers_ok']:,}/{watchers:,} exact" + (f" ({', '.join(faults)})" if faults else "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="N = 10, M = 20 at a 5 s interval, shared only, for CI")
    parser.add_argument("--sizes", type=int, nargs="+", default=None, help="numbers of watchers (default 10 100 1000)")
    parser.add_argument("-m", "--jobs", type=int, default=None, help="jobs that end during the run (default 500)")
    parser.add_argument("--interval", type=float, default=None, help="poll interval, seconds (default 10, at least 5)")
    parser.add_argument("--intervals", type=int, default=None, help="intervals measured (default 8)")
    parser.add_argument("--modes", nargs="+", choices=MODES, default=None, help="default all (--quick: shared)")
    parser.add_argument(
        "--baseline-ref", default=BASELINE_REF, help=f"the commit the baseline mode measures (default {BASELINE_REF})"
    )
    parser.add_argument(
        "--idle-save-seconds",
        type=int,
        default=None,
        help="the watchers' idle-save period in this run (default 4 intervals: the run crosses it; 600 in production)",
    )
    parser.add_argument(
        "--max-matches",
        type=int,
        default=None,
        help="most jobs one filter may match (default: what a watcher can report in the run, at one event "
        "per EVENT_SPACING_SECONDS)",
    )
    parser.add_argument("--child", nargs=7, help=argparse.SUPPRESS)
    args = parser.parse_args()
    use_private_airflow_home()
    if args.child:
        mode, watchers, jobs, interval, intervals, cap, idle = args.child
        figures = run_configuration(
            int(watchers), int(jobs), float(interval), int(intervals), int(cap), mode != "per-watcher", int(idle)
        )
        print(json.dumps(figures))
        return
    sizes = args.sizes or ([10] if args.quick else [10, 100, 1000])
    jobs = args.jobs or (20 if args.quick else 500)
    interval = args.interval or (5.0 if args.quick else 10.0)
    intervals = args.intervals or (4 if args.quick else 8)
    modes = args.modes or (["shared"] if args.quick else list(MODES))
    idle = args.idle_save_seconds or int(4 * interval)
    if intervals < FIRST_END + TAIL_INTERVALS + 1:
        parser.error(f"--intervals must be at least {FIRST_END + TAIL_INTERVALS + 1:g}")
    cap = args.max_matches if args.max_matches is not None else deliverable(interval, intervals)
    rows, faults, shared_worst, stall_worst = [], 0, 0, 0.0
    started = time.time()
    for watchers in sizes:
        for mode in modes:
            figures = measure(mode, args.baseline_ref, watchers, jobs, interval, intervals, cap, idle)
            print(
                f"measured N={watchers} {mode}: {figures['events']:,}/{figures['events_expected']:,} events, "
                f"longest stall {figures['stall_ms']:.1f} ms ({figures['stall_without_gc_ms']:.1f} without the "
                f"garbage collection passes in it, the longest {figures['gc_pass_ms']:.1f} ms), "
                f"{figures['other_calls']} calls other than accounting reads, pollers {figures['pollers']}, "
                f"{figures['first_saves']} first-start saves, {time.time() - started:.0f} s so far",
                file=sys.stderr,
                flush=True,
            )
            if mode == "shared":
                faults += int(figures["watchers_ok"] != watchers or bool(figures["wrong"] or figures["early_reported"]))
                shared_worst = max(shared_worst, int(figures["calls_max"]))
                stall_worst = max(stall_worst, figures["stall_without_gc_ms"])
            rows.append(
                [
                    f"{watchers:,}",
                    mode if mode != "baseline" else f"shared, {args.baseline_ref}",
                    f"{figures['calls']:.1f} / {figures['calls_max']:,}",
                    f"{figures['bytes'] / 1e6:.2f}",
                    f"{figures['cpu']:.3f}",
                    f"{figures['writes']:,.1f} / {figures['writes_max']:,}",
                    f"{figures['idle_writes']:,.1f} / {figures['idle_writes_max']:,}",
                    f"{figures['stall_ms']:,.0f} ({figures['stall_without_gc_ms']:,.0f})",
                    f"{figures['gc_pass_ms']:,.0f}",
                    f"{figures['rss_mb']:.0f} (+{figures['rss_above_idle_mb']:.1f})",
                    f"{figures['delay_p50']:.2f} / {figures['delay_max']:.2f}",
                    f"{figures['events']:,} of {figures['events_expected']:,}",
                    correctness_cell(figures, watchers),
                ]
            )
    headers = [
        "watchers", "reads", "API calls / interval (mean / max)", "MB / interval", "CPU s / interval",
        "cursor writes / interval (mean / max)", "of which idle (mean / max)",
        "longest stall, ms (without GC passes)", "longest GC pass (ms)", "peak RSS MB (above idle)",
        "event delay p50 / max (s)", "events", "watchers exact",
    ]  # fmt: skip
    print(
        f"Job-event watchers: {jobs:,} jobs ending over intervals {FIRST_END:g}-{intervals - TAIL_INTERVALS:g} "
        f"of {intervals}, poll interval {interval:g} s, each filter matching at most {cap:,} jobs "
        f"(events {event_spacing():g} s apart), idle cursors saved every {idle} s\n"
    )
    print(markdown_table(headers, rows))
    print()
    if "shared" in modes:
        verdict = "held" if faults == 0 else "violated"
        print(
            f"Limit: every shared watcher received exactly the jobs its filter matches, each once: {verdict} "
            f"({faults} of {len(sizes)} sizes with a fault)"
        )
        verdict = "held" if shared_worst <= 1 else "violated"
        print(f"Limit: shared watchers make at most 1 API call per interval: {verdict} (at most {shared_worst})")
        verdict = "held" if stall_worst <= STALL_LIMIT_MS else "not held on this machine"
        print(
            f"Limit: shared watchers stall the event loop at most {STALL_LIMIT_MS} ms, garbage collection passes "
            f"left out: {verdict} ({stall_worst:.0f} ms)"
        )
    print(f"Run in {time.time() - started:.0f} s")
    print(machine_line())
    if "shared" in modes and (faults or shared_worst > 1):
        sys.exit(1)


if __name__ == "__main__":
    main()
