"""A DAG used only by the live output system test: two jobs that print a numbered line with its
time every second, one watched by a deferred task's trigger, one by a task waiting in the worker."""

from __future__ import annotations

from datetime import datetime

from airflow_provider_slurmapi.operators.job import SlurmSubmitJobOperator

try:
    from airflow.sdk import DAG
except ImportError:  # Airflow 2.x
    from airflow import DAG

JOB = {"name": "live-output-test", "environment": ["PATH=/usr/bin:/bin"], "current_working_directory": "/tmp"}
LINES = 8  # on stdout, one a second
WARNINGS = 3  # on stderr, at lines 2, 4 and 6
# "line 3 1767225600.123456789": the time it was printed
SCRIPT = f"""#!/bin/bash
for i in $(seq 1 {LINES}); do
    echo "line $i $(date +%s.%N)"
    if [ $((i % 2)) -eq 0 ] && [ "$i" -le {2 * WARNINGS} ]; then echo "warning $((i / 2))" >&2; fi
    sleep 1
done
"""

with DAG(dag_id="test_slurm_live_output", start_date=datetime(2026, 1, 1), schedule=None):
    for task_id, deferrable in (("deferred", True), ("in_worker", False)):
        SlurmSubmitJobOperator(
            task_id=task_id,
            job=JOB,
            script=SCRIPT,
            deferrable=deferrable,
            poll_interval=1,
            live_output=True,
            live_output_period=2,
        )
