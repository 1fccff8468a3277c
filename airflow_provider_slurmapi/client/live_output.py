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
``live/{epoch seconds:010d}-{job ref}-{tag}-{run}-{stream}-{seq:06d}``, where the job ref is the
job ID (``{array job}_{task}`` for an array task), the tag tells the try's output folder from
another cluster's job of the same ID, the run counts requeues, and ``seq`` orders the pieces of
one stream.

Only the plan is made here (no I/O): the names, their parsing and the script.
"""

from __future__ import annotations

import hashlib
import re
import shlex
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
    r"(?P<time>\d{10})-(?P<job>\d+(?:_\d+)?)-(?P<tag>[0-9a-f]{8})-(?P<run>\d+)-(?P<stream>out|err)-(?P<seq>\d{6})"
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

    @classmethod
    def parse(cls, name: str) -> Piece | None:
        """The piece a name (its last path segment) stands for; None for anything else."""
        found = _PIECE.fullmatch(name.rsplit("/", 1)[-1])
        if found is None:
            return None
        return cls(
            int(found["time"]), found["job"], found["tag"], int(found["run"]), found["stream"], int(found["seq"])
        )

    @property
    def name(self) -> str:
        return f"{self.time:010d}-{self.job}-{self.tag}-{self.run}-{self.stream}-{self.seq:06d}"

    @property
    def key(self) -> str:
        """The stream this piece continues: one per job ref (an array's task), run and stream."""
        return f"{self.job}-{self.run}-{self.stream}"


def listing_offset(since: float) -> str:
    """The listing's ``start_offset`` (relative to the ``live/`` folder) for pieces published from ``since`` on."""
    return f"{max(0, int(since)):010d}"


def live_script(script: str, *, try_folder: str, live_folder: str, period: int, array: bool) -> str:
    """A bash script that runs ``script`` as its child with the same arguments, environment and
    output, publishes the new bytes of the job's stdout and stderr (``{try_folder}/{job}.out`` and
    ``.err``, as the submit operator names them) under ``live_folder`` every ``period`` seconds and
    when the child ends, and ends as the child did: its exit code, or the signal that killed it.

    Signals Slurm sends the batch shell alone (``--signal=B:...``) are passed on to the child;
    those it sends every process of the job (cancel, time limit, preemption) reach the child
    directly. A piece that cannot be written is skipped, never failing the job; the first failure
    is said once, in one line on the job's stderr (the only line the publisher ever adds there)."""
    from airflow_provider_slurmapi.client.staging import interpreter_and_directives

    interpreter, header = interpreter_and_directives(script)
    # the same script wraps the same (a staged wrapper is staged once); no script holds its own hash
    delimiter = f"__SLURM_JOB_SCRIPT_{hashlib.sha256(script.encode()).hexdigest()[:16]}__"
    stem = '"${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID}"' if array else '"$SLURM_JOB_ID"'
    return "\n".join(
        [
            "#!/bin/bash",
            *header,
            "# Live output: the batch script below runs as this script's child; its stdout and stderr",
            f"# are published in closed pieces under {live_folder} while it runs.",
            f"__live_job={stem}",
            f"__live_folder={shlex.quote(live_folder)}",
            f"__live_out={shlex.quote(try_folder)}/$__live_job.out",
            f"__live_err={shlex.quote(try_folder)}/$__live_job.err",
            f"__live_tag={folder_tag(try_folder)}",
            f"__live_period={int(period)}",
            _PUBLISHER,
            '__live_script=$(umask 077 && mktemp "${TMPDIR:-/tmp}/slurm-job-script.XXXXXX") || exit 1',
            f"cat >\"$__live_script\" <<'{delimiter}'",
            script if script.endswith("\n") else script + "\n",
            delimiter,
            _RUN_CHILD.replace("{interpreter}", interpreter).replace("{publisher}", _START_PUBLISHER),
            "",
        ]
    )


# The publisher: bash, no tools beyond coreutils. Its own output goes nowhere near the job's.
_PUBLISHER = r"""__live_run=${SLURM_RESTART_COUNT:-0}
__live_seq_out=0 __live_seq_err=0 __live_pos_out=0 __live_pos_err=0 __live_failed=
__live_piece() {  # STREAM FILE: the bytes of FILE past the stream's position, as one closed piece
    local stream=$1 file=$2 pos_var=__live_pos_$1 seq_var=__live_seq_$1 size name tmp
    size=$(stat -c %s -- "$file" 2>/dev/null) || return 0
    [ "$size" -gt "${!pos_var}" ] || return 0
    printf -v name '%010d-%s-%s-%s-%s-%06d' "$(date +%s)" "$__live_job" "$__live_tag" "$__live_run" "$stream" "${!seq_var}"
    tmp="$__live_folder/.$name.tmp"
    if tail -c +"$((${!pos_var} + 1))" -- "$file" 2>/dev/null | head -c "$((size - ${!pos_var}))" >"$tmp" 2>/dev/null \
        && mv -f -- "$tmp" "$__live_folder/$name" 2>/dev/null; then
        printf -v "$pos_var" %s "$size"
        printf -v "$seq_var" %s "$((${!seq_var} + 1))"
    else
        rm -f -- "$tmp" 2>/dev/null
        if [ -z "$__live_failed" ]; then  # said once, on the job's stderr: the job goes on
            __live_failed=1
            printf 'slurm-job-api: could not publish live output under %s; the job goes on, and its output is read when it ends\n' \
                "$__live_folder" >&8 2>/dev/null
        fi
    fi
}
__live_publish() {
    __live_piece out "$__live_out"
    [ "$__live_err" = "$__live_out" ] || __live_piece err "$__live_err"
}
mkdir -p -- "$__live_folder" 2>/dev/null
exec 8>&2  # the job's stderr, for the publisher's one note"""

# Started once the child runs: it publishes every period while the child lives, then the last piece.
# Cancel and time limit signal every process of the job: the publisher ignores them and waits.
_START_PUBLISHER = r"""(
    trap '' TERM INT HUP USR1 USR2 ALRM
    while kill -0 "$__live_child" 2>/dev/null; do
        for ((__live_tick = 0; __live_tick < __live_period; __live_tick++)); do
            kill -0 "$__live_child" 2>/dev/null || break
            sleep 1
        done
        __live_publish
    done
    __live_publish  # the last piece: the child has ended
) </dev/null >/dev/null 2>&1 &
__live_publisher=$!"""

_RUN_CHILD = r"""# what Slurm sends the batch shell alone (--signal=B:..., scancel --batch) is the child's;
# TERM is not passed on: cancel, time limit and preemption send it to every process already
for __live_signal in USR1 USR2 HUP INT QUIT ALRM; do
    trap "kill -s $__live_signal \$__live_child 2>/dev/null" "$__live_signal"
done
trap : TERM
{interpreter} "$__live_script" "$@" 8>&- &
__live_child=$!
{publisher}
while :; do
    wait "$__live_child"
    __live_status=$?
    kill -0 "$__live_child" 2>/dev/null && continue  # a trapped signal ended the wait, not the child
    wait "$__live_child" 2>/dev/null  # the child's own status, if a signal ended the wait as it ended
    __live_again=$?
    # 127 (or -1): already waited for, and the first wait's status was the child's
    if [ "$__live_again" -ge 0 ] && [ "$__live_again" -ne 127 ]; then __live_status=$__live_again; fi
    break
done
rm -f -- "$__live_script"
exec 8>&-
wait "$__live_publisher" 2>/dev/null
if [ "$__live_status" -gt 128 ] && [ "$__live_status" -lt 160 ]; then
    __live_name=$(kill -l "$__live_status" 2>/dev/null) && trap - "$__live_name" && kill -s "$__live_name" $$
fi
exit "$__live_status"
"""


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
