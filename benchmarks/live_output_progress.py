"""A progress bar in live output: what a job printing a ``\\r`` progress line that never ends costs
the trigger that follows it, in memory and in the position it saves.

The job prints a tqdm-like line (``\\r 42%|####      | 420/1000 [...]``) every 0.1 s of job time on
its stderr, with no newline until the end, for ``--seconds`` of job time. Its wrapper's pieces (one
per publishing period) are made up front and served by an object store stand-in in memory (listings
from ``start_offset`` in name order, reads of a piece's head), so that an hour of job time is played
in seconds: each poll interval the follower lists from its offset and ``LiveOutputReader.collect``
reads the new pieces, as a trigger's read thread does; its position is then saved as the trigger
saves it (``PositionStore``, into a dict in place of Airflow's Variables). Measured: the follower's
state (``len(json.dumps(follower.to_dict()))``) and the saved Variable's value, the most over the
run; the memory the run left allocated (``tracemalloc``, the saved values left out: they are kept in
Airflow's database) and the process's RSS growth (in the allocator's pages: a few pages either way
are noise).

Each provider runs in a process of its own: this tree's, and the one committed at ``--baseline-ref``
(5bd9020, before the progress-line fix), in the same run.

    python -m benchmarks.live_output_progress                 # an hour of job time
    python -m benchmarks.live_output_progress --quick         # 10 minutes of job time (CI smoke run)
    python -m benchmarks.live_output_progress --seconds 86400 # a day
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import logging
import subprocess
import sys
import tracemalloc
from typing import Any

from benchmarks.common import machine_line, markdown_table, provider_at, use_private_airflow_home
from benchmarks.triggerer_scale import rss_kib
from tests.unit.task_fakes import FakeVariables

BASELINE_REF = "5bd9020"  # the provider before the progress-line fix
URI = "gs://slurm-output/bench"
JOB, START = "4242", 1_800_000_000  # the job's ID, and the epoch second it starts at
UPDATE_SECONDS = 0.1  # one progress line every 0.1 s of job time
LIMIT = 64 * 1024  # the goal: each figure under 64 KiB


def progress_line(step: int, total: int) -> str:
    """tqdm's line at ``step`` of ``total`` (one step per update)."""
    percent = step * 100 // total
    bar = "#" * (percent // 10)
    elapsed = step * UPDATE_SECONDS
    left = (total - step) * UPDATE_SECONDS
    clock = f"{int(elapsed) // 60:02d}:{int(elapsed) % 60:02d}<{int(left) // 60:02d}:{int(left) % 60:02d}"
    return f"\r{percent:3d}%|{bar:<10}| {step}/{total} [{clock}, {1 / UPDATE_SECONDS:.2f}it/s]"


def pieces(seconds: int, period: int, tag: str) -> dict[str, bytes]:
    """The job's stderr pieces by name: a first line that ends, then the progress line, a piece per period."""
    from airflow_provider_slurmapi.client.live_output import Piece

    total = round(seconds / UPDATE_SECONDS)
    per_piece = round(period / UPDATE_SECONDS)
    out: dict[str, bytes] = {}
    for seq, first in enumerate(range(0, total, per_piece)):
        text = "Training: 1 epoch\n" if seq == 0 else ""
        text += "".join(progress_line(step + 1, total) for step in range(first, min(first + per_piece, total)))
        name = Piece(START + (seq + 1) * period, JOB, tag, 0, "err", seq).name
        out[name] = text.encode()
    return out


class Store:
    """An object store of these pieces: listings from an offset in name order, reads of a piece's head."""

    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}
        self.published: list[str] = []  # in name order

    def publish(self, name: str, data: bytes) -> None:
        self.objects[name] = data
        self.published.append(name)

    def names_from(self, folder: str, offset: str, *args: Any, **kwargs: Any) -> list[str]:
        return [name for name in self.published if name >= offset]

    def read_head(self, location: str, max_bytes: int, *args: Any, **kwargs: Any) -> bytes:
        return self.objects[location.rsplit("/", 1)[-1]][:max_bytes]


async def follow(seconds: int, period: int, interval: int) -> dict[str, Any]:
    """Play the job's pieces to the follower, an interval at a time; the largest sizes seen."""
    from airflow_provider_slurmapi.client.live_output import LiveFollower, LiveOutputSettings, folder_tag
    from airflow_provider_slurmapi.hooks.live_reader import LiveOutputReader
    from airflow_provider_slurmapi.triggers import live_output as live_triggers

    variables = FakeVariables()  # the triggers' positions: in memory, no database
    live_triggers._variables = lambda: variables  # type: ignore[attr-defined]
    tag = folder_tag(f"{URI}/bench__try1__0")
    planned = pieces(seconds, period, tag)
    store = Store()
    follower = LiveFollower(job=JOB, tag=tag)
    reader = LiveOutputReader(store, URI, LiveOutputSettings(), follower, f"{URI}/bench__try1__0")  # type: ignore[arg-type]
    positions = live_triggers.PositionStore(follower, logging.getLogger("bench"))
    await positions.save(follower)  # its threads started before the memory is measured
    reader.collect([])
    gc.collect()
    rss_before, traced_before = rss_kib("VmRSS"), tracemalloc.get_traced_memory()[0]
    order = sorted(planned)
    state_max = saved_max = shown = longest = 0
    for moment in range(interval, seconds + interval, interval):
        while order and int(order[0][:10]) <= START + moment:
            name = order.pop(0)
            store.publish(name, planned[name])
        lines = reader.collect(store.names_from(reader.folder, reader.offset()))
        shown += len(lines)
        longest = max([longest, *(len(text) for _, text in lines)])
        state_max = max(state_max, len(json.dumps(follower.to_dict())))
        await positions.save(follower)
        saved_max = max(saved_max, len(variables.values[positions.key]))
    variables.values.clear()  # kept in Airflow's database, not in the trigger's memory
    store.objects.clear()  # the bucket's, not the trigger's
    store.published.clear()
    gc.collect()
    rss_after, traced_after = rss_kib("VmRSS"), tracemalloc.get_traced_memory()[0]
    last = reader.unended_lines()  # shown once the job has ended
    return {
        "pieces": len(planned),
        "job_bytes": sum(map(len, planned.values())),
        "state_max": state_max,
        "saved_max": saved_max,
        "rss_growth_kib": rss_after - rss_before,
        "held": traced_after - traced_before,
        "lines_while_running": shown,
        "longest_line": longest,
        "lines_at_end": len(last),
        "longest_line_at_end": max((len(text) for _, text in last), default=0),
    }


def measure(ref: str | None, seconds: int, period: int, interval: int) -> dict[str, Any]:
    with provider_at(ref) as root:
        args = ["--child", str(seconds), str(period), str(interval)]
        result = subprocess.run(
            [sys.executable, "-m", "benchmarks.live_output_progress", *args],
            cwd=root, capture_output=True, text=True, check=False,
        )  # fmt: skip
    if result.returncode != 0:
        raise RuntimeError(f"measuring {ref or 'this tree'} failed:\n{result.stderr[-3000:]}")
    return dict(json.loads(result.stdout.strip().splitlines()[-1]))


def kib(size: float) -> str:
    return f"{size / 1024:,.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10 minutes of job time, for CI")
    parser.add_argument("--seconds", type=int, default=None, help="seconds of job time (default 3600)")
    parser.add_argument("--period", type=int, default=10, help="publishing period, seconds (default 10)")
    parser.add_argument("--interval", type=int, default=10, help="poll interval, seconds (default 10)")
    parser.add_argument(
        "--baseline-ref", default=BASELINE_REF, help=f"the commit the baseline measures (default {BASELINE_REF})"
    )
    parser.add_argument("--child", nargs=3, type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    use_private_airflow_home()
    if args.child:
        tracemalloc.start()
        print(json.dumps(asyncio.run(follow(*args.child))))
        return
    seconds = args.seconds or (600 if args.quick else 3600)
    rows = []
    for label, ref in ((f"baseline, {args.baseline_ref}", args.baseline_ref), ("this tree", None)):
        figures = measure(ref, seconds, args.period, args.interval)
        held = max(figures["state_max"], figures["saved_max"], figures["held"])
        rows.append(
            [
                label,
                f"{figures['pieces']:,}",
                kib(figures["job_bytes"]),
                kib(figures["state_max"]),
                kib(figures["saved_max"]),
                kib(figures["held"]),
                f"{figures['rss_growth_kib']:,}",
                "yes" if held < LIMIT else "no",
                f"{figures['lines_while_running']:,}",
                f"{figures['longest_line']:,}",
                f"{figures['lines_at_end']:,}",
                f"{figures['longest_line_at_end']:,}",
            ]
        )
        print(f"measured {label}: {figures}", file=sys.stderr, flush=True)
    headers = [
        "provider", "pieces", "progress output (KiB)", "follower state, most (KiB)", "saved position, most (KiB)",
        "memory held after, traced (KiB)", "RSS growth (KiB)", "all three under 64 KiB", "lines shown while running", "longest line shown (chars)",
        "lines shown at the end", "longest line at the end (chars)",
    ]  # fmt: skip
    print(
        f"Progress bar in live output: a \\r line every {UPDATE_SECONDS:g} s for {seconds:,} s of job time,"
        f" a piece every {args.period} s, a poll every {args.interval} s\n"
    )
    print(markdown_table(headers, rows))
    print()
    print(machine_line())


if __name__ == "__main__":
    main()
