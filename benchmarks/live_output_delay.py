"""Live output delay: how long after a job prints a line the deferred task's log shows it.

A job prints ``line N <epoch seconds>`` (``date +%s.%N``) every second for ``--seconds`` seconds,
run by the built-in emulator and, when this machine can run it (root, the Debian chroot of
``scripts/slurm-up.sh``), by a real Slurm 24.11 behind the emulator's slurmrestd backend. The job
publishes its output through the live-output wrapper under the emulator's output mount, which
uploads each closed piece to a Cloud Storage stand-in (``gcp-storage-emulator``) within half a
second of its close, as Cloud Storage FUSE would. The task defers (``SlurmSubmitJobOperator``,
``deferrable=True``), and its ``SlurmJobTrigger`` runs in this process's event loop as a
triggerer runs it; a logging handler on the trigger's logger notes when each line is logged
(``time.time()`` on emit). A line's delay is that time less the time the job printed it.

The issue's bound is "publishing period + poll interval + 5 s". Lines printed but never logged,
or logged twice, are counted too.

    .venv/bin/python -m benchmarks.live_output_delay              # 60-s jobs, (10, 10) and (2, 2)
    .venv/bin/python -m benchmarks.live_output_delay --quick      # 12-s jobs, (2, 2) only
    .venv/bin/python -m benchmarks.live_output_delay --backends builtin --settings 10:10
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.common import CLUSTER, PROJECT, REGION, machine_line, markdown_table, median, use_private_airflow_home
from tests.storage import BUCKET, storage_stand_in

PREFIX = f"gs://{BUCKET}/live-delay"
JOB = {"name": "live-delay", "environment": ["PATH=/usr/bin:/bin"], "current_working_directory": "/tmp"}
SHOWN = re.compile(r"^\[job (?P<job>\d+) stdout\] line (?P<number>\d+) (?P<printed>\d+\.\d+)$")
SLACK = 5.0  # the bound's fixed part, in seconds


def job_script(seconds: int) -> str:
    return f'#!/bin/bash\nfor i in $(seq 1 {seconds}); do\n    echo "line $i $(date +%s.%N)"\n    sleep 1\ndone\n'


@dataclass
class Result:
    backend: str
    period: int
    poll: float
    printed: int
    delays: list[float] = field(default_factory=list)  # seconds, per line shown, in the order shown
    twice: int = 0  # lines shown more than once
    wall: float = 0.0

    @property
    def bound(self) -> float:
        return self.period + self.poll + SLACK

    def row(self) -> list[str]:
        shown = f"{len(self.delays)}/{self.printed}"
        p50 = f"{median(self.delays):.1f}" if self.delays else "-"
        worst = max(self.delays) if self.delays else float("nan")
        within = "yes" if self.delays and worst <= self.bound and len(self.delays) == self.printed else "no"
        settings = [self.backend, str(self.period), f"{self.poll:g}"]
        return [*settings, shown, p50, f"{worst:.1f}", f"{self.bound:g}", within]


class LineTimes(logging.Handler):
    """When each of a job's stdout lines reached the trigger's log."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: dict[str, list[tuple[int, float, float]]] = {}  # job -> (number, printed, logged)

    def emit(self, record: logging.LogRecord) -> None:
        logged = time.time()
        match = SHOWN.match(record.getMessage())
        if match:
            self.seen.setdefault(match["job"], []).append((int(match["number"]), float(match["printed"]), logged))


def deferred_trigger(period: int, poll: float, seconds: int) -> tuple[Any, str]:
    """Submit the job as a deferrable task does; the trigger it defers to, rebuilt from its serialized form."""
    from airflow.providers.common.compat.sdk import TaskDeferred

    from airflow_provider_slurmapi.operators.job import SlurmSubmitJobOperator
    from airflow_provider_slurmapi.triggers.job import SlurmJobTrigger
    from tests.integration.airflow_runtime import context

    task = SlurmSubmitJobOperator(
        task_id="live_delay",
        job=JOB,
        script=job_script(seconds),
        deferrable=True,
        poll_interval=poll,
        live_output=True,
        live_output_period=period,
    )
    ctx: Any = context()
    try:
        task.execute(ctx)
    except TaskDeferred as deferred:
        _, kwargs = deferred.trigger.serialize()
        return SlurmJobTrigger(**json.loads(json.dumps(kwargs))), ctx["ti"].xcom["job_id"]
    raise RuntimeError("the task did not defer")


def measure(backend: str, period: int, poll: float, seconds: int) -> Result:
    from tests.integration.airflow_runtime import first_event

    lines = LineTimes()
    log = logging.getLogger(f"benchmarks.live_output_delay.{backend}.{period}.{poll:g}")
    log.addHandler(lines)
    log.setLevel(logging.INFO)
    log.propagate = False
    started = time.monotonic()
    trigger, job_id = deferred_trigger(period, poll, seconds)
    trigger._log = log  # the trigger's lines, to the handler
    event = asyncio.run(first_event(trigger, timeout=seconds + 10 * (period + poll) + 120))
    if event.get("status") != "finished":
        raise RuntimeError(f"job {job_id} did not finish: {event}")
    result = Result(backend, period, poll, seconds, wall=time.monotonic() - started)
    seen = lines.seen.get(job_id, [])
    numbers = [number for number, _, _ in seen]
    result.twice = len(numbers) - len(set(numbers))
    result.delays = [logged - printed for _, printed, logged in seen]
    return result


@contextmanager
def emulator_for(backend: str, work: Path, storage_host: str) -> Iterator[None]:
    """An emulator of ``backend`` with its output mount, and the connection to it in the environment."""
    from airflow_provider_slurmapi.emulator import Emulator, EmulatorConfig

    common: dict[str, Any] = {"key_file": work / "key.json", "state_dir": work / "jobs", "storage_host": storage_host}
    cleanup: Path | None = None
    if backend == "builtin":
        mount = work / "cluster-output"
        mount.mkdir()
        cluster_path = str(mount)
        config = EmulatorConfig(min_job_age=1.0, output_mount=f"{mount}={PREFIX}", **common)
    else:
        from tests import real_slurm

        slurm = real_slurm.bring_up()
        cluster_path = f"/tmp/live-output-delay-{os.getpid()}"  # a fresh live/ folder: no earlier pieces
        cleanup = slurm.host_path(cluster_path)
        cleanup.mkdir(mode=0o1777)
        cleanup.chmod(0o1777)  # the jobs' user writes here
        config = slurm.emulator_config(
            output_mount=f"{cluster_path}={PREFIX}", cluster_root=str(slurm.chroot), **common
        )
    try:
        with Emulator(config) as emu:
            extra = {"project_id": PROJECT, "region": REGION, "cluster_id": CLUSTER, "endpoint": emu.url}
            extra |= {"key_path": str(emu.key_file), "output_uri": PREFIX, "output_cluster_path": cluster_path}
            os.environ["AIRFLOW_CONN_SLURM_JOB_API_DEFAULT"] = json.dumps(
                {"conn_type": "slurm_job_api", "extra": extra}
            )
            yield
    finally:
        if cleanup is not None:
            shutil.rmtree(cleanup, ignore_errors=True)


def backends_here(wanted: list[str]) -> list[str]:
    from tests import real_slurm

    found = []
    for backend in wanted:
        reason = real_slurm.unavailable_reason() if backend == "slurm" else None
        if reason:
            print(f"(real Slurm skipped: {reason})")
        else:
            found.append(backend)
    return found


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="12-s jobs, period 2 and poll 2 only (CI smoke run)")
    parser.add_argument("--seconds", type=int, default=None, help="lines the job prints, one a second (default 60)")
    parser.add_argument(
        "--settings", nargs="+", default=None, help="PERIOD:POLL pairs (default 10:10 2:2, or 2:2 with --quick)"
    )
    parser.add_argument("--backends", nargs="+", choices=("builtin", "slurm"), default=["builtin", "slurm"])
    args = parser.parse_args()
    args.seconds = args.seconds or (12 if args.quick else 60)
    settings = args.settings or (["2:2"] if args.quick else ["10:10", "2:2"])
    try:
        args.settings = [(int(period), float(poll)) for period, poll in (pair.split(":") for pair in settings)]
    except ValueError:
        parser.error("--settings takes PERIOD:POLL pairs, e.g. 10:10")
    return args


def main() -> None:
    args = parse_args()
    use_private_airflow_home()
    os.environ["AIRFLOW__LOGGING__LOGGING_LEVEL"] = "WARNING"
    from airflow_provider_slurmapi.operators import job_record
    from airflow_provider_slurmapi.triggers import live_output as live_triggers
    from tests.unit.task_fakes import FakeVariables

    variables = FakeVariables()  # the job records and the triggers' positions: in memory, no database
    for module in (job_record, live_triggers):
        module._variables = lambda: variables  # type: ignore[attr-defined]
    print(machine_line())
    print(f"Job: one line a second for {args.seconds} s; bound: publishing period + poll interval + {SLACK:g} s\n")
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-live-delay-") as temp, storage_stand_in(bucket=BUCKET) as stand_in:
        os.environ["STORAGE_EMULATOR_HOST"] = stand_in.url
        for backend in backends_here(args.backends):
            work = Path(temp) / backend
            work.mkdir()
            with emulator_for(backend, work, stand_in.url):
                for period, poll in args.settings:
                    result = measure(backend, period, poll, args.seconds)
                    print(f"{backend}, period {period} s, poll {poll:g} s: {result.wall:.0f} s", flush=True)
                    results.append(result)
    headers = [
        "backend",
        "period (s)",
        "poll (s)",
        "lines shown",
        "p50 delay (s)",
        "max delay (s)",
        "bound (s)",
        "within",
    ]
    print()
    print(markdown_table(headers, [result.row() for result in results]))
    twice = [result for result in results if result.twice]
    for result in twice:
        print(f"{result.backend}, period {result.period}: {result.twice} shown twice")


if __name__ == "__main__":
    main()
