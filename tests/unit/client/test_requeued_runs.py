"""A requeued job has one accounting record per run (real Slurm 24.11, captured in the fixtures):
every reader takes the last run, whatever the earlier ones ended in."""

from __future__ import annotations

import pytest

from airflow_provider_slurmapi.client.arrays import select_job
from airflow_provider_slurmapi.client.jobs import JobStatus
from airflow_provider_slurmapi.client.requeue import latest_runs
from airflow_provider_slurmapi.client.usage import JobUsage


@pytest.mark.parametrize(
    ("name", "job_id", "first_run"),
    [
        ("slurmdb_requeue_running_final.json", "325", ["PENDING", "REQUEUED"]),  # scontrol requeue
        ("slurmdb_node_down_requeue_final.json", "328", ["NODE_FAIL"]),  # node down, requeue: true
        ("slurmdb_preempt_low_final.json", "334", ["PREEMPTED"]),  # preempted by a higher tier
    ],
)
def test_the_last_run_of_a_requeued_job_is_its_outcome(slurm_fixture, name: str, job_id: str, first_run) -> None:
    records = slurm_fixture(name)["jobs"]
    assert [r["state"]["current"] for r in records] == [first_run, ["COMPLETED"]]  # as real Slurm gave them
    (last,) = latest_runs(records)
    assert last["restart_cnt"] == 1
    status = select_job(job_id, [JobStatus.from_slurmdb(record) for record in latest_runs(records)])
    assert status is not None and (status.state, status.is_success) == ("COMPLETED", True)
    usage = JobUsage.from_accounting(job_id, latest_runs(records))
    assert usage is not None and usage.elapsed_seconds == last["time"]["elapsed"]  # the final run's, not a sum


def test_records_of_different_jobs_and_array_tasks_are_all_kept(slurm_fixture) -> None:
    records = slurm_fixture("slurmdb_job_array_partly_pending.json")["jobs"]
    assert latest_runs(records) == records
    assert latest_runs([]) == []
