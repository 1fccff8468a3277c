"""Live output under `airflow dags test` (a real Airflow), on the built-in backend and on a real
Slurm: a deferred task's trigger and a task waiting in the worker each log their job's lines while
it runs, each once and in order, and the job's own output files stay what it printed.

One DAG run per backend (``test_slurm_live_output``): both tasks' jobs print a numbered line with
the time it was printed (``date +%s.%N``) every second for 8 s, and three lines on stderr.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import pytest

from tests.storage import BUCKET
from tests.system.dags.test_slurm_live_output import LINES, WARNINGS
from tests.system.test_example_dags import (  # noqa: F401  (the fixtures, on both backends)
    OUTPUT_URI,
    airflow_env,
    dags_test,
    emulator,
    output,
)

pytestmark = pytest.mark.system

DAG_ID = "test_slurm_live_output"
TASKS = {"deferred": "airflow_provider_slurmapi.triggers.job.SlurmJobTrigger", "in_worker": "SlurmSubmitJobOperator"}
# 2026-12-06T22:33:52.596846Z [info     ] [job 1 stdout] line 1 1796596429.270854619 [logger] loc=...
LIVE_LINE = re.compile(
    r"^(?P<at>\d{4}-\d\d-\d\dT\S+Z) \[\w+\s*\] \[job (?P<job>\d+) (?P<stream>stdout|stderr)\] (?P<text>.*?)"
    r"\s+\[(?P<logger>[\w.]+)\]",
    re.M,
)
STDOUT_LINE = re.compile(r"line (\d+) (\d{10}\.\d{9})")


@dataclass(frozen=True)
class Shown:
    """A job's line as the task log showed it: when, where in the log, by which logger."""

    at: float
    position: int
    logger: str
    text: str


@dataclass(frozen=True)
class JobFiles:
    """A task's job and its own stdout and stderr, as the Cloud Storage stand-in holds them."""

    job_id: str
    out: bytes
    err: bytes


@pytest.fixture(scope="module")
def live_run(airflow_env: dict[str, str], storage_host: str) -> tuple[str, dict[str, JobFiles]]:  # noqa: F811
    """The DAG run once on this backend: its log, and each task's job's stdout and stderr objects."""
    dags = Path(airflow_env["AIRFLOW_HOME"]) / "live-output-dags"  # this DAG alone: parsed fast
    dags.mkdir()
    shutil.copy(Path(__file__).parent / "dags" / "test_slurm_live_output.py", dags)
    result = dags_test({**airflow_env, "AIRFLOW__CORE__DAGS_FOLDER": str(dags)}, DAG_ID)
    log = output(result)
    assert result.returncode == 0, log[-5000:]
    return log, objects_of_the_run(log, storage_host)


def objects_of_the_run(log: str, storage_host: str) -> dict[str, JobFiles]:
    """Each task's job's output objects in the Cloud Storage stand-in, by task."""
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    run_id = re.search(r"Created dag run\..*?: (manual__\S+?),", log)
    assert run_id, log[-5000:]
    folder = run_id.group(1).replace(":", "_")  # as the output paths spell it
    client = storage.Client(
        project="test", credentials=AnonymousCredentials(), client_options={"api_endpoint": storage_host}
    )
    prefix = f"{OUTPUT_URI.removeprefix(f'gs://{BUCKET}/')}/{DAG_ID}/{folder}/"
    found: dict[str, dict[str, bytes]] = {}
    for blob in client.bucket(BUCKET).list_blobs(prefix=prefix):
        task, _, name = blob.name[len(prefix) :].split("/")  # {task}/try-1/{job}.out
        found.setdefault(task, {})[name] = blob.download_as_bytes()
    files = {}
    for task, objects in found.items():
        [job_id] = {name.rsplit(".", 1)[0] for name in objects}
        files[task] = JobFiles(job_id, objects[f"{job_id}.out"], objects[f"{job_id}.err"])
    assert sorted(files) == sorted(TASKS), found
    return files


def shown_lines(log: str, job_id: str, stream: str) -> list[Shown]:
    return [
        Shown(datetime.fromisoformat(m["at"]).timestamp(), m.start(), m["logger"], m["text"])
        for m in LIVE_LINE.finditer(log)
        if m["job"] == job_id and m["stream"] == stream
    ]


@pytest.mark.parametrize("task_id", sorted(TASKS))
def test_each_line_reaches_the_task_log_once_while_the_job_runs_and_the_jobs_files_are_untouched(
    live_run: tuple[str, dict[str, JobFiles]], task_id: str
) -> None:
    log, files = live_run
    job_id, out, err = files[task_id].job_id, files[task_id].out, files[task_id].err
    # the job's own files, byte for byte what the script prints (only the times are its own)
    printed = [(int(m[1]), float(m[2])) for m in STDOUT_LINE.finditer(out.decode())]
    assert [number for number, _ in printed] == list(range(1, LINES + 1)), out
    expected_out = "".join(f"line {m[1]} {m[2]}\n" for m in STDOUT_LINE.finditer(out.decode())).encode()
    assert out == expected_out
    assert err == "".join(f"warning {n}\n" for n in range(1, WARNINGS + 1)).encode()

    # each line in the task log once, in order, under its prefix, by the task or its trigger
    stdout, stderr = shown_lines(log, job_id, "stdout"), shown_lines(log, job_id, "stderr")
    assert "".join(f"{line.text}\n" for line in stdout).encode() == out, ([line.text for line in stdout], out)
    assert "".join(f"{line.text}\n" for line in stderr).encode() == err, ([line.text for line in stderr], err)
    assert all(line.logger.endswith(TASKS[task_id]) for line in stdout + stderr), stdout + stderr
    for stream, lines in (("stdout", stdout), ("stderr", stderr)):
        for line in lines:  # the end-of-job excerpt does not repeat it
            assert log.count(f"[job {job_id} {stream}] {line.text}") == 1, line
    assert f"Slurm job {job_id} stdout: all of it ({len(out)} bytes) shown above while the job ran" in log
    assert f"Slurm job {job_id} stderr: all of it ({len(err)} bytes) shown above while the job ran" in log

    # shown while the job ran: before it printed its last line, and before the final state line
    last_printed = printed[-1][1]
    early = [line for line in stdout if line.at < last_printed]
    assert len(early) >= 3, (last_printed, stdout)
    assert stderr[0].at < last_printed, (last_printed, stderr)
    final = re.search(rf"^.*Slurm job {job_id} is COMPLETED; exit code 0\s+\[[\w.]*{TASKS[task_id]}\]", log, re.M)
    assert final, log[-5000:]
    assert all(line.position < final.start() for line in early), final.group()
