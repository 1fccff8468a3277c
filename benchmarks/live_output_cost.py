"""Live output's cost in the triggerer: N running jobs, each printing a line a second, followed by
N SlurmJobTriggers in one event loop, against the same N triggers without live output.

Each configuration runs in a fresh process against a fresh emulator process whose jobs run no
processes (``--virtual-jobs``) and end at spread, known times. Since no job runs, a publisher
process of its own plays their wrappers: every ``period`` seconds (each job at its own phase) it
writes each job's new lines as one closed piece, named as ``client/live_output.py`` names them,
into a Cloud Storage stand-in (``gcp-storage-emulator``, as ``tests/storage.py`` runs it, with
listings that honour ``start_offset`` and page at 1,000 names as Cloud Storage's do), and the last
piece just before the job ends. The triggers log as a triggerer's runner does (structlog, JSON,
one line per event into a file), where every printed line is then counted.

Modes: ``baseline``, the same triggers without live output; ``live``, with it; ``before``, with it
and the provider as committed at ``--baseline-ref`` (5bd9020, before the listing, progress-line and
stall fixes), measured in the same run. The longest stall is the event loop's: how late a 10 ms
timer fired (``StallProbe``), with and without the interpreter's garbage collection passes in it.

    python -m benchmarks.live_output_cost                  # N = 1, 100, 1000 at a 10 s interval and period
    python -m benchmarks.live_output_cost --quick          # N = 10 at a 2 s interval and period (CI smoke run)
    python -m benchmarks.live_output_cost --sizes 1000 --modes live before
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import heapq
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from benchmarks.common import (
    REPO_ROOT,
    StallProbe,
    machine_line,
    markdown_table,
    provider_at,
    stand_in_server,
    use_private_airflow_home,
)
from benchmarks.triggerer_scale import cpu_at, percentile, rss_kib, start_emulator
from tests.storage import BUCKET

if TYPE_CHECKING:
    from airflow.triggers.base import TriggerEvent

URI = f"gs://{BUCKET}/bench"
SPREAD_INTERVALS = 1.0  # jobs end spread over this many intervals
LAG_PROBE_SECONDS = 0.05
LAST_PIECE_BEFORE_END = 1.0  # a job's wrapper publishes its last piece, then the job ends
PAGE = 1000  # names per listing page, as Cloud Storage's default
LINE = re.compile(r"bench job (\d+) line (\d+)")
MODES = {"baseline": "no", "live": "yes", "before": "yes, at {ref}"}
BASELINE_REF = "5bd9020"  # the provider before the listing, progress-line and stall fixes


def line_text(job: int, number: int) -> str:
    return f"bench job {job} line {number} loss=0.{number % 997:03d} lr=3.0e-04 tokens/s=41{number % 89:02d}\n"


# --- the Cloud Storage stand-in, as Cloud Storage lists ------------------------------------------


def serve_stand_in(port: int) -> None:
    """``gcp-storage-emulator`` in memory, with two changes that make it answer as Cloud Storage does
    at this scale: a listing starts at ``startOffset`` (or after ``pageToken``) and holds at most
    ``maxResults`` (1,000) names (only their names with ``fields=items(name)...``), and no write rewrites a metadata file of every object (which made
    each upload cost time in proportion to the objects stored)."""
    from gcp_storage_emulator import storage as emulator_storage  # type: ignore[import-untyped]
    from gcp_storage_emulator.handlers import objects  # type: ignore[import-untyped]

    emulator_storage.Storage._write_config_to_file = lambda self: None
    listing = objects.ls

    def paged_listing(request: Any, response: Any, storage: Any, *args: Any, **kwargs: Any) -> None:
        query = request.query
        start = (query.get("startOffset") or [""])[0]
        after = (query.get("pageToken") or [""])[0]
        limit = int((query.get("maxResults") or [str(PAGE)])[0])
        answer = response.json

        def page(body: dict[str, Any]) -> None:
            items = sorted(
                (item for item in body.get("items") or [] if item["name"] >= start and item["name"] > after),
                key=lambda item: item["name"],
            )
            if (query.get("fields") or [""])[0].startswith("items(name)"):  # a partial response, as Cloud Storage gives
                items = [{"name": item["name"]} for item in items]
            body = {**body, "items": items[:limit], "prefixes": sorted(body.get("prefixes") or [])}
            if len(items) > limit:
                body["nextPageToken"] = items[limit - 1]["name"]
            answer(body)

        response.json = page
        listing(request, response, storage, *args, **kwargs)

    objects.ls = paged_listing  # before the server module reads its routes
    from gcp_storage_emulator.server import create_server  # type: ignore[import-untyped]

    create_server("127.0.0.1", port, in_memory=True, default_bucket=BUCKET).run()


# --- the jobs' publishers, in a process of their own -------------------------------------------


def publish(plan_file: Path) -> None:
    """Write each job's pieces as its wrapper would; print how many lines each job printed."""
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    from airflow_provider_slurmapi.client.live_output import Piece

    plan = json.loads(plan_file.read_text())
    start, period, jobs = plan["start"], plan["period"], plan["jobs"]
    bucket = storage.Client(project="bench", credentials=AnonymousCredentials()).bucket(BUCKET)
    prefix = URI.removeprefix(f"gs://{BUCKET}/") + "/live/"
    queue: list[tuple[float, int]] = []
    for n, job in enumerate(jobs):
        last = job["end"] - LAST_PIECE_BEFORE_END
        moment = start + period * (n + 1) / len(jobs)  # each job's wrapper at its own phase
        while moment < last:
            heapq.heappush(queue, (moment, n))
            moment += period
        heapq.heappush(queue, (last, n))
    printed = [0] * len(jobs)  # lines written into pieces so far
    seq = [0] * len(jobs)
    late = 0.0
    while queue:
        moment, n = heapq.heappop(queue)
        time.sleep(max(0.0, moment - time.time()))
        late = max(late, time.time() - moment)
        upto = int(moment - start) + 1  # the lines printed at start + k for k < upto
        if upto <= printed[n]:
            continue
        data = "".join(line_text(n, k) for k in range(printed[n], upto)).encode()
        piece = Piece(int(time.time()), jobs[n]["id"], jobs[n]["tag"], 0, "out", seq[n])
        bucket.blob(prefix + piece.name).upload_from_string(data, content_type="text/plain")
        printed[n], seq[n] = upto, seq[n] + 1
    print(json.dumps({"printed": printed, "late": late}))


# --- one configuration, in its own process ------------------------------------------------------


class Variables:
    """Airflow's Variables as a dict (no metadata database here), where triggers keep their position."""

    def __init__(self) -> None:
        self.values: dict[str, str] = {}

    def get(self, key: str, default: Any) -> Any:
        return self.values.get(key, default)

    def set(self, key: str, value: str, description: str | None = None) -> None:
        self.values[key] = value

    def delete(self, key: str) -> None:
        self.values.pop(key, None)


def log_as_a_triggerer_runner(path: Path) -> Any:
    """structlog as the triggerer's runner process has it: JSON, one line per event, unbuffered."""
    from airflow.sdk.log import configure_logging, reset_logging

    out = path.open("wb", buffering=0)
    reset_logging()
    configure_logging(json_output=True, output=out, sending_to_supervisor=True)
    return out


def submit_jobs(count: int, interval: float, steady: float) -> tuple[list[str], list[float], float]:
    """Submit ``count`` virtual jobs that end at spread times after the watch starts."""
    from airflow_provider_slurmapi.hooks.slurm_job_api import SlurmJobApiHook

    hook = SlurmJobApiHook()
    job = {"name": "bench", "current_working_directory": "/tmp"}
    started = time.time()
    hook.submit_job({**job, "environment": ["EMULATOR_RUNTIME=3600"]}, "#!/bin/bash\ntrue\n")  # warm up
    per_submit = time.time() - started
    watch_start = time.time() + count * per_submit * 2 + 1.5  # all submitted (and triggers built) by then
    job_ids, ends = [], []
    for n in range(count):
        end = watch_start + (steady + 1 + SPREAD_INTERVALS * n / count) * interval
        environment = [f"EMULATOR_RUNTIME={max(0.0, end - time.time()):.3f}", "PATH=/usr/bin:/bin"]
        job_ids.append(hook.submit_job({**job, "environment": environment}, "#!/bin/bash\ntrue\n"))
        ends.append(end)
    return job_ids, ends, watch_start


class Counts:
    """What the triggers asked of Cloud Storage and of the Slurm Job API, and when."""

    def __init__(self) -> None:
        self.listings: list[float] = []
        self.names: list[int] = []  # names each listing gave
        self.reads: list[tuple[float, int]] = []  # (when, bytes of the piece)
        self.requests: list[tuple[float, int]] = []  # storage HTTP requests: (when, response bytes)
        self.slurm: list[float] = []

    def install(self) -> None:
        import requests

        from airflow_provider_slurmapi.client.aio import AsyncSlurmJobApiClient
        from airflow_provider_slurmapi.hooks.object_store import ObjectStore

        names_from, read, request, post = (
            ObjectStore.names_from, ObjectStore.read_head, requests.Session.request, AsyncSlurmJobApiClient._post,
        )  # fmt: skip

        def counted_names_from(store: ObjectStore, *args: Any, **kwargs: Any) -> list[str]:
            self.listings.append(time.time())
            names = names_from(store, *args, **kwargs)
            self.names.append(len(names))
            return names

        def counted_read(store: ObjectStore, location: str, *args: Any, **kwargs: Any) -> bytes:
            data = read(store, location, *args, **kwargs)
            self.reads.append((time.time(), len(data)))
            return data

        def counted_request(session: Any, *args: Any, **kwargs: Any) -> Any:
            response = request(session, *args, **kwargs)
            self.requests.append((time.time(), int(response.headers.get("Content-Length") or 0)))
            return response

        async def counted_post(client: Any, *args: Any, **kwargs: Any) -> Any:
            self.slurm.append(time.time())
            return await post(client, *args, **kwargs)

        setattr(ObjectStore, "names_from", counted_names_from)  # noqa: B010
        setattr(ObjectStore, "read_head", counted_read)  # noqa: B010
        setattr(requests.Session, "request", counted_request)  # noqa: B010
        setattr(AsyncSlurmJobApiClient, "_post", counted_post)  # noqa: B010


async def watch(
    job_ids: list[str], ends: list[float], interval: float, period: int, live: bool, counts: Counts
) -> dict[str, Any]:
    from structlog.contextvars import bind_contextvars

    from airflow_provider_slurmapi.client.live_output import folder_tag
    from airflow_provider_slurmapi.triggers import live_output as live_triggers
    from airflow_provider_slurmapi.triggers.job import SlurmJobTrigger

    positions = Variables()
    live_triggers._variables = lambda: positions
    loop = asyncio.get_running_loop()
    lags: list[tuple[float, float]] = []  # (when, how late the probe woke)
    cpu_samples: list[tuple[float, float]] = []  # (wall time, CPU time) every probe
    done = asyncio.Event()

    async def probe_lag() -> None:
        while not done.is_set():
            before = loop.time()
            await asyncio.sleep(LAG_PROBE_SECONDS)
            lags.append((time.time(), loop.time() - before - LAG_PROBE_SECONDS))
            cpu_samples.append((time.time(), time.process_time()))

    async def run_trigger(n: int, trigger: SlurmJobTrigger) -> None:
        bind_contextvars(trigger_id=n + 1)  # as the triggerer binds each trigger's log lines
        events = cast("AsyncGenerator[TriggerEvent, None]", trigger.run())
        try:
            event = await events.__anext__()
        finally:
            await events.aclose()  # what the triggerer does after the first event
        assert event.payload["status"] == "finished", event.payload

    def spec(n: int, job_id: str) -> dict[str, Any] | None:
        tag = folder_tag(f"{URI}/bench__try1__{n}")
        return {"within": URI, "job": job_id, "tag": tag, "period": period} if live else None

    idle_rss = rss_kib("VmRSS")
    probe = StallProbe(0.01)
    triggers = [
        SlurmJobTrigger(job_id, poll_interval=interval, lost_grace=600, live_output=spec(n, job_id))
        for n, job_id in enumerate(job_ids)
    ]
    lag_task = asyncio.ensure_future(probe_lag())
    probe.start()
    started, loop_started = time.time(), loop.time()
    await asyncio.gather(*(run_trigger(n, t) for n, t in enumerate(triggers)))
    finished = time.time()
    done.set()
    await lag_task
    await probe.stop()
    since = loop_started + interval  # as the figures below: from one interval after the start to the last event
    # the steady state: from one interval after the start until the first job ends
    window = (started + interval, min(ends))
    intervals = max((window[1] - window[0]) / interval, 1e-9)

    def per_interval(moments: list[float]) -> float:
        return sum(window[0] <= m < window[1] for m in moments) / intervals

    def bytes_per_interval(events: list[tuple[float, int]]) -> float:
        return sum(size for m, size in events if window[0] <= m < window[1]) / intervals

    after_start = [lag for when, lag in lags if when >= started + interval]
    return {
        "slurm": per_interval(counts.slurm),
        "listings": per_interval(counts.listings),
        "listings_overall": len(counts.listings),
        "names_max": max(counts.names, default=0),
        "reads": per_interval([m for m, _ in counts.reads]),
        "pieces_read": len(counts.reads),
        "piece_bytes": bytes_per_interval(counts.reads),
        "requests": per_interval([m for m, _ in counts.requests]),
        "response_bytes": bytes_per_interval(counts.requests),
        "cpu": (cpu_at(cpu_samples, window[1]) - cpu_at(cpu_samples, window[0])) / intervals,
        "stall_max_ms": probe.longest(since) * 1000,
        "stall_without_gc_ms": probe.longest(since, without_gc=True) * 1000,
        "gc_pass_ms": probe.longest_gc_pass(since) * 1000,
        "lag_p99_ms": percentile(after_start, 99) * 1000,
        "rss_above_idle_mb": (rss_kib("VmHWM") - idle_rss) / 1024,
        "watch_s": finished - started,
    }


def run_configuration(
    count: int, interval: float, period: int, steady: float, live: bool, work: Path
) -> dict[str, Any]:
    from airflow_provider_slurmapi.client.live_output import folder_tag

    log_file = log_as_a_triggerer_runner(work / "triggerer.log")
    counts = Counts()
    counts.install()
    job_ids, ends, watch_start = submit_jobs(count, interval, steady)
    publisher = None
    if live:
        jobs = [
            {"id": job_id, "tag": folder_tag(f"{URI}/bench__try1__{n}"), "end": end}
            for n, (job_id, end) in enumerate(zip(job_ids, ends, strict=True))
        ]
        plan = work / "plan.json"
        plan.write_text(json.dumps({"start": watch_start, "period": period, "jobs": jobs}))
        command = [sys.executable, "-m", "benchmarks.live_output_cost", "--publish", str(plan)]
        publisher = subprocess.Popen(command, cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True)
    time.sleep(max(0.0, watch_start - time.time()))
    figures = asyncio.run(watch(job_ids, ends, interval, period, live, counts))
    log_file.close()
    if publisher is not None:
        out, _ = publisher.communicate(timeout=600)
        published = json.loads(out.strip().splitlines()[-1])
        logged = Counter(
            (int(m[1]), int(m[2])) for m in LINE.finditer((work / "triggerer.log").read_text(errors="replace"))
        )
        printed = published["printed"]
        expected = {(n, k) for n, lines in enumerate(printed) for k in range(lines)}
        figures["lines_printed"] = len(expected)
        figures["lines_once"] = sum(logged[key] == 1 for key in expected)
        figures["lines_missing"] = sum(key not in logged for key in expected)
        figures["lines_twice"] = sum(times > 1 for times in logged.values()) + sum(k not in expected for k in logged)
        figures["publisher_late_s"] = published["late"]
    return figures


# --- the driver: fresh emulator, stand-in and measuring process per configuration --------------


def measure(count: int, interval: float, period: int, steady: float, mode: str, baseline_ref: str) -> dict[str, Any]:
    live = mode != "baseline"
    with (
        tempfile.TemporaryDirectory(prefix="bench-live-output-") as work,
        provider_at(baseline_ref if mode == "before" else None) as provider,
        contextlib.ExitStack() as stack,
    ):
        emulator, connection = start_emulator(Path(work))
        stack.callback(emulator.wait, 30)
        stack.callback(emulator.terminate)
        env = dict(os.environ)
        if live:
            env["STORAGE_EMULATOR_HOST"] = stack.enter_context(stand_in_server("benchmarks.live_output_cost"))
            conn = json.loads(connection)
            conn["extra"]["output_uri"] = URI
            connection = json.dumps(conn)
        env["AIRFLOW_CONN_SLURM_JOB_API_DEFAULT"] = connection
        args = ["--child", str(count), str(interval), str(period), str(steady), "live" if live else "baseline", work]
        result = subprocess.run(
            [sys.executable, "-m", "benchmarks.live_output_cost", *args],
            env=env, cwd=provider, capture_output=True, text=True, check=False,
        )  # fmt: skip
        if result.returncode != 0:
            raise RuntimeError(f"measuring N={count} {mode} failed:\n{result.stderr[-3000:]}")
        return dict(json.loads(result.stdout.strip().splitlines()[-1]))


def row(
    count: int, mode: str, figures: dict[str, Any], baseline: dict[str, Any] | None, interval: float, ref: str
) -> list[str]:
    live = "lines_printed" in figures
    cpu = figures["cpu"]
    cpu_text = f"{cpu:.3f} ({cpu / interval * 100:.2f}%)"
    if live and baseline:
        cpu_text += f", x{cpu / max(baseline['cpu'], 1e-9):.1f}"
    lines = (
        f"{figures['lines_once']:,} of {figures['lines_printed']:,} ({figures['lines_missing']} missing,"
        f" {figures['lines_twice']} twice)"
        if live
        else "-"
    )
    rss = f"{figures['rss_above_idle_mb']:.1f}"
    if live and baseline:
        rss += f" (+{figures['rss_above_idle_mb'] - baseline['rss_above_idle_mb']:.1f})"
    return [
        f"{count:,}",
        MODES[mode].format(ref=ref),
        f"{figures['slurm']:.1f}",
        f"{figures['listings']:.1f}" if live else "-",
        f"{figures['names_max']:,}" if live else "-",
        f"{figures['reads']:.1f}" if live else "-",
        f"{figures['requests']:.1f}" if live else "-",
        f"{figures['piece_bytes']:,.0f}" if live else "-",
        f"{figures['response_bytes']:,.0f}" if live else "-",
        cpu_text,
        f"{figures['stall_max_ms']:.1f}",
        f"{figures['stall_without_gc_ms']:.1f}",
        f"{figures['gc_pass_ms']:.1f}",
        f"{figures['lag_p99_ms']:.1f}",
        rss,
        lines,
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="N = 10 at a 2 s interval and period, for CI")
    parser.add_argument("--sizes", type=int, nargs="+", default=None, help="numbers of running jobs")
    parser.add_argument("--interval", type=float, default=None, help="poll interval, seconds (default 10)")
    parser.add_argument("--period", type=int, default=None, help="publishing period, whole seconds (default 10)")
    parser.add_argument("--modes", nargs="+", choices=tuple(MODES), default=tuple(MODES))
    parser.add_argument(
        "--baseline-ref", default=BASELINE_REF, help=f"the commit mode 'before' measures (default {BASELINE_REF})"
    )
    parser.add_argument(
        "--steady", type=float, default=None, help="intervals every job runs before the first ends (default 6)"
    )
    parser.add_argument("--child", nargs=6, help=argparse.SUPPRESS)
    parser.add_argument("--publish", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--stand-in", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.stand_in:
        serve_stand_in(args.stand_in)
        return
    if args.publish:
        publish(args.publish)
        return
    use_private_airflow_home()
    if args.child:
        count, interval, period, steady, mode, work = args.child
        figures = run_configuration(int(count), float(interval), int(period), float(steady), mode == "live", Path(work))
        print(json.dumps(figures))
        return
    sizes = args.sizes or ([10] if args.quick else [1, 100, 1000])
    interval = args.interval or (2.0 if args.quick else 10.0)
    period = args.period or (2 if args.quick else 10)
    steady = args.steady or (2.0 if args.quick else 6.0)
    rows = []
    for count in sizes:
        baseline = None
        for mode in args.modes:
            figures = measure(count, interval, period, steady, mode, args.baseline_ref)
            baseline = figures if mode == "baseline" else baseline
            rows.append(row(count, mode, figures, baseline, interval, args.baseline_ref))
            extra = {k: figures[k] for k in ("watch_s", "listings_overall", "pieces_read")}
            late = figures.get("publisher_late_s")
            print(f"measured N={count} {mode}: {extra}, publisher late {late}", file=sys.stderr, flush=True)
    headers = [
        "jobs", "live output", "Slurm API calls / interval", "storage listings / interval",
        "names per listing, most", "piece reads / interval", "storage requests / interval",
        "piece bytes / interval", "storage response bytes / interval", "CPU s / interval (% of a core, x baseline)",
        "longest stall (ms)", "longest stall outside GC (ms)", "longest GC pass (ms)", "loop lag p99 (ms)", "peak RSS above idle (MB)", "lines logged once",
    ]  # fmt: skip
    print(
        f"Live output cost: poll interval {interval:g} s, publishing period {period} s, a line a second per job;"
        f" {steady:g} intervals measured while all jobs run, then they end over {SPREAD_INTERVALS:g} interval\n"
    )
    print(markdown_table(headers, rows))
    print()
    print(machine_line())


if __name__ == "__main__":
    main()
