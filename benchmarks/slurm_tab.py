"""Slurm job tab: what building the view and rendering the page cost for a job requeued 49 times,
against a job of one run, measured in the same run.

Both jobs are running and come from records a real Slurm 24.11 gave (``tests/fixtures/slurm-24.11.5``):
the one-run job is the captured running job; the 50-run job is the captured requeued job's history
(a node failure, then a run), its first accounting record copied once per earlier run with its
``restart_cnt`` and times moved on, and its live record of the running second run renumbered as the
50th. Each page carries the same two output excerpts of 100 lines. Only the tab's pure part is timed
(``build_job_view`` and ``render_page``): no reading, no HTTP. The cases run round-robin (each round
starting one case later) so drift affects both alike.

    .venv/bin/python -m benchmarks.slurm_tab [--quick] [-n REPEATS]
"""

from __future__ import annotations

import copy
import gc
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from benchmarks.common import REPO_ROOT, machine_line, markdown_table, median, p95, parse_args

FIXTURES = REPO_ROOT / "tests" / "fixtures" / "slurm-24.11.5"
WARMUP = 20  # untimed renders per case
RUNS = 50
RUN_SECONDS = 600  # each derived run: 2 min waiting for BeginTime, 8 min running


@dataclass
class Case:
    name: str
    runs: int
    render: Callable[[], str]
    seconds: list[float] = field(default_factory=list)
    page_bytes: int = 0


def records(name: str) -> list[dict[str, Any]]:
    jobs: list[dict[str, Any]] = json.loads((FIXTURES / name).read_text())["jobs"]
    return jobs


def one_run_job() -> tuple[str, list[dict[str, Any]], list[dict[str, Any]], float]:
    live = records("job_running.json")
    return "1", live, records("slurmdb_job_running.json"), live[0]["start_time"]["number"] + 300.0


def requeued_job(runs: int) -> tuple[str, list[dict[str, Any]], list[dict[str, Any]], float]:
    """The captured requeued job with ``runs`` runs: ``runs - 1`` ended ones (NODE_FAIL, PREEMPTED
    and REQUEUED in turn), then the running one, in accounting and in the live queue."""
    first, _ = records("slurmdb_node_down_requeue_final.json")
    ends = (["NODE_FAIL"], ["PREEMPTED"], ["PENDING", "REQUEUED"])
    accounting = []
    submitted = first["time"]["submission"]
    for number in range(runs):
        record = copy.deepcopy(first)
        record["restart_cnt"] = number
        record["state"] = {"current": ends[number % 3] if number < runs - 1 else ["RUNNING"], "reason": "BeginTime"}
        start, end = submitted + 120, submitted + RUN_SECONDS
        record["time"].update(submission=submitted, eligible=start, start=start, end=end if number < runs - 1 else 0)
        accounting.append(record)
        submitted = end
    live = copy.deepcopy(records("requeue_running_5_running.json"))
    live[0].update(job_id=first["job_id"], restart_cnt=runs - 1)
    live[0]["submit_time"]["number"] = accounting[-1]["time"]["submission"]
    live[0]["start_time"]["number"] = accounting[-1]["time"]["start"]
    return str(first["job_id"]), live, accounting, accounting[-1]["time"]["start"] + 300.0


def case(name: str, job: tuple[str, list[dict[str, Any]], list[dict[str, Any]], float]) -> Case:
    from airflow_provider_slurmapi.ui.job_view import build_job_view
    from airflow_provider_slurmapi.ui.page import OutputExcerpt, PageContext, render_page

    job_id, live, accounting, now = job
    lines = "\n".join(f"step {n:05d} loss {1 / (n + 1):.6f} lr 3.0e-04 tokens/s 51234" for n in range(100))
    context = PageContext(
        title="train (map index 3)",
        cancel_url=f"/slurm-job-tab/tasks/train/3/cancel?job={job_id}",
        refresh_seconds=30,
        nonce="bench-nonce",
        output=(
            OutputExcerpt("stdout", f"gs://bucket/airflow/train__{job_id}.out", lines),
            OutputExcerpt("stderr", f"gs://bucket/airflow/train__{job_id}.err", lines),
        ),
    )

    def render() -> str:
        return render_page(build_job_view(job_id, "a3-cluster", live, accounting, now), context)

    runs = len(build_job_view(job_id, "a3-cluster", live, accounting, now).runs)
    return Case(name, runs, render)


def run(cases: list[Case], repeats: int) -> None:
    for each in cases:
        for _ in range(WARMUP):
            each.page_bytes = len(each.render().encode())
    gc.collect()
    for r in range(repeats):
        shift = r % len(cases)
        for each in cases[shift:] + cases[:shift]:
            start = time.perf_counter()
            each.render()
            each.seconds.append(time.perf_counter() - start)


def table(cases: list[Case]) -> str:
    base = median(cases[0].seconds)
    rows = [
        [
            each.name,
            each.runs,
            f"{median(each.seconds) * 1000:.3f}",
            f"{p95(each.seconds) * 1000:.3f}",
            f"{median(each.seconds) / base:.1f}x",
            f"{each.page_bytes / 1024:.1f}",
        ]
        for each in cases
    ]
    headers = ["job", "runs", "median ms", "p95 ms", "median / baseline", "page KiB"]
    return markdown_table(headers, rows)


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], full=2000, quick=50, what="timed renders per case")
    cases = [case("(a) one run (baseline)", one_run_job()), case(f"(b) requeued, {RUNS} runs", requeued_job(RUNS))]
    if cases[1].runs != RUNS:
        raise SystemExit(f"the requeued job has {cases[1].runs} runs, not {RUNS}")
    run(cases, args.n)
    print(f"### Slurm job tab: view and page of a job with {RUNS} runs against one run, {args.n} renders each\n")
    print(table(cases))
    print()
    print(
        "One render: build_job_view from the job's live and accounting records, then render_page "
        "(the header, the timeline SVG, the table of runs, the usage, two output excerpts of 100 lines, "
        f"the cancel button), wall time in this process after {WARMUP} untimed renders per case. "
        "Both jobs are running, as a page that refreshes itself shows them."
    )
    print()
    print(machine_line())


if __name__ == "__main__":
    main()
