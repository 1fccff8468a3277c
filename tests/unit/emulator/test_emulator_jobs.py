"""Job life cycles on the built-in backend, driven over HTTP like a real client."""

from __future__ import annotations

import time
from pathlib import Path

from emulator_testkit import Api

from airflow_provider_slurmapi.emulator import Emulator, EmulatorConfig
from airflow_provider_slurmapi.emulator.cli import config_from_args

SUBMIT = "/slurm/v0.0.42/job/submit"


def test_submit_runs_and_completes_with_env_and_cwd(api: Api, workdir: Path) -> None:
    script = '#!/bin/bash\necho "foo=$FOO"\npwd\necho "id=$SLURM_JOB_ID name=$SLURM_JOB_NAME"\n'
    job_id = api.submit(
        script,
        name="envjob",
        current_working_directory=str(workdir),
        environment=["PATH=/bin:/usr/bin", "FOO=hello world"],
        comment="my comment",
    )
    job = api.wait(job_id)
    assert job["job_state"] == ["COMPLETED"]
    assert job["exit_code"]["status"] == ["SUCCESS"]
    assert job["exit_code"]["return_code"] == {"set": True, "infinite": False, "number": 0}
    assert job["comment"] == "my comment"
    assert job["standard_output"] == f"{workdir}/slurm-{job_id}.out"
    out = (workdir / f"slurm-{job_id}.out").read_text().splitlines()
    assert out == ["foo=hello world", str(workdir), f"id={job_id} name=envjob"]
    db = api.db_job(job_id)
    assert db["state"]["current"] == ["COMPLETED"]
    assert db["comment"]["job"] == "my comment"
    assert db["working_directory"] == str(workdir)


def test_accounting_without_job_comments_keeps_the_comment_field_empty(tmp_path: Path) -> None:
    """slurmdbd without AccountingStoreFlags=job_comment: ``comment.job`` is "" in accounting only."""
    assert config_from_args(["--no-job-comments"]).job_comments is False
    assert config_from_args([]).job_comments is True
    with Emulator(EmulatorConfig(job_comments=False, sched_delay=0, state_dir=tmp_path / "jobs")) as emu:
        api = Api(emu)
        job_id = api.submit(
            "#!/bin/bash\ntrue\n", name="quiet", comment="airflow-key=1", current_working_directory="/tmp"
        )
        assert api.wait(job_id)["comment"] == "airflow-key=1"  # slurmctld keeps it while the job is queued
        assert api.db_job(job_id)["comment"] == {"administrator": "", "job": "", "system": ""}
        _, listed = api.call("GET", "/slurmdb/v0.0.42/jobs/?job_name=quiet")
        assert [job["comment"]["job"] for job in listed["jobs"]] == [""]


def test_exit_3_fails_with_return_code(api: Api, workdir: Path) -> None:
    job_id = api.submit("#!/bin/bash\nexit 3\n", current_working_directory=str(workdir))
    job = api.wait(job_id)
    assert job["job_state"] == ["FAILED"]
    assert job["state_reason"] == "NonZeroExitCode"
    assert job["exit_code"]["status"] == ["ERROR"]
    assert job["exit_code"]["return_code"]["number"] == 3


def test_kill_9_self_is_signaled(api: Api, workdir: Path) -> None:
    job_id = api.submit("#!/bin/bash\nkill -9 $$\n", current_working_directory=str(workdir))
    job = api.wait(job_id)
    assert job["job_state"] == ["FAILED"]
    assert job["state_reason"] == "RaisedSignal"
    assert job["exit_code"]["status"] == ["SIGNALED"]
    assert job["exit_code"]["signal"] == {"id": {"set": True, "infinite": False, "number": 9}, "name": "KILL"}
    assert job["exit_code"]["return_code"]["set"] is False


def test_cancel_running_then_finished(api: Api, workdir: Path) -> None:
    marker = workdir / "after"
    job_id = api.submit(f"#!/bin/bash\nsleep 30\ntouch {marker}\n", current_working_directory=str(workdir))
    api.wait(job_id, {"RUNNING"})
    status, reply = api.call("DELETE", f"/slurm/v0.0.42/job/{job_id}")
    assert (status, reply["status"]) == (200, [])
    job = api.wait(job_id)
    assert job["job_state"] == ["CANCELLED"]
    assert job["exit_code"]["status"] == ["SIGNALED"]
    assert job["exit_code"]["signal"]["name"] == "TERM"
    assert not marker.exists()
    db = api.db_job(job_id)
    assert db["state"]["current"] == ["CANCELLED"]
    assert db["exit_code"]["status"] == ["SUCCESS"]  # real /slurmdb says SUCCESS/0 for cancelled jobs
    assert db["steps"][0]["exit_code"]["signal"]["name"] == "TERM"
    # cancelling a finished job still in the queue: HTTP 200, error 2021 inside status[]
    status, reply = api.call("DELETE", f"/slurm/v0.0.42/job/{job_id}")
    assert status == 200
    assert reply["status"][0]["error"]["code"] == 2021
    assert reply["status"][0]["job_id"]["number"] == job_id


def test_cancel_held_job(api: Api, workdir: Path) -> None:
    job_id = api.submit("#!/bin/bash\ntrue\n", hold=True, current_working_directory=str(workdir))
    time.sleep(0.3)
    job = api.job(job_id)
    assert job["job_state"] == ["PENDING"] and job["state_reason"] == "JobHeldUser"
    assert job["hold"] is True
    status, reply = api.call("DELETE", f"/slurm/v0.0.42/job/{job_id}")
    assert (status, reply["status"]) == (200, [])
    job = api.job(job_id)
    assert job["job_state"] == ["CANCELLED"]
    # as in real 24.11: still held with priority 0, max_nodes 1 (held jobs), no tasks (never ran)
    assert (job["hold"], job["priority"]["number"], job["max_nodes"]["number"]) == (True, 0, 1)
    assert (job["tasks"]["set"], job["tasks_per_node"]["number"]) == (False, 0)
    assert api.db_job(job_id)["time"]["start"] == 4294967294
    assert (api.db_job(job_id)["hold"], api.db_job(job_id)["priority"]["number"]) == (True, 0)


def test_flags_and_task_counts_follow_the_request(api: Api, workdir: Path) -> None:
    """Real 24.11: PARTITION_ASSIGNED and USING_DEFAULT_PARTITION only without a partition;
    EXACT_TASK_COUNT_REQUESTED with tasks; tasks_per_node 0 unless given, tasks derived from it."""
    cwd = str(workdir)
    plain = api.wait(api.submit("#!/bin/bash\ntrue\n", current_working_directory=cwd))
    assert plain["flags"] == [
        "USING_DEFAULT_ACCOUNT",
        "USING_DEFAULT_PARTITION",
        "USING_DEFAULT_QOS",
        "USING_DEFAULT_WCKEY",
        "PARTITION_ASSIGNED",
    ]
    assert (plain["tasks"]["number"], plain["tasks_per_node"]["number"]) == (1, 0)
    explicit = api.submit("#!/bin/bash\nsleep 30\n", partition="debug", tasks=2, current_working_directory=cwd)
    job = api.wait(explicit, {"RUNNING"})
    flags = ["EXACT_TASK_COUNT_REQUESTED", "JOB_WAS_RUNNING", "USING_DEFAULT_ACCOUNT", "USING_DEFAULT_QOS"]
    assert job["flags"] == [*flags, "USING_DEFAULT_WCKEY"]
    assert (job["tasks"]["number"], job["tasks_per_node"]["number"], job["cpus"]["number"]) == (2, 0, 2)
    api.call("DELETE", f"/slurm/v0.0.42/job/{explicit}")
    per_node = api.wait(api.submit("#!/bin/bash\ntrue\n", tasks_per_node=2, current_working_directory=cwd))
    assert (per_node["tasks"]["number"], per_node["tasks_per_node"]["number"]) == (2, 2)
    assert "EXACT_TASK_COUNT_REQUESTED" not in per_node["flags"]


def test_signal_usr1_is_delivered_and_job_keeps_running(api: Api, workdir: Path) -> None:
    script = "#!/bin/bash\ntrap 'echo got-usr1' USR1\nfor i in $(seq 50); do sleep 0.1; done\n"
    job_id = api.submit(script, current_working_directory=str(workdir))
    api.wait(job_id, {"RUNNING"})
    time.sleep(0.3)  # let bash install the trap
    status, reply = api.call("DELETE", f"/slurm/v0.0.42/job/{job_id}?signal=USR1")
    assert (status, reply["status"]) == (200, [])
    time.sleep(0.3)
    assert api.job(job_id)["job_state"] == ["RUNNING"]
    status, _ = api.call("DELETE", f"/slurm/v0.0.42/job/{job_id}?signal=KILL")
    job = api.wait(job_id)
    assert job["job_state"] == ["CANCELLED"]
    assert "got-usr1" in (workdir / f"slurm-{job_id}.out").read_text()


def test_time_limit_gives_timeout(api: Api, workdir: Path) -> None:
    # seconds_per_minute=1.5 in the fixture, so one minute of limit is 1.5 s
    job_id = api.submit("#!/bin/bash\nsleep 30\n", time_limit=1, current_working_directory=str(workdir))
    running = api.wait(job_id, {"RUNNING"})
    assert running["end_time"]["number"] == running["start_time"]["number"] + 60
    job = api.wait(job_id, timeout=10)
    assert job["job_state"] == ["TIMEOUT"]
    assert job["state_reason"] == "TimeLimit"
    assert job["exit_code"]["signal"]["id"]["number"] == 15
    assert api.db_job(job_id)["state"]["current"] == ["TIMEOUT"]


def test_finished_job_leaves_queue_and_stays_in_slurmdb(api: Api, workdir: Path) -> None:
    job_id = api.submit("#!/bin/bash\ntrue\n", current_working_directory=str(workdir))
    api.wait(job_id)
    time.sleep(2.3)  # min_job_age=2 in the fixture
    status, reply = api.call("GET", f"/slurm/v0.0.42/job/{job_id}")
    assert status == 404
    assert reply["errors"][0]["error_number"] == 2017
    status, reply = api.call("DELETE", f"/slurm/v0.0.42/job/{job_id}")
    assert status == 200 and reply["status"][0]["error"]["code"] == 2017
    assert reply["status"][0]["job_id"]["set"] is False
    db = api.db_job(job_id)
    assert db["state"]["current"] == ["COMPLETED"]
    assert isinstance(db["time"]["end"], int) and db["time"]["end"] > 0


def test_srun_step_failure_sets_derived_exit_code(api: Api, workdir: Path) -> None:
    job_id = api.submit("#!/bin/bash\nsrun -n 1 bash -c 'exit 7'\nexit 0\n", current_working_directory=str(workdir))
    job = api.wait(job_id)
    assert job["job_state"] == ["COMPLETED"]
    assert job["exit_code"]["status"] == ["SUCCESS"]
    assert job["derived_exit_code"]["status"] == ["ERROR"]
    assert job["derived_exit_code"]["return_code"]["number"] == 7
    steps = api.db_job(job_id)["steps"]
    assert [s["step"]["id"] for s in steps] == [f"{job_id}.batch", f"{job_id}.0"]
    assert steps[1]["state"] == ["FAILED"]


def test_array_job(api: Api, workdir: Path) -> None:
    """Like slurmctld, each task that starts is split off into a record with a job id of its own;
    the last task to start keeps the array's id."""
    script = "#!/bin/bash\necho task=$SLURM_ARRAY_TASK_ID\n"
    first = api.submit(
        script, array="0-3", standard_output=f"{workdir}/a-%A_%a.out", current_working_directory=str(workdir)
    )
    for job_id in range(first, first + 4):
        api.wait(job_id)
    status, reply = api.call("GET", f"/slurm/v0.0.42/job/{first}")
    records = reply["jobs"]
    # the array's own record first, then the others newest first
    assert [j["job_id"] for j in records] == [first, first + 3, first + 2, first + 1]
    assert [j["array_task_id"]["number"] for j in records] == [3, 2, 1, 0]
    assert {j["array_job_id"]["number"] for j in records} == {first}
    assert all(j["job_state"] == ["COMPLETED"] and j["array_task_string"] == "" for j in records)
    for task in range(4):
        assert (workdir / f"a-{first}_{task}.out").read_text() == f"task={task}\n"
    # a task suffix is ignored, as by real slurmrestd: the whole array
    assert [j["job_id"] for j in api.call("GET", f"/slurm/v0.0.42/job/{first}_2")[1]["jobs"]] == [
        first,
        first + 3,
        first + 2,
        first + 1,
    ]
    assert api.job(first + 1)["array_task_id"]["number"] == 0  # a task's own id: that record alone
    _, state = api.call("GET", f"/slurm/v0.0.42/jobs/state/?job_id={first}")
    assert [e["job_id"] for e in state["jobs"]] == [f"{first + 3}_2", f"{first}_3", f"{first + 2}_1", f"{first + 1}_0"]
    _, db = api.call("GET", f"/slurmdb/v0.0.42/job/{first}")
    assert [(j["job_id"], j["array"]["task_id"]["number"]) for j in db["jobs"]] == [
        (first, 3),
        (first + 1, 0),
        (first + 2, 1),
        (first + 3, 2),
    ]
    assert [j["job_id"] for j in api.call("GET", f"/slurmdb/v0.0.42/job/{first}_1")[1]["jobs"]] == [first + 2]
    _, deleted = api.call("DELETE", f"/slurm/v0.0.42/job/{first}")
    assert [(e["step_id"], e["job_id"]["number"], e["error"]["code"]) for e in deleted["status"]] == [
        (f"{first}_2", first + 3, 2021),
        (f"{first}_3", first, 2021),
        (f"{first}_1", first + 2, 2021),
        (f"{first}_0", first + 1, 2021),
    ]


def test_jobs_state_bulk(api: Api, workdir: Path) -> None:
    done = api.submit("#!/bin/bash\ntrue\n", current_working_directory=str(workdir))
    api.wait(done)
    running = api.submit("#!/bin/bash\nsleep 30\n", current_working_directory=str(workdir))
    api.wait(running, {"RUNNING"})
    status, reply = api.call("GET", f"/slurm/v0.0.42/jobs/state/?job_id={done}&job_id={running}&job_id=999999")
    assert status == 200
    assert reply["jobs"] == [
        {"job_id": str(done), "state": ["COMPLETED"]},
        {"job_id": str(running), "state": ["RUNNING"]},
    ]
    status, _ = api.call("GET", f"/slurm/v0.0.42/jobs/state?job_id={done},{running}")
    assert status == 400
    api.call("DELETE", f"/slurm/v0.0.42/job/{running}")
    api.wait(running)


def test_jobs_list_and_ping(api: Api, workdir: Path) -> None:
    job_id = api.submit("#!/bin/bash\nsleep 30\n", current_working_directory=str(workdir))
    api.wait(job_id, {"RUNNING"})
    for path in ("/slurm/v0.0.42/jobs/", "/slurm/v0.0.41/jobs"):
        status, reply = api.call("GET", path)
        assert status == 200 and job_id in [j["job_id"] for j in reply["jobs"]]
    status, reply = api.call("GET", "/slurm/v0.0.40/ping")
    assert status == 200 and reply["meta"]["plugin"]["data_parser"] == "data_parser/v0.0.40"
    status, reply = api.call("GET", "/slurmdb/v0.0.42/jobs")
    assert status == 200 and job_id in [j["job_id"] for j in reply["jobs"]]
    api.call("DELETE", f"/slurm/v0.0.42/job/{job_id}")


def test_begin_time_in_future_is_pending(api: Api, workdir: Path) -> None:
    begin = int(time.time()) + 3600
    job_id = api.submit(
        "#!/bin/bash\ntrue\n", begin_time={"set": True, "number": begin}, current_working_directory=str(workdir)
    )
    time.sleep(0.3)
    job = api.job(job_id)
    assert job["job_state"] == ["PENDING"] and job["state_reason"] == "BeginTime"
    # real Slurm (job_pending_begin_time.json): start_time is when the scheduler expects it to start
    assert job["start_time"]["number"] == begin
    api.call("DELETE", f"/slurm/v0.0.42/job/{job_id}")


def test_missing_cwd_runs_in_tmp_unless_the_output_cannot_be_opened(api: Api, workdir: Path) -> None:
    # like slurmstepd: it creates an output file's missing directories (real Slurm 24.11 does:
    # tests/fixtures/slurm-24.11.5/_notes.json) and fails the job when it cannot
    blocker = workdir / "a-file"
    blocker.write_text("")
    job_id = api.submit("#!/bin/bash\ntrue\n", current_working_directory=str(blocker / "nope"))
    job = api.wait(job_id)
    assert (job["job_state"], job["state_reason"]) == (["FAILED"], "RaisedSignal")
    assert job["exit_code"]["status"] == ["SIGNALED"]
    assert job["exit_code"]["signal"]["id"]["number"] == 53
    assert job["state_description"] == "RaisedSignal:53(Real-time signal 19)"  # as real Slurm says
    created = api.submit("#!/bin/bash\npwd\n", current_working_directory=str(workdir / "made"))
    assert api.wait(created)["job_state"] == ["COMPLETED"]
    assert (workdir / "made" / f"slurm-{created}.out").read_text() == f"{workdir / 'made'}\n"
    # with an output file that can be opened, it runs in /tmp and says why in the output
    out = workdir / "out.txt"
    job_id = api.submit("#!/bin/bash\npwd\n", current_working_directory=str(blocker / "nope"), standard_output=str(out))
    assert api.wait(job_id)["job_state"] == ["COMPLETED"]
    assert out.read_text().splitlines() == [
        f"slurmstepd-node1: error: couldn't chdir to `{blocker / 'nope'}': No such file or directory: "
        "going to /tmp instead",
        "/tmp",
    ]


def test_submit_errors_and_warnings(api: Api, workdir: Path) -> None:
    base = {"name": "e", "current_working_directory": str(workdir), "environment": ["PATH=/bin"]}

    def submit(job: dict[str, object], script: str | None = "#!/bin/bash\ntrue\n") -> tuple[int, dict]:
        body: dict[str, object] = {"job": job}
        if script is not None:
            body["script"] = script
        return api.call("POST", SUBMIT, body)

    status, reply = submit(base, script=None)
    assert (status, reply["errors"][0]["error_number"]) == (422, 9000)
    status, reply = submit({k: v for k, v in base.items() if k != "environment"})
    assert (status, reply["errors"][0]["error_number"]) == (500, 2019)
    status, reply = submit({k: v for k, v in base.items() if k != "current_working_directory"})
    assert (status, reply["errors"][0]["error_number"]) == (500, 2063)
    status, reply = submit({**base, "partition": "nosuch"})
    assert (status, reply["errors"][0]["error_number"]) == (500, 2000)
    status, reply = submit({**base, "time_limit": "five"})
    assert (status, reply["errors"][0]["error_number"]) == (500, 9202)
    status, reply = submit({**base, "bogus_field": 1, "environment": {"PATH": "/bin"}, "time_limit": 5})
    assert status == 200 and reply["job_id"] > 0
    descriptions = [w["description"] for w in reply["warnings"]]
    assert any('Ignoring unknown field "bogus_field"' in d for d in descriptions)
    assert any("type=object" in d for d in descriptions)
    status, reply = api.call("GET", SUBMIT)
    assert (status, reply["errors"][0]["error_number"]) == (422, 9000)
    status, reply = api.call("GET", "/slurm/v0.0.42/job/abc")
    assert (status, reply["errors"][0]["error_number"]) == (422, 9000)
    status, reply = api.call("GET", "/slurmdb/v0.0.42/job/999999")
    assert status == 200 and reply["jobs"] == [] and reply["warnings"]
