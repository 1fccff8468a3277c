"""Every reply kind has the same keys and JSON value types as the real Slurm 24.11.5 captures."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from emulator_testkit import Api, load_fixture

from tests.shapes import shape_diff


def test_shape_diff_can_fail() -> None:
    assert shape_diff({"a": 1, "b": [{"c": "x"}]}, {"a": 1, "b": [{"c": "y"}]}) == []
    assert shape_diff({"a": True}, {"a": 1}) == ["$.a: bool != int"]
    assert shape_diff({"a": 1}, {"a": 1, "b": 2}) == ["$.b: missing"]
    assert shape_diff([{"a": None}, {"a": {}}], [{"a": {}}, {"a": None}]) == []
    assert shape_diff([{"a": 1}], [{"a": {}}, {"a": None}]) == ["$[0].a: int != dict"]
    assert shape_diff({"n": {"set": True, "number": 1}}, {"n": {"set": True, "number": 1.0}}) == [
        "$.n.number: int != float"
    ]


@pytest.fixture(scope="module")
def replies(api: Api, tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[int, dict[str, Any]]]:
    """Drive jobs through every state once and collect the replies, keyed by fixture name."""
    cwd = str(tmp_path_factory.mktemp("shapes"))
    got: dict[str, tuple[int, dict[str, Any]]] = {}
    sub = "/slurm/v0.0.42/job/submit"

    def body(script: str, **job: Any) -> dict[str, Any]:
        desc = {
            "name": "t",
            "current_working_directory": cwd,
            "environment": ["PATH=/bin:/usr/bin"],
            "time_limit": {"set": True, "number": 5},
            **job,
        }
        return {"job": desc, "script": script}

    # ignores SIGTERM, so it stays CANCELLED+COMPLETING until the SIGKILL kill_wait (1 s) later
    got["submit_response.json"] = api.call("POST", sub, body("#!/bin/bash\ntrap '' TERM\nsleep 30\n"))
    running = got["submit_response.json"][1]["job_id"]
    api.wait(running, {"RUNNING"})
    got["job_running.json"] = api.call("GET", f"/slurm/v0.0.42/job/{running}")
    got["jobs_list_one_running.json"] = api.call("GET", "/slurm/v0.0.42/jobs/")
    got["slurmdb_job_running.json"] = api.call("GET", f"/slurmdb/v0.0.42/job/{running}")

    held = api.submit("#!/bin/bash\ntrue\n", hold=True, current_working_directory=cwd)
    got["job_pending_held.json"] = api.call("GET", f"/slurm/v0.0.42/job/{held}")
    got["slurmdb_job_pending.json"] = api.call("GET", f"/slurmdb/v0.0.42/job/{held}")
    got["delete_pending.json"] = api.call("DELETE", f"/slurm/v0.0.42/job/{held}")
    got["job_cancelled_pending.json"] = api.call("GET", f"/slurm/v0.0.42/job/{held}")
    got["slurmdb_job_cancelled_pending.json"] = api.call("GET", f"/slurmdb/v0.0.42/job/{held}")

    got["delete_running.json"] = api.call("DELETE", f"/slurm/v0.0.42/job/{running}")
    got["job_cancelled_immediately.json"] = api.call("GET", f"/slurm/v0.0.42/job/{running}")

    done = api.call("POST", sub, body("#!/bin/bash\nsrun bash -c 'exit 7'\nexit 0\n"))[1]["job_id"]
    plain = api.submit("#!/bin/bash\ntrue\n", current_working_directory=cwd)
    failed = api.submit("#!/bin/bash\nexit 3\n", current_working_directory=cwd)
    signaled = api.submit("#!/bin/bash\nkill -9 $$\n", current_working_directory=cwd)
    for job_id in (done, plain, failed, signaled, running):
        api.wait(job_id)
    got["job_cancelled.json"] = api.call("GET", f"/slurm/v0.0.42/job/{running}")
    got["slurmdb_job_cancelled.json"] = api.call("GET", f"/slurmdb/v0.0.42/job/{running}")
    got["job_completed.json"] = api.call("GET", f"/slurm/v0.0.42/job/{plain}")
    got["job_completed_step_failed.json"] = api.call("GET", f"/slurm/v0.0.42/job/{done}")
    got["slurmdb_job_completed.json"] = api.call("GET", f"/slurmdb/v0.0.42/job/{plain}")
    got["slurmdb_job_completed_step_failed.json"] = api.call("GET", f"/slurmdb/v0.0.42/job/{done}")
    got["job_failed.json"] = api.call("GET", f"/slurm/v0.0.42/job/{failed}")
    got["slurmdb_job_failed.json"] = api.call("GET", f"/slurmdb/v0.0.42/job/{failed}")
    got["job_failed_signal.json"] = api.call("GET", f"/slurm/v0.0.42/job/{signaled}")
    got["slurmdb_job_failed_signal.json"] = api.call("GET", f"/slurmdb/v0.0.42/job/{signaled}")
    named = api.call(
        "POST", sub, body("#!/bin/bash\necho to-stdout\necho to-stderr >&2\n", name="outpat",
        standard_output=f"{cwd}/out-%x-%j.out", standard_error=f"{cwd}/out-%j.err")
    )[1]["job_id"]  # fmt: skip
    api.wait(named)
    got["job_completed_output_paths.json"] = api.call("GET", f"/slurm/v0.0.42/job/{named}")
    got["slurmdb_job_completed_output_paths.json"] = api.call("GET", f"/slurmdb/v0.0.42/job/{named}")
    got["delete_completed.json"] = api.call("DELETE", f"/slurm/v0.0.42/job/{plain}")
    got["jobs_list_mixed.json"] = api.call("GET", "/slurm/v0.0.42/jobs")
    got["slurmdb_jobs_list.json"] = api.call("GET", "/slurmdb/v0.0.42/jobs")

    got["job_unknown.json"] = api.call("GET", "/slurm/v0.0.42/job/999999")
    got["delete_unknown.json"] = api.call("DELETE", "/slurm/v0.0.42/job/999999")
    got["job_invalid_id.json"] = api.call("GET", "/slurm/v0.0.42/job/abc")
    got["slurmdb_job_unknown.json"] = api.call("GET", "/slurmdb/v0.0.42/job/999999")
    got["ping.json"] = api.call("GET", "/slurm/v0.0.42/ping")
    got["submit_error_get_method.json"] = api.call("GET", sub)
    for name in (
        "submit_no_environment",
        "submit_no_cwd",
        "submit_error_no_script",
        "submit_error_bad_partition",
        "submit_unknown_field",
        "submit_environment_as_object",
        "submit_time_limit_plain_int",
        "submit_error_wrong_type",
        "submit_error_wrong_type_time_limit",
    ):
        request = load_fixture(f"{name}.request.json")
        request.get("job", {})["current_working_directory"] = cwd if "cwd" not in name else None
        if "cwd" in name:
            request["job"].pop("current_working_directory")
        got[f"{name}.json"] = api.call("POST", sub, request)
    got.update(queue_changes(api, cwd))
    return got


# the real capture's job for each role its scenario plays (jobs_list_*: job 1 held at submit, ...)
QUEUE_ROLES = {"held_at_submit": 1, "held_while_pending": 7, "held_later": 6, "requeued": 2}


def queue_changes(api: Api, cwd: str) -> dict[str, tuple[int, dict[str, Any]]]:
    """The live queue with held, pending and running jobs, then ``jobs/?update_time=`` after
    nothing, after a release and a hold, and after a requeue, as the real replies were captured."""
    got: dict[str, tuple[int, dict[str, Any]]] = {}
    later = {"set": True, "number": int(time.time()) + 3600}
    job = {"current_working_directory": cwd, "begin_time": later}
    ids = {
        "held_at_submit": api.submit(
            "#!/bin/bash\nsleep 60\n", name="held_at_submit", hold=True, current_working_directory=cwd
        ),  # fmt: skip
        "held_while_pending": api.submit("#!/bin/bash\ntrue\n", name="held_while_pending", **job),
        "held_later": api.submit("#!/bin/bash\ntrue\n", name="held_later", **job),
        "requeued": api.submit("#!/bin/bash\nsleep 60\n", name="requeued", current_working_directory=cwd),
    }
    api.wait(ids["requeued"], {"RUNNING"})
    api.emu.control(str(ids["held_while_pending"]), "hold")
    time.sleep(1.1)  # the next answer's stamp a second past the last change, as in the capture

    def changes(name: str, since: int | None = None) -> int:
        query = "" if since is None else f"?update_time={since}"
        got[name] = api.call("GET", f"/slurm/v0.0.42/jobs/{query}")
        return int(got[name][1]["last_update"]["number"])

    stamp = changes("jobs_list_held_pending_running.json")
    changes("jobs_list_update_time_unchanged_held.json", stamp)
    api.emu.control(str(ids["held_at_submit"]), "release")
    api.emu.control(str(ids["held_later"]), "hold")
    stamp = changes("jobs_list_update_time_after_release_and_hold.json", stamp)
    api.emu.control(str(ids["requeued"]), "requeue")
    # captured once the released job ran and the requeued one's last run was gone (BeginTime)
    api.wait(ids["held_at_submit"], {"RUNNING"})
    deadline = time.monotonic() + 15
    while api.job(ids["requeued"])["state_reason"] != "BeginTime":
        assert time.monotonic() < deadline, "the requeued job never pended for BeginTime"
        time.sleep(0.1)
    changes("jobs_list_update_time_after_requeue.json", stamp)
    by_id = f"step={ids['requeued']}&step={ids['held_at_submit']}&skip_steps=true&show_duplicates=true"
    got["slurmdb_jobs_by_id_requeued.json"] = api.call("GET", f"/slurmdb/v0.0.42/jobs/?{by_id}")
    for job_id in ids.values():
        api.call("DELETE", f"/slurm/v0.0.42/job/{job_id}")
    return got


FIXTURE_STATUS = {
    row.split("\t")[0]: int(row.split("\t")[3])
    for row in (Path(__file__).resolve().parents[2] / "fixtures" / "slurm-24.11.5" / "_index.tsv")
    .read_text()
    .splitlines()[1:]
    if row.strip()
}

COMPARED = [
    "submit_response.json",
    "job_running.json",
    "jobs_list_one_running.json",
    "slurmdb_job_running.json",
    "job_pending_held.json",
    "slurmdb_job_pending.json",
    "delete_pending.json",
    "job_cancelled_pending.json",
    "slurmdb_job_cancelled_pending.json",
    "delete_running.json",
    "job_cancelled_immediately.json",
    "job_cancelled.json",
    "slurmdb_job_cancelled.json",
    "job_completed.json",
    "job_completed_step_failed.json",
    "slurmdb_job_completed.json",
    "slurmdb_job_completed_step_failed.json",
    "job_completed_output_paths.json",
    "slurmdb_job_completed_output_paths.json",
    "job_failed.json",
    "slurmdb_job_failed.json",
    "job_failed_signal.json",
    "slurmdb_job_failed_signal.json",
    "delete_completed.json",
    "jobs_list_mixed.json",
    "slurmdb_jobs_list.json",
    "job_unknown.json",
    "delete_unknown.json",
    "job_invalid_id.json",
    "slurmdb_job_unknown.json",
    "ping.json",
    "submit_error_get_method.json",
    "submit_no_environment.json",
    "submit_no_cwd.json",
    "submit_error_no_script.json",
    "submit_error_bad_partition.json",
    "submit_unknown_field.json",
    "submit_environment_as_object.json",
    "submit_time_limit_plain_int.json",
    "submit_error_wrong_type.json",
    "submit_error_wrong_type_time_limit.json",
    "jobs_list_held_pending_running.json",
    "jobs_list_update_time_unchanged_held.json",
    "jobs_list_update_time_after_release_and_hold.json",
    "jobs_list_update_time_after_requeue.json",
    "slurmdb_jobs_by_id_requeued.json",
]


@pytest.mark.parametrize("fixture", COMPARED)
def test_reply_matches_real_slurm_shape(replies: dict[str, tuple[int, dict[str, Any]]], fixture: str) -> None:
    status, reply = replies[fixture]
    expected = load_fixture(fixture)
    assert status == FIXTURE_STATUS[fixture]
    assert shape_diff(reply, expected) == []
    # the same errors and warnings (numbers and sources), not only the same shapes
    assert [e["error_number"] for e in reply["errors"]] == [e["error_number"] for e in expected["errors"]]
    assert [w["source"] for w in reply["warnings"]] == [w["source"] for w in expected["warnings"]]
    single = fixture.startswith(("job_", "slurmdb_job_"))
    if single and expected.get("jobs") and "job_state" in expected["jobs"][0]:
        assert reply["jobs"][0]["job_state"][0] == expected["jobs"][0]["job_state"][0]
        assert reply["jobs"][0]["exit_code"]["status"] == expected["jobs"][0]["exit_code"]["status"]
        if fixture != "job_cancelled_pending.json":  # ours was held, the captured one waited for resources
            assert reply["jobs"][0]["state_reason"] == expected["jobs"][0]["state_reason"]
    if single and expected.get("jobs") and "state" in expected["jobs"][0]:
        assert reply["jobs"][0]["state"] == expected["jobs"][0]["state"]
        assert reply["jobs"][0]["exit_code"]["status"] == expected["jobs"][0]["exit_code"]["status"]
        steps = [(s["state"], s["exit_code"]["status"]) for s in reply["jobs"][0]["steps"]]
        assert steps == [(s["state"], s["exit_code"]["status"]) for s in expected["jobs"][0]["steps"]]


@pytest.mark.parametrize(
    "fixture",
    [name for name in COMPARED if name.startswith("jobs_list_update_time_")] + ["jobs_list_held_pending_running.json"],
)
def test_the_queue_changes_show_holds_releases_and_requeues_as_real_slurm(
    replies: dict[str, tuple[int, dict[str, Any]]], fixture: str
) -> None:
    def roles(jobs: list[dict[str, Any]], name_of: dict[int, str]) -> dict[str, tuple[Any, ...]]:
        seen = {}
        for job in jobs:
            role = name_of.get(job["job_id"], job["name"])
            if role in QUEUE_ROLES:
                held_or_requeued = job["hold"] or job["restart_cnt"]
                seen[role] = (job["job_state"][0], job["hold"], job["restart_cnt"],
                              job["state_reason"] if held_or_requeued else "-")  # fmt: skip
        return seen

    expected = load_fixture(fixture)
    got = replies[fixture][1]
    assert got["last_update"]["set"] is True and bool(got["last_update"]["number"]) == bool(expected["jobs"])
    real = roles(expected["jobs"], {job_id: role for role, job_id in QUEUE_ROLES.items()})
    assert roles(got["jobs"], {}) == real


def test_accounting_by_job_id_gives_every_run_as_real_slurm(replies: dict[str, tuple[int, dict[str, Any]]]) -> None:
    def runs(reply: dict[str, Any]) -> list[tuple[list[str], int, int]]:
        return [(j["state"]["current"], j["restart_cnt"], len(j["steps"])) for j in reply["jobs"]]

    # the requeued job's ended run and its new one, and a running job (ours has the lower ID); no steps
    got, real = (
        runs(replies["slurmdb_jobs_by_id_requeued.json"][1]),
        runs(load_fixture("slurmdb_jobs_by_id_requeued.json")),
    )
    assert sorted(got) == sorted(real)
