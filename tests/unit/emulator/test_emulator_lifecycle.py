"""Emulator start/stop and small pure helpers."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from emulator_testkit import Api

from airflow_provider_slurmapi.emulator import Emulator, EmulatorConfig
from airflow_provider_slurmapi.emulator.job_model import Job, parse_array


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"  # a zombie counts as gone


def test_stop_kills_every_job_process_and_removes_temp_dirs(tmp_path: Path) -> None:
    emu = Emulator(EmulatorConfig())
    emu.start()
    api = Api(emu)
    script = f"#!/bin/bash\necho $$ > {tmp_path}/batch.pid\nsleep 60 &\necho $! > {tmp_path}/child.pid\nwait\n"
    job_id = api.submit(script, current_working_directory=str(tmp_path))
    api.wait(job_id, {"RUNNING"})
    deadline = time.monotonic() + 5
    while not (tmp_path / "child.pid").exists() or not (tmp_path / "child.pid").read_text().strip():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    pids = [int((tmp_path / name).read_text()) for name in ("batch.pid", "child.pid")]
    assert all(_alive(pid) for pid in pids)
    key_dir = Path(emu.key_file).parent  # type: ignore[arg-type]
    emu.stop()
    # the background child gets its SIGKILL with the batch shell, but dies only when next scheduled
    deadline = time.monotonic() + 5
    while any(_alive(pid) for pid in pids):
        assert time.monotonic() < deadline, "a job process outlived the emulator"
        time.sleep(0.05)
    assert not key_dir.exists()


def test_parse_array() -> None:
    assert parse_array("0-3") == ([0, 1, 2, 3], 0)
    assert parse_array("0-3%2") == ([0, 1, 2, 3], 2)
    assert parse_array("1,3,5") == ([1, 3, 5], 0)
    assert parse_array("0-6:3") == ([0, 3, 6], 0)
    for bad in ("", "a-b", "3-1", "0-3%0"):
        with pytest.raises(ValueError):
            parse_array(bad)


def test_filename_patterns() -> None:
    job = Job(
        job_id=12,
        name="nm",
        user_name="u",
        user_id=1,
        group_id=1,
        group_name="u",
        script="",
        environment={},
        cwd="/w",
        stdout_pattern="",
        stderr_pattern="",
        stdin="",
        partition="debug",
        comment="",
        time_limit=None,
        hold=False,
        submit_time=0,
        begin_time=0,
        array_job_id=10,
        array_task_id=2,
    )
    assert job.expand("out-%j-%A_%a-%x-%u-%%.log") == "/w/out-12-10_2-nm-u-%.log"
    assert job.expand("/abs/%j.out") == "/abs/12.out"


def test_array_throttle_keeps_pending_tasks_in_the_meta_record(tmp_path: Path) -> None:
    """Tasks not started yet stay in one record, the array's own, until one is left."""
    with Emulator(EmulatorConfig(state_dir=tmp_path / "state")) as emu:
        api = Api(emu)
        first = api.submit("#!/bin/bash\nsleep 30\n", array="0-3%2", current_working_directory=str(tmp_path))
        deadline = time.monotonic() + 5
        while api.call("GET", f"/slurm/v0.0.42/job/{first + 2}")[0] != 200:  # task 1's record, once split off
            assert time.monotonic() < deadline
            time.sleep(0.05)
        api.wait(first + 2, {"RUNNING"})
        time.sleep(0.4)
        _, reply = api.call("GET", f"/slurm/v0.0.42/job/{first}")
        records = [
            (j["job_id"], j["job_state"][0], j["array_task_id"]["set"], j["array_task_string"]) for j in reply["jobs"]
        ]
        assert records == [
            (first, "PENDING", False, "2-3%2"),
            (first + 2, "RUNNING", True, ""),
            (first + 1, "RUNNING", True, ""),
        ]
        meta = reply["jobs"][0]
        assert (meta["state_reason"], meta["array_max_tasks"]["number"]) == ("JobArrayTaskLimit", 2)
        assert meta["standard_output"] == f"{tmp_path}/slurm-{first}_4294967294.out"
        _, state = api.call("GET", f"/slurm/v0.0.42/jobs/state/?job_id={first}")
        assert [e["job_id"] for e in state["jobs"]] == [f"{first + 2}_1", f"{first + 1}_0", f"{first}_2", f"{first}_3"]
        _, db = api.call("GET", f"/slurmdb/v0.0.42/job/{first}")
        assert [
            (j["job_id"], j["array"]["task"], j["array"]["limits"]["max"]["running"]["tasks"]) for j in db["jobs"]
        ] == [
            (first, "0xC", 2),
            (first + 1, "", 0),
            (first + 2, "", 0),
        ]
        # cancelling a task that has not started only takes it out of the meta record
        status, reply = api.call("DELETE", f"/slurm/v0.0.42/job/{first}_3")
        assert (status, reply["status"], api.job(first)["array_task_string"]) == (200, [], "2%2")
        status, reply = api.call("DELETE", f"/slurm/v0.0.42/job/{first}")
        assert (status, reply["status"]) == (200, [])
        assert all(api.wait(job_id)["job_state"] == ["CANCELLED"] for job_id in (first, first + 1, first + 2))
        meta = api.job(first)
        assert (meta["array_task_string"], meta["state_reason"], meta["tasks"]["set"]) == (
            "2%2",
            "JobArrayTaskLimit",
            False,
        )
