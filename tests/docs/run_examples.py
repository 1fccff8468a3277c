"""Runs example DAGs of the docs with ``dag.test()`` against an emulator, in a process of its own.

Usage: ``python run_examples.py SPEC.json RESULTS.json``. The environment names the Airflow home
and the DAGs folder (``AIRFLOW_HOME``, ``AIRFLOW__CORE__DAGS_FOLDER``); this process creates the
metadata database, starts an emulator, points ``slurm_job_api_default`` at it and runs each entry
of SPEC (``{"name", "dag_id", "conf", "faults", "output", "emulator"}``) in turn. RESULTS gets, per
entry, the run's state, each task's state and XComs, and the Slurm jobs each task submitted (found
by the key in their comment). Each run's log lies between ``=== BEGIN <name>`` and ``=== END
<name>`` lines on stdout.

When an entry has ``"output": true``, its connection names where job output goes: a directory that
the emulator publishes to a Cloud Storage stand-in (``gcp-storage-emulator``, started for it), as
Cloud Storage FUSE would (``OUTPUT_URI``). ``"emulator"`` holds ``EmulatorConfig`` settings for the
one emulator of the process, e.g. ``{"partitions": ["a3:gpu:h100:8", "debug"]}`` (as
``--partition a3:gpu:h100:8 --partition debug``): every entry of a SPEC that sets it sets the same.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
import traceback
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from tests.storage import storage_stand_in

EMULATOR_PROJECT, EMULATOR_REGION, EMULATOR_CLUSTER = "test-project", "us-central1", "test-cluster"
OUTPUT_URI = "gs://slurm-output/runs"  # where Airflow reads job output in runs with "output"


def connection(url: str, key_file: Path, output_dir: Path | None = None) -> str:
    extra = {
        "project_id": EMULATOR_PROJECT,
        "region": EMULATOR_REGION,
        "cluster_id": EMULATOR_CLUSTER,
        "endpoint": url,
        "key_path": str(key_file),
    }
    if output_dir is not None:
        extra.update(output_uri=OUTPUT_URI, output_cluster_path=str(output_dir))
    return json.dumps({"conn_type": "slurm_job_api", "extra": extra})


def emulator_settings(spec: list[dict[str, Any]]) -> dict[str, Any]:
    """The ``EmulatorConfig`` settings the entries ask for (lists as tuples); one emulator serves them all."""
    asked = [entry["emulator"] for entry in spec if entry.get("emulator")]
    if any(settings != asked[0] for settings in asked):
        raise ValueError(f"the entries of one process ask for different emulators: {asked}")
    return {key: tuple(value) if isinstance(value, list) else value for key, value in (asked or [{}])[0].items()}


def jobs_by_task(dag_id: str, run_id: str, task_ids: list[str]) -> dict[str, list[dict[str, Any]]]:
    from airflow_provider_slurmapi.client.jobs import JobStatus
    from airflow_provider_slurmapi.client.submission import submission_key
    from airflow_provider_slurmapi.hooks.slurm_job_api import SlurmJobApiHook

    hook = SlurmJobApiHook()
    listed = [JobStatus.from_slurmdb(job) for job in hook.call("GET", "/slurmdb/v0.0.42/jobs")["jobs"]]
    found: dict[str, list[dict[str, Any]]] = {}
    for task_id in task_ids:
        key = submission_key(dag_id, task_id, run_id, -1)
        found[task_id] = [
            {
                "job_id": job.job_id,
                "name": job.name,
                "state": job.state,
                "comment": job.comment,
                "exit_code": job.exit_code.return_code if job.exit_code else None,
            }
            for job in listed
            if key in job.comment.split()
        ]
    return found


def task_results(dag_run: Any) -> tuple[dict[str, str], dict[str, dict[str, Any]]]:
    from airflow.models.taskinstance import TaskInstance
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        tis = session.scalars(
            select(TaskInstance).where(TaskInstance.dag_id == dag_run.dag_id, TaskInstance.run_id == dag_run.run_id)
        ).all()
        states = {ti.task_id: str(ti.state.value if hasattr(ti.state, "value") else ti.state) for ti in tis}
        rows = session.scalars(
            select(XComModel).where(XComModel.dag_id == dag_run.dag_id, XComModel.run_id == dag_run.run_id)
        ).all()
        xcoms: dict[str, dict[str, Any]] = {}
        for row in rows:
            xcoms.setdefault(row.task_id, {})[row.key] = XComModel.deserialize_value(row)
    return states, xcoms


def run(spec: list[dict[str, Any]], results_path: Path) -> None:
    from airflow.dag_processing.dagbag import DagBag
    from airflow.utils import db

    from airflow_provider_slurmapi.emulator import Emulator, EmulatorConfig, ScriptedFault

    db.initdb()
    work = Path(os.environ["AIRFLOW_HOME"])
    results: dict[str, Any] = {}
    with ExitStack() as stack:
        output_dir, mount = None, {}
        if any(entry.get("output") for entry in spec):
            output_dir = work / "cluster-output"  # the cluster's mount of the bucket
            output_dir.mkdir()
            storage_host = stack.enter_context(storage_stand_in(work / "storage.log")).url
            os.environ["STORAGE_EMULATOR_HOST"] = storage_host  # where google-cloud-storage reads
            mount = {"output_mount": f"{output_dir}={OUTPUT_URI}", "storage_host": storage_host}
        config = EmulatorConfig(
            key_file=work / "emulator-key.json",
            state_dir=work / "emulator-jobs",
            sched_delay=0.2,
            kill_wait=1.0,
            min_job_age=60.0,
            **mount,
            **emulator_settings(spec),
        )
        emulator = stack.enter_context(Emulator(config))
        for entry in spec:
            name = entry["name"]
            output = output_dir if entry.get("output") else None
            os.environ["AIRFLOW_CONN_SLURM_JOB_API_DEFAULT"] = connection(emulator.url, emulator.key_file, output)
            print(f"=== BEGIN {name}", flush=True)
            started = time.monotonic()
            emulator.faults.clear()
            emulator.faults.script(*(ScriptedFault(**fault) for fault in entry.get("faults", [])))
            try:
                # parsed anew for each run: dag.test() leaves a run's conf in the tasks' params
                bag = DagBag(dag_folder=os.environ["AIRFLOW__CORE__DAGS_FOLDER"])
                dag = bag.get_dag(entry["dag_id"])
                if dag is None:
                    raise LookupError(f"no DAG {entry['dag_id']!r}; import errors: {bag.import_errors}")
                dag_run = dag.test(run_conf=entry.get("conf"))
                states, xcoms = task_results(dag_run)
                results[name] = {
                    "dag_id": dag.dag_id,
                    "run_id": dag_run.run_id,
                    "state": str(dag_run.state),
                    "tasks": states,
                    "xcom": xcoms,
                    "jobs": jobs_by_task(dag.dag_id, dag_run.run_id, list(dag.task_ids)),
                    "faults": dict(emulator.faults.injected),
                    "seconds": round(time.monotonic() - started, 1),
                }
            except Exception:
                results[name] = {"error": traceback.format_exc()}
            sys.stdout.flush()
            sys.stderr.flush()
            print(f"=== END {name}", flush=True)
            results_path.write_text(json.dumps(results, indent=2, default=str))


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # leave the emulator's block: it kills its jobs
    run(json.loads(Path(sys.argv[1]).read_text()), Path(sys.argv[2]))
