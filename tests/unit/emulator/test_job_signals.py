"""Signals to a job's processes, as slurmstepd sends them: default dispositions at the start,
sbatch --signal before the time limit, and DELETE ?signal= to the whole job or its batch shell alone."""

from __future__ import annotations

import signal
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from emulator_testkit import Api

from airflow_provider_slurmapi.emulator import Emulator, EmulatorConfig
from airflow_provider_slurmapi.emulator.job_model import ExitInfo, parse_signal

JOB = "/slurm/v0.0.42/job"

# the batch shell and a child of its own each say which signals reached them; ready files tell
# when both traps are set
SHELL_AND_CHILD = """#!/bin/bash
trap 'echo shell-got-usr1' USR1
trap 'echo shell-got-usr2' USR2
bash -c 'trap "echo child-got-usr1" USR1; trap "echo child-got-usr2" USR2; touch child-ready
         while :; do sleep 0.1; done' &
touch shell-ready
while :; do sleep 0.1; done
"""


def _wait_for(check: Callable[[], bool], what: str, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"still waiting for {what} after {timeout}s")
        time.sleep(0.05)


def _output(workdir: Path, job_id: int) -> str:
    path = workdir / f"slurm-{job_id}.out"
    return path.read_text() if path.exists() else ""


def _wait_for_line(workdir: Path, job_id: int, line: str) -> None:
    _wait_for(lambda: line in _output(workdir, job_id).splitlines(), repr(line))


def _start_shell_and_child(api: Api, workdir: Path, **job: object) -> int:
    job_id = api.submit(SHELL_AND_CHILD, current_working_directory=str(workdir), **job)
    _wait_for(lambda: (workdir / "shell-ready").exists() and (workdir / "child-ready").exists(), "the traps")
    return job_id


@contextmanager
def _ignoring_int_and_quit_blocking_usr1() -> Iterator[None]:
    """What a non-interactive shell's ``&`` gives the emulator (SIGINT, SIGQUIT ignored), and a
    blocked signal that threads started meanwhile inherit."""
    saved = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGQUIT)}
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        for sig, handler in saved.items():
            signal.signal(sig, handler)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
def test_jobs_start_with_default_dispositions_and_no_blocked_signal(tmp_path: Path) -> None:
    script = """#!/bin/bash
grep -E '^Sig(Ign|Blk):' /proc/self/status
trap 'echo trapped-int' INT
kill -INT $$
"""
    with (
        _ignoring_int_and_quit_blocking_usr1(),
        Emulator(EmulatorConfig(sched_delay=0, state_dir=tmp_path / "state")) as emu,
    ):
        api = Api(emu)
        job_id = api.submit(script, current_working_directory=str(tmp_path))
        job = api.wait(job_id)
    assert job["job_state"] == ["COMPLETED"]
    lines = _output(tmp_path, job_id).splitlines()
    assert lines == ["SigBlk:\t0000000000000000", "SigIgn:\t0000000000000000", "trapped-int"]


@pytest.mark.parametrize("name", ["KILL", "SEGV", "ABRT", "TERM", "INT", "USR1"])
def test_a_job_its_own_signal_ended_fails_with_that_signal(api: Api, workdir: Path, name: str) -> None:
    job = api.wait(api.submit(f"#!/bin/bash\nkill -s {name} $$\n", current_working_directory=str(workdir)))
    number = signal.Signals[f"SIG{name}"].value
    assert (job["job_state"], job["state_reason"]) == (["FAILED"], "RaisedSignal")
    assert job["exit_code"]["status"] == ["SIGNALED"]
    assert job["exit_code"]["signal"]["id"]["number"] == number
    # Slurm names the signals it knows and numbers the others (SIGSEGV is "11")
    assert job["exit_code"]["signal"]["name"] == ("11" if name == "SEGV" else name)


def test_slurm_signal_names_and_numbers() -> None:
    assert [parse_signal(text) for text in ("USR1", "sigusr2", " 10 ", 40, "SIGKILL")] == [10, 12, 10, 40, 9]
    for text in ("SEGV", "NOPE", "0", "", "999"):
        with pytest.raises(ValueError):
            parse_signal(text)
    assert [ExitInfo.from_returncode(-sig).signal_name for sig in (9, 11, 6, 15, 2, 10)] == [
        "KILL",
        "11",
        "ABRT",
        "TERM",
        "INT",
        "USR1",
    ]
    assert ExitInfo.from_returncode(-11).status == "SIGNALED"


def test_delete_signal_goes_to_the_batch_shell_alone_with_batch_job(api: Api, workdir: Path) -> None:
    job_id = _start_shell_and_child(api, workdir)
    status, reply = api.call("DELETE", f"{JOB}/{job_id}?signal=USR1&flags=BATCH_JOB")
    assert (status, reply["status"]) == (200, [])
    _wait_for_line(workdir, job_id, "shell-got-usr1")
    # then to the whole job: if USR1 had reached the child, it said so before USR2
    api.call("DELETE", f"{JOB}/{job_id}?signal=USR2")
    _wait_for_line(workdir, job_id, "child-got-usr2")
    _wait_for_line(workdir, job_id, "shell-got-usr2")
    assert "child-got-usr1" not in _output(workdir, job_id)
    assert api.job(job_id)["job_state"] == ["RUNNING"]  # a signal is not a cancel
    api.call("DELETE", f"{JOB}/{job_id}")
    assert api.wait(job_id)["job_state"] == ["CANCELLED"]


def test_delete_batch_job_without_a_signal_kills_the_batch_shell_alone(api: Api, workdir: Path) -> None:
    job_id = api.submit("#!/bin/bash\nwhile :; do sleep 0.1; done\n", current_working_directory=str(workdir))
    api.wait(job_id, {"RUNNING"})
    api.call("DELETE", f"{JOB}/{job_id}?flags=BATCH_JOB")  # SIGKILL, as slurmrestd's default signal
    job = api.wait(job_id)
    assert (job["job_state"], job["state_reason"]) == (["FAILED"], "RaisedSignal")
    assert job["exit_code"]["signal"]["name"] == "KILL"


def test_delete_refuses_unknown_flags_and_signals(api: Api, workdir: Path) -> None:
    job_id = api.submit("#!/bin/bash\nsleep 5\n", current_working_directory=str(workdir))
    for query in ("flags=NOPE", "signal=SEGV", "signal=99"):
        status, reply = api.call("DELETE", f"{JOB}/{job_id}?{query}")
        assert status == 422, query
        assert reply["errors"][0]["error_number"] == 9000
    api.call("DELETE", f"{JOB}/{job_id}")
    assert api.wait(job_id)["job_state"] == ["CANCELLED"]


def test_kill_warning_reaches_the_batch_shell_alone_with_batch_job(api: Api, workdir: Path) -> None:
    # the fixture's 1.5 s minutes: a 2 minute limit, the warning 40 s of it before, 2 s in
    job_id = _start_shell_and_child(
        api, workdir, time_limit=2, kill_warning_signal="USR1", kill_warning_delay=40, kill_warning_flags=["BATCH_JOB"]
    )
    _wait_for_line(workdir, job_id, "shell-got-usr1")
    api.call("DELETE", f"{JOB}/{job_id}?signal=USR2")  # if USR1 had reached the child, it said so before
    _wait_for_line(workdir, job_id, "child-got-usr2")
    assert "child-got-usr1" not in _output(workdir, job_id)
    api.call("DELETE", f"{JOB}/{job_id}")
    assert api.wait(job_id)["job_state"] == ["CANCELLED"]


def test_kill_warning_reaches_every_process_without_batch_job(api: Api, workdir: Path) -> None:
    job_id = _start_shell_and_child(
        api, workdir, time_limit=2, kill_warning_signal="SIGUSR1", kill_warning_delay={"set": True, "number": 40}
    )
    _wait_for_line(workdir, job_id, "child-got-usr1")
    _wait_for_line(workdir, job_id, "shell-got-usr1")
    assert api.job(job_id)["job_state"] == ["RUNNING"]
    api.call("DELETE", f"{JOB}/{job_id}")
    assert api.wait(job_id)["job_state"] == ["CANCELLED"]


def test_kill_warning_signal_must_be_one_slurm_knows(api: Api, workdir: Path) -> None:
    desc = {"environment": ["PATH=/bin"], "current_working_directory": str(workdir), "kill_warning_signal": "NOPE"}
    status, reply = api.call("POST", f"{JOB}/submit", {"job": desc, "script": "#!/bin/bash\ntrue\n"})
    assert status == 422
    assert "Unknown signal NOPE" in reply["errors"][0]["description"]


def test_a_script_whose_interpreter_is_missing_fails_as_slurmstepds_execve_does(api: Api, workdir: Path) -> None:
    job = api.wait(api.submit("#!/no/such/shell\ntrue\n", current_working_directory=str(workdir)))
    assert (job["job_state"], job["exit_code"]["return_code"]["number"]) == (["FAILED"], 2)  # ENOENT
    expected = "slurmstepd-node1: error: execve(): bad interpreter(/no/such/shell): No such file or directory"
    assert _output(workdir, job["job_id"]).splitlines() == [expected]
