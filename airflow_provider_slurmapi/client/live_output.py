"""A job's output while it runs: the job publishes what it printed in closed pieces, which
Airflow reads as they appear.

slurmrestd serves no file contents, and Cloud Storage FUSE uploads a file only when it is closed:
the job's own stdout and stderr, open until it ends, are invisible until then. So the submitted
script starts a publisher and becomes the batch script (``client/live_wrapper``); the publisher
copies the new bytes of those two files into pieces, each written under a hidden name and renamed
when closed (the rename is what the mount uploads), every ``period`` seconds and once more when the
batch script has ended. The job's
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

import dataclasses
import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import NamedTuple

from airflow_provider_slurmapi.client.numbers import checked_number
from airflow_provider_slurmapi.client.output import MAX_LINE_CHARS

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


class LiveLine(NamedTuple):
    """A line of a stream, as the task log shows it."""

    text: str  # at most ``LINE_CAP`` characters, what follows the line's last carriage return
    end: int | None  # the offset in the job's file just after it; None: not known (a piece was skipped)
    cut: int = 0  # characters past ``LINE_CAP`` dropped


LINE_CAP = MAX_LINE_CHARS  # characters of an unended line kept: what the task log shows of a line


def incomplete_tail(data: bytes) -> int:
    """How many of the last bytes of ``data`` (0-3) begin a UTF-8 character that its next bytes end."""
    for back in range(1, min(3, len(data)) + 1):
        byte = data[-back]
        if byte & 0xC0 != 0x80:  # not a continuation byte: the character's first
            length = 2 if 0xC0 <= byte < 0xE0 else 3 if 0xE0 <= byte < 0xF0 else 4 if 0xF0 <= byte < 0xF8 else 1
            return back if length > back else 0
    return 0


def overwritten(text: str) -> tuple[str, bool]:
    """What a terminal shows of a line that carriage returns rewrote: what follows the last ``\\r``
    (the last non-empty segment if it ends in ``\\r``); and whether that is the line's own start."""
    _, carriage_return, segment = text.rstrip("\r").rpartition("\r")
    return segment, not carriage_return


def joined(line: str, cut: int, more: str) -> tuple[str, int]:
    """The unended ``line`` (``cut``: characters dropped past the cap) followed by ``more``, as kept:
    only its last carriage return's segment (a trailing ``\\r`` is kept: the next text rewrites
    the line), at most ``LINE_CAP`` characters. A progress bar costs no more than its last state."""
    line += more
    if "\r" in line:
        segment, whole = overwritten(line)
        cut = cut if whole else 0
        line = segment + ("\r" if line.endswith("\r") else "")
    body = line.rstrip("\r")
    if len(body) > LINE_CAP:
        cut += len(body) - LINE_CAP
        line = body[:LINE_CAP] + line[len(body) :]
    return line, cut


@dataclass
class LiveFollower:
    """A task's view of its job's pieces: which ones it has shown, and the lines they make.

    Each stream of each run (a requeue starts a new one) of the job, or of each task of an array,
    is shown once and in order: a piece is taken only after the one before it, whatever order the
    listing finds them in. The state is plain JSON (``to_dict``), so that a trigger started again
    (another triggerer, a restart) goes on where it was; it stays small: an unended line is kept
    capped, and a character split between two pieces waits (its first bytes) for the next one.

    Keys are ``"{job ref}-{run}-{stream}"``.
    """

    job: str
    tag: str
    since: int = 0  # the listing's offset: no piece still wanted was published before it
    next_seq: dict[str, int] | None = None  # the next piece's seq
    partial: dict[str, str] | None = None  # the last line, not ended yet (capped, see ``joined``)
    offset: dict[str, int] | None = None  # the job's file's offset after the bytes taken; gone after a skipped piece
    shown: dict[str, int] | None = None  # the job's file's offset just after the last line logged
    start: dict[str, int] | None = None  # the offset of the run's first byte in the job's file
    cut: dict[str, int] | None = None  # characters of the unended line dropped past the cap
    held: dict[str, str] | None = None  # (hex) the first bytes of a character the next piece ends
    changes: int = dataclasses.field(
        default=0, compare=False
    )  # counts changes of what was taken or shown: a save is skipped cheaply

    SKEW = 120  # seconds the nodes' clocks and the mount's uploads may lag the names' order

    @classmethod
    def from_submission(cls, job: str, tag: str, submitted_at: float) -> LiveFollower:
        """A follower of a job submitted at ``submitted_at`` (epoch seconds): none of its pieces is older."""
        return cls(job=job, tag=tag, since=max(0, int(submitted_at) - cls.SKEW))

    def owns(self, piece: Piece) -> bool:
        return piece.tag == self.tag and (piece.job == self.job or piece.job.startswith(f"{self.job}_"))

    def wanted(self, names: list[str]) -> list[Piece]:
        """The pieces among ``names`` (a listing) to read now, in the order they are shown."""
        return self.choose(names)[0]

    def choose(self, names: list[str]) -> tuple[list[Piece], bool]:
        """``wanted``, and whether they are all of this job's pieces in ``names`` not taken yet (a
        later one waits for a piece not listed: a seq gap)."""
        next_seq = dict(self.next_seq or {})
        found = sorted(
            (piece for piece in map(Piece.parse, names) if piece and self.owns(piece)),
            key=lambda piece: (piece.job, piece.run, piece.stream, piece.seq),
        )
        chosen, waiting = [], False
        for piece in found:
            expected = next_seq.get(piece.key, 0)
            if piece.seq == expected:
                chosen.append(piece)
                next_seq[piece.key] = piece.seq + 1
            elif piece.seq > expected:
                waiting = True
        return chosen, not waiting

    def caught_up(self, listed_from: int, started: float) -> None:
        """After a listing from ``listed_from`` begun at ``started`` (epoch seconds) in which every
        piece of this job was taken: any piece still to come was published after ``started - SKEW``.
        A listing that began after this follower's offset may have missed some: no change."""
        if listed_from <= self.since < int(started) - self.SKEW:
            self.since = int(started) - self.SKEW  # not a change to save: a restart lists a little more, once

    def take(self, piece: Piece, data: bytes, *, gap: bool = False) -> list[LiveLine]:
        """The lines ``data`` completes (the piece's stream's unfinished line first); the piece is
        then shown. ``gap``: the piece is passed over unread (the caps), so no line runs across it
        and the offsets in the job's file of what follows are not known."""
        key = piece.key
        self.changes += 1
        self.next_seq = {**(self.next_seq or {}), key: piece.seq + 1}
        if piece.seq == 0:
            self.start = {**(self.start or {}), key: piece.start}
            self.offset = {**(self.offset or {}), key: piece.start}
        if gap:
            self._forget_line(key)
            return []
        held = bytes.fromhex((self.held or {}).get(key, ""))
        raw = held + data
        keep = incomplete_tail(raw)
        position = (self.offset or {}).get(key)
        if position is not None:
            self.offset = {**(self.offset or {}), key: position + len(data)}
            position -= len(held)
        line, cut = (self.partial or {}).get(key, ""), (self.cut or {}).get(key, 0)
        lines = []
        *ended, rest = raw[: len(raw) - keep].split(b"\n")
        for part in ended:
            line, cut = joined(line, cut, part.decode("utf-8", errors="replace"))
            position = None if position is None else position + len(part) + 1
            lines.append(LiveLine(line.rstrip("\r"), position, cut))
            line, cut = "", 0
        line, cut = joined(line, cut, rest.decode("utf-8", errors="replace"))
        self.partial = {**(self.partial or {}), key: line}
        self.cut = {**(self.cut or {}), key: cut}
        self.held = {**(self.held or {}), key: raw[len(raw) - keep :].hex()}
        return lines

    def _forget_line(self, key: str) -> None:
        self.partial = {**(self.partial or {}), key: ""}
        self.cut = {**(self.cut or {}), key: 0}
        self.held = {**(self.held or {}), key: ""}
        self.offset = {k: v for k, v in (self.offset or {}).items() if k != key}

    def logged(self, key: str, line: LiveLine) -> None:
        """``line`` of stream ``key`` is in the task log: the job's end leaves out what it shows."""
        if line.end is not None:
            self.shown = {**(self.shown or {}), key: line.end}
            self.changes += 1

    def rest(self) -> dict[str, LiveLine]:
        """Each stream's last line that never ended (shown when the job has ended)."""
        rest = {}
        for key, text in (self.partial or {}).items():
            line = text.rstrip("\r")
            if line:
                end = (self.offset or {}).get(key)
                rest[key] = LiveLine(line, end, (self.cut or {}).get(key, 0))
        return rest

    def shown_bytes(self) -> dict[str, int]:
        """The bytes of the job's own stdout and stderr files (its latest run's) that the task log
        showed: up to just after the last line it logged, by stream; none for an array's tasks.

        A requeued run writes its files anew, unless it starts where the earlier runs end
        (``open_mode: APPEND``: its first piece names that offset)."""
        shown: dict[str, int] = {}
        runs = {key for key in (self.next_seq or {}) if key.rsplit("-", 2)[0] == self.job}
        for key in sorted(runs, key=lambda key: int(key.rsplit("-", 2)[1])):
            name = STREAM_NAMES[key.rsplit("-", 1)[1]]
            if key in (self.shown or {}):
                shown[name] = (self.shown or {})[key]
            elif not (self.start or {}).get(key):  # a file written anew, none of it shown yet
                shown[name] = 0
        return {name: offset for name, offset in shown.items() if offset}

    def to_dict(self) -> dict[str, object]:
        state = {name: getattr(self, name) for name in _STATE}
        return {name: dict(value) if isinstance(value, dict) else value for name, value in state.items()}

    @classmethod
    def from_dict(cls, value: dict[str, object]) -> LiveFollower:
        """A follower from its ``to_dict``, or from an earlier version's (new keys optional)."""
        state = {name: value[name] for name in _STATE if name in value}
        if "taken" in value:  # an earlier version's bytes taken, from offset 0, all counted as shown
            state.setdefault("offset", value["taken"])
            state.setdefault("shown", value["taken"])
        follower = cls(**state)  # type: ignore[arg-type]
        partial = {key: joined("", 0, str(text)) for key, text in (follower.partial or {}).items()}
        follower.partial = {key: text for key, (text, _) in partial.items()}  # an earlier version kept it whole
        follower.cut = {**{key: cut for key, (_, cut) in partial.items()}, **(follower.cut or {})}
        return follower


_STATE = ("job", "tag", "since", "next_seq", "partial", "offset", "shown", "start", "cut", "held")
