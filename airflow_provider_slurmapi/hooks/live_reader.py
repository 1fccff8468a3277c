"""The lines a running job has published (``client/live_output``), for the task log: from one
listing of the output location's ``live/`` folder, one read per new piece of this job.

``collect`` does the reads and returns the log lines without logging them, so that a trigger runs
it in a thread and logs from its event loop; ``show_new`` is the worker's list-read-log in one.
"""

from __future__ import annotations

import logging
import posixpath
from typing import TYPE_CHECKING

from airflow_provider_slurmapi.client.live_output import (
    LIVE_FOLDER,
    STREAM_NAMES,
    LiveFollower,
    LiveOutputSettings,
    Piece,
    listing_offset,
)
from airflow_provider_slurmapi.client.output import job_lines, visible

if TYPE_CHECKING:
    from airflow_provider_slurmapi.client.waiting import Log
    from airflow_provider_slurmapi.hooks.object_store import ObjectStore

Line = tuple[int, str]  # (logging level, text)


def live_folder(output_uri: str) -> str:
    return posixpath.join(str(output_uri), LIVE_FOLDER)


class LiveOutputReader:
    """Shows what a job published since the last read, each line once, under its job's prefix.

    :param within: the ``output_uri`` the pieces are under (a ``file://`` read follows no link below it).
    :param output_folder: where Airflow reads the try's own ``{job}.out`` and ``.err`` (named when
        lines are skipped); None: not known.
    """

    def __init__(
        self,
        store: ObjectStore,
        within: str,
        live: LiveOutputSettings,
        follower: LiveFollower,
        output_folder: str | None = None,
    ) -> None:
        self.store, self.within, self.live, self.follower = store, within, live, follower
        self.output_folder = output_folder
        self.folder = live_folder(within)
        self.failed = False
        self.last_shown = 0  # the job's lines the last collect gave

    def trigger_spec(self) -> dict[str, object]:
        """What a trigger needs to go on showing these lines (``SlurmJobTrigger``'s ``live_output``)."""
        settings = {"period": self.live.period, "max_lines": self.live.max_lines, "max_bytes": self.live.max_bytes}
        where = {"within": self.within, "output_folder": self.output_folder}
        return {**where, "job": self.follower.job, "tag": self.follower.tag, **settings}

    def offset(self) -> str:
        return listing_offset(self.follower.since)

    def show_new(self, log: Log) -> int:
        """List, read and log the new lines; how many were shown. A failed read is said once and tried again later."""
        try:
            names = self.store.names_from(self.folder, self.offset())
        except Exception as error:
            lines, self.last_shown = self._problem(error), 0
        else:
            lines = self.collect(names)
        for level, text in lines:
            log.log(level, "%s", text)
        return self.last_shown

    def collect(self, names: list[str]) -> list[Line]:
        """The log lines of the new pieces among ``names`` (a listing of the folder), read now:
        within the caps per stream (lines and bytes), then a note naming the whole file."""
        shown: dict[str, int] = {}
        read: dict[str, int] = {}
        skipped: dict[str, tuple[Piece, int]] = {}
        out: list[Line] = []
        for piece in self.follower.wanted(names):
            key = piece.key
            budget = self.live.max_bytes - read.get(key, 0)
            data = b""
            if budget > 0:
                try:  # one byte past the budget tells a piece that does not fit
                    data = self.store.read_head(f"{self.folder}/{piece.name}", budget + 1, within=self.within)
                except Exception as error:
                    out += self._problem(error)
                    break  # the next read starts again at this piece
            if budget <= 0 or len(data) > budget:
                self.follower.take(piece, b"", gap=True)  # past the cap for this read: counted, not shown
                skipped[key] = (piece, skipped.get(key, (piece, 0))[1] + 1)
                continue
            read[key] = read.get(key, 0) + len(data)
            prefix = self.prefix(piece.job, piece.run, piece.stream)
            for line in self.follower.take(piece, data):
                if shown.get(key, 0) >= self.live.max_lines:
                    skipped[key] = (piece, skipped.get(key, (piece, 0))[1] + 1)
                    continue
                shown[key] = shown.get(key, 0) + 1
                out.append((logging.INFO, job_lines(line + "\n", prefix)[0]))  # escaped, cut, under the prefix
        for piece, count in skipped.values():
            stream = STREAM_NAMES[piece.stream]
            whole = f"{self.output_folder}/{piece.job}.{piece.stream}" if self.output_folder else f"its {stream} file"
            out.append(
                (
                    logging.INFO,
                    f"{self.prefix(piece.job, piece.run, piece.stream)}[... {count:,} line(s) or piece(s) of this job's {stream} not shown here"
                    f" (the caps per read are {self.live.max_lines:,} lines and {self.live.max_bytes:,} bytes):"
                    f" the whole output is in {whole}]",
                )
            )
        self.last_shown = sum(shown.values())
        return out

    def unended_lines(self) -> list[Line]:
        """Each stream's last line that has no newline: shown once the job has ended."""
        lines = []
        for key, text in self.follower.rest().items():
            job, run, stream = key.rsplit("-", 2)
            lines.append((logging.INFO, job_lines(text + "\n", self.prefix(job, int(run), stream))[0]))
        return lines

    def show_last(self, log: Log) -> None:
        """After the job ended: the pieces published up to its end, and the lines left without a newline."""
        self.show_new(log)
        for level, text in self.unended_lines():
            log.log(level, "%s", text)

    def prefix(self, job: str, run: int, stream: str) -> str:
        again = f" run {run + 1}" if run else ""
        return visible(f"[job {job}{again} {STREAM_NAMES[stream]}] ")

    def _problem(self, error: Exception) -> list[Line]:
        if self.failed:
            return []
        self.failed = True
        job = self.follower.job
        return [(logging.WARNING, f"Cannot read the live output of Slurm job {job} (tried again each poll): {error}")]
