"""Every code example of the documentation, run for real against the emulator.

- The DAG files under ``docs/examples/dags`` run with ``dag.test()`` (``run_examples.py``), in two
  processes at once, each with its own Airflow home and emulator. ``DAG_RUNS`` lists the runs; the
  tests below check how each ended: task states, XComs, the Slurm jobs and the failure messages
  the pages quote.
- The shell blocks marked ``:class: runnable`` run as one bash session per page, in the order a
  reader types them, in a directory laid out like a project (``dags/``, ``tests/``). The only
  changes to the text are the ports of the emulator and of the Cloud Storage stand-in, swapped for
  free ones. The session of the testing page runs ``docs/examples/tests`` with pytest.

All of this starts at once when the module's first test needs it, and runs in the background
while the tests wait for their part.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("sphinx", reason="the docs extra is not installed")

from tests.docs import pages  # noqa: E402

pytestmark = pytest.mark.docs

BIN = Path(sys.executable).parent
RUNNER = Path(__file__).with_name("run_examples.py")
DOCS_PORT = "8780"  # the port the pages use
DOCS_STORAGE_PORT = "9023"  # the Cloud Storage stand-in's port in the pages
WAIT = 300  # seconds any background process may take

# name -> how each example DAG is run; "group" picks the process (runs of one group are sequential).
DAG_RUNS: list[dict[str, Any]] = [
    {"name": "slurm_train", "dag_id": "slurm_train"},
    {"name": "slurm_train_bad_epochs", "dag_id": "slurm_train", "conf": {"epochs": "x"}},
    {"name": "slurm_timeout", "dag_id": "slurm_timeout"},
    {"name": "slurm_sensor", "dag_id": "slurm_sensor"},
    {"name": "slurm_cancel", "dag_id": "slurm_cancel"},
    {"name": "slurm_custom_trigger", "dag_id": "slurm_custom_trigger"},
    {"name": "slurm_hook", "dag_id": "slurm_hook"},
    # asset-scheduled: dag.test() runs them with no asset event (the deployment test sends real ones)
    {"name": "slurm_job_events", "dag_id": "slurm_job_events"},
    {"name": "slurm_job_failures", "dag_id": "slurm_job_failures"},
    # fine_tune polls at the default 30 s interval: in a process of its own, beside the others
    {"name": "slurm_submit_options", "dag_id": "slurm_submit_options", "group": "slow"},
    # job output read from a Cloud Storage stand-in that the emulator publishes to (run_examples.py)
    {"name": "slurm_output", "dag_id": "slurm_output", "output": True, "group": "output"},
    {
        "name": "slurm_output_bad_epochs",
        "dag_id": "slurm_output",
        "conf": {"epochs": "x"},
        "output": True,
        "group": "output",
    },
    # @task.slurm_python's return values come back through the job output location
    {"name": "slurm_taskflow", "dag_id": "slurm_taskflow", "output": True, "group": "output"},
    {
        "name": "slurm_taskflow_bad_epochs",
        "dag_id": "slurm_taskflow",
        "conf": {"epochs": 0},
        "output": True,
        "group": "output",
    },
    # the Cloud Composer guide's first DAG: an emulator with a GPU partition, as
    # `slurm-job-api-emulator --partition a3:gpu:h100:8 --partition debug` starts it
    {
        "name": "slurm_first_gpu_job",
        "dag_id": "slurm_first_gpu_job",
        "output": True,
        "emulator": {"partitions": ["a3:gpu:h100:8", "debug"]},
        "group": "gpu",
    },
]

# page -> what its commands assume is already there (an Airflow installation, with its database)
SESSION_PAGES: dict[str, str] = {
    "installation.md": "",
    "connection.md": "airflow db migrate > /dev/null",
    "testing.md": "",  # the page sets up its Airflow home itself
    "output.md": "airflow db migrate > /dev/null",
    "composer.md": "airflow db migrate > /dev/null",
    "cluster-requirements.md": "",  # the page starts its own emulator
}

KEY = re.compile(r"^airflow-key=[0-9a-f]{24}$")


def free_port() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return str(sock.getsockname()[1])


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without Airflow, emulator and pytest settings, the venv first on PATH."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("AIRFLOW", "SLURM_JOB_API_EMULATOR_", "PYTEST_"))
    }
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return {**env, **extra}


@dataclass
class Job:
    """A background process whose output goes to a file."""

    name: str
    process: subprocess.Popen[bytes]
    log: Path

    def wait(self) -> int:
        try:
            return self.process.wait(timeout=WAIT)
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail(f"{self.name} did not finish within {WAIT} s:\n{self.output()[-8000:]}")

    def kill(self) -> None:
        """SIGTERM first: emulators stop the jobs they run (in process groups of their own)."""
        if self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


def start(name: str, command: list[str], cwd: Path, env: dict[str, str]) -> Job:
    log = cwd / f"{name}.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            command, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    return Job(name, process, log)


def project_dir(path: Path) -> Path:
    """A directory laid out like a user's project: the example DAGs and tests."""
    path.mkdir(parents=True)
    for part in ("dags", "tests"):
        shutil.copytree(pages.EXAMPLES / part, path / part, ignore=shutil.ignore_patterns("__pycache__"))
    return path


class Background:
    """Everything this module runs, started together."""

    def __init__(self, work: Path) -> None:
        self.runners: dict[str, tuple[Job, Path]] = {}
        self.sessions: dict[str, Job] = {}
        groups: dict[str, list[dict[str, Any]]] = {}
        for run in DAG_RUNS:
            groups.setdefault(run.get("group", "main"), []).append(run)
        for group, runs in groups.items():
            where = project_dir(work / f"dags-{group}")
            (where / "spec.json").write_text(json.dumps(runs))
            env = clean_env(
                AIRFLOW_HOME=str(where / "airflow-home"),
                AIRFLOW__CORE__DAGS_FOLDER=str(where / "dags"),
                AIRFLOW__CORE__LOAD_EXAMPLES="False",
            )
            command = [sys.executable, str(RUNNER), "spec.json", "results.json"]
            self.runners[group] = (start(f"runner-{group}", command, where, env), where / "results.json")
        for page, prelude in SESSION_PAGES.items():
            where = project_dir(work / f"session-{Path(page).stem}")
            port = free_port()
            script = pages.runnable_script(pages.DOCS / page).replace(DOCS_PORT, port)
            script = script.replace(DOCS_STORAGE_PORT, free_port())
            (where / "session.sh").write_text(
                f"set -euo pipefail\ntrap 'kill $(jobs -p) 2>/dev/null || true' EXIT\n{prelude}\n\n{script}\n"
            )
            env = clean_env(AIRFLOW_HOME=str(where / "airflow-home"), AIRFLOW__CORE__LOAD_EXAMPLES="False")
            self.sessions[page] = start(f"session-{Path(page).stem}", ["bash", "session.sh"], where, env)
        self._results: dict[str, dict[str, Any]] = {}

    def dag_run(self, name: str) -> tuple[dict[str, Any], str]:
        """The run's result and its log."""
        group = next(run.get("group", "main") for run in DAG_RUNS if run["name"] == name)
        job, results = self.runners[group]
        code = job.wait()
        output = job.output()
        assert code == 0 and results.exists(), f"{job.name} failed ({code}):\n{output[-8000:]}"
        result = json.loads(results.read_text())[name]
        log = output.partition(f"=== BEGIN {name}\n")[2].partition(f"=== END {name}\n")[0]
        assert "error" not in result, f"{name}: {result['error']}\n{log[-8000:]}"
        return result, log

    def session(self, page: str) -> str:
        job = self.sessions[page]
        code = job.wait()
        output = job.output()
        assert code == 0, f"the commands of {page} failed ({code}):\n{output[-8000:]}"
        return output

    def stop(self) -> None:
        for job, _ in self.runners.values():
            job.kill()
        for job in self.sessions.values():
            job.kill()


@pytest.fixture(scope="module")
def background(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Background]:
    started = Background(tmp_path_factory.mktemp("docs-examples"))
    yield started
    started.stop()


def only_job(result: dict[str, Any], task_id: str) -> dict[str, Any]:
    jobs = result["jobs"][task_id]
    assert len(jobs) == 1, f"{task_id} submitted {len(jobs)} jobs: {jobs}"
    assert KEY.match(jobs[0]["comment"]), jobs[0]
    return jobs[0]


# --- the DAG files ---------------------------------------------------------------------------------


def test_slurm_train(background: Background) -> None:
    result, log = background.dag_run("slurm_train")
    assert result["state"] == "success", log[-8000:]
    job = only_job(result, "train")
    assert (job["name"], job["state"], job["exit_code"]) == ("llm-sft", "COMPLETED", 0)
    assert result["xcom"]["train"]["job_state"] == "COMPLETED" and result["xcom"]["train"]["exit_code"] == 0
    assert str(result["xcom"]["train"]["return_value"]) == job["job_id"]
    assert result["xcom"]["report"]["return_value"] == f"job {job['job_id']}: COMPLETED, exit code 0"
    assert "SlurmJobTrigger" in log  # the wait went through the trigger
    assert f"Slurm job {job['job_id']} is COMPLETED; exit code 0" in log


def test_slurm_train_failure_names_state_reason_and_exit_code(background: Background) -> None:
    result, log = background.dag_run("slurm_train_bad_epochs")
    assert result["state"] == "failed"
    assert result["tasks"] == {"train": "failed", "report": "upstream_failed"}
    job = only_job(result, "train")
    assert (job["state"], job["exit_code"]) == ("FAILED", 2)
    assert result["xcom"]["train"]["job_state"] == "FAILED" and result["xcom"]["train"]["exit_code"] == 2
    assert f"AirflowException: Slurm job {job['job_id']} is FAILED; reason: NonZeroExitCode; exit code 2" in log


def test_slurm_timeout_cancels_the_job(background: Background) -> None:
    result, log = background.dag_run("slurm_timeout")
    assert result["tasks"] == {"wait_for_dataset": "failed"}
    job = only_job(result, "wait_for_dataset")
    assert job["state"] == "CANCELLED"
    assert f"Slurm job {job['job_id']} did not finish before the task's deadline; it was cancelled" in log


def test_slurm_sensor(background: Background) -> None:
    result, log = background.dag_run("slurm_sensor")
    assert result["tasks"] == {"submit": "success", "wait": "success", "wait_in_worker": "success"}, log[-8000:]
    assert only_job(result, "submit")["state"] == "COMPLETED"


def test_slurm_cancel(background: Background) -> None:
    result, log = background.dag_run("slurm_cancel")
    assert result["state"] == "success", log[-8000:]
    assert result["xcom"]["checkpoint"]["return_value"] == "RUNNING"  # the signal did not end the job
    assert result["xcom"]["stop"]["return_value"] == "CANCELLED"
    assert only_job(result, "sweep")["state"] == "CANCELLED"
    assert only_job(result, "evaluate")["state"] == "COMPLETED"


def test_slurm_custom_trigger(background: Background) -> None:
    result, log = background.dag_run("slurm_custom_trigger")
    assert result["state"] == "success", log[-8000:]
    job = only_job(result, "train_and_register")
    assert (job["name"], job["state"]) == ("train-resnet50", "COMPLETED")
    assert str(result["xcom"]["train_and_register"]["return_value"]) == job["job_id"]
    assert "registering resnet50" in log


def test_slurm_hook(background: Background) -> None:
    result, log = background.dag_run("slurm_hook")
    assert result["state"] == "success", log[-8000:]
    summary = result["xcom"]["job_summary"]["return_value"]
    assert summary == {"state": "COMPLETED", "reason": None, "exit_code": 0, "source": "slurm"}
    assert isinstance(result["xcom"]["pending_jobs"]["return_value"], int)


def test_slurm_output(background: Background) -> None:
    result, log = background.dag_run("slurm_output")
    assert result["state"] == "success", log[-8000:]
    job = only_job(result, "train")
    path = f"slurm_output/{result['run_id'].replace(':', '_')}/train/try-1/{job['job_id']}"
    # the job's lines, shown once: while it ran (live output) or in the end-of-job excerpt
    for line in ["epoch 1/3 done", "epoch 2/3 done", "epoch 3/3 done"]:
        assert log.count(f"[job {job['job_id']} stdout] {line}") == 1, log[-8000:]
    assert re.search(
        rf"Slurm job {job['job_id']} stdout: (all of it \(\d+ bytes\) shown above while the job ran"
        rf"|last \d+ lines? of gs://slurm-output/runs/{re.escape(path)}\.out)",
        log,
    ), log[-8000:]
    assert f"Slurm job {job['job_id']} stderr: empty (gs://slurm-output/runs/{path}.err)" in log
    usage = result["xcom"]["train"]["usage"]
    assert (usage["job_id"], usage["nodes"], usage["gpu_hours"]) == (job["job_id"], 1, 0.0)
    assert f"Slurm job {job['job_id']} used 1 node(s), {usage['cpus']} CPU(s), 0 GPU(s) for " in log
    assert result["xcom"]["report_usage"]["return_value"].startswith(f"job {job['job_id']}: ")
    checked = result["xcom"]["last_epoch"]["return_value"]
    assert checked["last_line"] == "epoch 3/3 done" and checked["location"] == f"gs://slurm-output/runs/{path}.out"
    assert result["xcom"]["train"]["slurm_output_console_url"] == (
        f"https://console.cloud.google.com/storage/browser/_details/slurm-output/runs/{path.replace('+', '%2B')}.out"
    )


def test_slurm_output_failure_ends_with_stderr(background: Background) -> None:
    result, log = background.dag_run("slurm_output_bad_epochs")
    assert result["tasks"] == {"train": "failed", "report_usage": "upstream_failed", "last_epoch": "upstream_failed"}
    job = only_job(result, "train")
    path = f"slurm_output/{result['run_id'].replace(':', '_')}/train/try-1/{job['job_id']}"
    assert (
        f"Last lines of stderr of job {job['job_id']} (gs://slurm-output/runs/{path}.err):\n"
        f"[job {job['job_id']} stderr] EPOCHS must be a whole number, got 'x'\n"
    ) in log


def test_slurm_taskflow(background: Background) -> None:
    result, log = background.dag_run("slurm_taskflow")
    assert result["state"] == "success", log[-8000:]
    assert result["xcom"]["pick_best"]["return_value"] == {"learning_rate": 0.4, "loss": 0.6024}
    assert re.search(r"tokenizing gs://datasets/chat-v2 for run manual__", log), log[-8000:]
    assert "epoch 3/3: loss 0.6024" in log, log[-8000:]  # the mapped job's own output, in its task's log


def test_slurm_taskflow_failure_shows_the_cluster_side_traceback(background: Background) -> None:
    result, log = background.dag_run("slurm_taskflow_bad_epochs")
    assert result["tasks"]["fine_tune"] == "failed" and result["tasks"]["pick_best"] == "upstream_failed"
    assert "fine_tune() raised ValueError: epochs must be at least 1, got 0 (Slurm job " in log, log[-8000:]
    assert re.search(
        r'File "[^"]*slurm_taskflow\.py", line \d+, in fine_tune\n\[job \d+ stderr\]\s+raise ValueError', log
    )


def test_slurm_job_event_dags_parse_and_run_without_events(background: Background) -> None:
    for dag_id, task_id in (("slurm_job_events", "evaluate_checkpoints"), ("slurm_job_failures", "page_the_owner")):
        result, log = background.dag_run(dag_id)
        assert result["state"] == "success", log[-8000:]
        assert result["xcom"][task_id]["return_value"] == [], log[-8000:]


def test_slurm_submit_options(background: Background) -> None:
    result, log = background.dag_run("slurm_submit_options")
    assert result["tasks"] == {"evaluate": "success", "fine_tune": "success"}, log[-8000:]
    assert only_job(result, "evaluate")["state"] == "COMPLETED"
    assert only_job(result, "fine_tune")["name"] == "llm-fine-tune"


def test_slurm_first_gpu_job(background: Background) -> None:
    result, log = background.dag_run("slurm_first_gpu_job")
    assert result["tasks"] == {"check_cluster": "success", "gpu_job": "success"}, log[-8000:]
    # the check's report, printed in the task log: as composer.md quotes it, but for the names and numbers
    quoted = next(
        block.body
        for block in pages.blocks(pages.DOCS / "composer.md")
        if block.language == "text" and block.body.startswith("Cluster my-cluster (us-central1):")
    )
    report = re.sub(r"\d+", r"\\d+", re.escape(quoted.replace("my-cluster", "test-cluster")))
    assert re.search(f"^{report}$", log, re.MULTILINE), log[-8000:]
    job = only_job(result, "gpu_job")
    assert (job["name"], job["state"], job["exit_code"]) == ("first-gpu-job", "COMPLETED", 0)
    jid = job["job_id"]
    assert re.search(rf"Slurm job {jid} on cluster \S+: submitted \(airflow-key=[0-9a-f]{{24}}\)", log), log[-8000:]
    # the job's lines, shown once: while it ran (live output) or in the end-of-job excerpt
    cuda = re.findall(rf"\[job {jid} stdout\] job {jid}: CUDA_VISIBLE_DEVICES=\d+(?:,\d+){{7}}(?![\d,])", log)
    assert len(cuda) == 1, log[-8000:]
    assert len(re.findall(rf"\[job {jid} stdout\] GPUs visible: 8(?!\d)", log)) == 1, log[-8000:]
    if shutil.which("nvidia-smi", path="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin") is None:
        assert log.count(f"[job {jid} stdout] no nvidia-smi on this node") == 1, log[-8000:]
    path = f"slurm_first_gpu_job/{result['run_id'].replace(':', '_')}/gpu_job/try-1/{jid}"
    assert re.search(
        rf"Slurm job {jid} stdout: (all of it \(\d+ bytes\) shown above while the job ran"
        rf"|last \d+ lines? of gs://slurm-output/runs/{re.escape(path)}\.out)",
        log,
    ), log[-8000:]
    assert f"Slurm job {jid} stderr: empty (gs://slurm-output/runs/{path}.err)" in log, log[-8000:]
    # what it used: eight GPUs, and GPU-hours, from accounting's gres/gpu
    usage = result["xcom"]["gpu_job"]["usage"]
    assert (usage["job_id"], usage["nodes"], usage["gpus"]) == (jid, 1, 8), usage
    assert usage["gpu_hours"] == round(8 * usage["elapsed_seconds"] / 3600, 4), usage
    assert (
        f"Slurm job {jid} used 1 node(s), {usage['cpus']} CPU(s), 8 GPU(s) for {usage['elapsed_seconds']} s: "
        f"{usage['gpu_hours']:g} GPU-hours"
    ) in log, log[-8000:]
    assert f"Slurm job {jid} is COMPLETED; exit code 0" in log


# --- the shell commands ----------------------------------------------------------------------------


def test_installation_commands(background: Background) -> None:
    from airflow_provider_slurmapi import __version__

    output = background.session("installation.md")
    assert re.search(rf"airflow-provider-slurmapi\s*\|\s*{re.escape(__version__)}", output), output


def test_connection_commands(background: Background) -> None:
    output = background.session("connection.md")
    assert "Successfully added `conn_id`=slurm_job_api_default" in output, output
    connection = json.loads(output[output.rindex("[{") :])[0]
    assert connection["conn_type"] == "slurm_job_api"
    assert connection["extra_dejson"] == {
        "project_id": "my-project",
        "region": "us-central1",
        "cluster_id": "my-cluster",
    }


def test_testing_page_commands(background: Background) -> None:
    output = background.session("testing.md")
    assert "Connection success!" in output
    assert output.count("is COMPLETED; exit code 0") >= 3, output[-8000:]  # three runs of slurm_train
    assert re.search(r"\b3 passed\b", output), output[-8000:]  # the pytest example
    # the fault script's lost submit reply was reconciled through the job's key
    assert re.search(r"looking for the job by its key in \d+ s, once a submit still under way has landed", output)
    assert "The submit had reached Slurm" in output
    # the run with the emulator's output mount shows the job's output, read from the stand-in
    assert re.search(r"\[job \d+ stdout\] epoch 3/3 done", output), output[-8000:]
    assert re.search(r"Slurm job \d+ stdout: (all of it \(\d+ bytes\) shown above|last \d+ lines? of gs://)", output)


def test_output_page_commands(background: Background) -> None:
    output = background.session("output.md")
    connection = json.loads(output[output.rindex("[{") :])[0]
    assert connection["extra_dejson"]["output_uri"] == "gs://my-bucket/slurm-output"
    assert connection["extra_dejson"]["output_cluster_path"] == "/mnt/output/slurm-output"


def test_composer_page_commands(background: Background) -> None:
    output = background.session("composer.md")
    connection = json.loads(output[output.rindex("[{") :])[0]
    assert connection["conn_type"] == "slurm_job_api"
    assert connection["extra_dejson"] == {
        "project_id": "my-project",
        "region": "us-central1",
        "cluster_id": "my-cluster",
        "output_uri": "gs://my-bucket/slurm-output",
        "output_cluster_path": "/mnt/output/slurm-output",
    }


def test_cluster_requirements_page_commands(background: Background) -> None:
    """The cluster check against the emulator as the page sets it up: what it prints is the page's."""
    output = background.session("cluster-requirements.md")
    assert "[ok] partitions: a3 (1 node(s); gpu:h100:8 per node), debug (1 node(s))" in output, output[-8000:]
    assert "[ok] GPUs: h100 in a3" in output, output[-8000:]
    assert "[warning] job comments: accounting keeps none (probe job" in output, output[-8000:]
    assert "    fix: AccountingStoreFlags=job_comment in slurm.conf" in output, output[-8000:]
    assert re.search(r"\[ok\] jobs run as: emulator \(probe job \d+\); the default partition is a3", output)
    page = (pages.DOCS / "cluster-requirements.md").read_text()
    shown = page.partition("```text\n")[2].partition("```")[0]
    printed = output[output.index("Cluster test-cluster") :].splitlines()
    # the page shows what the command printed, but for the probe job's number
    assert [re.sub(r"job \d+", "job N", line) for line in shown.splitlines()] == [
        re.sub(r"job \d+", "job N", line) for line in printed[: len(shown.splitlines())]
    ], output[-8000:]
