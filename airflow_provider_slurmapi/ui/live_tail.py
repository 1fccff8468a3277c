"""The last lines a running job has published (live output), for the tab: one listing of the
``live/`` folder from the run's start, then the newest pieces of each stream, a few at most.

The task log shows every piece once, in order (``hooks/live_reader``); the tab shows only the end,
anew at each view, so it needs no follower state. A piece counts only if its name carries the
task try's folder tag and the job's ID, as for the task log.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow_provider_slurmapi.client.live_output import STREAM_NAMES, LiveFollower, Piece, listing_offset
from airflow_provider_slurmapi.client.output import job_lines, last_lines
from airflow_provider_slurmapi.hooks.live_reader import live_folder

if TYPE_CHECKING:
    from airflow_provider_slurmapi.hooks.object_store import ObjectStore

PIECES_PER_STREAM = 5  # the newest pieces read per stream: a few periods of output, a few reads
BYTES_PER_STREAM = 64 * 1024
LINES_PER_STREAM = 200


def live_tails(store: ObjectStore, within: str, job_id: str, tag: str, since: int) -> dict[str, str]:
    """Each stream's last lines (``stdout``, ``stderr``) of the job's latest run, from the pieces
    published since ``since`` (epoch seconds, the run's start)."""
    names = store.names_from(live_folder(within), listing_offset(since - LiveFollower.SKEW))
    owner = LiveFollower(job=job_id, tag=tag)
    # an array's tasks publish streams of their own (155_1, 155_2): one of them is no job's stream
    pieces = [piece for piece in map(Piece.parse, names) if piece and owner.owns(piece) and piece.job == job_id]
    if not pieces:
        return {}
    run = max(piece.run for piece in pieces)
    tails = {}
    for stream, name in STREAM_NAMES.items():
        newest = sorted((p for p in pieces if p.run == run and p.stream == stream), key=lambda p: p.seq)
        data, from_the_start = _read_newest(store, within, newest[-PIECES_PER_STREAM:])
        text, _ = last_lines(data, lines=LINES_PER_STREAM, started_mid_file=not from_the_start)
        if text:
            tails[name] = "\n".join(job_lines(text, ""))
    return tails


def _read_newest(store: ObjectStore, within: str, pieces: list[Piece]) -> tuple[bytes, bool]:
    """The newest of the pieces that fit in ``BYTES_PER_STREAM``, in order; whether they start at
    the stream's start."""
    chunks: list[bytes] = []
    left, first = BYTES_PER_STREAM, None
    for piece in reversed(pieces):
        data = store.read_head(f"{live_folder(within)}/{piece.name}", left + 1, within=within)
        if len(data) > left:
            break  # the older pieces do not fit: the text starts after them
        chunks.insert(0, data)
        left, first = left - len(data), piece
    return b"".join(chunks), first is not None and first.seq == 0
