"""Scripts past the API's request limit: staged under the job output location (which the
cluster's nodes see at ``output_cluster_path``), one object per DAG and content hash, and
submitted as a short wrapper that runs them from there. Only the plan is made here: the hook
writes the object.

Others can write where the script is staged (other jobs through a shared mount, other principals
on the bucket), so the wrapper runs only what Airflow staged: it copies the object to a file
private to the job, opens the copy, checks the open copy's hash, and runs that same open file. A
changed (or missing) object runs nothing: the job ends with ``STAGED_SCRIPT_CHANGED``.

A job that runs a staged script carries its mark (``STAGED_MARK`` and the start of its sha256) in
its comment, which the live queue shows: the retention keeps the scripts of the jobs Slurm may
still start or start again."""

from __future__ import annotations

import hashlib
import posixpath
import re
import shlex
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from airflow_provider_slurmapi.client.envelope import SlurmCall
from airflow_provider_slurmapi.client.job_description import submission_body
from airflow_provider_slurmapi.client.jobs import JobStatus
from airflow_provider_slurmapi.client.output import OutputSettings, safe_segment
from airflow_provider_slurmapi.client.paths import SlurmPaths
from airflow_provider_slurmapi.client.submission import with_key

STAGED_FOLDER = "staged"  # under output_cluster_path / output_uri, then one folder per DAG
STAGED_SCRIPT_CHANGED = 97  # the wrapper's exit code when the staged object is not what Airflow staged
_CHANGED_NOTE = "was changed after Airflow staged it"
_CHANGED_LINE = re.compile(rf"staged script (\S+) {_CHANGED_NOTE}")
STAGED_MARK = "airflow-staged="  # a job's comment: the staged script it runs, by its sha256's start
_MARK_DIGITS = 16  # short, for the comment's length; two scripts sharing it only keep each other


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
    def plan(cls, script: str, settings: OutputSettings, dag_id: str | None = None) -> StagedScript:
        if not settings.readable:
            raise ValueError("output_uri and output_cluster_path must both be set to stage a script")
        data = script.encode()
        digest = hashlib.sha256(data).hexdigest()
        folder = posixpath.join(str(settings.cluster_path), STAGED_FOLDER, safe_segment(dag_id or "_no_dag"))
        cluster_file = posixpath.join(folder, f"{digest}.script")  # one object per content: staged once
        location = settings.location_of(cluster_file)
        assert location is not None  # readable, and the file is under cluster_path
        return cls(data, location, cluster_file, wrapper_script(script, cluster_file, location))

    @property
    def folder(self) -> str:
        """The DAG's folder of staged scripts, as a location under output_uri."""
        return posixpath.dirname(self.location)


def staged_mark(script: str) -> str:
    """The mark in the comment of a job that runs ``script`` staged, e.g. ``airflow-staged=9c1f...``."""
    return STAGED_MARK + hashlib.sha256(script.encode()).hexdigest()[:_MARK_DIGITS]


def with_staged_mark(job: dict[str, Any], script: str) -> dict[str, Any]:
    """The job description with the mark of ``script`` (staged) added to its comment."""
    return with_key(job, staged_mark(script))


def scripts_in_use(names: Iterable[str], comments: Iterable[str]) -> set[str]:
    """Of ``names`` (staged objects, ``<sha256>.script``), those that a job with one of ``comments`` runs."""
    marked = {
        token[len(STAGED_MARK) :]
        for comment in comments
        for token in comment.split()
        if token.startswith(STAGED_MARK) and len(token) == len(STAGED_MARK) + _MARK_DIGITS
    }
    return {name for name in names if name[:_MARK_DIGITS] in marked}


def wrapper_script(script: str, cluster_file: str, location: str) -> str:
    """A bash script that runs a checked private copy of ``cluster_file`` with the interpreter of
    ``script``'s shebang, and carries the ``#SBATCH`` lines of its header (Slurm reads them only
    from the submitted script).

    The copy is opened as file descriptor 9 and unlinked before its hash is read: what is checked
    is what the interpreter reads (``/dev/fd/9``), and no one but the job's user could open it. The
    interpreter sees ``/dev/fd/9`` as the script's path."""
    data = script.encode()
    interpreter, header = interpreter_and_directives(script)
    digest = hashlib.sha256(data).hexdigest()
    refusal = shlex.quote(
        f"slurm-job-api: the staged script {location} {_CHANGED_NOTE} (or is missing): "
        "its content is not the one Airflow staged, so the job runs none of it"
    )
    return "\n".join(
        [
            "#!/bin/bash",
            *header,
            f"# The batch script ({len(data):,} bytes) is too large for the request: staged at",
            f"# {location}",
            "# and run from a private copy whose sha256 is checked first.",
            f"staged={shlex.quote(cluster_file)}",
            'copy=$(umask 077 && mktemp "${TMPDIR:-/tmp}/slurm-staged.XXXXXX") || exit 1',
            # a FIFO or device planted in its place is not read; one byte past the size tells a longer file
            f'[ -f "$staged" ] && head -c {len(data) + 1} -- "$staged" >"$copy" 2>/dev/null',
            'exec 9<"$copy" && rm -f -- "$copy"',
            f'if [ "$(sha256sum <&9)" != "{digest}  -" ]; then',
            f"  echo {refusal} >&2",
            f"  exit {STAGED_SCRIPT_CHANGED}",
            "fi",
            f'exec {interpreter} /dev/fd/9 "$@"',
            "",
        ]
    )


def interpreter_and_directives(script: str) -> tuple[str, list[str]]:
    """The interpreter of ``script``'s shebang (bash without one) and the ``#SBATCH`` lines of its
    header, which a script submitted in its place must carry (Slurm reads them only from the
    submitted script)."""
    lines = script.splitlines()
    interpreter = lines[0][2:].strip() if lines and lines[0].startswith("#!") else "/bin/bash"
    header = []
    for line in lines[1:]:
        if line.strip() and not line.startswith("#"):
            break  # Slurm stops reading directives at the first command
        if line.startswith("#SBATCH"):
            header.append(line)
    return interpreter, header


def wrapper_refusal(status: JobStatus, error_output: str, line: re.Pattern[str], code: int) -> re.Match[str] | None:
    """The refusal line of a provider's wrapper that ran none of the script: ``line`` in
    ``error_output`` (the end of the job's stderr) of a job that ended with the wrapper's exit ``code``."""
    exit_code = status.exit_code
    if exit_code is None or exit_code.return_code != code:
        return None
    return line.search(error_output)


def changed_script_headline(status: JobStatus, error_output: str) -> str:
    """The start of a failed task's message when the job's wrapper refused a changed staged
    script; else ""."""
    found = wrapper_refusal(status, error_output, _CHANGED_LINE, STAGED_SCRIPT_CHANGED)
    if found is None:
        return ""
    return (
        f"The staged script {found.group(1)} was changed after Airflow staged it, so the job ran none of it "
        f"(exit code {STAGED_SCRIPT_CHANGED}); a retry of the task stages it again. "
    )
