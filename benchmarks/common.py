"""Helpers shared by the benchmarks: statistics, Markdown tables, the machine line, the environment."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import importlib.metadata
import io
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

REPO_ROOT = Path(__file__).resolve().parent.parent
PROJECT, REGION, CLUSTER = "test-project", "us-central1", "test-cluster"


def parse_args(description: str, full: int, quick: int, what: str) -> argparse.Namespace:
    """``--quick`` for CI smoke runs, ``-n`` to choose the size explicitly."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--quick", action="store_true", help=f"small run for CI smoke tests ({quick} {what})")
    parser.add_argument("-n", type=int, default=None, help=f"{what} (default {full}, or {quick} with --quick)")
    args = parser.parse_args()
    if args.n is None:
        args.n = quick if args.quick else full
    if args.n < 1:
        parser.error("-n must be at least 1")
    return args


def use_private_airflow_home() -> None:
    """Point AIRFLOW_HOME at a temp dir unless set, so no user config or database interferes."""
    if "AIRFLOW_HOME" not in os.environ:
        os.environ["AIRFLOW_HOME"] = tempfile.mkdtemp(prefix="bench-airflow-home-")
    os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def p95(values: Sequence[float]) -> float:
    if len(values) < 2:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[94]


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A Markdown table; the first column is left-aligned, the figures right-aligned."""
    cells = [[str(c) for c in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]

    def line(row: list[str]) -> str:
        padded = [row[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=True)]
        return "| " + " | ".join(padded) + " |"

    rule = "| " + " | ".join([":" + "-" * (widths[0] - 1)] + ["-" * (w - 1) + ":" for w in widths[1:]]) + " |"
    return "\n".join([line(cells[0]), rule, *(line(row) for row in cells[1:])])


def cpu_model() -> str:
    try:
        for text in Path("/proc/cpuinfo").read_text().splitlines():
            if text.startswith("model name"):
                return text.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def version_of(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def machine_line() -> str:
    return (
        f"Machine: {cpu_model()}, {usable_cores()} cores, {platform.system()} {platform.release()}, "
        f"Python {platform.python_version()}, Airflow {version_of('apache-airflow')}, "
        f"Google provider {version_of('apache-airflow-providers-google')}"
    )


class EmulatorAddress(Protocol):
    url: str
    key_file: Path | str | None


def connection_json(emu: EmulatorAddress) -> str:
    """``AIRFLOW_CONN_...`` JSON for the emulator's cluster (as tests/conftest.py builds it)."""
    extra = {
        "project_id": PROJECT,
        "region": REGION,
        "cluster_id": CLUSTER,
        "endpoint": emu.url,
        "key_path": str(emu.key_file),
    }
    return json.dumps({"conn_type": "slurm_job_api", "extra": extra})


@contextlib.contextmanager
def stand_in_server(module: str, *arguments: str) -> Iterator[str]:
    """The URL of ``python -m module --stand-in PORT *arguments`` (an HTTP stand-in serving on a free
    local port), once it accepts connections; it is stopped at the end."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    command = [sys.executable, "-m", module, "--stand-in", str(port), *arguments]
    process = subprocess.Popen(command, cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), 1).close()
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the stand-in of {module} did not start") from None
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(30)


@contextlib.contextmanager
def provider_at(ref: str | None) -> Iterator[Path]:
    """Where to run a benchmark's child process from (its working directory, first on its path):
    these benchmarks with the provider as committed at ``ref``, for a baseline measured in the same
    run; this tree when ``ref`` is None."""
    if ref is None:
        yield REPO_ROOT
        return
    archive = subprocess.run(
        ["git", "-C", str(REPO_ROOT), "archive", ref, "airflow_provider_slurmapi"], capture_output=True, check=True
    ).stdout
    with tempfile.TemporaryDirectory(prefix="bench-baseline-") as work:
        root = Path(work)
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(root, filter="data")
        (root / "benchmarks").symlink_to(REPO_ROOT / "benchmarks")
        (root / "tests").symlink_to(REPO_ROOT / "tests")  # the stand-ins the benchmarks share (tests/storage.py)
        yield root


class StallProbe:
    """How late a short timer fires in the running event loop: what any trigger sharing the loop
    waits while something holds it (Airflow's triggerer warns past 0.2 s). The interpreter's
    garbage collection passes are noted too: a full pass scans every object of the process
    (Airflow's included), whoever's allocation set it off, and ``longest(..., without_gc=True)``
    leaves their time out."""

    def __init__(self, period: float = 0.01) -> None:
        self.period = period
        self.timers: list[tuple[float, float]] = []  # (loop time the timer was set, when it fired)
        self.gc_passes: list[tuple[float, float, int]] = []  # (start, end, generation), monotonic
        self._gc_started = 0.0
        self._task: asyncio.Future[None] | None = None

    def start(self) -> None:
        gc.callbacks.append(self._on_gc)
        self._task = asyncio.ensure_future(self._run())

    def _on_gc(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._gc_started = time.monotonic()
        else:
            self.gc_passes.append((self._gc_started, time.monotonic(), info["generation"]))

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()  # its time is time.monotonic()
        while True:
            before = loop.time()
            await asyncio.sleep(self.period)
            self.timers.append((before, loop.time()))

    def longest(self, since: float = 0.0, *, without_gc: bool = False) -> float:
        """The longest stall, in seconds, of timers set from loop time ``since`` on."""
        worst = 0.0
        for before, fired in self.timers:
            if before < since:
                continue
            late = fired - before - self.period
            if without_gc:
                late -= sum(
                    min(end, fired) - max(start, before)
                    for start, end, _ in self.gc_passes
                    if start < fired and end > before
                )
            worst = max(worst, late)
        return worst

    def longest_gc_pass(self, since: float = 0.0) -> float:
        return max((end - start for start, end, _ in self.gc_passes if start >= since), default=0.0)

    async def stop(self) -> None:
        gc.callbacks.remove(self._on_gc)
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


@dataclass
class EmulatorProcess:
    """``slurm-job-api-emulator`` in a process of its own (its work is not the benchmark's)."""

    url: str
    key_file: Path

    def requeue(self, job_id: str) -> None:
        """The emulator's own control, as an admin's ``scontrol requeue``."""
        url = f"{self.url}/emulator/v1/{PROJECT}/{REGION}/{CLUSTER}/jobs/{job_id}:requeue"
        with urllib.request.urlopen(urllib.request.Request(url, data=b"", method="POST"), timeout=30):
            pass


@contextlib.contextmanager
def emulator_process(workdir: Path, *options: str) -> Iterator[EmulatorProcess]:
    """Run the emulator with ``options`` on a free port and read its address from its banner."""
    command = [
        sys.executable, "-m", "airflow_provider_slurmapi.emulator.cli", "--port=0",
        f"--key-file={workdir / 'key.json'}", f"--state-dir={workdir / 'jobs'}", "--log-level=WARNING", *options,
    ]  # fmt: skip
    with open(workdir / "emulator.log", "w+") as log:
        proc = subprocess.Popen(command, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=log, text=True)
        try:
            assert proc.stdout is not None
            banner = {}
            for line in proc.stdout:  # the banner ends with the connection line
                name, _, value = line.partition(": ")
                banner[name] = value.strip()
                if line.startswith("AIRFLOW_CONN_"):
                    break
            if "URL" not in banner:
                log.seek(0)
                raise SystemExit(f"the emulator did not start (exit {proc.wait()}):\n{log.read()}")
            yield EmulatorProcess(banner["URL"], Path(banner["Key file"]))
        finally:
            proc.terminate()
            proc.wait(timeout=60)
