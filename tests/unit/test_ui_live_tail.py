"""The tab's last lines of a running job's live output, from pieces in a ``file://`` output folder."""

from __future__ import annotations

from pathlib import Path

from airflow_provider_slurmapi.client.live_output import LIVE_FOLDER, Piece
from airflow_provider_slurmapi.hooks.object_store import ObjectStore
from airflow_provider_slurmapi.ui import live_tail
from airflow_provider_slurmapi.ui.live_tail import live_tails

TAG, OTHER_TAG, START = "0a1b2c3d", "ffffffff", 1_796_000_000


def store() -> ObjectStore:
    def no_gcs() -> None:
        raise AssertionError("a file:// folder needs no Cloud Storage")

    return ObjectStore(gcs_hook=no_gcs, principal=lambda: "tests")  # type: ignore[arg-type]


def publish(root: Path, job: str, run: int, stream: str, chunks: list[str], tag: str = TAG) -> None:
    folder = root / LIVE_FOLDER
    folder.mkdir(exist_ok=True)
    for seq, text in enumerate(chunks):
        (folder / Piece(START + seq, job, tag, run, stream, seq).name).write_text(text)


def test_the_newest_pieces_of_the_latest_run_of_this_job_only(tmp_path: Path) -> None:
    publish(tmp_path, "7", 0, "out", ["old run\n"])
    publish(tmp_path, "7", 1, "out", ["step 1\nst", "ep 2\n", "step 3\n"])
    publish(tmp_path, "7", 1, "err", ["warning\n"])
    publish(tmp_path, "8", 1, "out", ["another job\n"])
    publish(tmp_path, "7", 1, "out", ["another try's piece\n"], tag=OTHER_TAG)
    tails = live_tails(store(), tmp_path.as_uri(), "7", TAG, START)
    assert tails == {"stdout": "step 1\nstep 2\nstep 3", "stderr": "warning"}


def test_only_the_last_pieces_and_no_broken_first_line(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(live_tail, "PIECES_PER_STREAM", 2)
    publish(tmp_path, "7", 0, "out", ["line 1\nline 2\nli", "ne 3\nline 4\n", "line 5\n"])
    # the oldest piece read starts inside line 3: that part is dropped, not shown as a line
    assert live_tails(store(), tmp_path.as_uri(), "7", TAG, START) == {"stdout": "line 4\nline 5"}


def test_lines_are_made_inert_as_in_the_task_log(tmp_path: Path) -> None:
    publish(tmp_path, "7", 0, "out", ["\x1b[31mred\x1b[0m <b>\n"])
    assert live_tails(store(), tmp_path.as_uri(), "7", TAG, START) == {"stdout": "\\x1b[31mred\\x1b[0m <b>"}


def test_nothing_published_yet(tmp_path: Path) -> None:
    assert live_tails(store(), tmp_path.as_uri(), "7", TAG, START) == {}


def test_an_array_tasks_streams_are_not_the_jobs(tmp_path: Path) -> None:
    publish(tmp_path, "7_1", 0, "out", ["task 1\n"])
    publish(tmp_path, "7_2", 0, "out", ["task 2\n"])
    assert live_tails(store(), tmp_path.as_uri(), "7", TAG, START) == {}
    publish(tmp_path, "7", 0, "out", ["the job's own\n"])
    assert live_tails(store(), tmp_path.as_uri(), "7", TAG, START) == {"stdout": "the job's own"}


def test_a_line_longer_than_what_is_read_keeps_its_end(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(live_tail, "PIECES_PER_STREAM", 1)
    publish(tmp_path, "7", 0, "out", ["start\n", "the end of a line that has not ended"])
    assert live_tails(store(), tmp_path.as_uri(), "7", TAG, START) == {"stdout": "the end of a line that has not ended"}
