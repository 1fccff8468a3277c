"""Whole objects at the job output location, in Cloud Storage (through the Google provider's
GCSHook) or a shared filesystem (never through a link: ``shared_files``): staged scripts
written (and rewritten when someone changed them), function results read back."""

from __future__ import annotations

import base64
import contextlib
import enum
import hashlib
import os
import time
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

from airflow_provider_slurmapi.hooks.cloud_storage import CloudStorage, object_name, wait_for
from airflow_provider_slurmapi.hooks.shared_files import UnsafeOutputPath, open_within, write_within

if TYPE_CHECKING:
    from airflow.providers.google.cloud.hooks.gcs import GCSHook
    from google.cloud.storage import Blob


class Staged(enum.Enum):
    """What staging found at the object's name."""

    WRITTEN = "staged at"
    UNCHANGED = "already staged at"
    REPLACED = "staged again (the object there had been changed) at"


STAGED_AT = "airflow-staged-at"  # an object's metadata: when Airflow last staged it (epoch seconds)


def _staged_at(blob: Blob) -> float:
    """When Airflow last staged the object: its metadata, else its last update."""
    try:
        return float((blob.metadata or {})[STAGED_AT])
    except (KeyError, ValueError):
        return blob.updated.timestamp() if blob.updated is not None else time.time()


def _md5(data: bytes) -> str:
    """Cloud Storage's ``md5Hash`` of ``data`` (a checksum of the content, not a defence: the job checks the sha256)."""
    return base64.b64encode(hashlib.md5(data, usedforsecurity=False).digest()).decode()


class ObjectStore:
    """:param gcs_hook: a factory of the Google provider's ``GCSHook`` (built only for ``gs://``).
    :param principal: who writes and reads, named in a permission error."""

    def __init__(self, gcs_hook: Callable[[], GCSHook], principal: Callable[[], str]) -> None:
        self._storage = CloudStorage(gcs_hook, principal)

    def stage(self, location: str, data: bytes, *, within: str) -> Staged:
        """Make the object at ``location`` hold ``data``: written if missing, left if it holds them
        already (its time refreshed, for the retention), rewritten if someone changed it.

        ``within``: the output folder (``output_uri``); for ``file://``, nothing below it is
        reached through a link.
        """
        parts = urlsplit(location)
        if parts.scheme == "file":
            return self._stage_file(unquote(parts.path), data, unquote(urlsplit(within).path))
        from google.api_core.exceptions import Forbidden, PreconditionFailed

        try:
            blob = self._storage.bucket(location).get_blob(object_name(location))
            if blob is not None and blob.md5_hash == _md5(data):
                blob.metadata = {**(blob.metadata or {}), STAGED_AT: f"{time.time():.3f}"}
                blob.patch()  # the retention counts from the last staging
                return Staged.UNCHANGED
            generation = blob.generation if blob is not None else 0  # no one else's write is overwritten
            fresh = self._storage.blob(location)
            fresh.metadata = {STAGED_AT: f"{time.time():.3f}"}
            fresh.upload_from_string(data, if_generation_match=generation)
        except PreconditionFailed:
            return Staged.UNCHANGED  # another try wrote it at that moment; the wrapper checks its content
        except Forbidden as error:
            raise self._storage.may_not_write(location, error) from error
        return Staged.WRITTEN if blob is None else Staged.REPLACED

    @staticmethod
    def _stage_file(path: str, data: bytes, root: str) -> Staged:
        try:
            with open_within(root, path) as file:
                if file.read(len(data) + 1) == data:
                    os.utime(file.fileno())
                    return Staged.UNCHANGED
            found = True
        except FileNotFoundError:
            found = False
        except UnsafeOutputPath:
            found = True  # a link, a device or a hard link in its place: replaced
        write_within(root, path, data)
        return Staged.REPLACED if found else Staged.WRITTEN

    def names_from(self, folder: str, offset: str) -> list[str]:
        """The names (last segments) right under ``folder`` from ``offset`` on, in name order, in one
        listing (``start_offset``: what was listed before is not listed again). Hidden names (a
        piece still being written) are left out."""
        parts = urlsplit(folder)
        if parts.scheme == "file":
            try:
                with os.scandir(unquote(parts.path)) as entries:
                    names = [entry.name for entry in entries if entry.name >= offset and not entry.name.startswith(".")]
            except FileNotFoundError:
                return []
            return sorted(names)
        prefix = object_name(folder).rstrip("/") + "/"
        # names only (a partial response): a page of a thousand objects' whole metadata takes the
        # listing thread tens of milliseconds to decode, holding the GIL the event loop needs
        blobs = self._storage.bucket(folder).list_blobs(
            prefix=prefix, start_offset=prefix + offset, delimiter="/", fields="items(name),prefixes,nextPageToken"
        )
        return [blob.name[len(prefix) :] for blob in blobs if not blob.name[len(prefix) :].startswith(".")]

    def remove_older(self, folder: str, max_age: float, keep: Callable[[list[str]], Collection[str]]) -> list[str]:
        """Remove the objects right under ``folder`` last staged more than ``max_age`` seconds ago,
        but the names (last segments) ``keep`` gives of theirs: it is called once, only when there
        are such objects, before any is removed. The locations removed. Best effort: what cannot
        be listed or removed stays."""
        cutoff = time.time() - max_age
        if urlsplit(folder).scheme == "file":
            return self._remove_older_files(folder, cutoff, keep)
        from google.api_core.exceptions import NotFound

        prefix = object_name(folder).rstrip("/") + "/"
        listed = self._storage.bucket(folder).list_blobs(prefix=prefix, delimiter="/")
        old = {blob.name[len(prefix) :]: blob for blob in listed if _staged_at(blob) < cutoff}
        kept = set(keep(list(old))) if old else set()
        removed = []
        for name, blob in old.items():
            if name not in kept:
                with contextlib.suppress(NotFound):
                    blob.delete(if_generation_match=blob.generation)  # not one rewritten since the listing
                removed.append(f"{folder}/{name}")
        return removed

    @staticmethod
    def _remove_older_files(folder: str, cutoff: float, keep: Callable[[list[str]], Collection[str]]) -> list[str]:
        with os.scandir(unquote(urlsplit(folder).path)) as entries:
            old = {
                entry.name: entry.path
                for entry in entries
                if entry.is_file(follow_symlinks=False) and entry.stat(follow_symlinks=False).st_mtime < cutoff
            }
        kept = set(keep(list(old))) if old else set()
        removed = []
        for name, path in old.items():
            if name not in kept:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
                removed.append(f"{folder}/{name}")
        return removed

    def read(self, location: str, wait: float, max_bytes: int, *, within: str | None = None) -> bytes:
        """The whole object, waited for up to ``wait`` seconds (a FUSE mount publishes a file when
        the job closes it); FileNotFoundError if it is not there then, ObjectTooLargeError if it
        is larger than ``max_bytes`` (then at most ``max_bytes + 1`` bytes of it are read).

        ``within``: for a ``file://`` location, the output folder (``output_uri``) it must be
        reached in without a link (``UnsafeOutputPath`` otherwise); its own folder if None.
        """
        deadline = time.monotonic() + wait
        data = wait_for(lambda: self._read(location, max_bytes, within), location, wait=wait, deadline=deadline)
        if len(data) > max_bytes:  # it grew between the read of its size and its own
            raise ObjectTooLargeError(location, None, max_bytes)
        return data

    def read_head(self, location: str, max_bytes: int, *, within: str | None = None) -> bytes:
        """At most the first ``max_bytes`` of the object, in one request (a live output piece: its
        name came from a listing); FileNotFoundError if it is gone. ``within`` as for ``read``."""
        parts = urlsplit(location)
        if parts.scheme == "file":
            path = unquote(parts.path)
            root = unquote(urlsplit(within).path) if within else os.path.dirname(path)
            with open_within(root, path) as file:
                return file.read(max_bytes)
        from google.api_core.exceptions import Forbidden, NotFound

        try:
            return bytes(self._storage.blob(location).download_as_bytes(start=0, end=max_bytes - 1))
        except NotFound as error:
            raise FileNotFoundError(f"{location} was not found") from error
        except Forbidden as error:
            raise self._storage.may_not_read(location, error) from error

    def _read(self, location: str, max_bytes: int, within: str | None) -> bytes | None:
        parts = urlsplit(location)
        if parts.scheme == "file":
            path = unquote(parts.path)
            root = unquote(urlsplit(within).path) if within else os.path.dirname(path)
            try:
                with open_within(root, path) as file:
                    size = os.fstat(file.fileno()).st_size
                    if size > max_bytes:
                        raise ObjectTooLargeError(location, size, max_bytes)
                    return file.read(max_bytes + 1)
            except FileNotFoundError:
                return None
        from google.api_core.exceptions import Forbidden, NotFound

        try:
            blob = self._storage.bucket(location).get_blob(object_name(location))
            if blob is None:
                return None
            if blob.size is not None and blob.size > max_bytes:
                raise ObjectTooLargeError(location, blob.size, max_bytes)
            # end is inclusive: one byte past the cap tells an object that grew since
            return bytes(blob.download_as_bytes(start=0, end=max_bytes))
        except NotFound:
            return None
        except Forbidden as error:
            raise self._storage.may_not_read(location, error) from error


class ObjectTooLargeError(ValueError):
    """An object past the size Airflow reads of it."""

    def __init__(self, location: str, size: int | None, max_bytes: int) -> None:
        size_text = f"{size:,} bytes" if size is not None else f"more than {max_bytes:,} bytes"
        super().__init__(f"{location} is {size_text}, more than the {max_bytes:,} bytes Airflow reads of it")
        self.location, self.size, self.max_bytes = location, size, max_bytes
