"""What the Slurm job tab trusts: the api-server reads only what Airflow's administrators set.

A task's XComs name its job, its connection and its output location, and whoever writes the task's
XComs (its DAG's author, a user allowed to write XComs) chooses them. DAG authors run code on
workers, never on the api-server, so what the tab reads is decided here:

- the connection is taken by its ID only, and only one of our type or ``google_cloud_platform``:
  its credentials, endpoint and output location are its own (an impersonation chain the task names
  is not used); the task's cluster names (project, region, cluster, REST version) are kept, since a
  ``google_cloud_platform`` connection has none, and are checked as the hook checks them;
- the task's output location counts only inside the connection's own ``output_uri``;
- a job is the task's own only if its record carries the task run's submission key (its comment),
  or, where the cluster keeps no comments at all, its output lies in one of the task run's try
  folders; a sensor's job is watched, shown read-only; any other job is a stranger's, shown not at all;
- of an own job, only files in the task run's try folders are read; of a watched job, only files
  under the output location.

No I/O and no Airflow import here: the rules are plain functions of what was read.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any
from urllib.parse import urlsplit

from airflow_provider_slurmapi.client.jobs import JobStatus, RecordSource
from airflow_provider_slurmapi.client.output import OutputFile, OutputSettings, console_url
from airflow_provider_slurmapi.client.submission import carries_key, submission_key

TAB_CONNECTION_TYPES = ("slurm_job_api", "google_cloud_platform")
CLUSTER_NAMES = ("project_id", "region", "cluster_id", "api_version")  # kept from the task's XCom
SENSOR_OPERATORS = ("SlurmJobSensor",)  # a task instance's operator that watches a job it did not submit


class Refused(Exception):
    """Why the tab reads nothing of a task's job (a sentence for the tab, naming no connection)."""


@dataclass(frozen=True)
class TaskRun:
    """One task run, as the api-server's own tables name it (never as an XCom does)."""

    dag_id: str
    run_id: str
    task_id: str
    map_index: int

    @property
    def key(self) -> str:
        return submission_key(self.dag_id, self.task_id, self.run_id, self.map_index)


class Ownership(StrEnum):
    OWN = "own"  # the task run submitted it: shown whole, cancellable
    WATCHED = "watched"  # a sensor's job, submitted elsewhere: shown read-only
    STRANGER = "stranger"  # another's job (a renumbered cluster, a forged XCom): not shown


def hook_arguments(connection_xcom: dict[str, Any], conn_type: str | None) -> dict[str, Any]:
    """The hook's arguments for the task's connection: its ID and the cluster names, nothing else.
    ``conn_type``: the connection's type as Airflow has it (None: it does not exist)."""
    conn_id = connection_xcom.get("slurm_conn_id")
    if not isinstance(conn_id, str) or not conn_id or conn_type not in TAB_CONNECTION_TYPES:
        raise Refused(
            "The tab reads jobs only through a connection of type slurm_job_api or google_cloud_platform, "
            "and the task's connection is neither (or does not exist)."
        )
    names = {name: connection_xcom.get(name) for name in CLUSTER_NAMES}
    return {"slurm_conn_id": conn_id, **{k: v for k, v in names.items() if isinstance(v, str) and v}}


def uri_inside(uri: str, root: str) -> bool:
    """Whether ``uri`` is ``root`` or a folder below it: same scheme and bucket, no ``..``."""
    inner, outer = urlsplit(uri), urlsplit(root)
    if (inner.scheme, inner.netloc) != (outer.scheme, outer.netloc) or ".." in inner.path.split("/"):
        return False
    base = outer.path.rstrip("/")
    return inner.path.rstrip("/") == base or inner.path.startswith(base + "/")


def output_settings(connection: OutputSettings, task_output: dict[str, Any]) -> tuple[OutputSettings, str | None]:
    """The settings the tab reads with: the connection's, with the task's ``uri`` and
    ``cluster_path`` where its ``uri`` lies inside the connection's; and why the task's were not taken."""
    uri, cluster_path = task_output.get("uri"), task_output.get("cluster_path")
    if not uri and not cluster_path:
        return connection, None
    if uri and not (connection.uri and uri_inside(str(uri), connection.uri)):
        return replace(connection, uri=None), (
            "The task's output_uri is outside its connection's output_uri: the tab reads no output there."
        )
    try:
        return replace(
            connection, **({"uri": uri} if uri else {}), **({"cluster_path": cluster_path} if cluster_path else {})
        ), None
    except ValueError as error:  # a malformed location: nothing read
        return replace(connection, uri=None), f"The task's output location is not valid: {error}"


def ownership(
    live: list[dict[str, Any]],
    accounting: list[dict[str, Any]],
    run: TaskRun,
    settings: OutputSettings,
    *,
    watches: bool,
) -> Ownership:
    """Whose job this is, from its records (see the module's text)."""
    statuses = [JobStatus.from_record(r, RecordSource.LIVE) for r in live]
    statuses += [JobStatus.from_record(r, RecordSource.ACCOUNTING) for r in accounting]
    if any(carries_key(status, run.key) for status in statuses):
        return Ownership.OWN
    if not watches and statuses and not any(status.comment for status in statuses):
        # a cluster that keeps no comments (accounting without job_comment, the job gone from the queue)
        files = [str(r.get("stdout_expanded") or "") for r in accounting]
        if files and all(in_try_folder(path, run, settings) for path in files):
            return Ownership.OWN
    return Ownership.WATCHED if watches else Ownership.STRANGER


def in_try_folder(cluster_file: str, run: TaskRun, settings: OutputSettings) -> bool:
    """Whether a file the job's record names is in one of the task run's try folders."""
    if not (cluster_file and settings.cluster_path):
        return False
    return settings.try_folder_holding(cluster_file, run.dag_id, run.run_id, run.task_id, run.map_index) is not None


def readable_file(file: OutputFile, ownership: Ownership, run: TaskRun, settings: OutputSettings) -> bool:
    """Whether the tab may read ``file``: an own job's in the task run's try folders, a watched
    job's under the output location (the reader maps nothing else)."""
    if ownership is Ownership.OWN:
        return in_try_folder(file.cluster_path, run, settings)
    return ownership is Ownership.WATCHED and settings.location_of(file.cluster_path) is not None


def live_tag_folder(live: list[dict[str, Any]], run: TaskRun, settings: OutputSettings) -> str | None:
    """The try folder a running own job writes to (its live output pieces carry that folder's tag)."""
    for record in live:
        path = str(record.get("standard_output") or "")
        if in_try_folder(path, run, settings):
            return posixpath.dirname(posixpath.normpath(path))
    return None


def output_link(link: str | None, ownership: Ownership, settings: OutputSettings) -> str | None:
    """The task's "Slurm job output" link, shown only for its own job and only if it is the Cloud
    console page of an object under the output location (the task wrote it: it may point anywhere)."""
    root = console_url(settings.uri) if settings.uri else None
    if ownership is not Ownership.OWN or not link or not root:
        return None
    return link if link.startswith(root.rstrip("/") + "/") else None
