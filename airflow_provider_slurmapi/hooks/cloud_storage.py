"""What the readers and the writer of the job output location share: the Cloud Storage client
(the Google provider's GCSHook's, built for the first ``gs://`` location), the words of a refused
read or write, and the wait for a file the job has not published yet."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar
from urllib.parse import unquote, urlsplit

if TYPE_CHECKING:
    from airflow.providers.google.cloud.hooks.gcs import GCSHook
    from google.api_core.exceptions import GoogleAPICallError
    from google.cloud.storage import Blob, Bucket, Client

T = TypeVar("T")


class CloudStorage:
    """The buckets and objects of ``gs://`` locations, through one client.

    :param gcs_hook: a factory of the Google provider's ``GCSHook`` (built only for ``gs://``).
    :param principal: who reads and writes, named in a permission error.
    """

    def __init__(self, gcs_hook: Callable[[], GCSHook], principal: Callable[[], str]) -> None:
        self._gcs_hook = gcs_hook
        self._principal = principal
        self._client: Client | None = None

    def bucket(self, location: str) -> Bucket:
        if self._client is None:
            self._client = self._gcs_hook().get_conn()
        return self._client.bucket(urlsplit(location).netloc)

    def blob(self, location: str) -> Blob:
        return self.bucket(location).blob(object_name(location))

    def may_not_read(self, location: str, error: GoogleAPICallError) -> PermissionError:
        """Who may not read ``location``, and the permission that is missing (Cloud Storage refused: ``error``)."""
        return PermissionError(
            f"{self._principal()} may not read {location}: it needs storage.objects.get on bucket "
            f"{urlsplit(location).netloc} (e.g. roles/storage.objectViewer); {error.message}"
        )

    def may_not_write(self, location: str, error: GoogleAPICallError) -> PermissionError:
        """As ``may_not_read``, for a refused write of ``location``."""
        return PermissionError(
            f"{self._principal()} may not write {location}: it needs storage.objects.create (and "
            f"storage.objects.delete, to replace a changed object) on bucket {urlsplit(location).netloc} "
            f"(e.g. roles/storage.objectUser on the prefix); {error.message}"
        )


def object_name(location: str) -> str:
    """The name of ``gs://bucket/name`` in its bucket."""
    return unquote(urlsplit(location).path.lstrip("/"))


def wait_for(read: Callable[[], T | None], location: str, *, wait: float, deadline: float) -> T:
    """What ``read`` gives, read again about every second while it gives None (a Cloud Storage FUSE
    mount publishes a file when the job closes it) until ``deadline`` (``time.monotonic()``);
    then FileNotFoundError, naming ``location`` and the ``wait`` in seconds."""
    while (found := read()) is None:
        if time.monotonic() >= deadline:
            raise FileNotFoundError(f"{location} was not found" + (f" after waiting {wait:g} s" if wait else ""))
        time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))
    return found
