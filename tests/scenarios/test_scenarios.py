"""What a user sees, on both backends: each scenario asserts the same outcome on each.

The hook (the provider's own code) drives every scenario; ``cluster`` is the built-in emulator
backend or a real Slurm 24.11 behind the emulator's slurmrestd backend.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest

from airflow_provider_slurmapi.client.errors import SlurmError
from airflow_provider_slurmapi.client.jobs import ExitCode
from airflow_provider_slurmapi.client.submission import submission_key
from airflow_provider_slurmapi.emulator import ScriptedFault
from tests.scenarios.conftest import Cluster

pytestmark = pytest.mark.scenario


def test_job_completes(cluster: Cluster) -> None:
    job_id = cluster.submit("#!/bin/bash\necho hello from $SLURM_JOB_ID in $PWD\n")
    first = cluster.hook.get_job(job_id)
    # pending until the scheduler's next pass, unless a pass came first (real Slurm schedules on
    # submit too) or the node is still busy with an earlier scenario's job
    assert (first.state, first.reason) in {("PENDING", None), ("PENDING", "Resources"), ("PENDING", "Priority")} or (
        first.state in ("RUNNING", "COMPLETED")
    ), first
    status = cluster.wait(job_id)
    assert (status.state, status.is_success) == ("COMPLETED", True)
    assert status.exit_code == ExitCode("SUCCESS", 0, None, None)
    assert status.describe() == f"Slurm job {job_id} is COMPLETED; exit code 0"
    output = cluster.host_path(f"/tmp/slurm-{job_id}.out").read_text()
    assert output == f"hello from {job_id} in /tmp\n"


def test_exit_3_fails(cluster: Cluster) -> None:
    job_id = cluster.submit("#!/bin/bash\necho failing\nexit 3\n")
    status = cluster.wait(job_id)
    assert (status.state, status.reason, status.is_success) == ("FAILED", "NonZeroExitCode", False)
    assert status.exit_code == ExitCode("ERROR", 3, None, None)
    assert status.describe() == f"Slurm job {job_id} is FAILED; reason: NonZeroExitCode; exit code 3"


def test_killed_by_signal(cluster: Cluster) -> None:
    job_id = cluster.submit("#!/bin/bash\nkill -9 $$\n")
    status = cluster.wait(job_id)
    assert (status.state, status.reason) == ("FAILED", "RaisedSignal")
    assert status.exit_code is not None
    assert (status.exit_code.status, status.exit_code.signal, status.exit_code.signal_name) == ("SIGNALED", 9, "KILL")
    assert "signal 9 (SIGKILL)" in status.describe()


def test_cancel_running_job(cluster: Cluster) -> None:
    job_id = cluster.submit("#!/bin/bash\nsleep 300\n")
    assert cluster.wait_for_state(job_id, "RUNNING").state == "RUNNING"
    assert cluster.hook.cancel_job(job_id) is True
    status = cluster.wait(job_id)
    assert (status.state, status.is_success) == ("CANCELLED", False)


def test_cancel_held_job(cluster: Cluster) -> None:
    job_id = cluster.submit("#!/bin/bash\ntrue\n", hold=True)
    pending = cluster.hook.get_job(job_id)
    assert (pending.state, pending.reason) == ("PENDING", "JobHeldUser")
    assert cluster.hook.cancel_job(job_id) is True
    status = cluster.wait(job_id)
    assert status.state == "CANCELLED"
    assert status.effective_exit_code is None  # it never ran: no exit code to report


def test_cancel_finished_job(cluster: Cluster) -> None:
    job_id = cluster.submit("#!/bin/bash\ntrue\n")
    assert cluster.wait(job_id).state == "COMPLETED"
    assert cluster.hook.cancel_job(job_id) is False  # nothing to cancel, and no error
    assert cluster.hook.get_job(job_id).state == "COMPLETED"


def test_time_limit_exceeded(cluster: Cluster) -> None:
    job_id = cluster.submit("#!/bin/bash\nsleep 600\n", time_limit=1)
    status = cluster.wait(job_id, timeout=300)
    assert (status.state, status.is_success) == ("TIMEOUT", False)
    assert status.describe().startswith(f"Slurm job {job_id} is TIMEOUT")


def test_job_read_back_from_accounting(cluster: Cluster) -> None:
    job_id = cluster.submit("#!/bin/bash\nexit 4\n")
    assert cluster.wait(job_id).source == "slurm"
    deadline = time.monotonic() + 120
    while True:  # until the job has left the live queue (MinJobAge)
        try:
            cluster.hook.call("GET", f"/slurm/v0.0.42/job/{job_id}")
        except SlurmError as error:
            assert error.status == 404
            break
        assert time.monotonic() < deadline, "the job never left the live queue"
        time.sleep(1)
    status = cluster.hook.get_job(job_id)
    assert (status.source, status.state, status.exit_code) == ("slurmdb", "FAILED", ExitCode("ERROR", 4, None, None))
    assert status.describe() == f"Slurm job {job_id} is FAILED; exit code 4"


def test_failed_step_in_successful_batch(cluster: Cluster) -> None:
    job_id = cluster.submit("#!/bin/bash\nsrun bash -c 'exit 7'\necho after\nexit 0\n")
    status = cluster.wait(job_id)
    assert (status.state, status.exit_code) == ("COMPLETED", ExitCode("SUCCESS", 0, None, None))
    assert status.derived_exit_code == ExitCode("ERROR", 7, None, None)
    assert status.describe() == f"Slurm job {job_id} is COMPLETED; exit code 0; derived (worst step) exit code 7"


def test_job_array_watched_to_the_end(cluster: Cluster) -> None:
    """Slurm keeps an array's tasks that have not started in one meta record (``ID_[1-3%1]``) and
    splits each task off into a record of its own as it starts; the array is over with its last."""
    job_id = cluster.submit("#!/bin/bash\necho task $SLURM_ARRAY_TASK_ID\nsleep 2\n", array="0-3%1")
    first = cluster.hook.get_job(job_id)
    assert (first.job_id, first.state, first.extra["tasks"]) == (job_id, "PENDING", {f"{job_id}_[0-3%1]": "PENDING"})
    deadline = time.monotonic() + 60
    while (partly := cluster.hook.get_job(job_id)).extra["tasks"].get(f"{job_id}_0") != "RUNNING":
        assert time.monotonic() < deadline, f"task 0 never ran: {partly.describe()}"
        time.sleep(0.3)
    # one task runs (the %1 limit); the meta record of the others comes first: the array is PENDING
    assert (partly.job_id, partly.state, partly.reason) == (job_id, "PENDING", "JobArrayTaskLimit")
    assert partly.extra["tasks"] == {f"{job_id}_0": "RUNNING", f"{job_id}_[1-3%1]": "PENDING"}
    waiting = cluster.hook.get_job(f"{job_id}_3")  # not started yet: read from the meta record
    assert (waiting.job_id, waiting.state, waiting.reason) == (f"{job_id}_3", "PENDING", "JobArrayTaskLimit")
    status = cluster.wait(job_id)
    assert (status.job_id, status.state, status.is_success) == (job_id, "COMPLETED", True)
    assert status.extra["tasks"] == {f"{job_id}_{task}": "COMPLETED" for task in range(4)}
    for task in range(4):
        assert cluster.host_path(f"/tmp/slurm-{job_id}_{task}.out").read_text() == f"task {task}\n"


def test_list_jobs(cluster: Cluster) -> None:
    held = cluster.submit("#!/bin/bash\ntrue\n", hold=True)
    done = cluster.submit("#!/bin/bash\ntrue\n")
    cluster.wait(done)
    listed = {job.job_id: job for job in cluster.hook.list_jobs()}
    assert (listed[held].state, listed[held].reason) == ("PENDING", "JobHeldUser")
    assert listed[done].state == "COMPLETED"
    assert cluster.hook.cancel_job(held) is True


def test_missing_working_directory(cluster: Cluster) -> None:
    """Slurm runs the job in /tmp and says so, unless its output file cannot be opened."""
    out = f"/tmp/scenario-nocwd-{time.time_ns()}.out"
    runs = cluster.submit("#!/bin/bash\npwd\n", current_working_directory="/nonexistent", standard_output=out)
    assert cluster.wait(runs).state == "COMPLETED"
    lines = cluster.host_path(out).read_text().splitlines()
    assert "couldn't chdir to `/nonexistent': No such file or directory: going to /tmp instead" in lines[0]
    assert lines[-1] == "/tmp"
    no_output = cluster.submit("#!/bin/bash\ntrue\n", current_working_directory="/nonexistent")
    status = cluster.wait(no_output)
    assert (status.state, status.reason) == ("FAILED", "RaisedSignal")
    assert status.exit_code == ExitCode("SIGNALED", None, 53, "53")


def test_submit_to_unknown_partition_names_the_cause(cluster: Cluster) -> None:
    with pytest.raises(SlurmError) as raised:
        cluster.submit("#!/bin/bash\ntrue\n", partition="nosuchpartition")
    assert raised.value.status == 500
    assert [(e.error_number, e.error) for e in raised.value.errors] == [(2000, "Invalid partition name specified")]
    assert "Invalid partition name specified" in str(raised.value)


def test_signal_reaches_a_running_job(cluster: Cluster) -> None:
    out = f"/tmp/scenario-signal-{time.time_ns()}.out"
    script = "#!/bin/bash\ntrap 'echo got USR1' USR1\nfor i in $(seq 120); do sleep 0.5; done\n"
    job_id = cluster.submit(script, standard_output=out)
    cluster.wait_for_state(job_id, "RUNNING")
    time.sleep(1)  # let bash install its trap
    assert cluster.hook.cancel_job(job_id, signal="USR1") is True
    deadline = time.monotonic() + 30
    while "got USR1" not in cluster.host_path(out).read_text():
        assert time.monotonic() < deadline, "the job never got the signal"
        time.sleep(0.5)
    assert cluster.hook.get_job(job_id).state == "RUNNING"  # a signal is not a cancel
    assert cluster.hook.cancel_job(job_id) is True
    assert cluster.wait(job_id).state == "CANCELLED"


def test_begin_time_in_the_future(cluster: Cluster) -> None:
    job_id = cluster.submit("#!/bin/bash\ntrue\n", begin_time={"set": True, "number": int(time.time()) + 3600})
    time.sleep(3)  # past the scheduler's first pass
    status = cluster.hook.get_job(job_id)
    assert (status.state, status.reason) == ("PENDING", "BeginTime")
    assert cluster.hook.cancel_job(job_id) is True
    assert cluster.wait(job_id).state == "CANCELLED"


def test_bulk_state_query(cluster: Cluster) -> None:
    done = cluster.submit("#!/bin/bash\ntrue\n")
    held = cluster.submit("#!/bin/bash\ntrue\n", hold=True)
    cluster.wait(done)
    reply = cluster.hook.call("GET", f"/slurm/v0.0.42/jobs/state/?job_id={done}&job_id={held}&job_id=999999")
    states = {job["job_id"]: job["state"] for job in reply["jobs"]}
    assert states == {done: ["COMPLETED"], held: ["PENDING"]}  # an unknown ID is simply absent
    assert reply["errors"] == reply["warnings"] == []
    cluster.hook.cancel_job(held)


def test_lost_submit_reply_is_reconciled_through_the_key(cluster: Cluster, emulator_backend: Any) -> None:
    # The submit reaches Slurm and its reply is lost: the client finds the job by its key
    # (live queue, then accounting by job name) instead of submitting a second one.
    emulator = emulator_backend[1]
    name = f"keyed-{uuid.uuid4().hex[:8]}"
    key = submission_key("scenario_dag", "keyed", name, -1)
    emulator.faults.script(ScriptedFault("reset_after", method="POST", path="job/submit$"))
    desc = {"name": name, "current_working_directory": "/tmp", "time_limit": 10, "comment": "from a scenario"}
    job_id = cluster.hook.submit_job(desc, "#!/bin/bash\ntrue\n", key=key)
    cluster.submitted.append(job_id)
    assert emulator.faults.injected["reset_after"] == 1 and not emulator.faults.pending
    assert cluster.hook.get_job(job_id).comment == f"from a scenario {key}"
    assert cluster.wait(job_id).state == "COMPLETED"
    deadline = time.monotonic() + 60
    while True:  # accounting, asked by job name, knows the job and its comment (it may lag a little)
        listed = cluster.hook.call("GET", f"/slurmdb/v0.0.42/jobs/?job_name={name}")["jobs"]
        if listed or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert [(str(j["job_id"]), j["comment"]["job"]) for j in listed] == [(job_id, f"from a scenario {key}")]
    found = cluster.hook.find_job_by_key(key, name)
    assert found is not None and (found.job_id, found.state) == (job_id, "COMPLETED")


# --- what Slurm does to a running job: requeue, preemption, node failure, hold --------------------

# The first run would last long; the run after a requeue ($SLURM_RESTART_COUNT > 0) lasts 2 s.
FIRST_RUN_LONG = (
    "#!/bin/bash\n"
    'echo "run ${SLURM_RESTART_COUNT:-0}"\n'
    'if [ "${SLURM_RESTART_COUNT:-0}" -gt 0 ]; then sleep 2; exit 0; fi\n'
    "sleep 300\n"
)


def wait_and_log(cluster: Cluster, task_log: Any, job_id: str, **wait: Any) -> tuple[Any, list[str]]:
    """The hook's wait, and the lines it logged."""
    task_log()
    try:
        status = cluster.hook.wait_for_job(job_id, poll_interval=1, **wait)
    except TimeoutError as error:
        status = error
    return status, task_log().splitlines()


def lines_with(lines: list[str], text: str) -> list[str]:
    return [line for line in lines if text in line]


@pytest.mark.parametrize(
    ("action", "cause"), [("requeue", "REQUEUED"), ("node_fail", "NODE_FAIL"), ("preempt", "PREEMPTED")]
)
def test_a_requeued_job_is_followed_to_its_last_run(cluster: Cluster, task_log: Any, action: str, cause: str) -> None:
    job_id = cluster.submit(FIRST_RUN_LONG, requeue=True, cpus_per_task=cluster.node_cpus())
    assert cluster.wait_for_state(job_id, "RUNNING").state == "RUNNING"
    cluster.act(action, job_id)
    cluster.start_now(job_id)
    status, lines = wait_and_log(cluster, task_log, job_id, timeout=240)
    assert (status.state, status.is_success, status.restarts) == ("COMPLETED", True, 1)
    (line,) = lines_with(lines, "was requeued")  # once
    assert f"Slurm job {job_id} was requeued (restart 1): {cause} on " in line
    assert "again from the start" in line  # "will run", or "ran" if first noticed at the end
    # Slurm writes the new run's output over the old one's
    assert cluster.host_path(f"/tmp/slurm-{job_id}.out").read_text() == "run 1\n"


def test_requeuehold_waits_for_a_release(cluster: Cluster, task_log: Any) -> None:
    job_id = cluster.submit(FIRST_RUN_LONG, requeue=True)
    assert cluster.wait_for_state(job_id, "RUNNING").state == "RUNNING"
    cluster.act("requeuehold", job_id)
    timeout, lines = wait_and_log(cluster, task_log, job_id, timeout=5)
    assert isinstance(timeout, TimeoutError) and "held: it will not start until released" in str(timeout)
    (line,) = lines_with(lines, "was requeued")
    assert f"Slurm job {job_id} was requeued (restart 1)" in line
    assert f"it is held (JobHeldUser) and runs again only once released (scontrol release {job_id})" in line
    assert len(lines_with(lines, "reason: JobHeldUser; held: it will not start")) == 1  # once, not at every read
    cluster.act("release", job_id)
    cluster.start_now(job_id)
    status = cluster.wait(job_id)
    assert (status.state, status.is_success, status.restarts) == ("COMPLETED", True, 1)


def test_a_node_failure_without_requeue_interrupts_the_job(cluster: Cluster) -> None:
    job_id = cluster.submit(FIRST_RUN_LONG, requeue=False)
    assert cluster.wait_for_state(job_id, "RUNNING").state == "RUNNING"
    cluster.act("node_fail", job_id)
    status = cluster.wait(job_id)
    assert (status.state, status.reason, status.is_interrupted, status.restarts) == ("NODE_FAIL", "NodeDown", True, 0)
    assert status.exit_code == ExitCode("SIGNALED", None, 1, "HUP")
    assert "work was interrupted (a node it ran on failed) and Slurm did not requeue it" in status.describe()


def test_a_pending_job_held_by_an_administrator(cluster: Cluster, task_log: Any) -> None:
    job_id = cluster.submit("#!/bin/bash\ntrue\n", begin_time={"set": True, "number": int(time.time()) + 3600})
    cluster.act("hold", job_id)
    status = cluster.hook.get_job(job_id)
    assert (status.state, status.reason, status.held) == ("PENDING", "JobHeldAdmin", True)
    timeout, lines = wait_and_log(cluster, task_log, job_id, timeout=3)
    assert isinstance(timeout, TimeoutError)
    assert len(lines_with(lines, "reason: JobHeldAdmin; held: it will not start until released")) == 1
    cluster.act("release", job_id)
    assert cluster.hook.get_job(job_id).held is False
    assert cluster.hook.cancel_job(job_id) is True
