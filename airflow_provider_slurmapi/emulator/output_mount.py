"""The emulator's Cloud Storage FUSE: a finished job's output files under a cluster directory land in
a bucket of a Cloud Storage stand-in (``gcp-storage-emulator``), as gcsfuse makes a file an
object when the job closes it.

It watches the replies the backend gives (either backend): the first time a reply shows a job
finished, its ``standard_output`` / ``standard_error`` (or accounting's ``stdout_expanded`` /
``stderr_expanded``) under the mounted directory are uploaded, before the reply goes out, so a
reader that saw the job end finds its output.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import posixpath
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from airflow_provider_slurmapi.emulator.backend_api import SlurmAnswer, SlurmBackend, SlurmRequest

log = logging.getLogger(__name__)

# a job in any other base state is over (its output files are closed), unless still COMPLETING
_ACTIVE = {"PENDING", "RUNNING", "SUSPENDED"}


@dataclass(frozen=True)
class OutputMount:
    """``cluster_dir`` on the cluster's nodes is ``gs://bucket/prefix`` in the stand-in at ``storage_host``.

    :param cluster_root: where the cluster's ``/`` is on this machine (a real Slurm's chroot), "/" for
        the built-in backend, whose jobs run here.
    """

    cluster_dir: str
    uri: str
    storage_host: str
    cluster_root: str = "/"

    @classmethod
    def parse(cls, spec: str, storage_host: str, cluster_root: str = "/") -> OutputMount:
        """``/cluster/dir=gs://bucket/prefix``."""
        cluster_dir, sep, uri = spec.partition("=")
        parts = urlsplit(uri)
        if not sep or not posixpath.isabs(cluster_dir) or parts.scheme != "gs" or not parts.netloc:
            raise ValueError(f"output mount must be /cluster/dir=gs://bucket[/prefix], got {spec!r}")
        if not storage_host.startswith(("http://", "https://")):
            raise ValueError(f"the storage stand-in's URL must be http(s)://host:port, got {storage_host!r}")
        return cls(posixpath.normpath(cluster_dir), uri.rstrip("/"), storage_host, cluster_root)

    def object_of(self, cluster_path: str) -> tuple[str, str] | None:
        """(bucket, object name) of a file under the mounted directory, else None."""
        path = posixpath.normpath(cluster_path)
        if not path.startswith(self.cluster_dir.rstrip("/") + "/"):
            return None
        parts = urlsplit(self.uri)
        prefix = parts.path.strip("/")
        relative = posixpath.relpath(path, self.cluster_dir)
        return parts.netloc, f"{prefix}/{relative}" if prefix else relative

    def local_path(self, cluster_path: str) -> str:
        return os.path.join(self.cluster_root, cluster_path.lstrip("/"))


UPLOAD_SECONDS = 0.5  # how soon a closed live piece is in the bucket


class MountingBackend(SlurmBackend):
    """Any backend, with its finished jobs' output published through an :class:`OutputMount`."""

    def __init__(self, inner: SlurmBackend, mount: OutputMount) -> None:
        self.inner = inner
        self.mount = mount
        self._published: dict[str, tuple[int, float]] = {}  # local path -> (size, mtime) uploaded
        self._fetched: dict[str, int] = {}  # local path -> generation of the object downloaded there
        self._client: Any = None
        self._publishing = asyncio.Lock()  # one upload pass at a time: the timer's or a read's
        self._uploader: asyncio.Task[None] | None = None

    def __getattr__(self, name: str) -> Any:  # the builtin backend's own controls (jobs, scheduler...)
        return getattr(self.inner, name)

    def is_known_path(self, path: str) -> bool:
        return self.inner.is_known_path(path)

    def control(self, job_ref: str, action: str) -> dict[str, Any]:
        return self.inner.control(job_ref, action)

    async def start(self) -> None:
        await self.inner.start()
        self._uploader = asyncio.ensure_future(self._upload_closed_pieces())

    async def close(self) -> None:
        if self._uploader is not None:
            self._uploader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._uploader
        await self.inner.close()

    async def _upload_closed_pieces(self) -> None:
        """A running job's closed live pieces, uploaded within ``UPLOAD_SECONDS`` of their close
        (as FUSE uploads a file when it is closed), whether or not anyone reads the API."""
        while True:
            await asyncio.sleep(UPLOAD_SECONDS)
            pieces = await asyncio.to_thread(self._closed_live_pieces)
            if pieces:
                await self._publish(pieces)

    async def _publish(self, files: list[str]) -> None:
        async with self._publishing:
            await asyncio.to_thread(self.publish, files)

    async def handle(self, request: SlurmRequest) -> SlurmAnswer:
        if request.method == "POST" and request.path.endswith("/job/submit"):
            await asyncio.to_thread(self.fetch)  # what Airflow staged in the bucket, seen by the job
        status, reply = await self.inner.handle(request)
        if request.method == "GET" and isinstance(reply, dict):
            files = [path for job in reply.get("jobs") or [] if isinstance(job, dict) for path in _ended_outputs(job)]
            files += self._closed_live_pieces()  # a running job's closed pieces, as FUSE uploads them
            if files:
                await self._publish(files)
        return status, reply

    def fetch(self) -> None:
        """Download the mounted prefix's objects missing or changed under the directory (as FUSE
        shows them): an object rewritten in the bucket, or a fetched file changed on the mount
        (which FUSE would have uploaded, and Airflow's next staging would have written over)."""
        parts = urlsplit(self.mount.uri)
        prefix = parts.path.strip("/")
        try:
            blobs = list(self._bucket(parts.netloc).list_blobs(prefix=f"{prefix}/" if prefix else None))
        except Exception as error:  # the stand-in down: the job will not find the file
            log.warning("could not list %s: %s", self.mount.uri, error)
            return
        for blob in blobs:
            relative = blob.name[len(prefix) :].lstrip("/") if prefix else blob.name
            local = self.mount.local_path(posixpath.join(self.mount.cluster_dir, relative))
            if local in self._fetched:
                unchanged = self._fetched[local] == blob.generation and self._published.get(local) == _seen(local)
            else:
                unchanged = os.path.lexists(local)  # a job's own file, written on the mount
            if unchanged:
                continue
            _make_dirs(os.path.dirname(local))
            with contextlib.suppress(FileNotFoundError):
                os.unlink(local)  # replaced, not written through (what is there may be a link)
            blob.download_to_filename(local)
            self._fetched[local] = blob.generation
            self._published[local] = (os.stat(local).st_size, os.stat(local).st_mtime)
            log.info("fetched gs://%s/%s to %s", parts.netloc, blob.name, local)

    def _closed_live_pieces(self) -> list[str]:
        """The pieces a job published under the mount's ``live/`` folder: each written under a hidden
        name and renamed once closed (a file still open is not visible, as on FUSE)."""
        folder = posixpath.join(self.mount.cluster_dir, "live")
        try:
            names = os.listdir(self.mount.local_path(folder))
        except OSError:
            return []
        paths = [posixpath.join(folder, name) for name in sorted(names) if not name.startswith(".")]
        return [path for path in paths if self.mount.local_path(path) not in self._published]

    def publish(self, cluster_paths: list[str]) -> None:
        """Upload each file that is under the mount and new or changed since its last upload, and
        the other files beside it (a job's result next to its output, as FUSE uploads every file)."""
        beside = []
        for cluster_path in cluster_paths:
            folder = self.mount.local_path(posixpath.dirname(cluster_path))
            with contextlib.suppress(OSError):
                names = [name for name in sorted(os.listdir(folder)) if not name.startswith(".")]  # still being written
                beside += [posixpath.join(posixpath.dirname(cluster_path), name) for name in names]
        for cluster_path in dict.fromkeys(cluster_paths + beside):
            target = self.mount.object_of(cluster_path)
            local = self.mount.local_path(cluster_path)
            if target is None or not os.path.isfile(local):
                continue  # not under the mount, or never written (a job cancelled while pending)
            stat = os.stat(local)
            if self._published.get(local) == (stat.st_size, stat.st_mtime):
                continue
            bucket, name = target
            try:
                self._bucket(bucket).blob(name).upload_from_filename(local)
            except Exception as error:  # the stand-in down: the reader will say the object is missing
                log.warning("could not publish %s to gs://%s/%s: %s", local, bucket, name, error)
                continue
            self._published[local] = (stat.st_size, stat.st_mtime)
            log.info("published %s as gs://%s/%s", cluster_path, bucket, name)

    def _bucket(self, name: str) -> Any:
        from google.api_core.exceptions import Conflict
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import storage

        if self._client is None:
            self._client = storage.Client(
                project="emulator",
                credentials=AnonymousCredentials(),
                client_options={"api_endpoint": self.mount.storage_host},
            )
        bucket = self._client.bucket(name)
        if not bucket.exists():
            try:
                self._client.create_bucket(name)
            except Conflict:
                pass
        return bucket


def _seen(path: str) -> tuple[int, float] | None:
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None
    return info.st_size, info.st_mtime


def _make_dirs(path: str) -> None:
    """Create ``path``'s missing directories as a Cloud Storage FUSE mount shows them: writable by
    every job's user (its ``--dir-mode``), not only by the emulator's, so that jobs still write
    their output under a prefix that something was fetched into."""
    missing = []
    while path and not os.path.exists(path):
        missing.append(path)
        path = os.path.dirname(path)
    for directory in reversed(missing):
        os.makedirs(directory, exist_ok=True)
        os.chmod(directory, 0o1777)  # explicit: mkdir's mode is cut by the umask


def _ended_outputs(job: dict[str, Any]) -> list[str]:
    """The output files of a job record (/slurm or /slurmdb) that shows the job over, else []."""
    state = job.get("job_state") if "job_state" in job else job.get("state")  # /slurm, jobs/state
    if isinstance(state, dict):  # /slurmdb
        state = state.get("current")
    states = [state] if isinstance(state, str) else list(state or [])
    if not states or states[0] in _ACTIVE or "COMPLETING" in states[1:]:
        return []
    if "stdout_expanded" in job:  # accounting
        paths = [job.get("stdout_expanded"), job.get("stderr_expanded")]
    else:
        paths = [_expand(job.get("standard_output"), job), _expand(job.get("standard_error"), job)]
    return [str(path) for path in paths if path]


def _expand(pattern: Any, job: dict[str, Any]) -> str:
    """The few filename patterns a live record may still carry (``%j``, ``%A``, ``%a``, ``%x``)."""
    if not isinstance(pattern, str) or "%" not in pattern:
        return pattern or ""

    def number(value: Any) -> str:
        return str(value["number"]) if isinstance(value, dict) and value.get("set") and value.get("number") else ""

    array, task = number(job.get("array_job_id")), number(job.get("array_task_id"))
    values = {
        "j": str(job.get("job_id", "")),
        "A": array or str(job.get("job_id", "")),
        "a": task,
        "x": str(job.get("name", "")),
    }
    return re.sub(r"%([jAax])", lambda m: values[m.group(1)] or m.group(0), pattern)
