"""Submit without waiting, then wait for the job with SlurmJobSensor."""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG

from airflow_provider_slurmapi.operators.job import SlurmSubmitJobOperator
from airflow_provider_slurmapi.sensors.job import SlurmJobSensor

with DAG(dag_id="slurm_sensor", start_date=datetime(2026, 1, 1), schedule=None):
    # [START howto_sensor_slurm_job]
    submit = SlurmSubmitJobOperator(
        task_id="submit",
        job={"name": "preprocess"},
        script="#!/bin/bash\nsrun sleep 2\necho preprocessed\n",
        wait_for_completion=False,  # returns the job ID as soon as Slurm accepted the job
    )
    wait = SlurmJobSensor(
        task_id="wait",
        job_id=submit.output,  # the job ID, from XCom
        deferrable=True,
        poke_interval=1,
        timeout=3600,
    )
    # [END howto_sensor_slurm_job]

    # [START howto_sensor_slurm_job_reschedule]
    wait_in_worker = SlurmJobSensor(
        task_id="wait_in_worker",
        job_id="{{ ti.xcom_pull(task_ids='submit') }}",
        mode="reschedule",  # frees the worker slot between pokes
        poke_interval=1,
        timeout=3600,
    )
    # [END howto_sensor_slurm_job_reschedule]

    submit >> [wait, wait_in_worker]
