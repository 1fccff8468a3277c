"""Output tail: the last lines of a big output object against a whole-object download, same stand-in.

One output object of realistic log lines sits in a Cloud Storage stand-in (``gcp-storage-emulator``
in a process of its own, storing on disk in a temporary directory). The tail read is the provider's
own ``OutputReader.tails()`` with the default caps (100 lines, ``output_tail_bytes`` = 64 KiB),
through a real google-cloud-storage client; the baseline downloads the whole object with
``blob.download_as_bytes()`` through the same client. Requests and response body bytes are counted
on the client's HTTP session, and the requests again in the stand-in's own request log. The cases
run round-robin (each round starting one case later) so drift affects both alike.

    .venv/bin/python -m benchmarks.output_tail [--quick] [--size-mb MB] [-n READS]
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.common import machine_line, markdown_table, median
from tests.storage import BUCKET, StandIn, storage_stand_in

URI = f"gs://{BUCKET}/airflow"
CLUSTER_PATH = "/mnt/slurm-output"
OBJECT_FILE = "train__scheduled__2026-01-01__fit__try1__4242.out"
JOB_ID = "4242"
MAX_REQUESTS = 2  # one metadata read, one ranged read
WARMUP = 1  # untimed reads per case: connections, the stand-in's page cache
MIB = 1024 * 1024
# ru_maxrss is in KiB on Linux, in bytes on macOS
RSS_TO_KIB = 1 / 1024 if sys.platform == "darwin" else 1
# the stand-in logs each request as: "GET /download/storage/v1/b/... HTTP/1.1" 206 -
REQUEST_LOG_LINE = re.compile(r'^"(GET|HEAD|POST|PUT|PATCH|DELETE) \S+ HTTP/[0-9.]+" \d{3} ', re.MULTILINE)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small run for CI smoke tests (8 MiB object, 3 reads)")
    parser.add_argument("--size-mb", type=int, default=None, help="object size in MiB (default 1024, 8 with --quick)")
    parser.add_argument("-n", type=int, default=None, help="timed reads per case (default 5, 3 with --quick)")
    args = parser.parse_args()
    if args.size_mb is None:
        args.size_mb = 8 if args.quick else 1024
    if args.n is None:
        args.n = 3 if args.quick else 5
    if args.size_mb < 1 or args.n < 1:
        parser.error("--size-mb and -n must be at least 1")
    return args


# --- the stand-in and the object ---------------------------------------------------------------


def stand_in_cpu_s(stand_in: StandIn) -> float | None:
    """The stand-in's CPU time so far (user and system), or None where /proc does not tell."""
    try:
        fields = Path(f"/proc/{stand_in.pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def requests_logged(stand_in: StandIn, since: int) -> tuple[int, int]:
    """Requests the stand-in logged after byte ``since`` of its log, and the log's size now."""
    text = stand_in.log.read_bytes()
    return len(REQUEST_LOG_LINE.findall(text[since:].decode(errors="replace"))), len(text)


def write_output_file(path: Path, size: int) -> tuple[int, int, str]:
    """A training job's stdout: whole lines up to the first that reaches ``size`` bytes, written 10,000
    lines (about 850 KB) at a time. Returns (bytes, lines, last line).
    """
    written = step = 0
    line = ""
    with open(path, "w", encoding="utf-8") as file:
        while written < size:
            block = []
            for _ in range(10_000):
                if written >= size:
                    break
                step += 1
                seconds = step * 0.41
                loss = 2.0 / (1.0 + step / 5000) + 0.01 * ((step * 7919) % 97) / 97
                line = (
                    f"[{int(seconds // 3600):02d}:{int(seconds % 3600 // 60):02d}:{seconds % 60:06.3f}] "
                    f"step {step} loss={loss:.6f} lr={3e-4 * min(1.0, step / 2000):.3e} "
                    f"grad_norm={0.5 + ((step * 104729) % 1000) / 1000:.4f} tokens/s={31000 + (step * 31) % 2500}\n"
                )
                block.append(line)
                written += len(line)  # ASCII: one byte a character
            file.write("".join(block))
    return written, step, line.rstrip("\n")


# --- the two cases -----------------------------------------------------------------------------


@dataclass
class Case:
    name: str
    read: Callable[[], Any]
    requests: list[int] = field(default_factory=list)  # per read, on the client's session
    logged: list[int] = field(default_factory=list)  # per read, in the stand-in's log
    body_bytes: list[int] = field(default_factory=list)  # per read, response bodies as received
    wall_s: list[float] = field(default_factory=list)
    cpu_s: list[float] = field(default_factory=list)
    stand_in_cpu_s: list[float] = field(default_factory=list)
    statuses: set[tuple[int, ...]] = field(default_factory=set)  # the responses' status codes, per read
    peak_traced: int = 0  # bytes allocated by Python at the peak of one read (tracemalloc)


class Counter:
    """The responses of the storage client's HTTP session (metadata reads and downloads alike)."""

    def __init__(self, session: Any) -> None:
        self.responses: list[Any] = []
        session.hooks["response"].append(lambda response, *args, **kwargs: self.responses.append(response))

    def take(self) -> tuple[int, int, tuple[int, ...]]:
        """(requests, response body bytes read off the wire, status codes) since the last call."""
        responses, self.responses = self.responses, []
        statuses = tuple(response.status_code for response in responses)
        return len(responses), sum(response.raw.tell() for response in responses), statuses


class StorageHook:
    """What ``OutputReader`` needs of the Google provider's ``GCSHook``: ``get_conn()``, a storage client."""

    def __init__(self, client: Any) -> None:
        self.client = client

    def get_conn(self) -> Any:
        return self.client


def cases(client: Any, size: int, last_line: str) -> list[Case]:
    from airflow_provider_slurmapi.client.output import OutputFile, OutputSettings
    from airflow_provider_slurmapi.hooks.output_reader import OutputReader

    settings = OutputSettings(uri=URI, cluster_path=CLUSTER_PATH, wait=0)
    file = OutputFile(JOB_ID, "stdout", f"{CLUSTER_PATH}/{OBJECT_FILE}")
    name = settings.location_of(file.cluster_path).removeprefix(f"gs://{BUCKET}/")

    def whole() -> None:
        data = client.bucket(BUCKET).blob(name).download_as_bytes()
        if len(data) != size or not data.endswith(f"{last_line}\n".encode()):
            raise SystemExit(f"the whole download returned {len(data)} bytes, not the object's {size}")

    def tail() -> None:
        reader = OutputReader(settings, gcs_hook=lambda: StorageHook(client), principal=lambda: "benchmark")
        (result,) = reader.tails([file])
        shown = result.text.splitlines()
        if result.problem or result.size != size or len(shown) != settings.tail_lines or shown[-1] != last_line:
            raise SystemExit(f"the tail read did not return the object's last {settings.tail_lines} lines: {result}")

    return [
        Case("(a) whole download, `blob.download_as_bytes()` (baseline)", whole),
        Case(f"(b) tail read, `OutputReader.tails()` ({settings.tail_lines} lines)", tail),
    ]


def run(cases: list[Case], counter: Counter, stand_in: StandIn, reads: int) -> None:
    for case in cases:
        for _ in range(WARMUP):
            case.read()
    counter.take()
    _, mark = requests_logged(stand_in, 0)
    for r in range(reads):
        shift = r % len(cases)
        for case in cases[shift:] + cases[:shift]:
            served0 = stand_in_cpu_s(stand_in)
            cpu0, t0 = time.process_time(), time.perf_counter()
            case.read()
            t1, cpu1 = time.perf_counter(), time.process_time()
            served1 = stand_in_cpu_s(stand_in)
            case.wall_s.append(t1 - t0)
            case.cpu_s.append(cpu1 - cpu0)
            if served0 is not None and served1 is not None:
                case.stand_in_cpu_s.append(served1 - served0)
            requests, body, statuses = counter.take()
            case.requests.append(requests)
            case.body_bytes.append(body)
            case.statuses.add(statuses)
            logged, mark = requests_logged(stand_in, mark)
            case.logged.append(logged)
    for case in cases:  # memory apart: tracing slows the reads it traces
        tracemalloc.start()
        try:
            case.read()
            case.peak_traced = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        counter.take()


# --- the table ---------------------------------------------------------------------------------


def ratio(whole: float, tail: float) -> str:
    return f"{whole / tail:,.2f}" if tail else "n/a"


def table(cases: list[Case]) -> str:
    def figures(case: Case) -> dict[str, float]:
        return {
            "requests": max(case.requests),
            "logged": max(case.logged),
            "bytes": max(case.body_bytes),
            "wall": median(case.wall_s),
            "cpu": median(case.cpu_s),
            "served": median(case.stand_in_cpu_s) if case.stand_in_cpu_s else float("nan"),
            "memory": case.peak_traced,
        }

    tail = figures(cases[-1])
    rows = []
    for case in cases:
        mine = figures(case)
        rows.append(
            [
                case.name,
                mine["requests"],
                mine["logged"],
                f"{mine['bytes']:,}",
                f"{mine['wall'] * 1000:.1f}",
                f"{mine['cpu'] * 1000:.1f}",
                f"{mine['served'] * 1000:.0f}",
                f"{mine['memory'] / MIB:.2f}",
                *(ratio(mine[what], tail[what]) for what in ("requests", "bytes", "wall", "cpu", "memory")),
            ]
        )
    headers = [
        "Case",
        "Storage requests",
        "Requests in stand-in log",
        "Response body bytes",
        "Median wall (ms)",
        "CPU/read (ms)",
        "Stand-in CPU/read (ms)",
        "Peak traced memory (MiB)",
        "Requests ÷ tail",
        "Bytes ÷ tail",
        "Wall ÷ tail",
        "CPU ÷ tail",
        "Memory ÷ tail",
    ]
    return markdown_table(headers, rows)


def limits(tail: Case, tail_bytes: int) -> list[str]:
    requests, body = max(max(tail.requests), max(tail.logged)), max(tail.body_bytes)
    held = {True: "held", False: "NOT held"}
    return [
        f"Limit: storage requests per tail read <= {MAX_REQUESTS}: {held[requests <= MAX_REQUESTS]} "
        f"(at most {requests} in {len(tail.requests)} reads)",
        f"Limit: response body bytes per tail read <= 2 x output_tail_bytes = {2 * tail_bytes:,}: "
        f"{held[body <= 2 * tail_bytes]} (at most {body:,} in {len(tail.body_bytes)} reads)",
    ]


def main() -> None:
    args = parse_args()
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    from airflow_provider_slurmapi.client.output import DEFAULT_TAIL_BYTES, DEFAULT_TAIL_LINES

    with tempfile.TemporaryDirectory(prefix="bench-storage-") as tmp:
        workdir = Path(tmp)
        with storage_stand_in(workdir / "stand-in.log", data_dir=workdir, bucket=BUCKET) as stand_in:
            os.environ["STORAGE_EMULATOR_HOST"] = stand_in.url
            client = storage.Client(
                project="p", credentials=AnonymousCredentials(), client_options={"api_endpoint": stand_in.url}
            )
            source = workdir / "job.out"
            size, lines, last_line = write_output_file(source, args.size_mb * MIB)
            t0 = time.perf_counter()
            blob = client.bucket(BUCKET).blob(f"{URI.removeprefix(f'gs://{BUCKET}/')}/{OBJECT_FILE}")
            blob.upload_from_filename(str(source), content_type="text/plain", timeout=600)
            upload_s = time.perf_counter() - t0
            source.unlink()
            counter = Counter(client._http)
            both = cases(client, size, last_line)
            run(both, counter, stand_in, args.n)

    print(
        f"### Output tail: the last {DEFAULT_TAIL_LINES} lines of one output object ({size / MIB:,.0f} MiB) "
        "against a whole download, Cloud Storage stand-in\n"
    )
    print(table(both))
    print()
    peak_rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * RSS_TO_KIB / 1024
    print(
        f"The object: {size:,} bytes, {lines:,} log lines, uploaded in {upload_s:.1f} s. Per read, after "
        f"{WARMUP} untimed read per case: storage requests and response body bytes are the most that any of "
        f"{args.n} timed reads made, counted on the storage client's HTTP session (bytes as read off the "
        "wire), the requests counted again in the stand-in's request log; wall time, this process's CPU "
        f"time and the stand-in's CPU time (in {1000 / os.sysconf('SC_CLK_TCK'):g} ms clock ticks) are "
        "medians; peak traced memory is what Python allocated at the peak of one more read, run under "
        "tracemalloc apart from the timed ones. "
        "The whole download is one request (no metadata read); the tail read is a metadata read and a "
        f"ranged read of at most output_tail_bytes = {DEFAULT_TAIL_BYTES:,} bytes. The stand-in reads the "
        "whole object from its disk for every download, a ranged one too, so the tail read's wall time "
        "here includes that (see the stand-in's CPU column). This process's peak RSS over the whole run "
        f"(upload and both cases): {peak_rss_mib:,.0f} MiB."
    )
    print()
    for case in both:
        seen = "; ".join(", ".join(map(str, statuses)) for statuses in sorted(case.statuses))
        print(f"Response statuses of {case.name.split(' ', 1)[0]} per read, over {args.n} timed reads: {seen}")
    print()
    for line in limits(both[1], DEFAULT_TAIL_BYTES):
        print(line)
    print()
    print(machine_line())


if __name__ == "__main__":
    main()
