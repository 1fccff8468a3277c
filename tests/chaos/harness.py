"""Runs the example DAG's Slurm task many times the way Airflow runs it, under injected faults.

Each try of a task runs in its own worker process (forked from a clean fork server), which the
harness may SIGKILL at a random moment, as a worker that dies. A try that defers hands its
trigger to the harness, which runs it like a triggerer, may stop it at a random moment and
restart it from its serialised form (a triggerer restart), and then resumes the task in a new
worker process with the trigger's event. A try that fails for any reason but its job's own
failure is retried, as Airflow does with ``retries``. Meanwhile the emulator injects random
API faults. Then every task run's outcome is checked against what Slurm says.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import importlib.util
import json
import logging
import multiprocessing
import os
import random
import re
import signal
import sys
import threading
import time
import traceback
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from airflow_provider_slurmapi.client.paths import base_job_id

REPO = Path(__file__).resolve().parents[2]
EXAMPLE_DAG = REPO / "example_dags" / "example_slurm_submit_job.py"
MAX_TRIES = 10  # enough that random faults never exhaust a task run's retries
HEARTBEAT_TIMEOUT = 1.0  # seconds, scaled down: longer than any request in flight (latency faults: 0.5 s)


# --- the worker process ------------------------------------------------------------------------


class ChaosTaskInstance:
    def __init__(self, spec: dict[str, Any]) -> None:
        self.dag_id, self.task_id, self.run_id = spec["dag_id"], spec["task_id"], spec["run_id"]
        self.map_index, self.try_number, self.max_tries = -1, spec["try_number"], MAX_TRIES - 1
        self.start_date = datetime.datetime.now(datetime.UTC)

    def xcom_push(self, key: str, value: Any) -> None:
        pass


class FileTaskStateStore:
    """Airflow 3.3's task state store: a write is durable at once, whatever happens next."""

    def __init__(self, path: str) -> None:
        self.path = Path(path)

    def get(self, key: str, default: Any = None) -> Any:
        return json.loads(self.path.read_text()).get(key, default) if self.path.exists() else default

    def set(self, key: str, value: Any) -> None:
        values = json.loads(self.path.read_text()) if self.path.exists() else {}
        self.path.write_text(json.dumps({**values, key: value}))


def _load_task(spec: dict[str, Any]) -> Any:
    module_spec = importlib.util.spec_from_file_location("chaos_example_dag", EXAMPLE_DAG)
    assert module_spec and module_spec.loader
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    task = module.dag.get_task("train")
    task.deferrable = spec["deferrable"]
    task.retries = MAX_TRIES - 1  # Airflow's max_tries for a task run that is never cleared
    task.poll_interval = 0.3  # the example polls every 2 s; the chaos run has many short jobs
    task.job = {**task.job, "environment": [*task.job["environment"], f"WANDB_API_KEY={spec['secret']}"]}
    return task


def run_try(spec: dict[str, Any], results: Any) -> None:
    """One try (``execute``) or its resumption (``execute_complete``), in a worker process."""
    from airflow.providers.common.compat.sdk import TaskDeferred

    log_file = open(spec["log_path"], "a", buffering=1)  # noqa: SIM115 - lives as long as the process
    os.dup2(log_file.fileno(), 1)
    os.dup2(log_file.fileno(), 2)
    logging.basicConfig(stream=log_file, level=logging.DEBUG, force=True)
    task = _load_task(spec)
    ti = ChaosTaskInstance(spec)
    context: dict[str, Any] = {
        "ti": ti,
        "params": spec["params"],
        "run_id": spec["run_id"],
        "ds_nodash": "20260101",
    }
    if spec["state_store"]:
        context["task_state_store"] = FileTaskStateStore(spec["state_store"])
    try:
        task.render_template_fields(context, jinja_env=task.dag.get_template_env())
        if spec["event"] is None:
            task.execute(context)
        else:
            task.execute_complete(context, spec["event"])
        results.send({"outcome": "success"})
    except TaskDeferred as deferred:
        results.send({"outcome": "deferred", "trigger": deferred.trigger.serialize()})
    except Exception as error:
        message = f"{type(error).__name__}: {error}"
        print(traceback.format_exc(), file=sys.stderr)
        results.send({"outcome": "failed", "error": message})


# --- the harness: scheduler, workers and triggerer ----------------------------------------------


@dataclass
class Chaos:
    """How rough the run is."""

    seed: int = 1
    worker_kill_rate: float = 0.25  # share of tries whose worker is SIGKILLed at a random moment
    triggerer_restart_rate: float = 0.3  # share of deferrals whose trigger is stopped and restarted
    job_seconds: float = 1.0


@dataclass
class TaskRun:
    number: int
    deferrable: bool
    exit_code: int
    uses_state_store: bool
    tries: int = 0
    outcome: str = ""  # "success" or the final error
    kills: int = 0
    restarts: int = 0


@dataclass
class Tally:
    runs: list[TaskRun] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


class Harness:
    def __init__(self, chaos: Chaos, work: Path, secret: str) -> None:
        self.chaos = chaos
        self.work = work
        self.secret = secret
        self.rng = random.Random(chaos.seed)
        self.rng_lock = threading.Lock()
        self.context = multiprocessing.get_context("forkserver")
        self.context.set_forkserver_preload(["tests.chaos.harness", "airflow_provider_slurmapi.hooks.slurm_job_api"])

    def random(self) -> float:
        with self.rng_lock:
            return self.rng.random()

    def run_all(self, count: int, concurrency: int) -> list[TaskRun]:
        runs = [
            TaskRun(
                number=n,
                deferrable=n % 2 == 0,
                exit_code=3 if n % 5 == 4 else 0,
                uses_state_store=n % 4 < 2,
            )
            for n in range(count)
        ]
        with ThreadPoolExecutor(concurrency) as pool:
            list(pool.map(self.run_task, runs))
        return runs

    def spec(self, run: TaskRun, event: dict[str, Any] | None) -> dict[str, Any]:
        return {
            "dag_id": "example_slurm_submit_job",
            "task_id": "train",
            "run_id": run_id(run),
            "try_number": run.tries,
            "deferrable": run.deferrable,
            "params": {"epochs": 1, "seconds_per_epoch": self.chaos.job_seconds, "exit_code": run.exit_code},
            "secret": self.secret,
            "state_store": str(self.work / f"store-{run.number}.json") if run.uses_state_store else None,
            "event": event,
            "log_path": str(self.work / f"worker-{run.number}.log"),
        }

    def run_task(self, run: TaskRun) -> None:
        while run.tries < MAX_TRIES:
            run.tries += 1
            result = self.worker(run, None, may_kill=True)
            if result["outcome"] == "deferred":
                event = asyncio.run(self.triggerer(run, result["trigger"]))
                result = self.worker(run, event, may_kill=False)
            if result["outcome"] == "success" or job_failed(result.get("error", "")):
                run.outcome = result["outcome"] if result["outcome"] == "success" else result["error"]
                return
            run.outcome = result.get("error", "killed")  # retried, as Airflow does with retries
            if result.get("error") == "worker killed":
                # Airflow retries a killed worker's task only once it has missed its heartbeats
                # (task_instance_heartbeat_timeout, 300 s by default): by then a request the dead
                # worker had sent (a submit) has reached Slurm, and the retry's key lookup finds its job
                time.sleep(HEARTBEAT_TIMEOUT)
        return

    def worker(self, run: TaskRun, event: dict[str, Any] | None, *, may_kill: bool) -> dict[str, Any]:
        receive, send = self.context.Pipe(duplex=False)
        process = self.context.Process(target=run_try, args=(self.spec(run, event), send))
        process.start()
        send.close()
        kill_at = self.random() * 2.0 if may_kill and self.random() < self.chaos.worker_kill_rate else None
        process.join(kill_at)
        if process.is_alive():
            os.kill(process.pid, signal.SIGKILL)  # a worker that dies: no on_kill, no cleanup
            process.join()
            run.kills += 1
            return {"outcome": "failed", "error": "worker killed"}
        with contextlib.closing(receive):
            return receive.recv() if receive.poll() else {"outcome": "failed", "error": "worker died"}

    async def triggerer(self, run: TaskRun, serialized: tuple[str, dict[str, Any]]) -> dict[str, Any]:
        from airflow_provider_slurmapi.triggers.job import SlurmJobTrigger

        _, kwargs = serialized
        while True:
            trigger = SlurmJobTrigger(**kwargs)  # rebuilt from its serialised form, as a triggerer does
            events = trigger.run()
            waiting = asyncio.ensure_future(events.__anext__())
            if self.random() < self.chaos.triggerer_restart_rate:
                done, _ = await asyncio.wait([waiting], timeout=self.random() * 2.0)
                if not done:
                    waiting.cancel()  # the triggerer stops; the trigger must not cancel the job
                    with contextlib.suppress(asyncio.CancelledError):
                        await waiting
                    await events.aclose()
                    run.restarts += 1
                    continue
            event = await waiting
            await events.aclose()
            return event.payload


def run_id(run: TaskRun) -> str:
    return f"chaos__{run.number:05d}"


def job_failed(error: str) -> bool:
    """A failure that reports the job's own end (not an API or worker problem): final, not retried."""
    return error.startswith("AirflowException: Slurm job ") and " is " in error and "deadline" not in error


# --- checking the outcome against Slurm ---------------------------------------------------------


@dataclass
class Verdict:
    table: list[tuple[str, str]]
    duplicates: int
    lost: int
    disagreements: int
    problems: list[str]
    submit_faults: Counter[str]


def verify(runs: list[TaskRun], accounting: list[dict[str, Any]], fault_log: list[Any], chaos: Chaos) -> Verdict:
    """Compare each task run's outcome with the jobs Slurm has for its key (``/slurmdb`` records).

    A task run may have a second job only if its first one failed while no try was watching it
    (a failed job is submitted anew by design); any other extra job is a duplicate. Each fault is
    tied to the task run whose call it hit where the call names one (a submit by its key, a job's
    own read or cancel by its ID), so that the table says, per fault kind, what the runs it hit came to.
    """
    from airflow_provider_slurmapi.client.jobs import JobStatus
    from airflow_provider_slurmapi.client.submission import carries_key, submission_key

    records = [(JobStatus.from_slurmdb(record), record["time"]) for record in accounting]
    problems: list[str] = []
    wrong: dict[int, Counter[str]] = {}  # task run -> "duplicates", "lost", "wrong outcomes"
    without_one = resubmitted = 0
    run_of_job: dict[str, int] = {}
    for run in runs:
        key = submission_key("example_slurm_submit_job", "train", run_id(run), -1)
        jobs = sorted(((job, times) for job, times in records if carries_key(job, key)), key=lambda j: int(j[0].job_id))
        wrong[run.number] = tally = Counter()
        run_of_job.update({base_job_id(job.job_id): run.number for job, _ in jobs})
        if not jobs:
            tally["lost"] += 1
            without_one += 1
            problems.append(f"task run {run.number}: no Slurm job ({run.outcome})")
            continue
        for (earlier, times), (later, later_times) in zip(jobs, jobs[1:], strict=False):
            if earlier.is_success or later_times["submission"] < times["end"] or not times["end"]:
                tally["duplicates"] += 1
                problems.append(f"task run {run.number}: job {later.job_id} while {earlier.describe()}")
        without_one += len(jobs) != 1
        resubmitted += len(jobs) > 1
        job = jobs[-1][0]
        expected_success = job.is_success
        if (run.outcome == "success") != expected_success or (
            not expected_success and f"exit code {run.exit_code}" not in run.outcome
        ):
            tally["wrong outcomes"] += 1
            problems.append(f"task run {run.number}: task says {run.outcome!r}, Slurm says {job.describe()}")
    run_of_key = {submission_key("example_slurm_submit_job", "train", run_id(run), -1): run.number for run in runs}
    faults = Counter(record.kind for record in fault_log)
    submit_faults = Counter(record.kind for record in fault_log if record.path.endswith("/job/submit"))
    hit: dict[str, set[int]] = {}
    for record in fault_log:
        number = _run_hit(record, run_of_key, run_of_job)
        if number is not None:
            hit.setdefault(record.kind, set()).add(number)
    total = Counter[str]()
    for tally in wrong.values():
        total.update(tally)
    slurm_jobs = [job for job, _ in records]
    kinds = _kinds(faults)
    table = [
        (
            "task runs",
            f"{len(runs)} ({sum(r.deferrable for r in runs)} deferrable, "
            f"{sum(not r.deferrable for r in runs)} waiting in the worker)",
        ),  # fmt: skip
        ("tries", str(sum(r.tries for r in runs))),
        ("worker kills (SIGKILL)", str(sum(r.kills for r in runs))),
        ("triggerer restarts", str(sum(r.restarts for r in runs))),
        ("faults injected", f"{sum(faults.values())} ({kinds})"),
        ("  of them on a submit", f"{sum(submit_faults.values())} ({_kinds(submit_faults)})"),
        ("Slurm jobs created", str(len({job.job_id for job in slurm_jobs}))),
        ("task runs with exactly one job", f"{len(runs) - without_one} of {len(runs)}"),
        ("  a second job after the first failed unwatched", str(resubmitted)),
        ("duplicate jobs", str(total["duplicates"])),
        ("jobs lost", str(total["lost"])),
        ("outcomes that disagree with Slurm", str(total["wrong outcomes"])),
        (
            "task runs succeeded / failed",
            f"{sum(r.outcome == 'success' for r in runs)} / {sum(r.outcome != 'success' for r in runs)}",
        ),  # fmt: skip
        ("seed", str(chaos.seed)),
    ]
    by_kind = [("fault kind", "calls hit, on a submit, task runs hit: duplicates / lost / wrong outcomes")]
    for kind in sorted(faults):
        runs_hit = hit.get(kind, set())
        among = Counter[str]()
        for number in runs_hit:
            among.update(wrong[number])
        by_kind.append(
            (
                f"  {kind}",
                f"{faults[kind]}, {submit_faults[kind]}, {len(runs_hit)}: "
                f"{among['duplicates']} / {among['lost']} / {among['wrong outcomes']}",
            )
        )
    return Verdict(
        table + by_kind, total["duplicates"], total["lost"], total["wrong outcomes"], problems, submit_faults
    )


def _run_hit(record: Any, run_of_key: dict[str, int], run_of_job: dict[str, int]) -> int | None:
    """The task run whose call a fault hit, where the call names one: a submit by the key in its
    comment, a job's own read or cancel by its ID; None for reads of many jobs."""
    for word in record.comment.split():
        if word in run_of_key:
            return run_of_key[word]
    match = re.search(r"/job/(\d+)", record.path)
    return run_of_job.get(match.group(1)) if match else None


def _kinds(faults: Counter[str]) -> str:
    return ", ".join(f"{kind} {count}" for kind, count in sorted(faults.items()))


def format_table(rows: list[tuple[str, str]]) -> str:
    width = max(len(name) for name, _ in rows)
    return "\n".join(f"{name:<{width}}  {value}" for name, value in rows)
