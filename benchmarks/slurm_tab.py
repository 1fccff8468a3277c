"""Slurm job tab: what showing a job requeued many times costs, against a job of one run, measured
in the same run: the view and page alone, then the tab's whole work against the emulator.

The view and page alone (``build_job_view`` and ``render_page``: no reading, no HTTP), for two
running jobs made of records a real Slurm 24.11 gave (``tests/fixtures/slurm-24.11.5``): the one-run
job is the captured running job; the 50-run job is the captured requeued job's history (a node
failure, then a run), its first accounting record copied once per earlier run with its
``restart_cnt`` and times moved on, and its live record of the running second run renumbered as the
50th. Each page carries the same two output excerpts of 100 lines.

End to end, what the tab's ``/tab`` endpoint does once it knows the task's job: ``read_task_job``
(a hook made from the task's connection arguments, the job's live record and all its accounting
records read through an emulator in its own process), then ``build_job_view`` and ``render_page``.
Two completed jobs: one of one run, and one requeued ``--requeues`` times while it ran (the emulator
runs a requeued job again at once), so its accounting has a record per run. Each read drops the
job's shared read first (``forget``), so that each one reads Slurm.

Both parts run their cases round-robin (each round starting one case later) so drift affects all
alike.

    .venv/bin/python -m benchmarks.slurm_tab [--quick] [-n RENDERS] [--reads READS] [--requeues REQUEUES]
"""

from __future__ import annotations

import argparse
import copy
import gc
import json
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from unittest import mock

from airflow_provider_slurmapi.ui.trust import TaskRun
from benchmarks.common import (
    REPO_ROOT,
    EmulatorProcess,
    connection_json,
    emulator_process,
    machine_line,
    markdown_table,
    median,
    p95,
    use_private_airflow_home,
)

FIXTURES = REPO_ROOT / "tests" / "fixtures" / "slurm-24.11.5"
WARMUP = 20  # untimed renders per case
RUNS = 50
RUN_SECONDS = 600  # each derived run: 2 min waiting for BeginTime, 8 min running
READ_WARMUP = 3  # untimed tab reads per job: imports, the connection pool
STATE_WAIT_SECONDS = 60
TASK_RUN = TaskRun("bench", "manual__1", "train", -1)  # the task run whose tab shows the jobs
# a run sleeps until it is requeued, but the job's REQUEUES-th requeue runs to its end at once
JOB_SCRIPT = """#!/bin/bash
if [ "${SLURM_RESTART_COUNT:-0}" -lt "$REQUEUES" ]; then exec sleep 600; fi
echo "run ${SLURM_RESTART_COUNT:-0} done"
"""


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


def run_renders(cases: list[Case], repeats: int) -> None:
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


def render_table(cases: list[Case]) -> str:
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


# --- end to end: the tab's read, view and page of jobs in the emulator --------------------------------


def wait_for(hook: Any, job_id: str, state: str, restarts: int) -> None:
    deadline = time.monotonic() + STATE_WAIT_SECONDS
    while True:
        status = hook.get_job(job_id)
        if status.state == state and status.restarts == restarts:
            return
        if time.monotonic() > deadline:
            raise SystemExit(f"job {job_id} is {status.state} after {status.restarts} requeues, not {state}")
        time.sleep(0.05)


def completed_job(emu: EmulatorProcess, workdir: Path, requeues: int) -> str:
    """A job requeued ``requeues`` times while it ran, then completed; its accounting checked."""
    from airflow_provider_slurmapi.hooks.slurm_job_api import SlurmJobApiHook

    hook = SlurmJobApiHook()
    job = {
        "name": f"train-{requeues}-requeues",
        "current_working_directory": str(workdir),
        "environment": ["PATH=/usr/bin:/bin", f"REQUEUES={requeues}"],
    }
    job_id = hook.submit_job(job, JOB_SCRIPT, key=TASK_RUN.key)  # the task run's own job, as the operators submit it
    for restarts in range(requeues):
        wait_for(hook, job_id, "RUNNING", restarts)
        emu.requeue(job_id)
    wait_for(hook, job_id, "COMPLETED", requeues)
    records = len(hook.job_history(job_id).accounting)
    if records != requeues + 1:
        raise SystemExit(f"job {job_id} has {records} accounting records, not {requeues + 1}")
    return job_id


@dataclass
class TabCase:
    name: str
    task_job: Any  # the TaskJob the tab would find in the task's XComs
    records: int = 0
    http_calls: int = 0
    page_bytes: int = 0
    read_s: list[float] = field(default_factory=list)
    render_s: list[float] = field(default_factory=list)

    @property
    def total_s(self) -> list[float]:
        return [read + render for read, render in zip(self.read_s, self.render_s, strict=True)]


def tab_case(name: str, job_id: str) -> TabCase:
    from airflow_provider_slurmapi.operators.base import connection_kwargs
    from airflow_provider_slurmapi.ui.task_job import TaskJob

    # what an operator left at its defaults pushes as XCom slurm_connection
    return TabCase(name, TaskJob(TASK_RUN, job_id, connection=connection_kwargs({}), output={}, watches=False))


def show_tab(task_job: Any) -> tuple[float, float, Any, str]:
    """What ``/tab`` does once it has the task's job: the read's and the render's seconds, the
    reading and the page."""
    from airflow_provider_slurmapi.ui.job_view import build_job_view
    from airflow_provider_slurmapi.ui.page import PageContext, render_page
    from airflow_provider_slurmapi.ui.task_job import forget, read_task_job

    forget(task_job)  # else the reads after the first would be the shared read of 5 s
    start = time.perf_counter()
    reading = read_task_job(task_job)
    read = time.perf_counter()
    if reading.ownership != "own":  # else the page would show one line, not the job
        raise SystemExit(f"job {task_job.job_id} is not the task run's own: {reading.ownership}")
    history = reading.history
    view = build_job_view(task_job.job_id, reading.cluster, history.live, history.accounting, time.time())
    # an ended job: no cancel button, no refresh; no output_uri, so no output read, only why
    context = PageContext(title="train", cancel_url=None, refresh_seconds=None, nonce="bench-nonce")
    page = render_page(view, context, reading.output_problem)
    return read - start, time.perf_counter() - read, reading, page


def count_http_calls(task_job: Any) -> int:
    """Requests one tab read sends, on any session (the new hook's token request too)."""
    from requests.adapters import HTTPAdapter

    with mock.patch.object(HTTPAdapter, "send", autospec=True, side_effect=HTTPAdapter.send) as send:
        show_tab(task_job)
    return send.call_count


def time_new_client(task_job: Any, repeats: int) -> list[float]:
    """What making the read's hook and client costs alone: the connection, the key file's credentials."""
    from airflow_provider_slurmapi.ui.task_job import hook_for

    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        _ = hook_for(task_job).client  # built on first use
        seconds.append(time.perf_counter() - start)
    return seconds


def run_tabs(cases: list[TabCase], repeats: int) -> None:
    for each in cases:
        for _ in range(READ_WARMUP):
            _, _, reading, page = show_tab(each.task_job)
        each.records, each.page_bytes = len(reading.history.accounting), len(page.encode())
        each.http_calls = count_http_calls(each.task_job)
    gc.collect()
    for r in range(repeats):
        shift = r % len(cases)
        for each in cases[shift:] + cases[:shift]:
            read, render, _, _ = show_tab(each.task_job)
            each.read_s.append(read)
            each.render_s.append(render)


def tab_table(cases: list[TabCase]) -> str:
    base = median(cases[0].total_s)
    rows = [
        [
            each.name,
            each.records,
            each.http_calls,
            *(f"{f(times) * 1000:.2f}" for times in (each.read_s, each.render_s, each.total_s) for f in (median, p95)),
            f"{median(each.total_s) / base:.1f}x",
            f"{each.page_bytes / 1024:.1f}",
        ]
        for each in cases
    ]
    headers = [
        "job",
        "accounting records",
        "HTTP calls",
        "read median ms",
        "read p95 ms",
        "render median ms",
        "render p95 ms",
        "total median ms",
        "total p95 ms",
        "total / baseline",
        "page KiB",
    ]
    return markdown_table(headers, rows)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small run for CI smoke tests")
    parser.add_argument("-n", type=int, help="timed renders per case of the view and page (2000; --quick 20)")
    parser.add_argument("--reads", type=int, help="timed tab reads per job against the emulator (200; --quick 5)")
    parser.add_argument("--requeues", type=int, help="requeues of the emulator's requeued job (50; --quick 2)")
    args = parser.parse_args()
    for flag, full, quick in (("-n", 2000, 20), ("--reads", 200, 5), ("--requeues", RUNS, 2)):
        name = flag.lstrip("-")
        if getattr(args, name) is None:
            setattr(args, name, quick if args.quick else full)
        if getattr(args, name) < 1:
            parser.error(f"{flag} must be at least 1")
    return args


def main() -> None:
    args = parse_args()
    use_private_airflow_home()
    cases = [case("(a) one run (baseline)", one_run_job()), case(f"(b) requeued, {RUNS} runs", requeued_job(RUNS))]
    if cases[1].runs != RUNS:
        raise SystemExit(f"the requeued job has {cases[1].runs} runs, not {RUNS}")
    run_renders(cases, args.n)
    print(f"### Slurm job tab: view and page of a job with {RUNS} runs against one run, {args.n} renders each\n")
    print(render_table(cases))
    print()
    print(
        "One render: build_job_view from the job's live and accounting records, then render_page "
        "(the header, the timeline SVG, the table of runs, the usage, two output excerpts of 100 lines, "
        f"the cancel button), wall time in this process after {WARMUP} untimed renders per case. "
        "Both jobs are running, as a page that refreshes itself shows them."
    )
    print()

    with (
        tempfile.TemporaryDirectory(prefix="bench-slurm-tab-") as work,
        emulator_process(Path(work), "--sched-delay=0", "--requeue-delay=0", "--min-job-age=3600") as emu,
    ):
        os.environ["AIRFLOW_CONN_SLURM_JOB_API_DEFAULT"] = connection_json(emu)
        baseline = completed_job(emu, Path(work), 0)
        requeued = completed_job(emu, Path(work), args.requeues)
        tabs = [tab_case("(a) one run (baseline)", baseline), tab_case(f"(b) requeued {args.requeues} times", requeued)]
        run_tabs(tabs, args.reads)
        new_client = time_new_client(tabs[0].task_job, args.reads)
    print(f"The requeued job's accounting: {tabs[1].records} records ({args.requeues} requeues, then its last run)\n")
    print(f"### Slurm job tab end to end: read, view and page of a completed job, {args.reads} reads each\n")
    print(tab_table(tabs))
    print()
    print(
        "Read: read_task_job for the task's job, after forget() dropped its shared read: a hook made "
        "from the connection arguments (the connection from the environment, a token from the emulator), "
        "then the job's live record and its accounting records through the emulator, in its own process "
        "on this machine, and their decoding. Render: build_job_view and render_page. Wall time in this "
        f"process after {READ_WARMUP} untimed reads per job; HTTP calls counted in one more. Not included: "
        "the api-server's authentication and the XCom lookup of the task's job (database reads). "
        f"Of the read, making its hook's client alone (the connection, credentials from the key file) "
        f"took {median(new_client) * 1000:.2f} ms (median of {len(new_client)})."
    )
    print()
    print(machine_line())


if __name__ == "__main__":
    main()
