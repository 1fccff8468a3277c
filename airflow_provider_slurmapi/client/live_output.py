"""A job's output while it runs: the job publishes what it printed in closed pieces, which
Airflow reads as they appear.

slurmrestd serves no file contents, and Cloud Storage FUSE uploads a file only when it is closed:
the job's own stdout and stderr, open until it ends, are invisible until then. So the submitted
script runs the batch script as its child and, beside it, a publisher that copies the new bytes of
those two files into pieces, each written under a hidden name and renamed when closed (the rename
is what the mount uploads), every ``period`` seconds and once more when the child ends. The job's
own files are not touched: they stay byte for byte what the batch script printed.

A piece's name sorts by the time it was published, so that one listing of the ``live/`` folder
with a start offset finds the new pieces of every job of the bucket:
``live/{epoch seconds:010d}-{job ref}-{tag}-{run}-{stream}-{seq:06d}[+{start}]``, where the job
ref is the job ID (``{array job}_{task}`` for an array task), the tag tells the try's output folder
from another cluster's job of the same ID, the run counts requeues, and ``seq`` orders the pieces of
one stream. A run's first piece carries ``+{start}`` when its bytes begin at that offset of the
job's file rather than at 0 (``open_mode: APPEND``: the file holds the earlier runs' output).

Only the plan is made here (no I/O): the names, their parsing and the script.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass

from airflow_provider_slurmapi.client.numbers import checked_number

LIVE_FOLDER = "live"  # under output_cluster_path / output_uri
DEFAULT_PERIOD = 10
PERIOD_RANGE = (2, 3600)
DEFAULT_MAX_LINES = 1000
MAX_LINES_RANGE = (1, 100_000)
DEFAULT_MAX_BYTES = 256 * 1024
MAX_BYTES_RANGE = (1024, 16 * 1024 * 1024)
LIVE_OUTPUT_FIELDS = ("live_output", "live_output_period", "live_output_max_lines", "live_output_max_bytes")
STREAMS = ("out", "err")
STREAM_NAMES = {"out": "stdout", "err": "stderr"}
_PIECE = re.compile(
    r"(?P<time>\d{10})-(?P<job>\d+(?:_\d+)?)-(?P<tag>[0-9a-f]{8})-(?P<run>\d+)-(?P<stream>out|err)-(?P<seq>\d{6})(?:\+(?P<start>\d{1,15}))?"
)


@dataclass(frozen=True)
class LiveOutputSettings:
    """Whether and how a job's output reaches the task log while it runs.

    :param enabled: publish and show it (needs ``output_uri`` and ``output_cluster_path``).
    :param period: whole seconds between two pieces of a stream (2-3600).
    :param max_lines: lines of a stream shown per read; past it, a note.
    :param max_bytes: bytes of a stream read per read; past it, a note.
    :param explicit: ``enabled`` was asked for (by the task or the connection), not the default:
        a job that cannot publish is then refused or warned of, not quietly left without.
    """

    enabled: bool = True
    period: int = DEFAULT_PERIOD
    max_lines: int = DEFAULT_MAX_LINES
    max_bytes: int = DEFAULT_MAX_BYTES
    explicit: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "enabled", switch("live_output", self.enabled))
        for name, field, (low, high) in (
            ("period", "live_output_period", PERIOD_RANGE),
            ("max_lines", "live_output_max_lines", MAX_LINES_RANGE),
            ("max_bytes", "live_output_max_bytes", MAX_BYTES_RANGE),
        ):
            number = checked_number(field, getattr(self, name), low=low, high=high, whole=True, from_text=True)
            object.__setattr__(self, name, int(number))

    @classmethod
    def resolve(cls, connection: Mapping[str, object], task: Mapping[str, object]) -> LiveOutputSettings:
        """The task's arguments over the connection's extras over the defaults (None: not set).

        Keys are the argument names: ``live_output``, ``live_output_period``, ``live_output_max_lines``,
        ``live_output_max_bytes``; a connection's text (``"false"``, ``"30"``) is read too."""
        if task.get("live_output") is not None and not isinstance(task["live_output"], bool):
            switch("live_output", task["live_output"], from_text=False)  # an argument is True or False
        given = {
            **{k: v for k, v in connection.items() if v not in (None, "")},
            **{k: v for k, v in task.items() if v is not None},
        }
        return cls(
            enabled=given.get("live_output", True),  # type: ignore[arg-type]
            period=given.get("live_output_period", DEFAULT_PERIOD),  # type: ignore[arg-type]
            max_lines=given.get("live_output_max_lines", DEFAULT_MAX_LINES),  # type: ignore[arg-type]
            max_bytes=given.get("live_output_max_bytes", DEFAULT_MAX_BYTES),  # type: ignore[arg-type]
            explicit="live_output" in given,
        )


_SWITCH_TEXT = {"true": True, "on": True, "false": False, "off": False}


def switch(field: str, value: object, *, from_text: bool = True) -> bool:
    """``value`` as on or off: a bool, or (a connection's field, ``from_text``) ``true``/``false``/``on``/``off``."""
    if isinstance(value, bool):
        return value
    if from_text and isinstance(value, str) and value.strip().lower() in _SWITCH_TEXT:
        return _SWITCH_TEXT[value.strip().lower()]
    from airflow_provider_slurmapi.client.errors import InvalidRequestError

    raise InvalidRequestError(field, f"must be True or False (true, false, on or off in a connection), got {value!r}")


def folder_tag(try_folder: str) -> str:
    """Eight hex digits of the try's output folder: tells its pieces from those of a job of the same
    ID that another cluster runs into the same bucket."""
    return hashlib.sha256(try_folder.encode()).hexdigest()[:8]


@dataclass(frozen=True, order=True)
class Piece:
    """One published piece, from its name."""

    time: int
    job: str
    tag: str
    run: int
    stream: str
    seq: int
    start: int = 0  # the offset in the job's file of a run's first byte (its first piece only)

    @classmethod
    def parse(cls, name: str) -> Piece | None:
        """The piece a name (its last path segment) stands for; None for anything else."""
        found = _PIECE.fullmatch(name.rsplit("/", 1)[-1])
        if found is None:
            return None
        start = int(found["start"] or 0)
        return cls(
            int(found["time"]), found["job"], found["tag"], int(found["run"]), found["stream"], int(found["seq"]), start
        )

    @property
    def name(self) -> str:
        start = f"+{self.start}" if self.start else ""
        return f"{self.time:010d}-{self.job}-{self.tag}-{self.run}-{self.stream}-{self.seq:06d}{start}"

    @property
    def key(self) -> str:
        """The stream this piece continues: one per job ref (an array's task), run and stream."""
        return f"{self.job}-{self.run}-{self.stream}"


def listing_offset(since: float) -> str:
    """The listing's ``start_offset`` (relative to the ``live/`` folder) for pieces published from ``since`` on."""
    return f"{max(0, int(since)):010d}"


@dataclass
class LiveFollower:
    """A task's view of its job's pieces: which ones it has shown, and the lines they make.

    Each stream of each run (a requeue starts a new one) of the job, or of each task of an array,
    is shown once and in order: a piece is taken only after the one before it, whatever order the
    listing finds them in. The state is plain JSON (``to_dict``), so that a trigger started again
    (another triggerer, a restart) goes on where it was.
    """

    job: str
    tag: str
    since: int = 0  # the listing's offset: no piece still wanted was published before it
    next_seq: dict[str, int] | None = None  # "{job ref}-{run}-{stream}" -> the next piece's seq
    partial: dict[str, str] | None = None  # "{job ref}-{run}-{stream}" -> the last line, not ended yet
    taken: dict[str, int] | None = None  # "{job ref}-{run}-{stream}" -> bytes taken

    SKEW = 120  # seconds the nodes' clocks and the mount's uploads may lag the names' order

    def owns(self, piece: Piece) -> bool:
        return piece.tag == self.tag and (piece.job == self.job or piece.job.startswith(f"{self.job}_"))

    def wanted(self, names: list[str]) -> list[Piece]:
        """The pieces among ``names`` (a listing) to read now, in the order they are shown."""
        next_seq = dict(self.next_seq or {})
        found = sorted(
            (piece for piece in map(Piece.parse, names) if piece and self.owns(piece)),
            key=lambda piece: (piece.job, piece.run, piece.stream, piece.seq),
        )
        chosen = []
        for piece in found:
            if piece.seq == next_seq.get(piece.key, 0):
                chosen.append(piece)
                next_seq[piece.key] = piece.seq + 1
        return chosen

    def take(self, piece: Piece, data: bytes, *, gap: bool = False) -> list[str]:
        """The lines ``data`` completes (the piece's stream's unfinished line first); the piece is
        then shown. ``gap``: the piece is passed over unread (the caps), so no line runs across it."""
        key = piece.key
        self.next_seq = {**(self.next_seq or {}), key: piece.seq + 1}
        self.taken = {**(self.taken or {}), key: (self.taken or {}).get(key, 0) + len(data)}
        text = ("" if gap else (self.partial or {}).get(key, "")) + data.decode("utf-8", errors="replace")
        *lines, rest = text.split("\n")
        self.partial = {**(self.partial or {}), key: rest}
        self.since = max(self.since, piece.time - self.SKEW)
        return lines

    def rest(self) -> dict[str, str]:
        """Each stream's last line that never ended (shown when the job has ended)."""
        return {key: text for key, text in (self.partial or {}).items() if text}

    def shown_bytes(self) -> dict[str, int]:
        """Bytes of the job's own stdout and stderr files already shown: those of its latest run
        (a requeued run writes its files anew), by stream; none for an array's tasks."""
        latest: dict[str, tuple[int, int]] = {}
        for key, count in (self.taken or {}).items():
            job, run, stream = key.rsplit("-", 2)
            name = STREAM_NAMES[stream]
            if job == self.job and int(run) >= latest.get(name, (-1, 0))[0]:
                latest[name] = (int(run), count)
        return {name: count for name, (_, count) in latest.items()}

    def to_dict(self) -> dict[str, object]:
        return {
            "job": self.job,
            "tag": self.tag,
            "since": self.since,
            "next_seq": self.next_seq or {},
            "partial": self.partial or {},
            "taken": self.taken or {},
        }

    @classmethod
    def from_dict(cls, value: dict[str, object]) -> LiveFollower:
        return cls(**value)  # type: ignore[arg-type]
