"""Scripts past the API's request limit: staged once per content hash under the job output
location (which the cluster's nodes see at ``output_cluster_path``) and submitted as a short
wrapper that runs them from there. Only the plan is made here: the hook writes the object."""

from __future__ import annotations

import hashlib
import posixpath
import shlex
from dataclasses import dataclass
from typing import Any

from airflow_provider_slurmapi.client.envelope import SlurmCall
from airflow_provider_slurmapi.client.job_description import submission_body
from airflow_provider_slurmapi.client.output import OutputSettings
from airflow_provider_slurmapi.client.paths import SlurmPaths

STAGED_FOLDER = "staged"  # under output_cluster_path / output_uri


def submit_call(job: dict[str, Any], script: str, paths: SlurmPaths) -> SlurmCall:
    """The submit request of this job and script (bad input raises here, naming the field)."""
    return SlurmCall("POST", paths.submit(), submission_body(job, script, paths.api_version))


@dataclass(frozen=True)
class StagedScript:
    """Where a script too large for the request goes, and the wrapper submitted in its place."""

    data: bytes  # the script as uploaded
    location: str  # where Airflow writes it: under output_uri
    cluster_file: str  # where the job reads it: under output_cluster_path
    wrapper: str

    @classmethod
    def plan(cls, script: str, settings: OutputSettings) -> StagedScript:
        if not settings.readable:
            raise ValueError("output_uri and output_cluster_path must both be set to stage a script")
        data = script.encode()
        name = f"{hashlib.sha256(data).hexdigest()}.script"  # one object per content: staged once
        cluster_file = posixpath.join(str(settings.cluster_path), STAGED_FOLDER, name)
        location = settings.location_of(cluster_file)
        assert location is not None  # readable, and the file is under cluster_path
        return cls(data, location, cluster_file, wrapper_script(script, cluster_file, location))


def wrapper_script(script: str, cluster_file: str, location: str) -> str:
    """A bash script that runs ``cluster_file`` with the interpreter of ``script``'s shebang, and
    carries the ``#SBATCH`` lines of its header (Slurm reads them only from the submitted script)."""
    lines = script.splitlines()
    interpreter = lines[0][2:].strip() if lines and lines[0].startswith("#!") else "/bin/bash"
    header = []
    for line in lines[1:]:
        if line.strip() and not line.startswith("#"):
            break  # Slurm stops reading directives at the first command
        if line.startswith("#SBATCH"):
            header.append(line)
    return "\n".join(
        [
            "#!/bin/bash",
            *header,
            f"# The batch script ({len(script.encode()):,} bytes) is too large for the request: staged at",
            f"# {location}",
            f'exec {interpreter} {shlex.quote(cluster_file)} "$@"',
            "",
        ]
    )
