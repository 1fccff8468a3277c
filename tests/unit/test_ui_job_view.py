"""The Slurm job tab's view of a job, built from records a real Slurm 24.11 gave (the fixtures): its
runs and how each ended, the expected start only while it means one, the usage from accounting."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_slurmapi.client.jobs import JobStatus
from airflow_provider_slurmapi.ui.job_view import build_job_view, duration_text, utc_text

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm-24.11.5"
NOW = 1796200000.0  # after every captured record


def records(name: str | None) -> list[dict[str, Any]]:
    """The job objects of a captured reply (``reply["jobs"]``); none for None."""
    return json.loads((FIXTURES / name).read_text())["jobs"] if name else []


def requeued_history(runs: int) -> list[dict[str, Any]]:
    """Accounting's records of a job requeued ``runs - 1`` times: derived from the real two-run
    history of a node failure (NODE_FAIL, then COMPLETED) by copying its first record once per earlier
    run, with its restart_cnt and times moved on, every other one PREEMPTED instead."""
    first, last = records("slurmdb_node_down_requeue_final.json")
    history = []
    submitted = first["time"]["submission"]
    for number in range(runs):
        record = copy.deepcopy(last if number == runs - 1 else first)
        record["restart_cnt"] = number
        if number % 2 and number != runs - 1:
            record["state"]["current"] = ["PREEMPTED"]
        record["time"].update(
            submission=submitted, eligible=submitted + 120, start=submitted + 150, end=submitted + 210, elapsed=60
        )
        history.append(record)
        submitted += 210
    return history


# --- requeued jobs: one run per accounting record ----------------------------------------------------


@pytest.mark.parametrize(
    ("name", "job_id", "first_end"),
    [
        ("slurmdb_node_down_requeue_final.json", "328", "NODE_FAIL"),  # node down, requeue: true
        ("slurmdb_jobs_requeue_running_by_name_duplicates.json", "325", "REQUEUED"),  # scontrol requeue
        ("slurmdb_preempt_low_final.json", "334", "PREEMPTED"),  # preempted by a higher tier
    ],
)
def test_each_run_of_a_requeued_job_and_how_it_ended(name: str, job_id: str, first_end: str) -> None:
    first, last = records(name)
    view = build_job_view(job_id, "a3", [], [first, last], NOW)

    assert [run.number for run in view.runs] == [0, 1]
    assert [run.end_state for run in view.runs] == [first_end, "COMPLETED"]
    assert (view.state, view.is_active, view.exit_code) == ("COMPLETED", False, "exit code 0")
    earlier, final = view.runs
    assert (earlier.started, earlier.ended) == (first["time"]["start"], first["time"]["end"])
    # the second run waited from the requeue for BeginTime (Slurm's delay before a requeued job may start)
    assert final.submitted_or_eligible == last["time"]["submission"] == first["time"]["end"]
    assert final.pending_reason == "BeginTime"
    assert (final.started, final.ended, final.nodes) == (last["time"]["start"], last["time"]["end"], "node1")
    assert view.submitted == first["time"]["submission"]
    # the usage is the last run's, as the task's report has it
    assert view.usage is not None and view.usage.elapsed_seconds == last["time"]["elapsed"]
    allocated = {entry["type"]: entry["count"] for entry in last["tres"]["allocated"]}
    assert (view.usage.nodes, view.usage.cpus) == (allocated["node"], allocated["cpu"])


def test_the_run_a_node_failure_ended_says_why() -> None:
    view = build_job_view("328", "a3", [], records("slurmdb_node_down_requeue_final.json"), NOW)
    assert view.runs[0].exit_code == "exit code 1"
    assert view.runs[0].end_reason == "a node it ran on failed"


def test_a_requeued_job_pending_again_has_the_live_reason_and_expected_start() -> None:
    live = records("requeue_running_4_pending_begintime.json")
    accounting = records("slurmdb_requeue_running_4_pending_requeued_pending.json")
    view = build_job_view("325", "a3", live, accounting, NOW)

    assert (view.state, view.reason, view.is_active) == ("PENDING", "BeginTime", True)
    assert view.expected_start == live[0]["start_time"]["number"] > 0
    assert [(run.number, run.end_state) for run in view.runs] == [(0, "REQUEUED"), (1, None)]
    current = view.runs[1]
    assert (current.pending_reason, current.started, current.ended, current.nodes) == ("BeginTime", None, None, "")
    assert current.submitted_or_eligible == view.runs[0].ended
    assert view.summary == JobStatus.from_slurm(live[0]).describe()  # the line of the task log


def test_a_run_accounting_has_not_closed_yet_reads_requeued_once_a_later_run_exists() -> None:
    # the live queue shows run 1 pending while accounting still has run 0 running
    live = records("requeue_running_4_pending_begintime.json")
    accounting = records("slurmdb_requeue_running_2_running.json")
    assert accounting[0]["state"]["current"] == ["RUNNING"]
    view = build_job_view("325", "a3", live, accounting, NOW)
    earlier = view.runs[0]
    assert (earlier.end_state, earlier.ended) == ("REQUEUED", live[0]["submit_time"]["number"])


def test_the_live_record_of_a_running_requeued_job_extends_its_accounting_record() -> None:
    live = records("requeue_running_5_running.json")
    accounting = records("slurmdb_requeue_running_5_pending_requeued_running_begintime.json")
    view = build_job_view("325", "a3", live, accounting, NOW)
    assert (view.state, view.nodes, view.expected_start, view.reason) == ("RUNNING", "node1", None, None)
    current = view.runs[-1]
    # started from the live record; the reason it waited for only accounting keeps once it runs
    assert (current.started, current.ended, current.pending_reason) == (1796172763, None, "BeginTime")


def test_a_requeued_job_still_completing_its_last_run_has_no_expected_start() -> None:
    live = records("requeue_running_3_pending_completing.json")
    assert live[0]["start_time"]["number"] > 0  # the last run's start, not an estimate
    view = build_job_view("325", "a3", live, records("slurmdb_requeue_running_3_pending_requeued.json"), NOW)
    assert (view.state, view.flags, view.expected_start) == ("PENDING", ("COMPLETING",), None)
    assert view.runs[-1].nodes == ""


def test_fifty_runs() -> None:
    view = build_job_view("328", "a3", [], requeued_history(50), NOW)
    assert [run.number for run in view.runs] == list(range(50))
    assert {run.end_state for run in view.runs[:-1]} == {"NODE_FAIL", "PREEMPTED"}
    assert view.runs[-1].end_state == "COMPLETED"
    assert view.usage is not None and view.usage.elapsed_seconds == 60  # the last run's


# --- the expected start: only while pending, only when Slurm set one --------------------------------


def test_a_pending_job_with_a_begin_time_expects_to_start_then() -> None:
    live = records("job_pending_begin_time.json")
    view = build_job_view("5", "a3", live, [], NOW)
    assert (view.state, view.reason, view.is_active) == ("PENDING", "BeginTime", True)
    assert view.expected_start == live[0]["start_time"]["number"] == live[0]["eligible_time"]["number"]
    (run,) = view.runs
    # the run waits from its submit, not from the begin time it waits for
    assert (run.submitted_or_eligible, run.started, run.pending_reason) == (1796051431, None, "BeginTime")
    assert view.usage is None  # accounting was not read


def test_a_pending_job_slurm_has_not_scheduled_has_no_expected_start() -> None:
    live = records("job_pending_resources.json")
    assert live[0]["start_time"]["number"] == 0
    view = build_job_view("3", "a3", live, records("slurmdb_job_pending.json"), NOW)
    assert (view.state, view.reason, view.expected_start) == ("PENDING", "Resources", None)


def test_a_held_job_has_no_expected_start() -> None:
    live = records("requeuehold_running_4_pending_jobhelduser.json")
    assert live[0]["start_time"]["number"] > 0  # kept from before the hold
    view = build_job_view("326", "a3", live, [], NOW)
    assert (view.held, view.expected_start, view.reason) == (True, None, "JobHeldUser")


@pytest.mark.parametrize(
    ("live", "accounting"),
    [("job_running.json", "slurmdb_job_running.json"), ("job_completed.json", "slurmdb_job_completed.json")],
)
def test_no_expected_start_once_it_started(live: str, accounting: str) -> None:
    view = build_job_view("1", "a3", records(live), records(accounting), NOW)
    assert records(live)[0]["start_time"]["number"] > 0
    assert view.expected_start is None
    assert view.runs[0].started == 1796051423


def test_a_running_job() -> None:
    live = records("job_running.json")
    view = build_job_view("1", "a3", live, records("slurmdb_job_running.json"), NOW)
    assert (view.state, view.nodes, view.is_active, view.exit_code) == ("RUNNING", "node1", True, None)
    (run,) = view.runs
    # a running record's end_time is when its time limit runs out: no end yet
    assert (run.started, run.ended, run.end_state) == (1796051423, None, None)
    assert view.usage is not None and (view.usage.nodes, view.usage.cpus) == (1, 1)


# --- finished jobs -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("job_id", "live", "accounting", "state", "exit_code", "reason"),
    [
        ("1", "job_completed.json", "slurmdb_job_completed.json", "COMPLETED", "exit code 0", None),
        ("8", "job_failed.json", "slurmdb_job_failed.json", "FAILED", "exit code 3", "NonZeroExitCode"),
        ("7", "job_timeout.json", "slurmdb_job_timeout.json", "TIMEOUT", "killed by signal 15 (SIGTERM)", "TimeLimit"),
        ("7", None, "slurmdb_job_timeout.json", "TIMEOUT", None, None),  # accounting writes SUCCESS/0 for TIMEOUT
    ],
)
def test_a_finished_job(
    job_id: str, live: str | None, accounting: str, state: str, exit_code: str | None, reason: str | None
) -> None:
    view = build_job_view(job_id, "a3", records(live), records(accounting), NOW)
    assert (view.state, view.is_active, view.exit_code, view.reason) == (state, False, exit_code, reason)
    (run,) = view.runs
    assert (run.end_state, run.exit_code) == (state, exit_code)
    assert run.ended == records(accounting)[0]["time"]["end"]
    assert view.usage is not None and view.usage.elapsed_seconds == records(accounting)[0]["time"]["elapsed"]


def test_a_job_cancelled_while_pending_never_started() -> None:
    accounting = records("slurmdb_job_cancelled_pending.json")
    assert accounting[0]["time"]["start"] == 4294967294  # NO_VAL
    view = build_job_view("3", "a3", records("job_cancelled_pending.json"), accounting, NOW)
    (run,) = view.runs
    assert (run.started, run.ended, run.end_state, run.nodes) == (None, 1796051432, "CANCELLED", "")
    assert run.pending_reason == "Resources"  # what it waited for until cancelled
    assert view.exit_code is None


# --- which records, and none -------------------------------------------------------------------------


def test_an_array_task_reads_its_own_records() -> None:
    live, accounting = records("job_array_partly_pending.json"), records("slurmdb_job_array_partly_pending.json")
    view = build_job_view("155_1", "a3", live, accounting, NOW)
    assert (view.state, view.nodes) == ("RUNNING", "node1")
    assert len(view.runs) == 1
    # asked by the array's ID, the record that speaks for it: the meta record of the tasks not started yet
    assert build_job_view("155", "a3", live, accounting, NOW).state == "PENDING"


def test_a_job_neither_source_has_is_unknown() -> None:
    view = build_job_view("42", "a3", [], [], NOW)
    assert (view.state, view.runs, view.is_active, view.usage, view.expected_start) == (
        "UNKNOWN",
        (),
        False,
        None,
        None,
    )
    assert "42" in view.summary


def test_to_dict_is_plain_json() -> None:
    view = build_job_view("328", "a3", [], records("slurmdb_node_down_requeue_final.json"), NOW)
    data = json.loads(json.dumps(view.to_dict()))
    assert [run["end_state"] for run in data["runs"]] == ["NODE_FAIL", "COMPLETED"]
    assert data["usage"]["elapsed_seconds"] == 5 and data["flags"] == [] and data["now"] == NOW
    assert json.loads(json.dumps(build_job_view("1", "a3", [], [], NOW).to_dict()))["usage"] is None


# --- how times read ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0 s"),
        (59.6, "1 min"),
        (45, "45 s"),
        (12 * 60 + 5, "12 min"),
        (7500, "2 h 5 min"),
        (3 * 86400 + 4 * 3600, "3 d 4 h"),
    ],
)
def test_duration_text(seconds: float, text: str) -> None:
    assert duration_text(seconds) == text


def test_utc_text() -> None:
    assert utc_text(0) == "1970-01-01 00:00:00"
    assert utc_text(1796055031, "%H:%M") == "16:10"


def test_an_array_asked_by_its_id_is_active_while_any_task_is() -> None:
    live = [record for record in records("job_array_partly_pending.json") if record["job_state"] != ["PENDING"]]
    live[0]["job_state"] = ["COMPLETED"]  # the task listed first has ended, the other one still runs
    view = build_job_view("155", "a3", live, [], NOW)
    assert (view.state, view.is_active) == ("RUNNING", True)
    live[1]["job_state"] = ["FAILED"]  # once all have ended, a failed task speaks for the array
    assert build_job_view("155", "a3", live, [], NOW).state == "FAILED"
