"""Provider metadata read by Airflow through the ``apache_airflow_provider`` entry point."""

from __future__ import annotations

from typing import Any

from airflow_provider_slurmapi import __version__
from airflow_provider_slurmapi.client.live_output import DEFAULT_PERIOD, PERIOD_RANGE
from airflow_provider_slurmapi.client.output import DEFAULT_STAGED_RETENTION_DAYS, STAGED_RETENTION_DAYS_RANGE
from airflow_provider_slurmapi.client.paths import API_VERSION_PATTERN, DEFAULT_API_VERSION
from airflow_provider_slurmapi.client.retry import (
    RETRY_ATTEMPTS_RANGE,
    RETRY_MAX_SECONDS_RANGE,
    SUBMIT_SETTLE_SECONDS_RANGE,
    RetryPolicy,
)

CONN_TYPE = "slurm_job_api"
DEFAULT_CONN_ID = "slurm_job_api_default"


def _text(label: str, description: str, **schema: Any) -> dict[str, Any]:
    return {"label": label, "description": description, "schema": {"type": ["string", "null"], **schema}}


def _range(bounds: tuple[int, int]) -> str:
    return f"{bounds[0]}-{bounds[1]}"


# The connection's extra fields: shown by Airflow 3.2+'s form, and by 2.x through the hook's widgets.
CONN_FIELDS: dict[str, dict[str, Any]] = {
    "project_id": _text("Project ID", "Google Cloud project of the training cluster."),
    "region": _text("Region", "Region of the training cluster, e.g. us-central1.", examples=["us-central1"]),
    "cluster_id": _text("Cluster ID", "ID of the Vertex AI training cluster (modelDevelopmentClusters)."),
    "api_version": _text(
        "Slurm REST API version",
        "Version of the Slurm REST paths, v0.0.NN; use the one your cluster's Slurm serves.",
        default=DEFAULT_API_VERSION,
        pattern=f"^{API_VERSION_PATTERN}$",
        examples=["v0.0.42", "v0.0.41", "v0.0.40"],
    ),
    "endpoint": _text(
        "API endpoint",
        "Base URL of the API. Empty: https://{region}-aiplatform.googleapis.com. "
        "Point it at slurm-job-api-emulator to test DAGs offline.",
        format="url",
    ),
    "key_path": _text(
        "Keyfile Path", "Path to a service account key file (JSON). Empty: Application Default Credentials."
    ),
    "keyfile_dict": _text("Keyfile JSON", "Contents of a service account key file.", format="password"),
    "credential_config_file": _text(
        "Credential Configuration File", "Workload identity federation configuration (path or JSON)."
    ),
    "impersonation_chain": _text(
        "Impersonation Chain", "Service account to impersonate, or a comma-separated chain of them."
    ),
    "scope": _text("Scopes (comma separated)", "OAuth scopes. Empty: https://www.googleapis.com/auth/cloud-platform."),
    "retry_attempts": _text(
        "API retries: attempts",
        "How often a status read or a cancel is tried when the API fails transiently "
        f"(UNAVAILABLE, 429, 5xx, connection errors), {_range(RETRY_ATTEMPTS_RANGE)}. "
        f"Empty: {RetryPolicy.max_attempts}. A submit is never resent blindly.",
        pattern="^(" + "|".join(str(n) for n in range(RETRY_ATTEMPTS_RANGE[0], RETRY_ATTEMPTS_RANGE[1] + 1)) + ")$",
    ),
    "retry_max_seconds": _text(
        "API retries: time limit (s)",
        f"Stop retrying one request after this many seconds, {_range(RETRY_MAX_SECONDS_RANGE)}. "
        f"Empty: {RetryPolicy.max_elapsed:g}.",
        pattern=r"^\d+(\.\d+)?$",
    ),
    "submit_settle_seconds": _text(
        "Submit: seconds before a failed submit is looked for",
        "A submit that failed may still create its job this long after: slurmctld's MessageTimeout, "
        f"{_range(SUBMIT_SETTLE_SECONDS_RANGE)}. Empty: {RetryPolicy.submit_settle:g}.",
        pattern=r"^\d+(\.\d+)?$",
    ),
    "output_uri": _text(
        "Job output: where Airflow reads it",
        "gs://bucket/prefix (or file:///path on a filesystem the workers mount) holding what the cluster "
        "sees at the path below. Both set: the task log shows the end of each job's output.",
        pattern="^(gs://[^/]+(/.*)?|file:///.*)$",
        examples=["gs://my-bucket/slurm-output"],
    ),
    "output_cluster_path": _text(
        "Job output: the same place on the cluster",
        "Absolute path where the cluster's nodes mount that location (e.g. the bucket's Cloud Storage FUSE mount).",
        pattern="^/.*$",
        examples=["/mnt/output/slurm-output"],
    ),
    "output_staged_retention_days": _text(
        "Staged scripts: days kept",
        "A DAG's staged scripts (those past the request limit) not staged again for this many days are "
        "removed when it stages another, but those a job in the cluster's live queue may still run "
        f"(pending, running, suspended, requeued), {_range(STAGED_RETENTION_DAYS_RANGE)}; 0 keeps them. "
        f"Empty: {DEFAULT_STAGED_RETENTION_DAYS:g}.",
        pattern=r"^\d+(\.\d+)?$",
    ),
    "live_output": _text(
        "Live output: on or off",
        "true or false: show a job's output in the task log while it runs (needs both output locations). "
        "Empty: on wherever it can work. A task's live_output argument wins.",
        pattern="^(true|false|on|off|True|False)$",
    ),
    "live_output_period": _text(
        "Live output: seconds between pieces",
        f"How often a running job publishes its new output, {_range(PERIOD_RANGE)}. Empty: {DEFAULT_PERIOD}.",
        pattern=r"^\d+$",
    ),
}

UI_FIELD_BEHAVIOUR: dict[str, Any] = {
    "hidden-fields": ["host", "schema", "login", "password", "port"],
    "relabeling": {},
    "placeholders": {},
}


def get_provider_info() -> dict[str, Any]:
    return {
        "package-name": "airflow-provider-slurmapi",
        "name": "Slurm Job API (Google Cloud training clusters)",
        "description": "Submit, watch and cancel Slurm jobs on Vertex AI training clusters "
        "through Google Cloud's Slurm Job API (callSlurmRestApi).",
        "versions": [__version__],
        "integrations": [
            {
                "integration-name": "Google Cloud Slurm Job API",
                "tags": ["gcp"],
            }
        ],
        "connection-types": [
            {
                "connection-type": CONN_TYPE,
                "hook-class-name": "airflow_provider_slurmapi.hooks.slurm_job_api.SlurmJobApiHook",
                "hook-name": "Google Cloud Slurm Job API",
                "ui-field-behaviour": UI_FIELD_BEHAVIOUR,
                "conn-fields": CONN_FIELDS,
            }
        ],
        "hooks": [
            {
                "integration-name": "Google Cloud Slurm Job API",
                "python-modules": ["airflow_provider_slurmapi.hooks.slurm_job_api"],
            }
        ],
        "operators": [
            {
                "integration-name": "Google Cloud Slurm Job API",
                "python-modules": ["airflow_provider_slurmapi.operators.job"],
            }
        ],
        "sensors": [
            {
                "integration-name": "Google Cloud Slurm Job API",
                "python-modules": ["airflow_provider_slurmapi.sensors.job"],
            }
        ],
        "task-decorators": [
            {"name": "slurm", "class-name": "airflow_provider_slurmapi.decorators.slurm.slurm_task"},
            {
                "name": "slurm_python",
                "class-name": "airflow_provider_slurmapi.decorators.slurm_python.slurm_python_task",
            },
        ],
        "extra-links": ["airflow_provider_slurmapi.links.SlurmJobOutputLink"],
        "triggers": [
            {
                "integration-name": "Google Cloud Slurm Job API",
                # job_events: Airflow 3 only (asset watchers)
                "python-modules": [
                    "airflow_provider_slurmapi.triggers.job",
                    "airflow_provider_slurmapi.triggers.job_events",
                ],
            }
        ],
    }
