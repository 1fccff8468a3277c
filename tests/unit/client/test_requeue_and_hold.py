"""Requeued, preempted, failed-node and held jobs, read from the replies real Slurm 24.11 gave
(``tests/fixtures/capture_requeue.py``): what each read means and what the user is told."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_slurmapi.client.arrays import select_job, summaries
from airflow_provider_slurmapi.client.envelope import SlurmReply, read_reply
from airflow_provider_slurmapi.client.errors import SlurmJobApiError
from airflow_provider_slurmapi.client.jobs import JobStatus
from airflow_provider_slurmapi.client.operations import QueueChanges, describe_requeue, queue_changes
from airflow_provider_slurmapi.client.paths import SlurmPaths
from airflow_provider_slurmapi.client.requeue import run_that_ended
from airflow_provider_slurmapi.client.steps import ApiSettings
from airflow_provider_slurmapi.client.wait_policy import HELD_REPORT_SECONDS, JobWaitPolicy
from airflow_provider_slurmapi.triggers.polling import SharedJobReader, SharedPoller, Tick
from tests.unit.client.conftest import FIXTURES

# case, job ID: every live reply real Slurm gave, in the order it gave them
REQUEUED_CASES = {
    "requeue_running": "325",
    "requeuehold_running": "326",
    "node_down_requeue": "328",
    "preempt_low": "334",
}


def live_replies(case: str, prefix: str = "") -> list[dict[str, Any]]:
    files = sorted(
        FIXTURES.glob(f"{prefix}{case}_[0-9]*.json"), key=lambda f: int(f.name[len(prefix + case) + 1 :].split("_")[0])
    )
    return [json.loads(f.read_text()) for f in files if "http_" not in f.name]


def live_statuses(case: str, job_id: str) -> list[JobStatus]:
    found = [select_job(job_id, [JobStatus.from_slurm(j) for j in reply["jobs"]]) for reply in live_replies(case)]
    return [status for status in found if status is not None]


@pytest.mark.parametrize(("case", "job_id"), sorted(REQUEUED_CASES.items()))
def test_a_requeued_job_is_never_finished_until_its_last_run_ends(case: str, job_id: str) -> None:
    statuses = live_statuses(case, job_id)
    policy = JobWaitPolicy(job_id)
    verdicts = [policy.judge(status, now=float(i)) for i, status in enumerate(statuses)]
    assert [v.finished for v in verdicts] == [False] * (len(verdicts) - 1) + [True]
    assert sum(v.requeued for v in verdicts) == 1  # logged once, at the first reply after the requeue
    requeued = next(v.status for v in verdicts if v.requeued)
    assert requeued is not None and (requeued.state, requeued.restarts) == ("PENDING", 1)
    final = verdicts[-1].status
    assert final is not None and (final.state, final.is_success, final.restarts) == ("COMPLETED", True, 1)
    assert "requeued 1 time" in final.describe()


def test_requeuehold_is_held_until_released(slurm_fixture) -> None:
    held = JobStatus.from_slurm(slurm_fixture("requeuehold_running_3_pending_completing_jobhelduser.json")["jobs"][0])
    assert (held.state, held.flags, held.reason, held.held, held.restarts) == (
        "PENDING",
        ("COMPLETING",),
        "JobHeldUser",
        True,
        1,
    )
    released = JobStatus.from_slurm(slurm_fixture("requeuehold_running_6_pending_begintime.json")["jobs"][0])
    assert (released.reason, released.held) == ("BeginTime", False)


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("hold_at_submit_1_pending_jobhelduser.json", "JobHeldUser"),
        ("hold_pending_3_pending_jobheldadmin.json", "JobHeldAdmin"),
    ],
)
def test_a_held_job_says_so_and_how_to_release_it(slurm_fixture, name: str, reason: str) -> None:
    status = JobStatus.from_slurm(slurm_fixture(name)["jobs"][0])
    assert (status.held, status.reason) == (True, reason)
    assert (
        f"reason: {reason}; held: it will not start until released (scontrol release {status.job_id})"
        in status.describe()
    )


def test_a_held_job_is_reported_when_first_seen_then_every_ten_minutes(slurm_fixture) -> None:
    held = JobStatus.from_slurm(slurm_fixture("hold_pending_3_pending_jobheldadmin.json")["jobs"][0])
    policy = JobWaitPolicy(held.job_id)
    times = [0.0, 30.0, HELD_REPORT_SECONDS - 1, HELD_REPORT_SECONDS, HELD_REPORT_SECONDS + 30]
    reports = [policy.judge(held, now).report_held for now in times]
    assert reports == [True, False, False, True, False]
    level, line = policy.judge(held, 2 * HELD_REPORT_SECONDS).progress() or (None, "")
    assert level == logging.WARNING and "held" in line


def test_a_job_held_again_after_a_release_is_reported_again(slurm_fixture) -> None:
    held = JobStatus.from_slurm(slurm_fixture("hold_pending_3_pending_jobheldadmin.json")["jobs"][0])
    released = JobStatus.from_slurm(slurm_fixture("hold_pending_4_pending_priority.json")["jobs"][0])
    state_only = JobStatus(held.job_id, "PENDING", source="state")  # says nothing of a hold
    policy = JobWaitPolicy(held.job_id)
    reports = [policy.judge(status, now).report_held for now, status in enumerate([held, state_only, released, held])]
    assert reports == [True, False, False, True]


def test_a_job_ended_by_a_node_failure_says_its_work_was_interrupted(slurm_fixture) -> None:
    status = JobStatus.from_slurm(slurm_fixture("node_down_no_requeue_3_node_fail_nodedown.json")["jobs"][0])
    assert (status.state, status.reason, status.is_finished, status.is_interrupted) == (
        "NODE_FAIL",
        "NodeDown",
        True,
        True,
    )
    text = status.describe()
    assert text.startswith(f"Slurm job {status.job_id} is NODE_FAIL; reason: NodeDown; killed by signal 1 (SIGHUP)")
    assert "work was interrupted (a node it ran on failed) and Slurm did not requeue it" in text
    assert "its own code did not fail" in text and "A retry of the task submits a new job" in text


def test_a_failed_job_is_not_called_interrupted(slurm_fixture) -> None:
    status = JobStatus.from_slurm(slurm_fixture("job_failed.json")["jobs"][0])
    assert status.is_interrupted is False and "interrupted" not in status.describe()


@pytest.mark.parametrize(
    ("name", "job_id", "cause"),
    [
        ("slurmdb_requeue_running_final.json", "325", "REQUEUED on node1"),
        ("slurmdb_node_down_requeue_final.json", "328", "NODE_FAIL on node1"),
        ("slurmdb_preempt_low_final.json", "334", "PREEMPTED on node1"),
        ("slurmdb_requeue_running_2_running.json", "325", None),  # accounting has no earlier run yet
    ],
)
def test_how_the_run_before_a_requeue_ended(slurm_fixture, name: str, job_id: str, cause: str | None) -> None:
    assert run_that_ended(slurm_fixture(name)["jobs"], job_id, restarts=1) == cause


def test_the_requeue_line_names_the_cause_read_from_accounting(slurm_fixture) -> None:
    status = JobStatus.from_slurm(slurm_fixture("node_down_requeue_2_pending.json")["jobs"][0])
    operation = describe_requeue(ApiSettings(), status)
    call = next(operation)
    assert (call.method, call.path) == ("GET", "/slurmdb/v0.0.42/job/328")
    with pytest.raises(StopIteration) as done:
        operation.send(SlurmReply(200, slurm_fixture("slurmdb_node_down_requeue_2_node_fail_pending.json")))
    assert (
        done.value.value
        == "Slurm job 328 was requeued (restart 1): NODE_FAIL on node1; it will run again from the start"
    )


# --- the shared poller's answers carry neither holds nor requeues: when a trigger reads in full ---


class FakePoller:
    unsupported = False
    interval = 1.0

    def __init__(self, ticks: list[Tick], full_reads: int = 1000) -> None:
        self.ticks = iter(ticks)
        self.full_reads = full_reads

    def grant_full_read(self) -> bool:
        self.full_reads -= 1
        return self.full_reads >= 0

    async def next_tick(self) -> Tick:
        return next(self.ticks)


class FakeClient:
    def __init__(self, statuses: list[JobStatus]) -> None:
        self.statuses = iter(statuses)
        self.reads = 0

    async def get_job(self, job_id: str) -> JobStatus:
        self.reads += 1
        return next(self.statuses)


def tick(path: Path) -> Tick:
    states = {str(j["job_id"]): j["state"] for j in json.loads(path.read_text())["jobs"]}
    return Tick(active={k: v for k, v in summaries(states).items() if v.is_active})


def test_the_shared_reader_reads_in_full_when_a_job_goes_back_to_pending() -> None:
    # real bulk answers for scontrol requeue: PENDING, RUNNING, [PENDING, COMPLETING], PENDING, RUNNING
    ticks = [tick(p) for p in sorted(FIXTURES.glob("jobs_state_requeue_running_[1-5]_*.json"))]
    full = live_statuses("requeue_running", "325")
    pending, requeued = full[0], next(s for s in full if s.restarts == 1)
    client = FakeClient([pending, requeued])
    reader = SharedJobReader(FakePoller(ticks), client)  # type: ignore[arg-type]
    policy = JobWaitPolicy("325")

    async def read_all() -> list[Any]:
        return [policy.judge(await reader.next_status("325"), now=float(i)) for i in range(len(ticks))]

    verdicts = asyncio.run(read_all())
    assert client.reads == 2  # first seen pending (a hold would show), and back to pending
    assert [v.status.state for v in verdicts] == ["PENDING", "RUNNING", "PENDING", "PENDING", "RUNNING"]
    assert [v.requeued for v in verdicts] == [False, False, True, False, False]
    assert [v.changed for v in verdicts] == [True, True, True, False, True]  # a bulk answer keeps the reason


def test_a_full_read_refused_this_tick_is_made_at_the_next(slurm_fixture) -> None:
    held = JobStatus.from_slurm(slurm_fixture("hold_at_submit_1_pending_jobhelduser.json")["jobs"][0])
    pending = Tick(active={held.job_id: JobStatus(held.job_id, "PENDING", source="state")})
    poller = FakePoller([pending, pending, pending], full_reads=0)  # the poller's budget is spent
    client = FakeClient([held])
    reader = SharedJobReader(poller, client)  # type: ignore[arg-type]

    async def read(times: int) -> list[JobStatus]:
        return [await reader.next_status(held.job_id) for _ in range(times)]

    assert [status.held for status in asyncio.run(read(1))] == [False]  # the summary, for now
    poller.full_reads = 1
    assert [status.held for status in asyncio.run(read(2))] == [True, False]  # owed, then read once
    assert client.reads == 1


def test_a_held_job_is_read_again_every_ten_minutes(slurm_fixture, monkeypatch) -> None:
    held = JobStatus.from_slurm(slurm_fixture("hold_at_submit_1_pending_jobhelduser.json")["jobs"][0])
    pending = Tick(active={held.job_id: JobStatus(held.job_id, "PENDING", source="state")})
    client = FakeClient([held, held])
    reader = SharedJobReader(FakePoller([pending] * 4), client)  # type: ignore[arg-type]
    now = [1000.0]
    monkeypatch.setattr("airflow_provider_slurmapi.triggers.polling.time.monotonic", lambda: now[0])

    async def read() -> JobStatus:
        return await reader.next_status(held.job_id)

    assert asyncio.run(read()).held is True  # first seen pending: read in full
    now[0] += HELD_REPORT_SECONDS - 1
    assert asyncio.run(read()).source == "state"  # held, but read less than 10 minutes ago
    now[0] += 1
    assert asyncio.run(read()).held is True  # read again
    assert client.reads == 2


# --- the shared poller reads holds, releases and requeues from the live queue's changes ---


class QueueClient:
    """Runs the real ``queue_changes`` operation on real replies of ``GET jobs/?update_time=``, in
    order; answers the state list with ``states``; gives requeue lines, counting the calls."""

    def __init__(self, names: list[str], states: dict[str, str] | None = None) -> None:
        self.names = iter(names)
        self.states = states or {}
        self.asked: list[int | None] = []
        self.state_calls = 0
        self.requeue_calls: list[list[str]] = []

    async def job_states(self, job_ids: list[str]) -> dict[str, list[str]]:
        self.state_calls += 1
        return {job_id: [self.states[job_id]] for job_id in job_ids if job_id in self.states}

    async def queue_changes(self, since: int | None, job_ids: list[str] | None = None) -> QueueChanges:
        self.asked.append(since)
        operation = queue_changes(ApiSettings(SlurmPaths("v0.0.42")), since, job_ids)
        call = next(operation)
        body = (FIXTURES / f"{next(self.names)}.json").read_text()
        try:
            operation.send(read_reply(call, 200, f'{{"status": 200, "structuredBody": {body}}}'))
        except StopIteration as done:
            return done.value
        raise AssertionError("queue_changes made a second call")

    async def requeue_lines(self, statuses: list[JobStatus]) -> dict[str, str]:
        self.requeue_calls.append([s.job_id for s in statuses])
        return {s.job_id: f"line of {s.job_id}" for s in statuses}


def shared_poller(client: QueueClient, watched: list[str]) -> SharedPoller:
    poller = SharedPoller(("k",), {}, 1.0)
    poller.client = client  # type: ignore[assignment]
    poller.watched.update(watched)
    return poller


def full(tick: Tick) -> dict[str, tuple[str, str, bool, int]]:
    return {job_id: (s.state, s.reason, s.held, s.restarts) for job_id, s in tick.full.items()}


def test_the_poller_reads_holds_releases_and_requeues_from_the_queue_changes() -> None:
    # real Slurm: 1 held at submit, 7 held while pending; then nothing changed; then 1 released
    # and 6 held; then 2 requeued (scontrol requeue) while running
    client = QueueClient(
        [
            "jobs_list_held_pending_running",
            "jobs_list_update_time_unchanged_held",
            "jobs_list_update_time_after_release_and_hold",
            "jobs_list_update_time_after_requeue",
        ],
        {"1": "PENDING", "2": "RUNNING", "5": "PENDING", "6": "PENDING", "7": "PENDING"},
    )
    poller = shared_poller(client, ["1", "2", "5", "6", "7"])
    first = asyncio.run(poller._read_tick())  # the state list, then the queue for the pending jobs
    assert full(first) == {
        "1": ("PENDING", "JobHeldUser", True, 0),
        "5": ("PENDING", "Priority", False, 0),
        "6": ("PENDING", "Priority", False, 0),
        "7": ("PENDING", "JobHeldAdmin", True, 0),
    }
    assert first.active["2"].state == "RUNNING"
    unchanged = asyncio.run(poller._read_tick())  # from now on the queue alone: nothing changed
    assert full(unchanged) == {**full(first), "2": ("RUNNING", None, False, 0)}
    assert full(asyncio.run(poller._read_tick())) == {
        "1": ("PENDING", "Resources", False, 0),  # released
        "2": ("RUNNING", None, False, 0),
        "5": ("PENDING", "Priority", False, 0),
        "6": ("PENDING", "JobHeldAdmin", True, 0),  # held once seen pending
        "7": ("PENDING", "JobHeldAdmin", True, 0),
    }
    requeued = full(asyncio.run(poller._read_tick()))
    assert requeued["2"] == ("PENDING", "BeginTime", False, 1) and requeued["1"][0] == "RUNNING"
    assert client.asked == [None, 1796247641, 1796247641, 1796247643]
    assert client.state_calls == 1 and len(client.asked) == 4  # one call a tick, two in the first


def test_a_large_queue_is_read_again_only_once_its_bytes_spread_under_the_budget(monkeypatch) -> None:
    # the first answer (the whole queue) is 4 to 5 budgets long: the state list for the next 4
    # intervals, then the queue's changes again, where the release and the new hold show
    names = ["jobs_list_held_pending_running", "jobs_list_update_time_after_release_and_hold"]
    size = len((FIXTURES / f"{names[0]}.json").read_text())
    monkeypatch.setattr("airflow_provider_slurmapi.triggers.polling.QUEUE_BYTES_PER_INTERVAL", size // 4)
    client = QueueClient(names, {"1": "PENDING", "5": "PENDING", "6": "PENDING", "7": "PENDING"})
    poller = shared_poller(client, ["1", "5", "6", "7"])
    ticks = [asyncio.run(poller._read_tick()) for _ in range(6)]
    assert client.asked == [None, 1796247641]  # at the first tick and the sixth
    assert client.state_calls == 5  # the first tick, and each of the four between
    assert [sorted(tick.full) for tick in ticks[1:5]] == [[]] * 4  # summaries in between
    assert [ticks[0].full["1"].held, ticks[5].full["1"].held] == [True, False]  # released
    assert [ticks[0].full["6"].held, ticks[5].full["6"].held] == [False, True]  # held


def test_the_poller_reads_the_state_list_alone_while_no_watched_job_pends() -> None:
    client = QueueClient([], {"2": "RUNNING"})
    poller = shared_poller(client, ["2"])
    for _ in range(3):
        assert asyncio.run(poller._read_tick()).full == {}
    assert client.asked == [] and client.state_calls == 3


def test_a_job_watched_later_is_asked_for_from_the_whole_queue() -> None:
    client = QueueClient(
        ["jobs_list_held_pending_running", "jobs_list_update_time_after_release_and_hold"], {"5": "PENDING"}
    )
    poller = shared_poller(client, ["5"])
    asyncio.run(poller._read_tick())
    poller.watched.update(["7"])  # a trigger joined: 7 was not kept from the first answer
    found = asyncio.run(poller._read_tick())
    assert client.asked == [None, None]
    assert found.full["7"].held is True


def test_the_requeue_lines_asked_for_in_a_tick_come_with_one_call_at_the_next() -> None:
    client = QueueClient([], {"2": "RUNNING", "3": "RUNNING"})
    poller = shared_poller(client, ["2", "3"])

    async def scenario() -> list[str]:
        asking = [asyncio.ensure_future(poller.requeue_line(JobStatus(j, "PENDING", restarts=1))) for j in ("2", "3")]
        await asyncio.sleep(0)
        await poller._read_tick()
        return list(await asyncio.gather(*asking))

    assert asyncio.run(scenario()) == ["line of 2", "line of 3"]
    assert client.requeue_calls == [["2", "3"]] and client.state_calls == 1


def test_a_requeue_line_whose_read_failed_comes_without_its_cause() -> None:
    class Failing(QueueClient):
        async def requeue_lines(self, statuses: list[JobStatus]) -> dict[str, str]:
            raise SlurmJobApiError("accounting is down")

    poller = shared_poller(Failing([], {"2": "PENDING"}), ["2"])

    async def scenario() -> str:
        asking = asyncio.ensure_future(poller.requeue_line(JobStatus("2", "PENDING", restarts=1)))
        await asyncio.sleep(0)
        with pytest.raises(SlurmJobApiError):
            await poller._read_tick()
        return await asking

    assert asyncio.run(scenario()) == "Slurm job 2 was requeued (restart 1); it will run again from the start"


def test_the_shared_reader_takes_a_pending_job_from_the_queue_without_reading_it() -> None:
    held = JobStatus("9", "PENDING", reason="JobHeldUser", held=True)
    summary = JobStatus("9", "PENDING", source="state")
    client = FakeClient([])
    reader = SharedJobReader(FakePoller([Tick(active={"9": summary}, full={"9": held})]), client)  # type: ignore[arg-type]
    assert asyncio.run(reader.next_status("9")) is held
    assert client.reads == 0
