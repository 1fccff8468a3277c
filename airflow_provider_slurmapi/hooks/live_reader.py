"""The lines a running job has published (``client/live_output``), for the task log: from one
listing of the output location's ``live/`` folder, one read per new piece of this job.

``collect`` does the reads and returns the log lines without logging them, so that a trigger runs
it in a thread and logs from its event loop; ``show_new`` is the worker's list-read-log in one.
"""

from __future__ import annotations

import functools
import logging
import posixpath
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, TypeVar

from airflow_provider_slurmapi.client.live_output import (
    LIVE_FOLDER,
    STREAM_NAMES,
    LiveFollower,
    LiveLine,
    LiveOutputSettings,
    Piece,
    listing_offset,
)
from airflow_provider_slurmapi.client.output import job_lines, visible

if TYPE_CHECKING:
    from airflow_provider_slurmapi.client.waiting import Log
    from airflow_provider_slurmapi.hooks.object_store import ObjectStore

Line = tuple[int, str]  # (logging level, text)
T = TypeVar("T")
READ_THREADS = 4  # pieces of different streams (an array's tasks) read at once
_READS: ThreadPoolExecutor | None = None


def _at_once(reads: list[Callable[[], T]]) -> list[T]:
    """The results of ``reads``, run at once in a few threads shared by all readers (one runs here)."""
    global _READS
    if len(reads) <= 1:
        return [read() for read in reads]
    if _READS is None:
        _READS = ThreadPoolExecutor(READ_THREADS, thread_name_prefix="slurm-live-pieces")
    return [future.result() for future in [_READS.submit(read) for read in reads]]


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
        self.took_all = False  # the last collect took every piece of the job it was given

    def trigger_spec(self) -> dict[str, object]:
        """What a trigger needs to go on showing these lines (``SlurmJobTrigger``'s ``live_output``)."""
        settings = {"period": self.live.period, "max_lines": self.live.max_lines, "max_bytes": self.live.max_bytes}
        where = {"within": self.within, "output_folder": self.output_folder}
        job = {"job": self.follower.job, "tag": self.follower.tag, "since": self.follower.since}
        return {**where, **job, **settings}

    def offset(self) -> str:
        return listing_offset(self.follower.since)

    def show_new(self, log: Log) -> int:
        """List, read and log the new lines; how many were shown. A failed read is said once and tried again later."""
        listed_from, started = self.follower.since, time.time()
        try:
            names = self.store.names_from(self.folder, listing_offset(listed_from))
        except Exception as error:
            lines, self.last_shown = self._problem(error), 0
        else:
            lines = self.collect(names)
            if self.took_all:
                self.follower.caught_up(listed_from, started)
        for level, text in lines:
            log.log(level, "%s", text)
        return self.last_shown

    def collect(self, names: list[str]) -> list[Line]:
        """The log lines of the new pieces among ``names`` (a listing of the folder), read now:
        within the caps per stream (lines and bytes), then a note naming the whole file. The
        streams (an array's tasks) are read at once, each in order; ``took_all`` then tells
        whether every piece of the job in ``names`` was taken."""
        self.took_all = False
        pieces, complete = self.follower.choose(names)
        streams: dict[str, list[Piece]] = {}
        for piece in pieces:
            streams.setdefault(piece.key, []).append(piece)
        chains = list(streams.values())
        reads = _at_once([functools.partial(self._read_stream, chain) for chain in chains])
        lines: list[Line] = []
        notes: list[Line] = []
        for chain, read in zip(chains, reads, strict=True):
            failed = read[-1]
            if isinstance(failed, Exception):
                read.pop()  # the next read starts again at its piece
                notes += self._problem(failed)
                complete = False
            shown, note = self._take_stream(chain, read)  # type: ignore[arg-type]
            lines += shown
            notes += note
        self.last_shown = len(lines)
        self.took_all = complete
        return lines + notes

    def _read_stream(self, chain: list[Piece]) -> list[bytes | None | Exception]:
        """Each piece's bytes, in order, None past the byte cap; a read that fails ends the list."""
        read: list[bytes | None | Exception] = []
        budget = self.live.max_bytes
        for piece in chain:
            data = b""
            if budget > 0:
                try:  # one byte past the budget tells a piece that does not fit
                    data = self.store.read_head(f"{self.folder}/{piece.name}", budget + 1, within=self.within)
                except Exception as error:
                    return [*read, error]
            if budget <= 0 or len(data) > budget:
                read.append(None)  # past the cap for this read: counted, not shown
                budget = 0
            else:
                read.append(data)
                budget -= len(data)
        return read

    def _take_stream(self, chain: list[Piece], read: list[bytes | None]) -> tuple[list[Line], list[Line]]:
        """The log lines of one stream's pieces read, within the line cap; and a note for what is not shown."""
        lines: list[Line] = []
        skipped = 0
        first = chain[0]
        prefix = self.prefix(first.job, first.run, first.stream)
        for piece, data in zip(chain, read, strict=False):
            if data is None:
                self.follower.take(piece, b"", gap=True)
                skipped += 1
                continue
            for line in self.follower.take(piece, data):
                if len(lines) >= self.live.max_lines:
                    skipped += 1
                    continue
                lines.append((logging.INFO, self.shown_line(line, prefix)))
                self.follower.logged(piece.key, line)
        return lines, [self._skipped_note(first, skipped)] if skipped else []

    def _skipped_note(self, piece: Piece, count: int) -> Line:
        stream = STREAM_NAMES[piece.stream]
        whole = f"{self.output_folder}/{piece.job}.{piece.stream}" if self.output_folder else f"its {stream} file"
        return (
            logging.INFO,
            f"{self.prefix(piece.job, piece.run, piece.stream)}[... {count:,} line(s) or piece(s) of this job's {stream} not shown here"
            f" (the caps per read are {self.live.max_lines:,} lines and {self.live.max_bytes:,} bytes):"
            f" the whole output is in {whole}]",
        )

    @staticmethod
    def shown_line(line: LiveLine, prefix: str) -> str:
        """``line`` for the task log: escaped, under ``prefix``, with a note of what was cut."""
        cut = f" [... {line.cut:,} more characters not shown]" if line.cut else ""
        return job_lines(line.text + "\n", prefix)[0] + cut

    def unended_lines(self) -> list[Line]:
        """Each stream's last line that has no newline: shown once the job has ended."""
        lines = []
        for key, line in self.follower.rest().items():
            job, run, stream = key.rsplit("-", 2)
            lines.append((logging.INFO, self.shown_line(line, self.prefix(job, int(run), stream))))
            self.follower.logged(key, line)
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
