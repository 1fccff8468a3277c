"""A small training sweep written with TaskFlow decorators, each task a Slurm job on the cluster.

- ``prepare`` (``@task.slurm``) returns a batch script (sent as it is: not a Jinja template);
- ``train`` (``@task.slurm_python``) runs on the cluster under ``python3``, once per learning rate
  (``.expand``), and its return value comes back as the task's XCom;
- ``pick_best`` is a plain ``@task`` in Airflow that reads those values.

``@task.slurm_python`` needs the connection's (or the task's) ``output_uri`` and
``output_cluster_path``: the return value comes back through that location. Trigger with
``{"fail": true}`` to see an exception raised on the cluster fail the task with its traceback.
"""

from __future__ import annotations

import shlex
from datetime import datetime

try:
    from airflow.sdk import DAG, task
except ImportError:  # Airflow 2.x
    from airflow import DAG
    from airflow.decorators import task

JOB = {"minimum_nodes": 1, "time_limit": {"set": True, "number": 30}, "current_working_directory": "/tmp"}

with DAG(
    dag_id="example_slurm_taskflow",
    start_date=datetime(2026, 1, 1),
    schedule=None,
    catchup=False,
    params={"fail": False},
    render_template_as_native_obj=True,  # "{{ params.fail }}" stays a bool
    tags=["example", "slurm"],
) as dag:

    @task.slurm(job={**JOB, "name": "prepare"}, deferrable=True, poll_interval=2)
    def prepare(run_id: str | None = None) -> str:  # the context's values, by name: the script is not a template
        return f"#!/bin/bash\necho {shlex.quote(f'preparing the data of run {run_id}')}\n"  # a value is quoted

    @task.slurm_python(job={**JOB, "name": "train"}, python="python3", deferrable=True, poll_interval=2)
    def train(learning_rate: float, fail: bool = False) -> dict:
        import math  # the function runs on the cluster: it imports what it uses

        print(f"training with learning rate {learning_rate}")
        if fail:
            raise ValueError(f"loss diverged at learning rate {learning_rate}")
        return {"learning_rate": learning_rate, "loss": round(math.exp(-3 * learning_rate), 4)}

    @task
    def pick_best(results: list[dict]) -> dict:
        best = min(results, key=lambda result: result["loss"])
        print(f"best run: learning rate {best['learning_rate']}, loss {best['loss']}")
        return best

    runs = train.partial(fail="{{ params.fail }}").expand(learning_rate=[0.1, 0.3, 1.0])
    prepare() >> runs
    pick_best(runs)
