"""Live output on the node: what the wrapper and its publisher cost next to the job they run.

The same batch script runs with a real bash and no Slurm, once as it is and once under the
live-output wrapper (``live_script``), as Slurm starts a batch script: ``SLURM_JOB_ID`` set, its
stdout and stderr sent to ``{try_folder}/{job}.out`` and ``.err``. Two jobs:

- ``line a second``: a line a second on stdout for ``--seconds`` seconds (and a line on stderr every ten);
- ``10 MB at once``: 100,000 lines of 100 bytes on stdout as fast as ``yes`` prints them, and 1,000 on stderr.

For each run, in a session of its own: CPU seconds (user + system) from ``wait4`` of its first
process (the job's script, which the wrapper becomes) and of the publisher (detached from the job's
script, it is reparented to this process, a child subreaper); and, sampled from ``/proc`` every
20 ms, the peak summed RSS of the session's processes and that of the publisher's (every process
of the session but the job's script and what it starts: the publisher's subshell and the ``stat``,
``tail``, ``head``, ``mv``, ``date`` and ``sleep`` it runs; short ones may fall between samples).
The job's own files must be byte for byte those of the plain run, and the published pieces must
add up to them. The plain and wrapped runs of a job run side by side (the line-a-second job mostly
sleeps), each repeated ``-n`` times for the 10-MB job.

    .venv/bin/python -m benchmarks.live_output_node              # 60-s job, period 10 and 2
    .venv/bin/python -m benchmarks.live_output_node --quick      # 10-s job
"""

from __future__ import annotations

import argparse
import ctypes
import os
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from airflow_provider_slurmapi.client.live_output import Piece
from airflow_provider_slurmapi.client.live_wrapper import live_script
from benchmarks.common import machine_line, markdown_table, median

SAMPLE_SECONDS = 0.02
PAGE_KIB = os.sysconf("SC_PAGE_SIZE") // 1024
PR_SET_CHILD_SUBREAPER = 36  # the publisher, once detached, becomes this process's child: its CPU is counted


def line_a_second(seconds: int) -> str:
    return (
        "#!/bin/bash\n"
        f"for i in $(seq 1 {seconds}); do\n"
        '    echo "step $i of the training run: loss=0.$((1000 - i)) lr=3e-4"\n'
        '    if [ $((i % 10)) -eq 0 ]; then echo "checkpoint $i written" >&2; fi\n'
        "    sleep 1\n"
        "done\n"
    )


TEN_MB = (
    "#!/bin/bash\n"
    "yes \"$(printf 'x%.0s' $(seq 1 99))\" | head -n 100000\n"  # 100,000 lines of 99 x's and a newline
    "seq 1 1000 >&2\n"
)


@dataclass
class Run:
    """One run of a batch script, as Slurm would start it."""

    folder: Path
    job_id: str
    script: str
    cpu_s: float = 0.0
    tree_rss_kib: int = 0  # peak summed RSS of the whole tree (sampled)
    wrapper_rss_kib: int = 0  # peak summed RSS of the wrapper's own processes (sampled)
    wall_s: float = 0.0
    pid: int = 0
    publishers: set[int] | None = None  # the session's processes reparented to this one
    done: bool = False
    status: int = 0

    def file(self, stream: str) -> bytes:
        return (self.folder / f"{self.job_id}.{stream}").read_bytes()

    def start(self) -> None:
        env = {"PATH": os.environ["PATH"], "SLURM_JOB_ID": self.job_id, "TMPDIR": str(self.folder.parent)}
        out, err = (open(self.folder / f"{self.job_id}.{stream}", "wb") for stream in ("out", "err"))  # noqa: SIM115
        with out, err:
            process = subprocess.Popen(
                ["bash", "-c", self.script, "slurm_script"], stdout=out, stderr=err, env=env, start_new_session=True
            )
        self.pid, self.wall_s = process.pid, time.monotonic()
        # reaped with wait4 below, for the tree's resource usage: the Popen object never waits
        process.returncode = 0

    def wait(self) -> None:
        _, status, usage = os.wait4(self.pid, 0)
        self.wall_s = time.monotonic() - self.wall_s
        self.status = os.waitstatus_to_exitcode(status)
        self.cpu_s = usage.ru_utime + usage.ru_stime
        self.done = True
        for publisher in self.publishers or ():  # it ends a second or so after the job's script
            _, _, usage = os.wait4(publisher, 0)
            self.cpu_s += usage.ru_utime + usage.ru_stime


def process_table() -> dict[int, tuple[int, int, int]]:
    """pid -> (parent pid, session, RSS in KiB) of every process now."""
    table = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry.name}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # ended meanwhile
        table[int(entry.name)] = (int(stat[1]), int(stat[3]), int(stat[21]) * PAGE_KIB)
    return table


def subtree(table: dict[int, tuple[int, int, int]], root: int) -> set[int]:
    """``root`` and every process it started (the job's script and what it runs)."""
    children: dict[int, list[int]] = {}
    for pid, (parent, _, _) in table.items():
        children.setdefault(parent, []).append(pid)
    found, stack = set(), [root]
    while stack:
        pid = stack.pop()
        if pid in table:
            found.add(pid)
            stack += children.get(pid, [])
    return found


def sample(runs: list[Run]) -> None:
    """Note each run's summed RSS, and its publisher's, until all have ended."""
    while not all(run.done for run in runs):
        table = process_table()
        for run in runs:
            if run.done:
                continue
            session = {pid for pid, (_, sid, _) in table.items() if sid == run.pid}
            publisher = session - subtree(table, run.pid)
            run.publishers = (run.publishers or set()) | {p for p in publisher if table[p][0] == os.getpid()}
            run.tree_rss_kib = max(run.tree_rss_kib, sum(table[pid][2] for pid in session))
            run.wrapper_rss_kib = max(run.wrapper_rss_kib, sum(table[pid][2] for pid in publisher))
        time.sleep(SAMPLE_SECONDS)


def prepared(root: Path, script: str, periods: list[int]) -> tuple[Run, list[Run]]:
    """The script as it is, and under the wrapper for each period, each in a try folder of its own."""
    plain_folder = root / "plain" / "try-1"
    plain_folder.mkdir(parents=True)
    wrapped = []
    for period in periods:
        folder = root / f"period-{period}" / "try-1"
        folder.mkdir(parents=True)
        live = str(folder.parent / "live")
        wrapped.append(
            Run(folder, "42", live_script(script, try_folder=str(folder), live_folder=live, period=period, array=False))
        )
    return Run(plain_folder, "42", script), wrapped


def run(runs: list[Run], together: bool) -> None:
    """Run them side by side (``together``) or one after another, sampling the wrappers' memory."""
    for batch in [runs] if together else [[one] for one in runs]:
        for one in batch:
            one.start()
        sampler = threading.Thread(target=sample, args=(batch,))
        sampler.start()
        for one in batch:
            one.wait()
        sampler.join()


def published(wrapped: Run) -> tuple[int, bytes, bytes]:
    """How many pieces the wrapped run published, and what they add up to, by stream."""
    live = wrapped.folder.parent / "live"
    pieces = sorted((piece, path) for path in live.iterdir() if (piece := Piece.parse(path.name)))
    joined = {s: b"".join(path.read_bytes() for piece, path in pieces if piece.stream == s) for s in ("out", "err")}
    return len(pieces), joined["out"], joined["err"]


def row(case: str, period: int, pairs: list[tuple[Run, Run]]) -> list[str]:
    """A table row: the plain and wrapped runs of one job and period (medians of the pairs)."""
    plain = [p for p, _ in pairs]
    wrapped = [w for _, w in pairs]
    identical = all(w.status == p.status == 0 and w.file(s) == p.file(s) for p, w in pairs for s in ("out", "err"))
    complete = all(published(w)[1:] == (w.file("out"), w.file("err")) for w in wrapped)
    size = len(plain[0].file("out")) + len(plain[0].file("err"))
    return [
        case,
        str(period),
        f"{size / 1e6:.2f}",
        f"{median([p.wall_s for p in plain]):.1f} / {median([w.wall_s for w in wrapped]):.1f}",
        f"{median([p.cpu_s for p in plain]):.3f} / {median([w.cpu_s for w in wrapped]):.3f}",
        f"{median([w.cpu_s - p.cpu_s for p, w in pairs]):+.3f}",
        f"{median([p.tree_rss_kib for p in plain]) / 1024:.1f} / {median([w.tree_rss_kib for w in wrapped]) / 1024:.1f}",
        f"{median([w.wrapper_rss_kib for w in wrapped]) / 1024:.1f}",
        str(median([published(w)[0] for w in wrapped])),
        "yes" if identical and complete else "NO",
    ]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a 10-s line-a-second job, one 10-MB run (CI smoke run)")
    parser.add_argument("--seconds", type=int, default=None, help="length of the line-a-second job (default 60)")
    parser.add_argument("--periods", type=int, nargs="+", default=[10, 2], help="publishing periods (default 10 2)")
    parser.add_argument(
        "-n", type=int, default=None, help="runs of the 10-MB job per period (default 3, 1 with --quick)"
    )
    args = parser.parse_args()
    args.seconds = args.seconds or (10 if args.quick else 60)
    args.n = args.n or (1 if args.quick else 3)
    return args


def main() -> None:
    args = parse_args()
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    print(machine_line())
    print(
        f"Real bash, no Slurm; the wrapper's processes sampled every {SAMPLE_SECONDS * 1000:g} ms; medians where repeated."
    )
    print(
        f"Line a second: the plain run and one wrapped run per period side by side; 10 MB: one run at a time, {args.n} times.\n"
    )
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-live-node-") as temp:
        plain, wrapped = prepared(Path(temp) / "lines", line_a_second(args.seconds), args.periods)
        run([plain, *wrapped], together=True)
        for period, one in zip(args.periods, wrapped, strict=True):
            rows.append(row(f"line a second, {args.seconds} s", period, [(plain, one)]))
        tries = [prepared(Path(temp) / f"10mb-{attempt}", TEN_MB, args.periods) for attempt in range(args.n)]
        for plain, wrapped in tries:
            run([plain, *wrapped], together=False)
        for index, period in enumerate(args.periods):
            rows.append(row("10 MB at once", period, [(plain, wrapped[index]) for plain, wrapped in tries]))
    headers = [
        "job",
        "period (s)",
        "output (MB)",
        "wall plain / wrapped (s)",
        "CPU plain / wrapped (s)",
        "extra CPU (s)",
        "peak RSS plain / wrapped (MiB)",
        "wrapper+publisher peak RSS (MiB)",
        "pieces",
        "identical, pieces complete",
    ]
    print(markdown_table(headers, rows))


if __name__ == "__main__":
    main()
