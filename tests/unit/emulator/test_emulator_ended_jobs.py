"""``GET /slurmdb/V/jobs/?start_time=..&end_time=..&state=..``: the jobs that ended in a window.

The emulator plays the jobs of ``tests/fixtures/capture_ended_jobs.py`` (one running throughout,
then one after another: early, ok, fail, other (another user), cancel, held), then replays every
captured query with its times moved onto its own jobs' end times, and answers as real Slurm did.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Any

import pytest
from emulator_testkit import FIXTURES, Api, load_fixture

from airflow_provider_slurmapi.emulator import Emulator
from tests.shapes import shape_diff

PREFIX = "slurmdb_jobs_ended_"
INDEX = [row.split("\t") for row in (FIXTURES / "_index.tsv").read_text().splitlines()[1:] if row.strip()]
CAPTURED = {row[0]: (row[2], int(row[3])) for row in INDEX if row[0].startswith(PREFIX)}  # file -> (path, status)
REAL = load_fixture("_notes.json")["capture_ended_jobs"]
REAL_ENDS = {role: job["end"] for role, job in REAL["jobs"].items() if job["end"]}
# the real "other" job ran in partition urgent with account root: the emulator has neither
BY_PARTITION_OR_ACCOUNT = {f for f in CAPTURED if f.startswith((f"{PREFIX}partition_", f"{PREFIX}account_"))}


@dataclass
class Played:
    """The emulator's run of the captured jobs: their IDs, users and accounting records once ended."""

    ids: dict[str, int]
    user: str
    other_user: str
    records: dict[str, dict[str, Any]]

    def end(self, role: str) -> int:
        return int(self.records[role]["time"]["end"])

    def role(self, record: dict[str, Any]) -> str:
        return {job_id: role for role, job_id in self.ids.items()}[record["job_id"]]


def _wait_until(epoch: int) -> None:
    while time.time() < epoch:
        time.sleep(0.05)


def _ended(api: Api, job_id: int) -> dict[str, Any]:
    api.wait(job_id)
    return api.db_job(job_id)


@pytest.fixture(scope="module")
def played(emu: Emulator, api: Api, tmp_path_factory: pytest.TempPathFactory) -> Played:
    cwd = str(tmp_path_factory.mktemp("ended"))
    other = Api(emu, emu.issue_token("other-user@example.com"))

    def submit(role: str, script: str, via: Api = api, **job: Any) -> int:
        return via.submit(script, name=f"ended-{role}", comment=f"ended {role}", current_working_directory=cwd, **job)

    ids = {"running": submit("running", "#!/bin/bash\nsleep 120\n")}
    api.wait(ids["running"], {"RUNNING"})
    records: dict[str, dict[str, Any]] = {}
    last_end = int(time.time())
    # a second between one job's end and the next one's start keeps their end times apart
    for role, script, via in [
        ("early", "#!/bin/bash\nexit 0\n", api),
        ("ok", "#!/bin/bash\nsleep 2\nexit 0\n", api),
        ("fail", "#!/bin/bash\nsleep 1\nexit 3\n", api),
        ("other", "#!/bin/bash\nsleep 1\nexit 0\n", other),
    ]:
        _wait_until(last_end + 1)
        ids[role] = submit(role, script, via)
        records[role] = _ended(api, ids[role])
        last_end = int(records[role]["time"]["end"])
    _wait_until(last_end + 1)
    ids["cancel"] = submit("cancel", "#!/bin/bash\nsleep 60\n")
    api.wait(ids["cancel"], {"RUNNING"})
    api.call("DELETE", f"/slurm/v0.0.42/job/{ids['cancel']}")
    records["cancel"] = _ended(api, ids["cancel"])
    _wait_until(int(records["cancel"]["time"]["end"]) + 1)
    ids["held"] = submit("held", "#!/bin/bash\ntrue\n", hold=True)
    time.sleep(1)  # submitted a second before its end, as in the capture
    api.call("DELETE", f"/slurm/v0.0.42/job/{ids['held']}")
    records["held"] = _ended(api, ids["held"])
    _wait_until(int(records["held"]["time"]["end"]) + 1)  # nothing more ends within the window
    records["running"] = api.db_job(ids["running"])
    return Played(ids, records["ok"]["user"], records["other"]["user"], records)


@pytest.fixture(scope="module")
def answers(api: Api, played: Played) -> dict[str, tuple[int, dict[str, Any]]]:
    """Every captured query replayed on the emulator's jobs, by fixture file; then the running job is cancelled."""
    got = {fixture: api.call("GET", replay(path, played)) for fixture, (path, _) in CAPTURED.items()}
    api.call("DELETE", f"/slurm/v0.0.42/job/{played.ids['running']}")
    return got


def replay(path: str, played: Played) -> str:
    """The captured query with each time moved to the same place among the emulator's job ends
    (e.g. the end of "fail" minus one second) and the users swapped for the emulator's."""

    def moved(match: re.Match[str]) -> str:
        value = int(match.group(2))
        role = min(REAL_ENDS, key=lambda r: abs(REAL_ENDS[r] - value))
        return f"{match.group(1)}={played.end(role) + value - REAL_ENDS[role]}"

    path = re.sub(r"(start_time|end_time)=(\d+)", moved, path)
    users = {"root": played.other_user, REAL["jobs"]["ok"]["user"]: played.user}
    return re.sub(r"users=(\w+)", lambda m: f"users={users.get(m.group(1), m.group(1))}", path)


def real_roles(fixture: str) -> list[str]:
    reply = load_fixture(fixture)
    return [re.sub(r"^cap-ended-(\w+)-\d+$", r"\1", job["name"]) for job in reply.get("jobs", [])]


def window_of(path: str) -> tuple[int, int]:
    """[start_time, end_time] of a query."""
    found = dict(re.findall(r"(start_time|end_time)=(\d+)", path))
    return int(found["start_time"]), int(found["end_time"])


def truncated(record: dict[str, Any], start: int, end: int) -> dict[str, Any]:
    """The times slurmdbd shows for ``record`` cut to [start, end]: the rule the captures show."""
    t = record["time"]
    started = t["start"] not in (0, 4294967294)
    new_end = end if not t["end"] or t["end"] > end else t["end"]
    new_start = max(t["start"], start) if started else new_end
    planned = new_start - t["eligible"] if started and t["eligible"] else t["planned"]["number"]
    return {"start": new_start, "end": new_end, "elapsed": max(0, new_end - new_start), "planned": planned}


def times(record: dict[str, Any]) -> dict[str, Any]:
    t = record["time"]
    return {"start": t["start"], "end": t["end"], "elapsed": t["elapsed"], "planned": t["planned"]["number"]}


# ------------------------------------------------------------------------------ every captured query
def test_the_capture_has_every_query_and_job() -> None:
    expected = {"window", "window_empty", "window_truncated", "state_csv", "no_end_time"}
    assert {re.sub(rf"^{PREFIX}|\.(json|txt)$", "", f) for f in CAPTURED} >= expected
    assert set(REAL_ENDS) == {"early", "ok", "fail", "other", "cancel", "held"}


@pytest.mark.parametrize("fixture", sorted(f for f in CAPTURED if f.endswith(".json")))
def test_reply_has_the_real_shape_status_and_errors(
    answers: dict[str, tuple[int, dict[str, Any]]], fixture: str
) -> None:
    status, reply = answers[fixture]
    expected = load_fixture(fixture)
    assert status == CAPTURED[fixture][1]
    assert shape_diff(reply, expected) == []
    assert [(e["error_number"], e["source"]) for e in reply["errors"]] == [
        (e["error_number"], e["source"]) for e in expected["errors"]
    ]
    # "found nothing" when nothing is found (the emulator has no job in partition urgent nor account root)
    found_nothing = [{"source": "_dump_jobs"}] if reply.get("jobs") == [] else []
    expected_warnings = found_nothing if fixture in BY_PARTITION_OR_ACCOUNT else expected["warnings"]
    assert [w["source"] for w in reply["warnings"]] == [w["source"] for w in expected_warnings]


@pytest.mark.parametrize(
    "fixture", sorted(f for f in CAPTURED if f.endswith(".json") and f not in BY_PARTITION_OR_ACCOUNT)
)
def test_the_same_jobs_as_real_slurm(
    answers: dict[str, tuple[int, dict[str, Any]]], played: Played, fixture: str
) -> None:
    reply = answers[fixture][1]
    assert [played.role(job) for job in reply.get("jobs", [])] == real_roles(fixture)


def test_partition_and_account_are_matched_without_case(
    answers: dict[str, tuple[int, dict[str, Any]]], played: Played
) -> None:
    def roles(variation: str) -> list[str]:
        return [played.role(job) for job in answers[f"{PREFIX}{variation}.json"][1]["jobs"]]

    everyone = ["ok", "fail", "other", "cancel", "held"]
    # all the emulator's jobs run in partition debug with account testacct
    assert real_roles(f"{PREFIX}partition_upper.json") == ["ok", "fail", "cancel", "held"]
    assert roles("partition_upper") == everyone
    assert real_roles(f"{PREFIX}account_repeated.json") == everyone
    assert roles("account_repeated") == everyone
    assert real_roles(f"{PREFIX}partition_urgent.json") == real_roles(f"{PREFIX}account_root.json") == ["other"]
    assert roles("partition_urgent") == roles("account_root") == []


# ------------------------------------------------------------------------------ the window
def test_the_window_holds_every_job_that_ended_in_it_and_no_other(
    answers: dict[str, tuple[int, dict[str, Any]]], played: Played
) -> None:
    fixture = f"{PREFIX}window.json"
    start, end = window_of(replay(CAPTURED[fixture][0], played))
    assert (start, end) == (played.end("ok"), played.end("held"))  # a job ends on each edge
    jobs = answers[fixture][1]["jobs"]
    assert [(played.role(j), j["state"]["current"]) for j in jobs] == [
        ("ok", ["COMPLETED"]),
        ("fail", ["FAILED"]),
        ("other", ["COMPLETED"]),
        ("cancel", ["CANCELLED"]),
        ("held", ["CANCELLED"]),
    ]
    assert all(start <= j["time"]["end"] <= end for j in jobs)
    # held since submission, it never became eligible (which keeps it out of a query without state)
    assert jobs[-1]["time"]["eligible"] == load_fixture(fixture)["jobs"][-1]["time"]["eligible"] == 0
    # not truncated: the times accounting keeps
    assert [times(j) for j in jobs] == [times(played.records[played.role(j)]) for j in jobs]
    assert played.end("early") < start and played.records["running"]["time"]["end"] == 0
    assert {j["exit_code"]["return_code"]["number"] for j in jobs if played.role(j) == "fail"} == {3}
    assert [j["comment"]["job"] for j in jobs][:2] == ["ended ok", "ended fail"]


def test_a_window_between_two_ends_is_empty(answers: dict[str, tuple[int, dict[str, Any]]], played: Played) -> None:
    fixture = f"{PREFIX}window_empty.json"
    start, end = window_of(replay(CAPTURED[fixture][0], played))
    assert played.end("ok") < start <= end < played.end("fail")
    status, reply = answers[fixture]
    assert (status, reply["jobs"]) == (200, [])
    assert reply["warnings"][0]["description"].startswith("slurmdb_jobs_get(0x")
    assert reply["warnings"][0]["description"].endswith(") found nothing")


def test_without_end_time_or_with_the_same_end_the_window_is_one_second(
    answers: dict[str, tuple[int, dict[str, Any]]], played: Played
) -> None:
    for variation in ("no_end_time", "window_same_second"):
        path = replay(CAPTURED[f"{PREFIX}{variation}.json"][0], played)
        assert f"start_time={played.end('fail') - 1}&" in path
        assert [played.role(j) for j in answers[f"{PREFIX}{variation}.json"][1]["jobs"]] == ["fail"]


def test_a_comma_separated_state_list_is_refused(answers: dict[str, tuple[int, dict[str, Any]]]) -> None:
    fixture = f"{PREFIX}state_csv.txt"
    assert "state=COMPLETED,FAILED&" in CAPTURED[fixture][0]
    status, reply = answers[fixture]
    assert status == CAPTURED[fixture][1] == 400
    assert [e["description"] for e in reply["errors"]] == [(FIXTURES / fixture).read_text()]
    assert "jobs" not in reply


def test_an_unknown_state_is_named_and_read_as_pending(answers: dict[str, tuple[int, dict[str, Any]]]) -> None:
    status, reply = answers[f"{PREFIX}state_unknown.json"]
    assert status == 500
    assert [(e["description"], e["source"]) for e in reply["errors"]] == [('Unknown flag "CD"', "#/state[1][0]/")]


def test_an_unknown_user_is_refused(answers: dict[str, tuple[int, dict[str, Any]]]) -> None:
    status, reply = answers[f"{PREFIX}users_unknown.json"]
    assert status == 422
    assert reply["errors"][0]["description"] == "Unable to resolve user: nosuchuser"


# ------------------------------------------------------------------------------ truncation
@pytest.mark.parametrize("variation", ["window_truncated", "window_no_state"])
def test_the_truncation_rule_is_the_one_real_slurm_applies(variation: str) -> None:
    full = {job["job_id"]: job for job in load_fixture(f"{PREFIX}window.json")["jobs"]}
    start, end = window_of(CAPTURED[f"{PREFIX}{variation}.json"][0])
    cut = [job for job in load_fixture(f"{PREFIX}{variation}.json")["jobs"] if job["job_id"] in full]
    assert len(cut) >= 4
    assert [times(job) for job in cut] == [truncated(full[job["job_id"]], start, end) for job in cut]
    # ... and it changes something: ok started before the window
    assert any(times(job) != times(full[job["job_id"]]) for job in cut)


def test_without_disable_truncate_usage_time_the_run_is_cut_to_the_window(
    answers: dict[str, tuple[int, dict[str, Any]]], played: Played
) -> None:
    start, end = window_of(replay(CAPTURED[f"{PREFIX}window_truncated.json"][0], played))
    jobs = {played.role(j): j for j in answers[f"{PREFIX}window_truncated.json"][1]["jobs"]}
    for role, job in jobs.items():
        assert times(job) == truncated(played.records[role], start, end), role
    assert played.records["ok"]["time"]["start"] < start
    assert (jobs["ok"]["time"]["start"], jobs["ok"]["time"]["elapsed"]) == (start, 0)
    assert played.records["ok"]["time"]["elapsed"] >= 2
    assert jobs["held"]["time"]["start"] == jobs["held"]["time"]["end"] == end
    assert times(jobs["fail"]) == times(played.records["fail"])


def test_without_state_a_running_job_is_cut_to_the_window_at_both_ends(
    answers: dict[str, tuple[int, dict[str, Any]]], played: Played
) -> None:
    start, end = window_of(replay(CAPTURED[f"{PREFIX}window_no_state.json"][0], played))
    running = answers[f"{PREFIX}window_no_state.json"][1]["jobs"][0]
    assert played.role(running) == "running" and running["state"]["current"] == ["RUNNING"]
    assert (running["time"]["start"], running["time"]["end"], running["time"]["elapsed"]) == (start, end, end - start)


def test_with_the_steps_nothing_is_cut(answers: dict[str, tuple[int, dict[str, Any]]], played: Played) -> None:
    jobs = answers[f"{PREFIX}window_with_steps.json"][1]["jobs"]
    assert [times(j) for j in jobs] == [times(played.records[played.role(j)]) for j in jobs]
    assert [len(j["steps"]) for j in jobs] == [1, 1, 1, 1, 0]  # the batch step; held never ran


# ------------------------------------------------------------------------------ the other parameters
def test_names_and_ids_select_as_before(api: Api, played: Played) -> None:
    def roles(query: str) -> list[str]:
        status, reply = api.call("GET", f"/slurmdb/v0.0.42/jobs/?{query}")
        assert status == 200, reply
        return [played.role(j) for j in reply["jobs"] if j["job_id"] in played.ids.values()]

    assert roles("") == ["running", "early", "ok", "fail", "other", "cancel", "held"]
    assert roles("job_name=ended-ok&job_name=ended-fail") == ["ok", "fail"]
    assert roles("job_name=ended-ok%2Cended-fail") == ["ok", "fail"]  # an encoded comma makes a list
    assert roles(f"step={played.ids['held']}&step={played.ids['ok']}&skip_steps=true") == ["ok", "held"]
    status, reply = api.call("GET", "/slurmdb/v0.0.42/jobs/?job_name=ended-ok,ended-fail")
    assert (status, reply["errors"][0]["description"]) == (400, "Unable to parse query.")


def test_a_malformed_time_is_refused(api: Api) -> None:
    status, reply = api.call("GET", "/slurmdb/v0.0.42/jobs/?start_time=abc&state=FAILED")
    assert status == 422
    assert [(e["error_number"], e["source"]) for e in reply["errors"]] == [
        (9202, "#/start_time/"),
        (9000, "op_handler_jobs"),
    ]


def test_a_name_from_a_start_time_gives_the_jobs_not_ended_before_it(api: Api, played: Played) -> None:
    # find_job_by_key's search: without state (as window_no_state shows), slurmdbd gives the jobs
    # that became eligible and had not ended by start_time; the window ends now
    names = "&".join(f"job_name=ended-{role}" for role in ("running", "early", "ok", "held"))

    def roles(start_time: int) -> list[str]:
        status, reply = api.call("GET", f"/slurmdb/v0.0.42/jobs/?{names}&start_time={start_time}")
        assert status == 200, reply
        return [played.role(j) for j in reply["jobs"]]

    assert roles(played.end("early")) == ["running", "early", "ok"]  # an end at start_time is in
    assert roles(played.end("early") + 1) == ["running", "ok"]
    # held ended after that start, but never became eligible; running ends last, if at all
    assert roles(played.end("held")) == ["running"]
