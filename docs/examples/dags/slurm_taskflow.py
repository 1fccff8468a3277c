"""TaskFlow: a fine-tuning sweep where every task is a Slurm job, written as Python functions.

The connection holds output_uri and output_cluster_path: @task.slurm_python brings each return
value back through them.
"""

from __future__ import annotations

import shlex
from datetime import datetime

from airflow.sdk import DAG, task

JOB = {"minimum_nodes": 1, "time_limit": {"set": True, "number": 60}}

with DAG(
    dag_id="slurm_taskflow",
    start_date=datetime(2026, 1, 1),
    schedule=None,
    params={"epochs": 3},
    render_template_as_native_obj=True,  # "{{ params.epochs }}" stays a number
):
    # [START howto_decorator_slurm]
    @task.slurm(job={**JOB, "name": "prepare"}, deferrable=True, poll_interval=2)
    def prepare(dataset: str, run_id: str | None = None) -> str:
        # the context's values come by name; the returned script is sent as it is (not rendered),
        # so each value it embeds is quoted for the shell
        return f"#!/bin/bash\necho {shlex.quote(f'tokenizing {dataset} for run {run_id}')}\n"

    # [END howto_decorator_slurm]

    # [START howto_decorator_slurm_python]
    @task.slurm_python(job={**JOB, "name": "fine-tune"}, python="python3", deferrable=True, poll_interval=2)
    def fine_tune(learning_rate: float, epochs: int) -> dict:
        import math  # runs on the cluster: import what the function uses inside it

        if epochs < 1:
            raise ValueError(f"epochs must be at least 1, got {epochs}")
        loss = 2.0
        for epoch in range(1, epochs + 1):
            loss *= math.exp(-learning_rate)
            print(f"epoch {epoch}/{epochs}: loss {loss:.4f}")
        return {"learning_rate": learning_rate, "loss": round(loss, 4)}

    # [END howto_decorator_slurm_python]

    # [START howto_decorator_slurm_python_mapped]
    @task
    def pick_best(results: list[dict]) -> dict:
        return min(results, key=lambda result: result["loss"])

    runs = fine_tune.partial(epochs="{{ params.epochs }}").expand(learning_rate=[0.1, 0.2, 0.4])
    prepare("gs://datasets/chat-v2") >> runs
    pick_best(runs)
    # [END howto_decorator_slurm_python_mapped]
