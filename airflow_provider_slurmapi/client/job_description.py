"""The submit request: the job description checked against the version's schema, with the
defaults real slurmrestd needs filled in."""

from __future__ import annotations

from typing import Any

from airflow_provider_slurmapi.client.errors import InvalidRequestError
from airflow_provider_slurmapi.client.paths import DEFAULT_API_VERSION
from airflow_provider_slurmapi.client.validation import validate_job_description

# slurmrestd refuses a submit without these (errors 2019 and 2063); documented defaults.
DEFAULT_ENVIRONMENT = ("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",)
DEFAULT_WORKING_DIRECTORY = "/tmp"


def submission_body(job: dict[str, Any], script: str, api_version: str = DEFAULT_API_VERSION) -> dict[str, Any]:
    """The submit request body, checked against the version's schema, with the defaults real
    slurmrestd needs filled in. An ``environment`` dict becomes Slurm's ``["K=V", ...]`` list."""
    if not isinstance(job, dict):
        raise InvalidRequestError("job", f"must be a dict (a Slurm job description), got {type(job).__name__}")
    if not isinstance(script, str) or not script.strip():
        raise InvalidRequestError("script", "must be the non-empty text of a batch script")
    if not script.startswith("#!"):
        raise InvalidRequestError("script", "must start with a shebang line such as #!/bin/bash")
    if "script" in job:
        raise InvalidRequestError("job.script", "pass the batch script as `script`, not inside `job`")
    job = dict(job)
    if isinstance(job.get("environment"), dict):
        job["environment"] = [f"{key}={value}" for key, value in job["environment"].items()]
    job.setdefault("environment", list(DEFAULT_ENVIRONMENT))
    job.setdefault("current_working_directory", DEFAULT_WORKING_DIRECTORY)
    validate_job_description(job, api_version)
    return {"job": job, "script": script}
