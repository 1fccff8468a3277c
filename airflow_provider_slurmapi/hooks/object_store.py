"""Whole objects at the job output location, in Cloud Storage (through the Google provider's
GCSHook) or a shared filesystem (read never through a link: ``shared_files``): staged scripts
written once, function results read back."""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

from airflow_provider_slurmapi.hooks.shared_files import open_within

if TYPE_CHECKING:
    from airflow.providers.google.cloud.hooks.gcs import GCSHook
    from google.cloud.storage import Blob, Bucket, Client


class ObjectStore:
    """:param gcs_hook: a factory of the Google provider's ``GCSHook`` (built only for ``gs://``).
    :param principal: who writes and reads, named in a permission error."""

    def __init__(self, gcs_hook: Callable[[], GCSHook], principal: Callable[[], str]) -> None:
        self._gcs_hook = gcs_hook
        self._principal = principal
        self._client: Client | None = None

    def write_once(self, location: str, data: bytes) -> bool:
        """Write the object unless it is there already (its name is its content's hash); True if written."""
        parts = urlsplit(location)
        if parts.scheme == "file":
            path = unquote(parts.path)
            if os.path.exists(path):
                return False
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=os.path.dirname(path), delete=False) as file:
                file.write(data)
            os.replace(file.name, path)
            return True
        from google.api_core.exceptions import Forbidden, PreconditionFailed

        blob = self._blob(location)
        if blob.exists():
            return False
        try:
            blob.upload_from_string(data, if_generation_match=0)  # another try writing it at once is fine
        except PreconditionFailed:
            return False
        except Forbidden as error:
            raise PermissionError(
                f"{self._principal()} may not write {location}: it needs storage.objects.create on bucket "
                f"{parts.netloc} (e.g. roles/storage.objectCreator); {error.message}"
            ) from error
        return True

    def read(self, location: str, wait: float, max_bytes: int, *, within: str | None = None) -> bytes:
        """The whole object, waited for up to ``wait`` seconds (a FUSE mount publishes a file when
        the job closes it); FileNotFoundError if it is not there then, ObjectTooLargeError if it
        is larger than ``max_bytes`` (then at most ``max_bytes + 1`` bytes of it are read).

        ``within``: for a ``file://`` location, the output folder (``output_uri``) it must be
        reached in without a link (``UnsafeOutputPath`` otherwise); its own folder if None.
        """
        deadline = time.monotonic() + wait
        while True:
            data = self._read(location, max_bytes, within)
            if data is not None:
                if len(data) > max_bytes:  # it grew between the read of its size and its own
                    raise ObjectTooLargeError(location, None, max_bytes)
                return data
            if time.monotonic() >= deadline:
                raise FileNotFoundError(f"{location} was not found" + (f" after waiting {wait:g} s" if wait else ""))
            time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))

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
            blob = self._bucket(location).get_blob(self._name(location))
            if blob is None:
                return None
            if blob.size is not None and blob.size > max_bytes:
                raise ObjectTooLargeError(location, blob.size, max_bytes)
            # end is inclusive: one byte past the cap tells an object that grew since
            return bytes(blob.download_as_bytes(start=0, end=max_bytes))
        except NotFound:
            return None
        except Forbidden as error:
            raise PermissionError(
                f"{self._principal()} may not read {location}: it needs storage.objects.get on bucket "
                f"{parts.netloc} (e.g. roles/storage.objectViewer); {error.message}"
            ) from error

    def _blob(self, location: str) -> Blob:
        return self._bucket(location).blob(self._name(location))

    def _bucket(self, location: str) -> Bucket:
        if self._client is None:
            self._client = self._gcs_hook().get_conn()
        return self._client.bucket(urlsplit(location).netloc)

    @staticmethod
    def _name(location: str) -> str:
        return unquote(urlsplit(location).path.lstrip("/"))


class ObjectTooLargeError(ValueError):
    """An object past the size Airflow reads of it."""

    def __init__(self, location: str, size: int | None, max_bytes: int) -> None:
        size_text = f"{size:,} bytes" if size is not None else f"more than {max_bytes:,} bytes"
        super().__init__(f"{location} is {size_text}, more than the {max_bytes:,} bytes Airflow reads of it")
        self.location, self.size, self.max_bytes = location, size, max_bytes
