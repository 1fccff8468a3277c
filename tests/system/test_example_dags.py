"""The example DAGs under `airflow dags test` (a real Airflow), against the emulator."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_slurmapi.emulator import Emulator, EmulatorConfig
from airflow_provider_slurmapi.hooks.slurm_job_api import SlurmJobApiHook
from airflow_provider_slurmapi.version_compat import AIRFLOW_V_3_0_PLUS
from tests.conftest import connection_json
from tests.storage import BUCKET
from tests.system.dags.test_slurm_live_output import LINES, WARNINGS

pytestmark = pytest.mark.system

ROOT = Path(__file__).parents[2]
AIRFLOW = str(Path(sys.executable).with_name("airflow"))
OUTPUT_URI = f"gs://{BUCKET}/airflow"


@pytest.fixture(scope="module", params=["builtin", pytest.param("slurmrestd", marks=pytest.mark.real_slurm)])
def emulator(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, storage_host: str
) -> Iterator[Emulator]:
    """The built-in backend, then a real Slurm 24.11 behind the emulator's slurmrestd backend.

    Jobs write their output under OUTPUT_MOUNT, which the emulator publishes to the Cloud Storage
    stand-in as Cloud Storage FUSE would; for real Slurm it is a directory inside the chroot.
    """
    work = tmp_path_factory.mktemp("emulator")
    common: dict[str, Any] = {"key_file": work / "key.json", "state_dir": work / "jobs", "storage_host": storage_host}
    if request.param == "builtin":
        mount = work / "cluster-output"
        mount.mkdir()
        # KillWait past the live-output wrapper's last publish (up to a second after its script ends),
        # as on real clusters (Slurm's default is 30 s): an interrupted job then ends by its own signal
        config = EmulatorConfig(min_job_age=1.0, kill_wait=3.0, output_mount=f"{mount}={OUTPUT_URI}", **common)
    else:
        slurm = request.getfixturevalue("real_slurm")
        mount = Path("/tmp/airflow-job-output")
        slurm.host_path(str(mount)).mkdir(mode=0o1777, exist_ok=True)
        slurm.host_path(str(mount)).chmod(0o1777)  # the jobs' user writes here
        mount_spec = f"{mount}={OUTPUT_URI}"
        config = slurm.emulator_config(output_mount=mount_spec, cluster_root=str(slurm.chroot), **common)
    with Emulator(config) as emu:
        yield emu


@pytest.fixture(scope="module")
def airflow_env(
    request: pytest.FixtureRequest, emulator: Emulator, tmp_path_factory: pytest.TempPathFactory, storage_host: str
) -> dict[str, str]:
    home = tmp_path_factory.mktemp("airflow")
    dags = home / "dags"
    shutil.copytree(ROOT / "example_dags", dags)
    shutil.copy(Path(__file__).parent / "dags" / "test_slurm_modes.py", dags)
    mount = emulator.config.mount()
    assert mount is not None
    output = {"output_uri": OUTPUT_URI, "output_cluster_path": mount.cluster_dir}
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW_CONN_SLURM_JOB_API_DEFAULT": connection_json(emulator, **output),
        "STORAGE_EMULATOR_HOST": storage_host,  # google-cloud-storage talks to the stand-in
        # real Slurm purges finished jobs 17-22 s after they end (MinJobAge=10), the built-in one after 1 s
        "SLURM_TEST_READBACK_POLL": "40" if emulator.config.backend == "slurmrestd" else "5",
    }
    subprocess.run([AIRFLOW, "db", "migrate"], env=env, check=True, capture_output=True, timeout=300)
    return env


def dags_test(env: dict[str, str], dag_id: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [AIRFLOW, "dags", "test", dag_id, *args], env=env, capture_output=True, text=True, timeout=300
    )


def output(result: subprocess.CompletedProcess[str]) -> str:
    return result.stdout + result.stderr


def times_shown(log: str, job_id: str, line: str) -> int:
    """How often the task log showed a line of the job's stdout: as a record of its own while the
    job ran, or in the end-of-job excerpt (a record that Airflow 2.11's `dags test` prints twice,
    in two formats: each excerpt counted once)."""
    live = re.findall(rf"^\S.*?\] \[job {job_id} stdout\] {line}\b", log, re.M)
    excerpts = set(
        re.findall(rf"----- Slurm job {job_id} stdout: last .*?----- end of Slurm job {job_id} stdout", log, re.S)
    )
    return len(live) + sum(len(re.findall(rf"^\[job {job_id} stdout\] {line}\b", text, re.M)) for text in excerpts)


def test_submit_job_deferrable_succeeds(airflow_env: dict[str, str], emulator: Emulator) -> None:
    started = time.time()
    result = dags_test(airflow_env, "example_slurm_submit_job")
    log = output(result)
    assert result.returncode == 0, log[-5000:]
    failed = [call for call in emulator.requests.calls(since=started) if call.status >= 500]
    assert failed == [], failed  # every read answered, the shared poller's bulk queries too
    assert "status unavailable" not in log, log[-5000:]
    assert "Trigger" in log  # the wait really went through the trigger
    assert "is COMPLETED; exit code 0" in log
    # the job's own output, each line once: shown while it ran (live output, from the trigger) or
    # in the excerpt read back from Cloud Storage in the worker after the trigger's event
    job_id = re.search(r"Slurm job (\d+) is COMPLETED; exit code 0", log).group(1)  # type: ignore[union-attr]
    for line in [r"training run manual__\S+ on \S+, job \d+", "epoch 1/3", "epoch 3/3"]:
        assert times_shown(log, job_id, line) == 1, log[-5000:]
    excerpt = rf"Slurm job {job_id} stdout: (all of it \(\d+ bytes\) shown above|last \d+ lines of {OUTPUT_URI}/)"
    assert re.search(excerpt, log), log[-5000:]
    assert re.search(rf"Slurm job {job_id} used 1 node\(s\), \d+ CPU\(s\)", log), log[-5000:]


def test_submit_job_exit_3_fails_the_task(airflow_env: dict[str, str]) -> None:
    result = dags_test(airflow_env, "example_slurm_submit_job", "-c", '{"exit_code": 3, "epochs": 1}')
    log = output(result)
    # on every Airflow supported (2.11 and later), a failed run ends `dags test` with SystemExit("DagRun failed")
    assert result.returncode == 1 and "DagRun failed" in result.stderr.splitlines(), log[-5000:]
    # The task's own error names the state, the reason and the exit code, then the job's last stderr lines.
    error = re.search(r"AirflowException: Slurm job (\d+) is FAILED(; reason: \w+)?; exit code 3\n", log)
    assert error, log[-5000:]
    job_id = error.group(1)
    stderr = f"Last lines of stderr of job {job_id} ({OUTPUT_URI}/example_slurm_submit_job/"
    assert stderr in log and "ERROR: loss diverged at epoch 1 (loss=nan)" in log[log.index(stderr) :], log[-5000:]
    assert times_shown(log, job_id, "epoch 1/1") == 1, log[-5000:]


def test_worker_waiting_mode(airflow_env: dict[str, str]) -> None:
    ok = dags_test(airflow_env, "test_slurm_worker_wait")
    assert ok.returncode == 0, output(ok)[-5000:]
    assert "is COMPLETED; exit code 0" in output(ok)
    assert "Trigger" not in output(ok).replace("Trigger completed", "")  # nothing deferred
    failed = dags_test(airflow_env, "test_slurm_worker_wait", "-c", '{"exit_code": 3}')
    assert "is FAILED" in output(failed) and "exit code 3" in output(failed), output(failed)[-5000:]


def test_taskflow_decorators_run_mapped_and_bring_return_values_back(airflow_env: dict[str, str]) -> None:
    result = dags_test(airflow_env, "example_slurm_taskflow")
    log = output(result)
    assert result.returncode == 0, log[-5000:]
    assert re.search(r"preparing the data of run manual__", log), log[-5000:]  # @task.slurm's script, from the context
    for rate in (0.1, 0.3, 1.0):  # each mapped @task.slurm_python job's own output
        assert f"training with learning rate {rate}" in log, log[-5000:]
    # the three return values came back as XComs, read by a task in Airflow
    assert "best run: learning rate 1.0, loss 0.0498" in log, log[-5000:]


def test_an_exception_on_the_cluster_fails_the_task_with_its_traceback(airflow_env: dict[str, str]) -> None:
    result = dags_test(airflow_env, "example_slurm_taskflow", "-c", '{"fail": true}')
    log = output(result)
    assert result.returncode == 1 and "DagRun failed" in result.stderr.splitlines(), log[-5000:]
    assert "train() raised ValueError: loss diverged at learning rate 0.1 (Slurm job" in log, log[-5000:]
    # the traceback from the cluster names the line of the DAG file that raised
    traceback = r'File "[^"]*example_slurm_taskflow\.py", line \d+, in train\n\[job \d+ stderr\]\s+raise ValueError'
    assert re.search(traceback, log), log[-5000:]


def test_a_script_past_the_request_limit_is_staged_and_run(airflow_env: dict[str, str]) -> None:
    from tests.system.dags.test_slurm_modes import STAGED_LINES

    data = "\n".join(f"{line:016x}" * 4 for line in range(STAGED_LINES))
    result = dags_test(airflow_env, "test_slurm_staged_script")
    log = output(result)
    assert result.returncode == 0, log[-5000:]
    # the module's Cloud Storage stand-in serves both backends: the second finds the object staged
    staged = rf"too large for the request: (already )?staged at {OUTPUT_URI}/staged/test_slurm_staged_script/[0-9a-f]{{64}}\.script"
    assert re.search(staged, log), log[-5000:]
    digest = hashlib.sha256(data.encode()).hexdigest()[:16]
    assert f"staged script ran: {len(data)} characters of data, sha256 {digest}" in log, log[-5000:]


def test_job_read_back_from_accounting(airflow_env: dict[str, str]) -> None:
    result = dags_test(airflow_env, "test_slurm_accounting_readback")
    assert result.returncode == 0, output(result)[-5000:]
    assert "reading it from accounting (/slurmdb)" in output(result)


def test_rescheduling_sensor_reports_a_lost_job(airflow_env: dict[str, str], emulator: Emulator) -> None:
    """mode="reschedule": each poke is a new sensor; the wait still ends after lost_grace (8 s)."""
    from airflow_provider_slurmapi.version_compat import AIRFLOW_V_3_3_PLUS

    started, tokens_before = time.time(), emulator.tokens.issued
    result = dags_test(airflow_env, "test_slurm_lost_job_reschedule")
    log = output(result)
    assert "Slurm job 999999 is lost: for 8 s" in log, log[-5000:]
    assert "AirflowSensorTimeout" not in log and "Sensor has timed out" not in log, log[-5000:]
    reads = emulator.requests.calls("GET", "/slurm/v0.0.42/job/999999", since=started)
    assert len(reads) >= 4, reads  # read every poke_interval (2 s) until the 8 s grace was over
    if AIRFLOW_V_3_3_PLUS:
        # really rescheduled: every poke was a new sensor with a new hook, hence a new token
        assert emulator.tokens.issued - tokens_before >= 4, emulator.tokens.issued - tokens_before


def test_sensor_and_cancel_dag(airflow_env: dict[str, str], monkeypatch) -> None:
    result = dags_test(airflow_env, "example_slurm_sensor_and_cancel")
    assert result.returncode == 0, output(result)[-5000:]
    monkeypatch.setenv("AIRFLOW_CONN_SLURM_JOB_API_DEFAULT", airflow_env["AIRFLOW_CONN_SLURM_JOB_API_DEFAULT"])
    accounting = SlurmJobApiHook().call("GET", "/slurmdb/v0.0.42/jobs")["jobs"]
    states = {job["name"]: job["state"]["current"][0] for job in accounting}
    assert states.get("example-long-running") == "CANCELLED", states
    assert states.get("example-preprocess") == "COMPLETED", states


def test_job_cancelled_outside_fails_the_task(airflow_env: dict[str, str], monkeypatch) -> None:
    """Someone cancels the job while the task waits: the task fails and says CANCELLED."""
    monkeypatch.setenv("AIRFLOW_CONN_SLURM_JOB_API_DEFAULT", airflow_env["AIRFLOW_CONN_SLURM_JOB_API_DEFAULT"])
    hook = SlurmJobApiHook()
    known = {job.job_id for job in hook.list_jobs()}
    cancelled: list[str] = []

    def cancel_when_running() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not cancelled:
            for job in hook.list_jobs():
                if job.job_id not in known and job.state == "RUNNING":
                    hook.cancel_job(job.job_id)
                    cancelled.append(job.job_id)
            time.sleep(0.5)

    canceller = threading.Thread(target=cancel_when_running)
    canceller.start()
    result = dags_test(airflow_env, "example_slurm_submit_job", "-c", '{"epochs": 120}')
    canceller.join()
    log = output(result)
    assert cancelled, "the job never ran"
    assert f"AirflowException: Slurm job {cancelled[0]} is CANCELLED" in log, log[-5000:]


def test_an_interrupted_job_fails_the_try_and_the_retry_submits_a_new_job(
    airflow_env: dict[str, str], emulator: Emulator, monkeypatch, request: pytest.FixtureRequest
) -> None:
    """The node fails under the first try's job: that try fails saying the work was interrupted,
    and Airflow's retry submits a new job (the task run's key finds only a failed job)."""
    monkeypatch.setenv("AIRFLOW_CONN_SLURM_JOB_API_DEFAULT", airflow_env["AIRFLOW_CONN_SLURM_JOB_API_DEFAULT"])
    hook = SlurmJobApiHook()
    known = {job.job_id for job in hook.list_jobs()}
    failed: list[str] = []
    real = request.getfixturevalue("real_slurm") if emulator.config.backend == "slurmrestd" else None

    def fail_node(job_id: str) -> None:  # scontrol on real Slurm, the emulator's control otherwise
        if real is not None:
            real.fail_node()
        else:
            emulator.control(job_id, "node_fail")

    def fail_the_node_when_running() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not failed:
            for job in hook.list_jobs():
                if job.job_id not in known and job.name == "interrupted-retry" and job.state == "RUNNING":
                    fail_node(job.job_id)
                    failed.append(job.job_id)
            time.sleep(0.5)

    interrupter = threading.Thread(target=fail_the_node_when_running)
    interrupter.start()
    started = time.time()
    result = dags_test(airflow_env, "test_slurm_interrupted_retry")
    interrupter.join()
    log = output(result)
    assert failed, "the first job never ran"
    assert result.returncode == 0, log[-5000:]  # the retry succeeded
    # the trigger's first read may come after the job left the live queue (MinJobAge): accounting
    # then tells NODE_FAIL with exit code 1 instead of the live record's reason and signal
    live = f"Slurm job {failed[0]} is NODE_FAIL; reason: NodeDown; killed by signal 1 (SIGHUP); the job's work"
    accounted = f"Slurm job {failed[0]} is NODE_FAIL; exit code 1; derived (worst step) pending; the job's work"
    assert live in log or accounted in log, log[-5000:]
    assert "a node it ran on failed) and Slurm did not requeue it; its own code did not fail" in log, log[-5000:]
    submits = emulator.requests.calls("POST", "/slurm/v0.0.42/job/submit", since=started)
    assert len(submits) == 2, submits  # one job per try
    accounting = hook.call("GET", "/slurmdb/v0.0.42/jobs/?job_name=interrupted-retry")["jobs"]
    ran = {
        str(job["job_id"]): job["state"]["current"][0]
        for job in accounting
        if job["time"]["submission"] >= int(started)  # not those of earlier runs on a real Slurm
    }
    assert sorted(ran.values()) == ["COMPLETED", "NODE_FAIL"] and ran[failed[0]] == "NODE_FAIL", ran


def test_connection_stored_in_the_metadata_database(airflow_env: dict[str, str]) -> None:
    """Most users keep connections in the database: the trigger must find it in `dags test` too."""
    extra = json.loads(airflow_env["AIRFLOW_CONN_SLURM_JOB_API_DEFAULT"])["extra"]
    added = subprocess.run(
        [AIRFLOW, "connections", "add", "slurm_job_api_default", "--conn-type", "slurm_job_api",
         "--conn-extra", json.dumps(extra)],
        env=airflow_env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    env = {k: v for k, v in airflow_env.items() if k != "AIRFLOW_CONN_SLURM_JOB_API_DEFAULT"}
    result = dags_test(env, "example_slurm_submit_job")
    assert result.returncode == 0, output(result)[-5000:]
    assert "is COMPLETED; exit code 0" in output(result)


# --- live output: one run of test_slurm_live_output per backend, a deferred task and one waiting in
# the worker, whose jobs print a numbered line with the time it was printed every second for 8 s

LIVE_DAG_ID = "test_slurm_live_output"
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
def live_run(airflow_env: dict[str, str], storage_host: str) -> tuple[str, dict[str, JobFiles]]:
    """The DAG run once on this backend: its log, and each task's job's stdout and stderr objects."""
    dags = Path(airflow_env["AIRFLOW_HOME"]) / "live-output-dags"  # this DAG alone: parsed fast
    dags.mkdir()
    shutil.copy(Path(__file__).parent / "dags" / "test_slurm_live_output.py", dags)
    result = dags_test({**airflow_env, "AIRFLOW__CORE__DAGS_FOLDER": str(dags)}, LIVE_DAG_ID)
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
    prefix = f"{OUTPUT_URI.removeprefix(f'gs://{BUCKET}/')}/{LIVE_DAG_ID}/{folder}/"
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


def excerpt_lines(log: str, job_id: str, stream: str) -> list[str]:
    """The lines of the end-of-job excerpt of a stream (none when all of it was shown while the job ran)."""
    block = re.search(rf"----- Slurm job {job_id} {stream}: last .*?\n(.*?)\n----- end of Slurm job", log, re.S)
    prefix = f"[job {job_id} {stream}] "
    return [line.removeprefix(prefix) for line in block[1].splitlines()] if block else []


@pytest.mark.skipif(
    not AIRFLOW_V_3_0_PLUS,
    reason="reads Airflow 3's log lines; on 2.11, tests/integration/test_live_output.py checks live output",
)
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

    # each line in the task log once, in order, under its prefix, by the task or its trigger while the
    # job ran, then in the end-of-job excerpt: what the last piece held, which the job's end may keep
    # from being published (it takes down the publisher, as Slurm's process tracking does)
    stdout, stderr = shown_lines(log, job_id, "stdout"), shown_lines(log, job_id, "stderr")
    assert all(line.logger.endswith(TASKS[task_id]) for line in stdout + stderr), stdout + stderr
    for stream, lines, printed_bytes in (("stdout", stdout, out), ("stderr", stderr, err)):
        rest = excerpt_lines(log, job_id, stream)
        assert "".join(f"{text}\n" for text in [line.text for line in lines] + rest).encode() == printed_bytes, (
            [line.text for line in lines],
            rest,
            printed_bytes,
        )
        for line in lines:  # the end-of-job excerpt does not repeat it
            assert log.count(f"[job {job_id} {stream}] {line.text}") == 1, line

    # shown while the job ran: before it printed its last line, and before the final state line
    last_printed = printed[-1][1]
    early = [line for line in stdout if line.at < last_printed]
    assert len(early) >= 3, (last_printed, stdout)
    assert stderr[0].at < last_printed, (last_printed, stderr)
    final = re.search(rf"^.*Slurm job {job_id} is COMPLETED; exit code 0\s+\[[\w.]*{TASKS[task_id]}\]", log, re.M)
    assert final, log[-5000:]
    assert all(line.position < final.start() for line in early), final.group()
