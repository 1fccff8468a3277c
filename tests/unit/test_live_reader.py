"""The task log's reader of a job's pieces, on a ``file://`` output folder: the caps, the streams
read at once, the listing's offset; and the trigger's shared listing of a pending job."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

from airflow_provider_slurmapi.client.live_output import LIVE_FOLDER, LiveFollower, LiveOutputSettings, Piece
from airflow_provider_slurmapi.hooks.live_reader import LiveOutputReader
from airflow_provider_slurmapi.hooks.object_store import ObjectStore
from airflow_provider_slurmapi.triggers import live_output as live_triggers
from airflow_provider_slurmapi.triggers.live_output import Listing, LiveWatch

TAG, SUBMITTED = "0a1b2c3d", 1_796_000_000


def store() -> ObjectStore:
    def no_gcs() -> None:
        raise AssertionError("a file:// folder needs no Cloud Storage")

    return ObjectStore(gcs_hook=no_gcs, principal=lambda: "tests")  # type: ignore[arg-type]


def publish(root: Path, job: str, stream: str, chunks: list[bytes], first_seq: int = 0) -> None:
    folder = root / LIVE_FOLDER
    folder.mkdir(exist_ok=True)
    for seq, data in enumerate(chunks, first_seq):
        (folder / Piece(SUBMITTED + seq, job, TAG, 0, stream, seq).name).write_bytes(data)


def reader(root: Path, job: str = "7", **settings: Any) -> LiveOutputReader:
    follower = LiveFollower.from_submission(job, TAG, SUBMITTED)
    return LiveOutputReader(store(), root.as_uri(), LiveOutputSettings(**settings), follower)


def names(root: Path) -> list[str]:
    return sorted(path.name for path in (root / LIVE_FOLDER).iterdir())


def test_past_the_line_cap_the_lines_are_not_counted_as_shown(tmp_path: Path) -> None:
    publish(tmp_path, "7", "out", [b"".join(b"line %d\n" % n for n in range(1, 21))])
    live = reader(tmp_path, max_lines=3)
    lines = [text for _, text in live.collect(names(tmp_path))]
    assert lines[:3] == ["[job 7 stdout] line 1", "[job 7 stdout] line 2", "[job 7 stdout] line 3"]
    assert "17 line(s) or piece(s)" in lines[3] and live.last_shown == 3
    assert live.follower.shown_bytes() == {"stdout": len(b"line 1\nline 2\nline 3\n")}


def test_an_arrays_tasks_are_read_at_once_each_in_order_within_its_caps(tmp_path: Path, monkeypatch: Any) -> None:
    for task in range(1, 5):
        publish(tmp_path, f"7_{task}", "out", [b"a\n", b"b\n", b"c" * 2000 + b"\n", b"d\n"])
    reading: set[str] = set()
    both = threading.Barrier(2, timeout=10)  # two tasks' reads are under way together
    read_head = ObjectStore.read_head

    def watched(self: ObjectStore, location: str, max_bytes: int, *, within: str | None = None) -> bytes:
        job = Piece.parse(location).job  # type: ignore[union-attr]
        if job in ("7_1", "7_2") and job not in reading:
            reading.add(job)
            both.wait()
        return read_head(self, location, max_bytes, within=within)

    monkeypatch.setattr(ObjectStore, "read_head", watched)
    live = reader(tmp_path, max_bytes=1024)
    lines = [text for _, text in live.collect(names(tmp_path))]
    for task in range(1, 5):
        mine = [line for line in lines if line.startswith(f"[job 7_{task} stdout] ")]
        assert mine[:2] == [f"[job 7_{task} stdout] a", f"[job 7_{task} stdout] b"]
        assert "2 line(s) or piece(s)" in mine[2]  # the third piece is past the byte cap, and the fourth
    assert live.took_all


def test_a_failed_read_keeps_the_offset_and_starts_again_at_its_piece(tmp_path: Path, monkeypatch: Any) -> None:
    publish(tmp_path, "7", "out", [b"one\n", b"two\n"])
    live = reader(tmp_path)
    read_head = ObjectStore.read_head
    failing = {"on": True}

    def flaky(self: ObjectStore, location: str, max_bytes: int, *, within: str | None = None) -> bytes:
        if failing["on"] and location.endswith("000001"):
            raise OSError("the read failed")
        return read_head(self, location, max_bytes, within=within)

    monkeypatch.setattr(ObjectStore, "read_head", flaky)
    lines = [text for _, text in live.collect(names(tmp_path))]
    assert lines[0] == "[job 7 stdout] one" and "the read failed" in lines[1] and not live.took_all
    failing["on"] = False
    assert [text for _, text in live.collect(names(tmp_path))] == ["[job 7 stdout] two"] and live.took_all


def test_each_poll_of_a_pending_job_moves_its_listing_offset_on(tmp_path: Path, monkeypatch: Any) -> None:
    (tmp_path / LIVE_FOLDER).mkdir()
    live = reader(tmp_path)
    offsets: list[str] = []
    names_from = ObjectStore.names_from

    def listed(self: ObjectStore, folder: str, offset: str) -> list[str]:
        offsets.append(offset)
        return names_from(self, folder, offset)

    monkeypatch.setattr(ObjectStore, "names_from", listed)
    monkeypatch.setattr("time.time", lambda: SUBMITTED + 3600.0)
    live.show_new(live_log := _Log())
    live.show_new(live_log)
    assert offsets == [f"{SUBMITTED - LiveFollower.SKEW:010d}", f"{SUBMITTED + 3600 - LiveFollower.SKEW:010d}"]
    assert live.trigger_spec()["since"] == SUBMITTED + 3600 - LiveFollower.SKEW


class _Log:
    def log(self, level: int, message: str, *args: object) -> None:
        pass


def test_a_pending_jobs_trigger_does_not_hold_the_shared_listing_back(monkeypatch: Any) -> None:
    class Poller:
        def __init__(self) -> None:
            self.ticks = [Listing([], listed_from=SUBMITTED - 120, started=SUBMITTED + 3600.0)]

        async def next_tick(self) -> Listing:
            if not self.ticks:
                await asyncio.sleep(3600)
            return self.ticks.pop()

        async def store(self) -> ObjectStore:
            return store()

    spec = {"within": "file:///nowhere", "job": "7", "tag": TAG, "since": SUBMITTED - 120}
    watch = LiveWatch(spec, {}, 1.0, _Log())
    assert watch.follower.since == SUBMITTED - 120  # from the spec: the job's submission
    watch._poller = Poller()  # type: ignore[assignment]
    monkeypatch.setattr(live_triggers, "SAVE_SECONDS", 3600.0)

    async def one_listing() -> None:
        showing = asyncio.ensure_future(watch._show_each_listing())
        while watch.follower.since == SUBMITTED - 120:
            await asyncio.sleep(0.01)
        showing.cancel()

    asyncio.run(asyncio.wait_for(one_listing(), 10))
    assert watch.follower.since == SUBMITTED + 3600 - LiveFollower.SKEW
