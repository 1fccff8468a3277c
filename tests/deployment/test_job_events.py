"""Jobs submitted outside Airflow start the DAGs whose asset watchers match them, one run each,
across a triggerer restart, in a real Airflow 3 deployment (api-server, scheduler, dag-processor
and triggerer as separate processes, on PostgreSQL). The watchers' cursor lives in the asset state
store on Airflow 3.3 and in an Airflow Variable on 3.1 and 3.2.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from airflow_provider_slurmapi.emulator import Emulator
from tests.conftest import connection_json
from tests.deployment.airflow_services import (
    BLOCKED_LOOP_WARNING,
    Airflow,
    airflow_home,
    require_airflow_3,
    running,
    stop_process_group,
    wait_for,
)
from tests.deployment.job_events import (
    OutsideJob,
    job_ids,
    reads_per_interval,
    reported_jobs,
    submit_outside_airflow,
    wait_for_jobs,
)
from tests.deployment.postgres import Postgres

pytestmark = pytest.mark.deployment

DAG_FILE = Path(__file__).parent / "dags" / "slurm_job_events.py"


@pytest.fixture(scope="module", autouse=True)
def _requirements() -> None:
    require_airflow_3()


@pytest.fixture(scope="module")
def airflow(postgres: Postgres, emulator: Emulator, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Airflow]:
    home = airflow_home(tmp_path_factory, "airflow-job-events", DAG_FILE)
    components = ["api-server", "scheduler", "dag-processor", "triggerer"]
    settings = {
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": postgres.url,
        "AIRFLOW_CONN_SLURM_JOB_API_DEFAULT": connection_json(emulator),
    }
    with running(home, components, **settings) as deployment:
        yield deployment


def _cursor_store() -> str:
    from airflow_provider_slurmapi.version_compat import AIRFLOW_V_3_3_PLUS

    return "the asset state store" if AIRFLOW_V_3_3_PLUS else "Airflow Variable 'slurm_job_events."


# The job-event DAGs of tests/deployment/dags/slurm_job_events.py, the task that reads the payload,
# and how often their watchers read accounting.
VISION, FAILED = "slurm_vision_runs_ended", "slurm_job_failed"
EVENT_TASKS = {VISION: "read_payload", FAILED: "read_failure"}
EVENT_INTERVAL = 5
ENDED_JOBS_READ = r"^/slurmdb/v0\.0\.42/jobs/$"
# Ending 10 s (two intervals) apart, each matching job is read in an interval of its own: one DAG run each.
BEFORE_RESTART = [
    OutsideJob("evt-train-a", 1, comment="team=vision", starts=(VISION,)),
    OutsideJob("evt-train-x", 2, comment="team=nlp"),
    OutsideJob("other-train", 4, comment="team=vision"),
    OutsideJob("evt-train-b", 11, exit_code=3, comment="team=vision run=2", starts=(VISION, FAILED)),
    OutsideJob("other-fail", 14, exit_code=1),
    OutsideJob("evt-eval-f", 17, exit_code=2, starts=(FAILED,)),
    OutsideJob("evt-train-c", 24, comment="sweep team=vision", starts=(VISION,)),
]
# Ending while no triggerer runs.
DURING_RESTART = [
    OutsideJob("evt-train-g", 1, comment="team=vision", starts=(VISION,)),
    OutsideJob("evt-train-y", 1, comment="team=nlp"),
    OutsideJob("evt-train-h", 3, exit_code=4, comment="team=vision", starts=(VISION, FAILED)),
]
# Ending two intervals after the restart: Airflow 3.3.2 and older may leave an asset event that came
# while the scheduler created a run unconsumed until the asset's next one (apache/airflow#56050).
AFTER_RESTART = [
    OutsideJob("evt-train-z", 2 * EVENT_INTERVAL, exit_code=5, comment="team=vision", starts=(VISION, FAILED))
]


def _submit(emulator: Emulator, jobs: list[OutsideJob]) -> dict[str, OutsideJob]:
    return {submit_outside_airflow(emulator, job): job for job in jobs}


def _expected(submitted: dict[str, OutsideJob], dag_id: str) -> set[str]:
    return {job_id for job_id, job in submitted.items() if dag_id in job.starts}


def _triggerer_says(airflow: Airflow, text: str, count: int = 1) -> bool:
    return airflow.log_file("triggerer").read_text(errors="replace").count(text) >= count


def test_jobs_ended_outside_airflow_start_one_run_each_once_across_a_triggerer_restart(
    airflow: Airflow, emulator: Emulator
) -> None:
    """Jobs submitted through the emulator's API, not Airflow; the triggerer stopped in the middle."""
    with airflow.explained():
        api = airflow.api_for(VISION)
        airflow.api_for(FAILED)
        wait_for(lambda: _triggerer_says(airflow, "Reporting Slurm jobs that end from", 2), 120, "both watchers")
        assert _triggerer_says(airflow, f"cursor in {_cursor_store()}", 2)
        watching_since = time.time()
        submitted = _submit(emulator, BEFORE_RESTART)
        runs = {
            dag: wait_for_jobs(api, dag, EVENT_TASKS[dag], _expected(submitted, dag), 120) for dag in (VISION, FAILED)
        }
        time.sleep(2 * EVENT_INTERVAL)  # nothing more comes
        runs = {dag: reported_jobs(api, dag, EVENT_TASKS[dag]) for dag in (VISION, FAILED)}
        reads = [call.at for call in emulator.requests.calls("GET", ENDED_JOBS_READ, since=watching_since)]
        per_interval = len(reads) / ((time.time() - watching_since) / EVENT_INTERVAL)
        print(f"\n== before the restart: {len(submitted)} jobs submitted outside Airflow")
        for job_id, job in submitted.items():
            print(f"   job {job_id} {job.name} exit {job.exit_code} comment {job.comment!r}: starts {list(job.starts)}")
        for dag, dag_runs in runs.items():
            print(f"   {dag}: {len(dag_runs)} DAG runs: {json.dumps(dag_runs)}")
        print(f"   {len(reads)} accounting reads for both watchers in {time.time() - watching_since:.0f} s: "
              f"{per_interval:.2f} per {EVENT_INTERVAL} s interval")  # fmt: skip
        for dag in (VISION, FAILED):
            assert job_ids(runs[dag]) == sorted(_expected(submitted, dag), key=int), (dag, runs[dag])
        assert len(runs[VISION]) == 3, runs[VISION]  # one run per job: they ended two intervals apart
        by_id = {job["job_id"]: job for jobs in runs[VISION].values() for job in jobs}
        for job_id in _expected(submitted, VISION):
            job = submitted[job_id]
            assert (by_id[job_id]["name"], by_id[job_id]["exit_code"]) == (job.name, job.exit_code)
            assert by_id[job_id]["state"] == ("COMPLETED" if job.exit_code == 0 else "FAILED")
            assert by_id[job_id]["cpus"] >= 1  # usage, from accounting
        assert per_interval <= 1.3, (len(reads), per_interval)  # one read per interval for both watchers

        stop_process_group(airflow.processes["triggerer"])
        stopped = time.time()
        # (the restarted triggerer's count is printed when the deployment stops: its log replaces this one)
        blocked = airflow.log_file("triggerer").read_text(errors="replace").count(BLOCKED_LOOP_WARNING)
        print(f'== the triggerer logged {blocked} "{BLOCKED_LOOP_WARNING}" lines before its restart')
        during = _submit(emulator, DURING_RESTART)
        time.sleep(8)  # they end while no triggerer runs
        airflow.start("triggerer")
        restarted = time.time()
        wait_for(lambda: _triggerer_says(airflow, "Resuming after Slurm jobs that ended by", 2), 120, "the resume")
        all_jobs = {**submitted, **during, **_submit(emulator, AFTER_RESTART)}
        after = {
            dag: wait_for_jobs(api, dag, EVENT_TASKS[dag], _expected(all_jobs, dag), 120) for dag in (VISION, FAILED)
        }
        time.sleep(3 * EVENT_INTERVAL)  # nothing more comes, nothing comes twice
        after = {dag: reported_jobs(api, dag, EVENT_TASKS[dag]) for dag in (VISION, FAILED)}
        print(f"== triggerer stopped for {time.time() - stopped:.0f} s; jobs submitted meanwhile: "
              f"{ {job_id: job.name for job_id, job in during.items()} }, then evt-train-z")  # fmt: skip
        for dag, dag_runs in after.items():
            new = {run: jobs for run, jobs in dag_runs.items() if run not in runs[dag]}
            print(f"   {dag}: {len(new)} new DAG runs after the restart: {json.dumps(new)}")
        reads = [call.at for call in emulator.requests.calls("GET", ENDED_JOBS_READ, since=restarted)]
        print(f"   {len(reads)} accounting reads for both watchers after the restart, "
              f"{reads_per_interval(reads, EVENT_INTERVAL):.2f} per {EVENT_INTERVAL} s interval; "
              f"gaps (s): {[round(b - a, 1) for a, b in zip(reads, reads[1:], strict=False)]}")  # fmt: skip
        for dag in (VISION, FAILED):
            assert job_ids(after[dag]) == sorted(_expected(all_jobs, dag), key=int), (dag, after[dag])
