"""Where a job's output goes, where Airflow reads it, and how its last lines are shown.

slurmrestd returns paths, never file contents. A job writes its output under a directory that the
cluster's nodes mount (``output_cluster_path``, e.g. a bucket mounted through Cloud Storage FUSE);
Airflow reads the same files at ``output_uri`` (``gs://bucket/prefix`` or ``file:///shared``).
This module only maps paths and cuts text: no I/O, no clock, no Airflow import.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any
from urllib.parse import quote, urlsplit

from airflow_provider_slurmapi.client.errors import InvalidRequestError
from airflow_provider_slurmapi.client.jobs import JobStatus, RecordSource
from airflow_provider_slurmapi.client.numbers import checked_number

OUTPUT_SCHEMES = ("gs", "file")
DEFAULT_TAIL_LINES = 100
DEFAULT_TAIL_BYTES = 64 * 1024
DEFAULT_OUTPUT_WAIT = 30.0
TAIL_LINES_RANGE = (1, 10_000)
TAIL_BYTES_RANGE = (1024, 16 * 1024 * 1024)
OUTPUT_WAIT_RANGE = (0.0, 600.0)
DEFAULT_STAGED_RETENTION_DAYS = 7.0
STAGED_RETENTION_DAYS_RANGE = (0, 3650)  # 0: staged scripts are kept until removed by hand
MAX_SEGMENT = 200  # a path segment has at most 255 bytes

# Characters kept from Airflow names in an output path; anything else becomes "_".
_UNSAFE = re.compile(r"[^A-Za-z0-9._=+-]")
_TRY_FOLDER = re.compile(r"try-[1-9][0-9]*")


def safe_segment(value: object) -> str:
    """One path segment from an Airflow name: unsafe characters replaced, never empty or a dot name."""
    text = _UNSAFE.sub("_", str(value))
    return text if text.strip(".") else text.replace(".", "_") or "_"


@dataclass(frozen=True)
class OutputSettings:
    """The two locations of a job's output, and how much of it a task shows.

    :param uri: where Airflow reads the output: ``gs://bucket[/prefix]`` or ``file:///path``.
    :param cluster_path: where the cluster's nodes see that same location (an absolute path).
    :param tail_lines: last lines of stdout and of stderr shown in the task log.
    :param tail_bytes: at most this many bytes read from the end of each file.
    :param wait: seconds to wait for the output to appear after the job ends.
    :param staged_retention_days: a DAG's staged scripts not staged again for this many days are
        removed when it stages another, but those a job in the live queue runs (0: kept); None:
        the connection's, else 7.
    """

    uri: str | None = None
    cluster_path: str | None = None
    tail_lines: int = DEFAULT_TAIL_LINES
    tail_bytes: int = DEFAULT_TAIL_BYTES
    wait: float = DEFAULT_OUTPUT_WAIT
    staged_retention_days: float | None = None

    def __post_init__(self) -> None:
        if self.uri:
            parts = urlsplit(self.uri)
            if parts.scheme not in OUTPUT_SCHEMES:
                raise InvalidRequestError("output_uri", f"must start with gs:// or file://, got {self.uri!r}")
            if parts.scheme == "gs" and not parts.netloc:
                raise InvalidRequestError("output_uri", f"must name a bucket (gs://bucket/prefix), got {self.uri!r}")
            if parts.scheme == "file" and (parts.netloc or not parts.path.startswith("/")):
                raise InvalidRequestError("output_uri", f"must be an absolute file:///path, got {self.uri!r}")
        if self.cluster_path and not posixpath.isabs(self.cluster_path):
            raise InvalidRequestError("output_cluster_path", f"must be an absolute path, got {self.cluster_path!r}")
        checked_number(
            "output_tail_lines", self.tail_lines, low=TAIL_LINES_RANGE[0], high=TAIL_LINES_RANGE[1], whole=True
        )
        checked_number(
            "output_tail_bytes", self.tail_bytes, low=TAIL_BYTES_RANGE[0], high=TAIL_BYTES_RANGE[1], whole=True
        )
        checked_number("output_wait", self.wait, low=OUTPUT_WAIT_RANGE[0], high=OUTPUT_WAIT_RANGE[1])
        if self.staged_retention_days is not None:
            low, high = STAGED_RETENTION_DAYS_RANGE
            days = checked_number(
                "output_staged_retention_days",
                self.staged_retention_days,
                low=low,
                high=high,
                from_text=True,
                unit="days",
            )
            object.__setattr__(self, "staged_retention_days", days)  # a connection's field is text

    @property
    def staged_retention_seconds(self) -> float | None:
        """How long a staged script is kept after its last staging; None: kept."""
        days = DEFAULT_STAGED_RETENTION_DAYS if self.staged_retention_days is None else self.staged_retention_days
        return days * 86400 if days else None

    @property
    def readable(self) -> bool:
        """Whether Airflow can map the cluster's paths to locations it reads."""
        return bool(self.uri and self.cluster_path)

    def per_try_paths(
        self, dag_id: str, run_id: str, task_id: str, map_index: int, try_number: int, *, array: bool
    ) -> tuple[str, str]:
        """``standard_output`` and ``standard_error`` of one try, under ``cluster_path``:
        ``{dag}/{run}/{task}[/map-{index}]/try-{n}/{job}.out`` (Slurm creates the directories)."""
        folder = self.per_try_folder(dag_id, run_id, task_id, map_index, try_number)
        stem = posixpath.join(folder, "%A_%a" if array else "%j")
        return f"{stem}.out", f"{stem}.err"

    def per_try_folder(self, dag_id: str, run_id: str, task_id: str, map_index: int, try_number: int) -> str:
        """Where one try's files go, under ``cluster_path``: ``{dag}/{run}/{task}[/map-{index}]/try-{n}``."""
        return posixpath.join(self.task_run_folder(dag_id, run_id, task_id, map_index), f"try-{int(try_number)}")

    def task_run_folder(self, dag_id: str, run_id: str, task_id: str, map_index: int) -> str:
        """The folder of one task run, every try's: ``{dag}/{run}/{task}[/map-{index}]`` under ``cluster_path``."""
        if not self.cluster_path:
            raise ValueError("output_cluster_path is not set")
        parts = [dag_id, run_id, task_id] + ([f"map-{map_index}"] if map_index is not None and map_index >= 0 else [])
        return posixpath.join(self.cluster_path, *(safe_segment(part)[:MAX_SEGMENT] for part in parts))

    def try_folder_holding(
        self, cluster_file: str, dag_id: str, run_id: str, task_id: str, map_index: int
    ) -> str | None:
        """The try folder of this task run that holds ``cluster_file`` (a job's output as its record
        names it), or None when it is in none: how a retry finds the files of an earlier try's job."""
        folder = posixpath.dirname(posixpath.normpath(cluster_file))
        task_run = posixpath.normpath(self.task_run_folder(dag_id, run_id, task_id, map_index))
        if posixpath.dirname(folder) != task_run or not _TRY_FOLDER.fullmatch(posixpath.basename(folder)):
            return None
        return folder

    def is_under_cluster_path(self, path: str) -> bool:
        if not self.cluster_path:
            return False
        root = posixpath.normpath(self.cluster_path)
        return posixpath.normpath(path).startswith(root.rstrip("/") + "/")

    def location_of(self, cluster_file: str) -> str | None:
        """The ``output_uri`` location of a file the job wrote, or None if Airflow cannot read it."""
        if not (self.readable and cluster_file and self.is_under_cluster_path(cluster_file)):
            return None
        root = posixpath.normpath(str(self.cluster_path))
        relative = posixpath.relpath(posixpath.normpath(cluster_file), root)
        return f"{str(self.uri).rstrip('/')}/{relative}"


def console_url(uri: str) -> str | None:
    """The Cloud console page of a ``gs://`` object; None for other locations."""
    parts = urlsplit(uri)
    if parts.scheme != "gs" or not parts.netloc:
        return None
    return f"https://console.cloud.google.com/storage/browser/_details/{parts.netloc}/{quote(parts.path.lstrip('/'))}"


def expand_pattern(
    pattern: str, *, job_id: str, array_job_id: str = "", array_task_id: str = "", name: str = ""
) -> str:
    """Fill in the filename patterns a reply may leave unexpanded (``%j``, ``%A``, ``%a``, ``%x``, ``%%``)."""
    values = {"j": job_id, "A": array_job_id or job_id, "a": array_task_id, "x": name, "%": "%"}
    return re.sub(r"%([jAax%])", lambda match: values[match.group(1)] or match.group(0), pattern)


class Stream(StrEnum):
    """Which of a job's output streams a file holds."""

    STDOUT = "stdout"
    STDERR = "stderr"
    BOTH = "stdout+stderr"  # both streams go to one file


@dataclass(frozen=True)
class OutputFile:
    """One output file of a job, as its accounting (or live) record names it."""

    job_id: str
    stream: Stream
    cluster_path: str
    failed: bool = False  # the job (or array task) that wrote it did not succeed


def output_files(records: list[dict[str, Any]], *, source: RecordSource) -> list[OutputFile]:
    """The output files the records name (one record per array task), the failed tasks' first.

    Accounting's records name them in ``stdout_expanded``, the live queue's in ``standard_output``.
    """
    files = []
    for record in records:
        status = JobStatus.from_record(record, source)
        if source == RecordSource.ACCOUNTING:
            out, err = str(record.get("stdout_expanded") or ""), str(record.get("stderr_expanded") or "")
        else:
            array = (
                str(record.get("array_job_id", {}).get("number", "") or "")
                if isinstance(record.get("array_job_id"), dict)
                else ""
            )
            task = record.get("array_task_id")
            task_id = str(task.get("number")) if isinstance(task, dict) and task.get("set") else ""
            fill = {
                "job_id": str(record.get("job_id", "")),
                "array_job_id": array if task_id else "",
                "array_task_id": task_id,
                "name": str(record.get("name") or ""),
            }
            out = expand_pattern(str(record.get("standard_output") or ""), **fill)
            err = expand_pattern(str(record.get("standard_error") or ""), **fill)
        failed = status.is_finished and not status.is_success
        if out and (not err or err == out):
            files.append(OutputFile(status.job_id, Stream.BOTH, out, failed))
            continue
        files += [
            OutputFile(status.job_id, stream, path, failed)
            for stream, path in ((Stream.STDOUT, out), (Stream.STDERR, err))
            if path
        ]
    return sorted(files, key=lambda file: not file.failed)  # stable: the records' order otherwise


MAX_LINE_CHARS = 4000  # of one job line in the task log; the rest is cut, with a note

# What a terminal or a log view acts on instead of showing: C0 and C1 controls (ESC starts the CSI
# and OSC sequences; carriage returns and backspaces overwrite), line separators, bidi overrides.
_HIDDEN = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def visible(text: str) -> str:
    """Text a job or a cluster user chose, made inert for a log: each control character, escape
    sequence introducer and bidi override shown as its escape (``\\x1b``, ``\\r``, ``\\u202e``);
    tabs stay."""
    return _HIDDEN.sub(lambda match: repr(match.group())[1:-1], text)


def job_lines(text: str, prefix: str) -> list[str]:
    """The lines of a job's output as the task log shows them: each made ``visible``, cut at
    ``MAX_LINE_CHARS`` with a note of how much was cut, after ``prefix`` (so no line can pass for
    one of Airflow's own)."""
    shown = []
    for line in split_lines(text):
        cut = len(line) - MAX_LINE_CHARS
        note = f" [... {cut:,} more characters not shown]" if cut > 0 else ""
        shown.append(f"{prefix}{visible(line[:MAX_LINE_CHARS])}{note}")
    return shown


def split_lines(text: str) -> list[str]:
    """Lines at newlines only: a carriage return inside a line stays in it, to be shown."""
    if not text:
        return []
    return [line.removesuffix("\r") for line in text.removesuffix("\n").split("\n")]


@dataclass(frozen=True)
class OutputTail:
    """The last lines of one output file, or why they could not be read.

    ``text`` is what the file holds; ``frame()`` is the safe way to show it.
    """

    job_id: str
    stream: Stream
    location: str  # where Airflow read it, or the path on the cluster when it cannot
    text: str = ""
    size: int | None = None  # bytes in the whole file
    problem: str | None = None  # why nothing (or not everything) could be shown

    def without_shown(self, shown: int) -> OutputTail:
        """This tail less the file's first ``shown`` bytes, which the task log already showed (live output)."""
        if self.size is None or shown <= 0 or not self.text:
            return self
        unseen = self.size - shown
        if unseen <= 0:
            return replace(self, text="", problem=f"all of it ({_size(self.size)}) shown above while the job ran")
        data = self.text.encode()
        if unseen >= len(data):
            return self
        # ``shown`` ends a line, and the text leaves out the file's last newline: the slice then
        # begins with the newline that ended the last line shown
        rest = data[-unseen:].removeprefix(b"\n")
        return replace(self, text=rest.decode("utf-8", errors="replace"), problem=None)

    @property
    def line_prefix(self) -> str:
        """What starts each of this file's lines in the task log: ``[job 42 stderr]`` and a space."""
        return visible(f"[job {self.job_id} {self.stream}] ")

    def frame(self) -> str:
        """A block for the task log that names the whole file's location."""
        title = visible(f"Slurm job {self.job_id} {self.stream}")
        location, problem = visible(self.location), visible(self.problem or "")
        if problem and not self.text:
            return f"{title}: {problem}"
        if self.size == 0:
            return f"{title}: empty ({location})"
        lines = job_lines(self.text, self.line_prefix)
        size = f", {_size(self.size)} in all" if self.size is not None else ""
        count = f"{len(lines)} line" + ("" if len(lines) == 1 else "s")
        head = f"----- {title}: last {count} of {location}{size} -----"
        note = f"\n(note: {problem})" if problem else ""
        return "\n".join([head, *lines, f"----- end of {title} -----"]) + note


def _size(count: int | None) -> str:
    value = float(count or 0)
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{int(value)} bytes" if unit == "bytes" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"


def last_lines(data: bytes, *, lines: int, started_mid_file: bool) -> tuple[str, str | None]:
    """The last ``lines`` lines of ``data``, decoded, and a note when some bytes were not text.

    A read that began inside the file drops its first, partial line, unless it is the only line:
    then its end is kept, with a note.
    """
    notes = []
    if started_mid_file:
        _, newline, rest = data.partition(b"\n")
        if newline and rest:
            data = rest
        else:
            notes.append(f"the first line shown is the end of a line longer than the {len(data):,} bytes read")
    text = data.decode("utf-8", errors="replace")
    undecodable = text.count("\ufffd") - data.decode("utf-8", errors="ignore").count("\ufffd")
    kept = split_lines(text)[-lines:]
    if undecodable:
        notes.append(f"{undecodable} bytes that are not UTF-8 shown as \ufffd")
    return "\n".join(kept), "; ".join(notes) or None


def error_excerpt(tails: list[OutputTail], *, lines: int = 20) -> str:
    """The end of a failed job's error stream, for the task's failure message ("" if none)."""
    for stream in (Stream.STDERR, Stream.BOTH, Stream.STDOUT):
        for tail in tails:
            if tail.stream == stream and tail.text.strip():
                kept = "\n".join(job_lines("\n".join(split_lines(tail.text)[-lines:]), tail.line_prefix))
                where = visible(f"{tail.stream} of job {tail.job_id} ({tail.location})")
                return f"\nLast lines of {where}:\n{kept}"
    return ""
