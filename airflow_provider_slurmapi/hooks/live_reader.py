"""The lines a running job has published (``client/live_output``), into the task log: one listing
of the output location's ``live/`` folder per read, then one read per new piece of this job."""

from __future__ import annotations

import posixpath
from typing import TYPE_CHECKING

from airflow_provider_slurmapi.client.live_output import (
    LIVE_FOLDER,
    LiveFollower,
    LiveOutputSettings,
    listing_offset,
)
from airflow_provider_slurmapi.client.output import OutputSettings, job_lines, visible

if TYPE_CHECKING:
    from airflow_provider_slurmapi.client.waiting import Log
    from airflow_provider_slurmapi.hooks.object_store import ObjectStore

STREAM_NAMES = {"out": "stdout", "err": "stderr"}


class LiveOutputReader:
    """Shows what a job published since the last read, each line once, under its job's prefix."""

    def __init__(
        self, store: ObjectStore, output: OutputSettings, live: LiveOutputSettings, follower: LiveFollower, log: Log
    ) -> None:
        self.store, self.output, self.live, self.follower, self.log = store, output, live, follower, log
        self.folder = posixpath.join(str(output.uri), LIVE_FOLDER)
        self.failed = False

    def show_new(self) -> int:
        """Log the new lines; how many were shown. A read that fails is said once and tried again later."""
        try:
            names = self.store.names_from(self.folder, listing_offset(self.follower.since))
            pieces = self.follower.wanted(names)
        except Exception as error:
            self._problem(error)
            return 0
        shown: dict[str, int] = {}
        read: dict[str, int] = {}
        skipped: dict[str, int] = {}
        for piece in pieces:
            key = f"{piece.run}-{piece.stream}"
            location = f"{self.folder}/{piece.name}"
            if read.get(key, 0) >= self.live.max_bytes:
                self.follower.take(piece, b"")  # past the cap for this read: counted, not read
                skipped[key] = skipped.get(key, 0) + 1
                continue
            try:
                data = self.store.read(location, 0, self.live.max_bytes, within=self.output.uri)
            except Exception as error:
                self._problem(error)
                break  # the next read starts again at this piece
            read[key] = read.get(key, 0) + len(data)
            prefix = self._prefix(piece.run, piece.stream)
            for line in self.follower.take(piece, data):
                if shown.get(key, 0) >= self.live.max_lines:
                    skipped[key] = skipped.get(key, 0) + 1
                    continue
                shown[key] = shown.get(key, 0) + 1
                self.log.info("%s", job_lines(line + "\n", prefix)[0])  # escaped, cut, under the prefix
        for key, count in skipped.items():
            run, stream = key.split("-")
            self.log.info(
                "%s[... %s of this job's %s not shown here (the caps per read are %s lines and %s bytes):"
                " the whole output is in its %s file]",
                self._prefix(int(run), stream),
                f"{count:,} line(s) or piece(s)",
                STREAM_NAMES[stream],
                f"{self.live.max_lines:,}",
                f"{self.live.max_bytes:,}",
                STREAM_NAMES[stream],
            )
        return sum(shown.values())

    def _prefix(self, run: int, stream: str) -> str:
        again = f" run {run + 1}" if run else ""
        return visible(f"[job {self.follower.job}{again} {STREAM_NAMES[stream]}] ")

    def _problem(self, error: Exception) -> None:
        if not self.failed:
            self.failed = True
            self.log.warning(
                "Cannot read the live output of Slurm job %s (tried again each poll): %s", self.follower.job, error
            )
