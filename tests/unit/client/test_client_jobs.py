"""JobStatus / ExitCode / select_job against the captured slurmrestd 24.11.5 replies.

Expected values come from the capture notes (_index.tsv) and real-slurm.md section 6, not from
the code under test.
"""

from __future__ import annotations

import copy
import json
import logging

import pytest

from airflow_provider_slurmapi.client.arrays import select_job
from airflow_provider_slurmapi.client.jobs import JobStatus, RecordSource
from airflow_provider_slurmapi.client.wait_policy import JobWaitPolicy
from airflow_provider_slurmapi.client.waiting import follow, run_wait


def _only_job(body: dict) -> dict:
    jobs = body["jobs"]
    assert len(jobs) == 1, "a single-job GET answers exactly one job"
    return jobs[0]


def live(slurm_fixture, name: str) -> JobStatus:
    return JobStatus.from_slurm(_only_job(slurm_fixture(name)))


def acct(slurm_fixture, name: str) -> JobStatus:
    return JobStatus.from_slurmdb(_only_job(slurm_fixture(name)))


def _sn(number: int | None) -> dict:
    """Slurm's {set, infinite, number} wrapper."""
    return {"set": number is not None, "infinite": False, "number": number or 0}


def _exit(status: str = "SUCCESS", rc: int | None = 0, signal: int | None = None, name: str = "") -> dict:
    return {"status": [status], "return_code": _sn(rc), "signal": {"id": _sn(signal), "name": name}}


# --------------------------------------------------------------------------- /slurm (live queue)

# file, base state, flags, finished, success, state_reason   (real-slurm.md section 6 + _index notes)
LIVE = [
    ("job_running.json", "RUNNING", (), False, False, None),
    ("job_pending_resources.json", "PENDING", (), False, False, "Resources"),
    ("job_pending_held.json", "PENDING", (), False, False, "JobHeldUser"),
    ("job_pending_begin_time.json", "PENDING", (), False, False, "BeginTime"),
    ("job_completed.json", "COMPLETED", (), True, True, None),
    ("job_completed_after_delete.json", "COMPLETED", (), True, True, None),
    ("job_failed.json", "FAILED", (), True, False, "NonZeroExitCode"),
    ("job_failed_signal.json", "FAILED", (), True, False, "RaisedSignal"),
    ("job_cancelled.json", "CANCELLED", (), True, False, None),
    ("job_cancelled_pending.json", "CANCELLED", (), True, False, "Resources"),
    ("job_cancelled_immediately.json", "CANCELLED", ("COMPLETING",), False, False, None),
    ("job_after_delete_signal_kill.json", "CANCELLED", (), True, False, None),
    ("job_timeout.json", "TIMEOUT", (), True, False, "TimeLimit"),
    ("job_completed_step_failed.json", "COMPLETED", (), True, True, None),
]


@pytest.mark.parametrize(("name", "state", "flags", "finished", "success", "reason"), LIVE)
def test_from_slurm_state_of_each_fixture(slurm_fixture, name, state, flags, finished, success, reason):
    raw = _only_job(slurm_fixture(name))
    status = JobStatus.from_slurm(raw)
    assert status.source == "slurm"
    assert status.job_id == str(raw["job_id"])
    assert status.name == raw["name"]
    assert status.state == state
    assert status.flags == flags
    assert status.reason == reason  # slurmrestd's literal "None" means no reason
    assert status.is_finished is finished
    assert status.is_active is (not finished)
    assert status.is_success is success


@pytest.mark.parametrize("name", ["job_running.json", "job_pending_resources.json", "job_cancelled_immediately.json"])
def test_describe_shows_no_exit_code_while_the_job_is_active(slurm_fixture, name):
    # PENDING/RUNNING already read SUCCESS/0: ignore it until the job is terminal.
    raw = _only_job(slurm_fixture(name))
    assert raw["exit_code"]["status"] == ["SUCCESS"]  # precondition: the misleading placeholder
    text = JobStatus.from_slurm(raw).describe()
    assert "exit code" not in text
    assert str(raw["job_id"]) in text


def test_running_job(slurm_fixture):
    status = live(slurm_fixture, "job_running.json")
    assert "RUNNING" in status.describe()


def test_pending_job_reason_in_describe(slurm_fixture):
    text = live(slurm_fixture, "job_pending_held.json").describe()
    assert "PENDING" in text and "JobHeldUser" in text


# file, job ID, the start Slurm expects: a pending live record's start_time, where it means one (captured replies)
EXPECTED_STARTS = [
    ("job_pending_begin_time.json", "5", 1796055031),  # reason BeginTime: the begin time asked for
    ("job_pending_resources.json", "3", None),  # start_time 0: the scheduler computed none yet
    ("jobs_list_held_pending_running.json", "4", 1827783587),  # Resources, behind jobs without a time limit
    ("job_pending_held.json", "4", None),  # held: it starts only once released
    ("jobs_list_update_time_after_release_and_hold.json", "6", None),  # held again: its start_time is stale
    ("requeue_running_3_pending_completing.json", "325", None),  # still COMPLETING: the last run's start
    ("requeue_running_4_pending_begintime.json", "325", 1796172746),  # 121 s after the requeue
    ("job_running.json", "1", None),
]


@pytest.mark.parametrize(("name", "job_id", "expected"), EXPECTED_STARTS)
def test_expected_start_of_a_pending_job(slurm_fixture, name, job_id, expected):
    (record,) = [job for job in slurm_fixture(name)["jobs"] if str(job["job_id"]) == job_id]
    assert JobStatus.from_slurm(record).expected_start == expected


def test_accounting_tells_no_expected_start(slurm_fixture):
    assert acct(slurm_fixture, "slurmdb_job_pending.json").expected_start is None


def test_describe_a_pending_job_with_its_expected_start(slurm_fixture):
    status = live(slurm_fixture, "job_pending_begin_time.json")
    assert status.describe() == "Slurm job 5 is PENDING; reason: BeginTime; expected start 2026-11-30 16:10 UTC"
    assert live(slurm_fixture, "job_pending_resources.json").describe() == "Slurm job 3 is PENDING; reason: Resources"


def test_completed_job(slurm_fixture):
    status = live(slurm_fixture, "job_completed.json")
    assert status.exit_code is not None and status.exit_code.is_zero
    assert status.exit_code.return_code == 0
    assert "derived" not in status.describe()  # derived SUCCESS/0 is not worth mentioning


def test_failed_exit_3(slurm_fixture):
    status = live(slurm_fixture, "job_failed.json")
    assert status.state == "FAILED"
    assert status.exit_code.status == "ERROR"
    assert status.exit_code.return_code == 3
    assert status.exit_code.signal is None
    assert not status.exit_code.is_zero
    assert status.is_finished and not status.is_success
    text = status.describe()
    assert "FAILED" in text and "exit code 3" in text and "NonZeroExitCode" in text


def test_failed_by_sigkill(slurm_fixture):
    status = live(slurm_fixture, "job_failed_signal.json")
    assert status.state == "FAILED"
    assert status.exit_code.status == "SIGNALED"
    assert status.exit_code.signal == 9
    assert status.exit_code.signal_name == "KILL"
    assert status.exit_code.return_code is None  # return_code set:false
    assert not status.exit_code.is_zero
    assert not status.is_success
    text = status.describe()
    assert "signal 9" in text and "KILL" in text
    assert "exit code 0" not in text


def test_cancelled_while_running_reports_sigterm(slurm_fixture):
    status = live(slurm_fixture, "job_cancelled.json")
    assert status.exit_code.status == "SIGNALED" and status.exit_code.signal == 15
    assert not status.is_success
    assert "signal 15" in status.describe()


def test_cancelled_immediately_is_cancelled_but_still_completing(slurm_fixture):
    raw = _only_job(slurm_fixture("job_cancelled_immediately.json"))
    assert raw["job_state"] == ["CANCELLED", "COMPLETING"]
    status = JobStatus.from_slurm(raw)
    assert status.state == "CANCELLED"  # base state first
    assert status.flags == ("COMPLETING",)
    assert not status.is_finished  # processes are still being cleaned up
    assert status.is_active
    assert not status.is_success
    assert "COMPLETING" in status.describe()


def test_cancelled_completing_becomes_finished_once_flag_drops(slurm_fixture):
    raw = copy.deepcopy(_only_job(slurm_fixture("job_cancelled_immediately.json")))
    raw["job_state"] = ["CANCELLED"]
    assert JobStatus.from_slurm(raw).is_finished


def test_timeout(slurm_fixture):
    status = live(slurm_fixture, "job_timeout.json")
    assert status.state == "TIMEOUT"
    assert status.is_finished and not status.is_success
    assert status.exit_code.signal == 15
    assert "TimeLimit" in status.describe()


def test_completed_with_failed_step_is_success_with_derived_exit_7(slurm_fixture):
    status = live(slurm_fixture, "job_completed_step_failed.json")
    assert status.state == "COMPLETED"
    assert status.is_success  # the batch script exited 0
    assert status.exit_code.is_zero
    assert status.derived_exit_code.status == "ERROR"
    assert status.derived_exit_code.return_code == 7
    text = status.describe()
    assert "derived" in text and "7" in text
    assert "COMPLETED" in text


def test_cancelled_while_pending_describe_does_not_claim_exit_code_0(slurm_fixture):
    raw = _only_job(slurm_fixture("job_cancelled_pending.json"))
    assert raw["exit_code"]["status"] == ["SUCCESS"]  # the job never ran
    assert "exit code 0" not in JobStatus.from_slurm(raw).describe()


def test_jobs_list_mixed(slurm_fixture):
    body = slurm_fixture("jobs_list_mixed.json")
    statuses = [JobStatus.from_slurm(j) for j in body["jobs"]]
    # _index.tsv: one RUNNING, three PENDING, one COMPLETED
    assert sorted(s.state for s in statuses) == ["COMPLETED", "PENDING", "PENDING", "PENDING", "RUNNING"]
    assert [s.job_id for s in statuses] == [str(j["job_id"]) for j in body["jobs"]]
    assert [s.is_active for s in statuses].count(True) == 4


def test_job_state_as_plain_string_older_versions(slurm_fixture):
    raw = copy.deepcopy(_only_job(slurm_fixture("job_completed.json")))
    raw["job_state"] = "COMPLETED"
    status = JobStatus.from_slurm(raw)
    assert status.state == "COMPLETED"
    assert status.flags == ()
    assert status.is_finished and status.is_success

    raw["job_state"] = "RUNNING"
    status = JobStatus.from_slurm(raw)
    assert status.state == "RUNNING" and status.is_active


def test_old_plain_integer_exit_code():
    status = JobStatus.from_slurm({"job_id": 5, "job_state": "FAILED", "exit_code": 3})
    assert status.exit_code.return_code == 3
    assert not status.exit_code.is_zero
    assert not status.is_success
    ok = JobStatus.from_slurm({"job_id": 5, "job_state": "COMPLETED", "exit_code": 0})
    assert ok.is_success


def test_completed_with_nonzero_exit_code_is_not_success():
    status = JobStatus.from_slurm({"job_id": 5, "job_state": ["COMPLETED"], "exit_code": _exit("ERROR", 1)})
    assert status.is_finished and not status.is_success


def test_missing_state_is_unknown_and_not_finished():
    status = JobStatus.from_slurm({"job_id": 5})
    assert status.state == "UNKNOWN"
    assert not status.is_finished and not status.is_success


@pytest.mark.parametrize(
    "state",
    ["COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL", "DEADLINE", "OUT_OF_MEMORY"],
)
def test_terminal_states_are_finished(state):
    status = JobStatus.from_slurm({"job_id": 1, "job_state": [state]})
    assert status.is_finished and not status.is_active
    assert status.is_success is (state == "COMPLETED")


@pytest.mark.parametrize(
    "state", ["PENDING", "RUNNING", "SUSPENDED", "COMPLETING", "CONFIGURING", "REQUEUED", "RESIZING"]
)
def test_non_terminal_states_are_active(state):
    status = JobStatus.from_slurm({"job_id": 1, "job_state": [state]})
    assert status.is_active and not status.is_finished and not status.is_success


@pytest.mark.parametrize("base", ["COMPLETED", "FAILED", "TIMEOUT"])
def test_any_finished_base_with_completing_flag_is_still_active(base):
    status = JobStatus.from_slurm({"job_id": 1, "job_state": [base, "COMPLETING"]})
    assert status.state == base and status.is_active and not status.is_finished


# --------------------------------------------------------------------------- /slurmdb (accounting)

# file, state, finished, success
ACCT = [
    ("slurmdb_job_running.json", "RUNNING", False, False),
    ("slurmdb_job_pending.json", "PENDING", False, False),
    ("slurmdb_job_completed.json", "COMPLETED", True, True),
    ("slurmdb_job_completed_step_failed.json", "COMPLETED", True, True),
    ("slurmdb_job_failed.json", "FAILED", True, False),
    ("slurmdb_job_failed_signal.json", "FAILED", True, False),
    ("slurmdb_job_cancelled.json", "CANCELLED", True, False),
    ("slurmdb_job_cancelled_pending.json", "CANCELLED", True, False),
    ("slurmdb_job_timeout.json", "TIMEOUT", True, False),
]


@pytest.mark.parametrize(("name", "state", "finished", "success"), ACCT)
def test_from_slurmdb_state_of_each_fixture(slurm_fixture, name, state, finished, success):
    raw = _only_job(slurm_fixture(name))
    assert "job_state" not in raw  # accounting uses state.current
    status = JobStatus.from_slurmdb(raw)
    assert status.source == "slurmdb"
    assert status.job_id == str(raw["job_id"])
    assert status.state == state
    assert status.flags == ()
    assert status.reason is None  # accounting's reason is the literal "None"
    assert status.comment == ""  # comment is an object {administrator, job, system} there
    assert status.is_finished is finished
    assert status.is_success is success


@pytest.mark.parametrize(
    "name", ["slurmdb_job_cancelled.json", "slurmdb_job_cancelled_pending.json", "slurmdb_job_timeout.json"]
)
def test_slurmdb_cancelled_and_timeout_do_not_claim_exit_code_0(slurm_fixture, name):
    raw = _only_job(slurm_fixture(name))
    # precondition (real-slurm.md 6): accounting reports SUCCESS/0 for these at job level
    assert raw["exit_code"]["status"] == ["SUCCESS"]
    assert raw["exit_code"]["return_code"]["number"] == 0
    status = JobStatus.from_slurmdb(raw)
    assert not status.is_success
    assert status.is_finished
    text = status.describe()
    assert "exit code 0" not in text
    assert "success" not in text.lower()
    assert status.state in text


def test_slurmdb_failed_exit_3(slurm_fixture):
    status = acct(slurm_fixture, "slurmdb_job_failed.json")
    assert status.exit_code.return_code == 3 and status.exit_code.status == "ERROR"
    assert "exit code 3" in status.describe()


def test_slurmdb_failed_signal_9(slurm_fixture):
    status = acct(slurm_fixture, "slurmdb_job_failed_signal.json")
    assert status.exit_code.signal == 9 and status.exit_code.status == "SIGNALED"
    assert "signal 9" in status.describe()


def test_slurmdb_step_failed_reports_derived_7(slurm_fixture):
    status = acct(slurm_fixture, "slurmdb_job_completed_step_failed.json")
    assert status.is_success
    assert status.derived_exit_code.return_code == 7
    text = status.describe()
    assert "derived" in text and "7" in text


def test_slurmdb_completed_matches_live_view(slurm_fixture):
    a = acct(slurm_fixture, "slurmdb_job_completed.json")
    b = live(slurm_fixture, "job_completed.json")
    assert (a.job_id, a.state, a.is_success, a.name) == (b.job_id, b.state, b.is_success, b.name)


def test_slurmdb_unknown_has_no_jobs(slurm_fixture):
    body = slurm_fixture("slurmdb_job_unknown.json")
    statuses = [JobStatus.from_slurmdb(j) for j in body.get("jobs") or []]
    assert select_job("999999", statuses) is None


def test_slurmdb_jobs_list(slurm_fixture):
    body = slurm_fixture("slurmdb_jobs_list.json")
    statuses = [JobStatus.from_slurmdb(j) for j in body["jobs"]]
    assert len(statuses) == len(body["jobs"]) > 1
    for raw, status in zip(body["jobs"], statuses, strict=True):
        assert status.state == raw["state"]["current"][0]
        assert status.job_id == str(raw["job_id"])


def test_slurmdb_state_current_as_plain_string():
    status = JobStatus.from_slurmdb({"job_id": 4, "state": {"current": "COMPLETED", "reason": "None"}})
    assert status.state == "COMPLETED" and status.flags == () and status.is_success


# --------------------------------------------------------------------------- serialisation

ALL_FIXTURES = [row[0] for row in LIVE] + [row[0] for row in ACCT]


@pytest.mark.parametrize("name", ALL_FIXTURES)
def test_to_dict_from_dict_round_trip_through_json(slurm_fixture, name):
    raw = _only_job(slurm_fixture(name))
    status = JobStatus.from_slurmdb(raw) if name.startswith("slurmdb_") else JobStatus.from_slurm(raw)
    data = json.loads(json.dumps(status.to_dict()))
    back = JobStatus.from_dict(data)
    assert back == status
    assert back.describe() == status.describe()
    assert (back.is_finished, back.is_success) == (status.is_finished, status.is_success)


def test_round_trip_keeps_flags_and_array_tasks():
    tasks = [
        JobStatus.from_slurm(_array_task(10, 1, "COMPLETED")),
        JobStatus.from_slurm(_array_task(10, 2, "CANCELLED", flags=("COMPLETING",))),
    ]
    merged = select_job("10", tasks)
    back = JobStatus.from_dict(json.loads(json.dumps(merged.to_dict())))
    assert back == merged
    assert back.flags == ("COMPLETING",)  # a tuple again: JSON's list would not be equal to it
    assert back.extra["tasks"] == {"10_1": "COMPLETED", "10_2": "CANCELLED"}


def test_from_dict_without_exit_codes():
    status = JobStatus(job_id="1", state="PENDING")
    assert JobStatus.from_dict(json.loads(json.dumps(status.to_dict()))) == status


# --------------------------------------------------------------------------- ids and select_job


def _array_task(array_job: int, task: int, state: str, rc: int = 0, flags: tuple = ()) -> dict:
    return {
        "job_id": array_job + task,  # each task has its own job id
        "array_job_id": _sn(array_job),
        "array_task_id": _sn(task),
        "het_job_id": _sn(0),
        "het_job_offset": _sn(0),
        "job_state": [state, *flags],
        "state_reason": "None",
        "exit_code": _exit("SUCCESS" if rc == 0 else "ERROR", rc),
        "derived_exit_code": _exit(),
    }


def test_array_task_ids_are_array_job_underscore_task():
    assert JobStatus.from_slurm(_array_task(10, 3, "RUNNING")).job_id == "10_3"


def test_het_component_ids():
    leader = {"job_id": 20, "het_job_id": _sn(20), "het_job_offset": _sn(0), "job_state": ["RUNNING"]}
    component = {"job_id": 21, "het_job_id": _sn(20), "het_job_offset": _sn(1), "job_state": ["RUNNING"]}
    assert JobStatus.from_slurm(leader).job_id == "20"
    assert JobStatus.from_slurm(component).job_id == "20+1"


def test_fixture_jobs_are_not_mistaken_for_array_or_het(slurm_fixture):
    # real replies carry array_job_id/het_job_id {set: true, number: 0} for ordinary jobs
    assert live(slurm_fixture, "job_failed.json").job_id == "8"
    assert acct(slurm_fixture, "slurmdb_job_failed.json").job_id == "8"


def test_slurmdb_array_task_id():
    raw = {"job_id": 12, "array": {"job_id": 10, "task_id": _sn(2)}, "state": {"current": ["FAILED"]}}
    assert JobStatus.from_slurmdb(raw).job_id == "10_2"


def test_select_array_is_active_while_any_task_is():
    tasks = [
        JobStatus.from_slurm(_array_task(10, 1, "COMPLETED")),
        JobStatus.from_slurm(_array_task(10, 2, "RUNNING")),
        JobStatus.from_slurm(_array_task(10, 3, "FAILED", rc=1)),
    ]
    merged = select_job("10", tasks)
    assert merged.job_id == "10"
    assert merged.is_active and not merged.is_finished and not merged.is_success
    assert merged.extra["tasks"] == {"10_1": "COMPLETED", "10_2": "RUNNING", "10_3": "FAILED"}


def test_select_array_success_only_when_every_task_succeeded():
    ok = [JobStatus.from_slurm(_array_task(10, i, "COMPLETED")) for i in range(3)]
    merged = select_job("10", ok)
    assert merged.is_finished and merged.is_success and merged.job_id == "10"

    one_bad = ok[:2] + [JobStatus.from_slurm(_array_task(10, 2, "FAILED", rc=4))]
    merged = select_job("10", one_bad)
    assert merged.is_finished and not merged.is_success
    assert merged.state == "FAILED"

    bad_rc = ok[:2] + [JobStatus.from_slurm(_array_task(10, 2, "COMPLETED", rc=4))]
    assert not select_job("10", bad_rc).is_success

    cancelled = ok[:2] + [JobStatus.from_slurm(_array_task(10, 2, "CANCELLED"))]
    assert not select_job("10", cancelled).is_success


def test_select_array_task_by_its_own_id():
    tasks = [
        JobStatus.from_slurm(_array_task(10, 1, "COMPLETED")),
        JobStatus.from_slurm(_array_task(10, 2, "RUNNING")),
    ]
    picked = select_job("10_2", tasks)
    assert picked.job_id == "10_2" and picked.state == "RUNNING"
    picked = select_job("10_1", tasks)
    assert picked.job_id == "10_1" and picked.state == "COMPLETED"


def test_select_job_single_and_empty(slurm_fixture):
    status = live(slurm_fixture, "job_running.json")
    assert select_job(status.job_id, [status]) == status
    assert select_job("1", []) is None


# --------------------------------------------------------------------------- arrays with tasks not started

# Real 24.11 (job_array_partly_pending.json, array 0-3 on 2 CPUs): the tasks that have not started
# share one "meta" record, the array's own job id with array_task_id unset and array_task_string
# "2-3", listed first; each task that started has a record and a job id of its own.


def _partly_pending(slurm_fixture) -> list[JobStatus]:
    return [JobStatus.from_slurm(job) for job in slurm_fixture("job_array_partly_pending.json")["jobs"]]


def test_meta_record_is_named_after_the_tasks_it_holds(slurm_fixture):
    jobs = _partly_pending(slurm_fixture)
    assert [(job.job_id, job.state, job.reason) for job in jobs] == [
        ("155_[2-3]", "PENDING", "Resources"),
        ("155_1", "RUNNING", None),
        ("155_0", "RUNNING", None),
    ]


def test_partly_pending_array_is_pending_with_every_task_listed(slurm_fixture):
    merged = select_job("155", _partly_pending(slurm_fixture))
    assert (merged.job_id, merged.state, merged.reason, merged.is_active) == ("155", "PENDING", "Resources", True)
    assert merged.extra["tasks"] == {"155_[2-3]": "PENDING", "155_1": "RUNNING", "155_0": "RUNNING"}
    assert merged.describe() == "Slurm job 155 is PENDING; reason: Resources"


def test_array_before_any_task_started_keeps_the_asked_id(slurm_fixture):
    meta = copy.deepcopy(slurm_fixture("job_array_partly_pending.json")["jobs"][0])
    meta["array_task_string"], meta["state_reason"] = "0-3%1", "None"
    merged = select_job("155", [JobStatus.from_slurm(meta)])
    assert (merged.job_id, merged.state, merged.extra["tasks"]) == ("155", "PENDING", {"155_[0-3%1]": "PENDING"})


def test_task_not_started_reads_the_meta_record(slurm_fixture):
    # GET .../job/155_3 answers the whole array: slurmrestd ignores the task suffix
    jobs = _partly_pending(slurm_fixture)
    waiting = select_job("155_3", jobs)
    assert (waiting.job_id, waiting.state, waiting.reason) == ("155_3", "PENDING", "Resources")
    assert select_job("155_0", jobs).state == "RUNNING"
    assert select_job("155_4", jobs) is None  # in no record here: accounting is asked next


@pytest.mark.parametrize(
    ("spec", "inside", "outside"),
    [("1,3,5-7", [1, 3, 5, 7], [0, 2, 4, 8]), ("0-14:2%3", [0, 2, 14], [1, 13, 16]), ("4", [4], [3, 5])],
)
def test_task_ranges_of_the_meta_record(slurm_fixture, spec, inside, outside):
    meta = copy.deepcopy(slurm_fixture("job_array_partly_pending.json")["jobs"][0])
    meta["array_task_string"] = spec
    jobs = [JobStatus.from_slurm(meta)]
    assert all(select_job(f"155_{task}", jobs) is not None for task in inside)
    assert all(select_job(f"155_{task}", jobs) is None for task in outside)


def test_slurmdb_meta_record_reads_the_task_bitmap(slurm_fixture):
    rows = slurm_fixture("slurmdb_job_array_partly_pending.json")["jobs"]
    jobs = [JobStatus.from_slurmdb(row) for row in rows]
    assert [(job.job_id, job.state) for job in jobs] == [
        ("155_[2-3]", "PENDING"),
        ("155_0", "RUNNING"),
        ("155_1", "RUNNING"),
    ]
    assert select_job("155", jobs).extra["tasks"] == {"155_[2-3]": "PENDING", "155_0": "RUNNING", "155_1": "RUNNING"}
    throttled = copy.deepcopy(rows[0])
    throttled["array"]["task"], throttled["array"]["limits"]["max"]["running"]["tasks"] = "0xEA", 2
    assert JobStatus.from_slurmdb(throttled).job_id == "155_[1,3,5-7%2]"


def test_wait_policy_waits_out_the_grace_window_and_forgets_on_found() -> None:
    from airflow_provider_slurmapi.client.errors import JobLostError
    from airflow_provider_slurmapi.client.wait_policy import JobWaitPolicy

    policy = JobWaitPolicy("7", lost_grace=10)
    assert policy.judge(None, now=100).status is None
    assert policy.judge(None, now=109.9).status is None  # accounting may still catch up
    found = policy.judge(JobStatus("7", "RUNNING"), now=110)  # it did: the window starts again at the next miss
    assert (found.finished, found.changed, policy.astray_since) == (False, True, None)
    policy.judge(None, now=200)
    with pytest.raises(JobLostError, match="Slurm job 7 is lost: for 10 s"):
        policy.judge(None, now=210)


def test_wait_policy_carries_on_from_a_kept_astray_time() -> None:
    """A rescheduled sensor builds a new policy each poke from the time it kept."""
    from airflow_provider_slurmapi.client.errors import JobLostError
    from airflow_provider_slurmapi.client.wait_policy import JobWaitPolicy

    JobWaitPolicy("7", lost_grace=10, astray_since=100).judge(None, now=109)
    with pytest.raises(JobLostError):
        JobWaitPolicy("7", lost_grace=10, astray_since=100).judge(None, now=110)


def test_wait_policy_reports_changes_and_the_end_once_each() -> None:
    from airflow_provider_slurmapi.client.wait_policy import JobWaitPolicy

    policy = JobWaitPolicy("9")
    verdicts = [
        policy.judge(JobStatus("9", state, reason=reason), now=0)
        for state, reason in [("PENDING", "Priority"), ("PENDING", "Priority"), ("RUNNING", None), ("COMPLETED", None)]
    ]
    assert [(v.changed, v.finished) for v in verdicts] == [(True, False), (False, False), (True, False), (True, True)]


def _pending_job_4(slurm_fixture, **changes) -> dict:
    """Job 4 of a real queue, PENDING for Resources with an expected start, with ``changes``."""
    (record,) = [job for job in slurm_fixture("jobs_list_held_pending_running.json")["jobs"] if job["job_id"] == 4]
    return {**copy.deepcopy(record), **changes}


def test_one_log_line_per_change_of_state_reason_or_expected_start(slurm_fixture, caplog) -> None:
    estimate = 1827783587  # 2027-12-02 21:39:47 UTC
    records = [
        _pending_job_4(slurm_fixture, start_time=_sn(0)),  # no estimate yet
        _pending_job_4(slurm_fixture),
        _pending_job_4(slurm_fixture, start_time=_sn(estimate + 20)),  # backfill's next cycle: seconds off
        _pending_job_4(slurm_fixture, start_time=_sn(estimate - 20)),
        _pending_job_4(slurm_fixture, start_time=_sn(estimate + 300)),  # moved 5 minutes
        _pending_job_4(slurm_fixture, job_state=["RUNNING"], state_reason="None", start_time=_sn(estimate + 310)),
        _pending_job_4(slurm_fixture, job_state=["COMPLETED"], state_reason="None", start_time=_sn(estimate + 310)),
    ]
    reads = iter(JobStatus.from_slurm(record) for record in records)
    logger = logging.getLogger("tests.wait")
    with caplog.at_level(logging.INFO, logger=logger.name):
        final = run_wait(
            follow(JobWaitPolicy("4"), 1, logger), read=lambda: next(reads), describe_requeue=str, sleep=lambda _: None
        )
    assert final.state == "COMPLETED"
    assert caplog.messages == [
        "Slurm job 4 is PENDING; reason: Resources",
        "Slurm job 4 is PENDING; reason: Resources; expected start 2027-12-02 21:39 UTC",
        "Slurm job 4 is PENDING; reason: Resources; expected start 2027-12-02 21:44 UTC",
        "Slurm job 4 is RUNNING",
    ]


def test_the_state_list_keeps_the_last_reason_and_expected_start(slurm_fixture) -> None:
    pending = JobStatus.from_slurm(_pending_job_4(slurm_fixture))
    policy = JobWaitPolicy("4")
    reads = [
        pending,
        JobStatus("4", "PENDING", source=RecordSource.STATE_LIST),  # no reason, no estimate: not a change
        pending,
        JobStatus("4", "RUNNING", source=RecordSource.STATE_LIST),
        JobStatus("4", "RUNNING"),  # a full read that says no more than the state list did
    ]
    assert [policy.judge(status, now=0).changed for status in reads] == [True, False, False, True, False]


def test_wait_policy_deadline() -> None:
    from airflow_provider_slurmapi.client.wait_policy import JobWaitPolicy

    assert JobWaitPolicy("1").pause(30, now=5) == 30
    policy = JobWaitPolicy("1", deadline=100)
    assert (policy.pause(30, now=50), policy.pause(30, now=90), policy.pause(30, now=100)) == (30, 10, None)
    assert (policy.time_left(40), policy.time_left(120)) == (60, 0)


def test_an_unknown_state_keeps_polling_for_the_grace_window_then_fails() -> None:
    from airflow_provider_slurmapi.client.errors import UnknownJobStateError
    from airflow_provider_slurmapi.client.wait_policy import JobWaitPolicy

    strange = JobStatus("8", "HIBERNATING")  # a base state a newer Slurm might add
    assert (strange.is_known_state, strange.is_active) == (False, True)
    policy = JobWaitPolicy("8", lost_grace=10)
    policy.judge(strange, now=100)
    policy.judge(strange, now=109.9)
    policy.judge(JobStatus("8", "PENDING"), now=110)  # a known state again: the window restarts
    policy.judge(strange, now=200)
    with pytest.raises(UnknownJobStateError, match="Slurm job 8 has been in state 'HIBERNATING'.*for 10 s"):
        policy.judge(strange, now=210)
    for state in ("PENDING", "RUNNING", "SUSPENDED", "COMPLETED", "OUT_OF_MEMORY"):
        policy.judge(JobStatus("8", state), now=1000)  # never raises for a state Slurm 24.11 documents
