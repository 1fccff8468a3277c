"""Reads the end of a job's output files from Cloud Storage (through the Google provider's GCSHook)
or a shared filesystem (never through a link: ``shared_files``): one metadata read and one ranged
read per file, whatever its size."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

from airflow_provider_slurmapi.client.output import OutputFile, OutputSettings, OutputTail, last_lines, split_lines
from airflow_provider_slurmapi.hooks.cloud_storage import CloudStorage, object_name, wait_for
from airflow_provider_slurmapi.hooks.shared_files import UnsafeOutputPath, open_within

if TYPE_CHECKING:
    from airflow.providers.google.cloud.hooks.gcs import GCSHook


class OutputReader:
    """Reads the last lines of output files; a problem becomes the tail's ``problem``, never an error.

    :param gcs_hook: a factory of the Google provider's ``GCSHook`` (built only for ``gs://``).
    :param principal: who reads, named in a permission error.
    """

    def __init__(self, settings: OutputSettings, gcs_hook: Callable[[], GCSHook], principal: Callable[[], str]) -> None:
        self.settings = settings
        self._storage = CloudStorage(gcs_hook, principal)

    def tails(self, files: list[OutputFile]) -> list[OutputTail]:
        """The files' last lines: stdout and stderr each within the settings' caps, which an
        array's tasks share (the failed tasks come first).

        A file not there yet is waited for up to ``settings.wait`` seconds in all (output on a
        Cloud Storage FUSE mount appears when the job closes it).
        """
        deadline = time.monotonic() + self.settings.wait
        left = {stream: [self.settings.tail_lines, self.settings.tail_bytes] for stream in {f.stream for f in files}}
        tails = []
        for file in files:
            location = self.settings.location_of(file.cluster_path)
            lines, size = left[file.stream]
            if location is None:
                tails.append(self._unreadable(file))
            elif lines <= 0 or size <= 0:
                tails.append(OutputTail(file.job_id, file.stream, location, problem="not shown: the caps are used up"))
            else:
                tail = self._tail(file, location, lines, size, deadline)
                left[file.stream] = [lines - len(split_lines(tail.text)), size - len(tail.text.encode())]
                tails.append(tail)
        return tails

    def _unreadable(self, file: OutputFile) -> OutputTail:
        if self.settings.readable:
            why = f"it is not under output_cluster_path {self.settings.cluster_path}, so Airflow cannot read it"
        else:
            why = "Airflow cannot read it: set output_uri and output_cluster_path to see it here"
        return OutputTail(
            file.job_id, file.stream, file.cluster_path, problem=f"written to {file.cluster_path} on the cluster; {why}"
        )

    def _tail(self, file: OutputFile, location: str, lines: int, max_bytes: int, deadline: float) -> OutputTail:
        try:
            data, size = wait_for(
                lambda: self._read_end(location, max_bytes), location, wait=self.settings.wait, deadline=deadline
            )
        except (FileNotFoundError, PermissionError, UnsafeOutputPath) as error:
            return OutputTail(file.job_id, file.stream, location, problem=str(error))
        except Exception as error:  # a read that fails must never change the task's outcome
            problem = f"could not read {location}: {type(error).__name__}: {error}"
            return OutputTail(file.job_id, file.stream, location, problem=problem)
        text, note = last_lines(data, lines=lines, started_mid_file=size > len(data))
        return OutputTail(file.job_id, file.stream, location, text=text, size=size, problem=note)

    def _read_end(self, location: str, max_bytes: int) -> tuple[bytes, int] | None:
        """The last ``max_bytes`` of the file and its whole size; None if it is not there (yet)."""
        parts = urlsplit(location)
        if parts.scheme == "file":
            return _read_file_end(unquote(urlsplit(str(self.settings.uri)).path), unquote(parts.path), max_bytes)
        return self._read_object_end(location, max_bytes)

    def _read_object_end(self, location: str, max_bytes: int) -> tuple[bytes, int] | None:
        from google.api_core.exceptions import Forbidden, NotFound

        try:
            blob = self._storage.bucket(location).get_blob(object_name(location))  # one metadata read: the size
            if blob is None:
                return None
            size = int(blob.size or 0)
            if size == 0:
                return b"", 0
            start = max(0, size - max_bytes)
            return blob.download_as_bytes(start=start, end=size - 1, checksum=None), size  # one ranged read
        except Forbidden as error:
            raise self._storage.may_not_read(location, error) from error
        except NotFound:
            return None


def _read_file_end(root: str, path: str, max_bytes: int) -> tuple[bytes, int] | None:
    try:
        with open_within(root, path) as file:
            size = os.fstat(file.fileno()).st_size
            file.seek(max(0, size - max_bytes))
            return file.read(max_bytes), size
    except FileNotFoundError:
        return None
    except PermissionError as error:
        raise PermissionError(f"this worker's user may not read {path}: {error.strerror}") from error
