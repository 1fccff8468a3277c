"""The follower of a job's pieces: where its listing starts, the lines it makes, what it shows."""

from __future__ import annotations

import json

from airflow_provider_slurmapi.client.live_output import LINE_CAP, LiveFollower, LiveLine, Piece

TAG, SUBMITTED = "0a1b2c3d", 1_796_000_000


def piece(seq: int, stream: str = "out", *, job: str = "7", run: int = 0, start: int = 0) -> Piece:
    return Piece(SUBMITTED + 10 * seq, job, TAG, run, stream, seq, start)


def texts(lines: list[LiveLine]) -> list[str]:
    return [line.text for line in lines]


def test_a_new_follower_lists_from_its_jobs_submission_less_the_skew() -> None:
    follower = LiveFollower.from_submission("7", TAG, SUBMITTED + 0.9)
    assert follower.since == SUBMITTED - LiveFollower.SKEW


def test_a_listing_that_leaves_nothing_of_the_job_untaken_moves_the_offset_to_its_start() -> None:
    pending = LiveFollower.from_submission("7", TAG, SUBMITTED)
    pending.caught_up(pending.since, SUBMITTED + 3600)  # an hour later, still nothing published
    assert pending.since == SUBMITTED + 3600 - LiveFollower.SKEW


def test_a_listing_begun_past_the_followers_offset_moves_nothing() -> None:
    follower = LiveFollower.from_submission("7", TAG, SUBMITTED)
    follower.caught_up(follower.since + 1, SUBMITTED + 3600)  # it may have missed the older pieces
    assert follower.since == SUBMITTED - LiveFollower.SKEW


def test_a_seq_gap_keeps_the_offset_where_the_missing_piece_is_still_listed() -> None:
    follower = LiveFollower.from_submission("7", TAG, SUBMITTED)
    names = [piece(0).name, piece(2).name]  # piece 1 not uploaded yet
    chosen, complete = follower.choose(names)
    assert chosen == [piece(0)] and not complete
    assert follower.choose([piece(0).name])[1]


def test_pieces_are_taken_in_order_whatever_the_listing_order() -> None:
    follower = LiveFollower("7", TAG)
    assert follower.wanted([piece(1).name, piece(0).name, piece(0, "err").name]) == [
        piece(0, "err"),
        piece(0),
        piece(1),
    ]


def test_lines_are_made_across_pieces_with_the_offset_after_each_in_the_jobs_file() -> None:
    follower = LiveFollower("7", TAG)
    assert follower.take(piece(0), b"one\ntw") == [LiveLine("one", 4)]
    assert follower.take(piece(1), b"o\nthree") == [LiveLine("two", 8)]
    assert follower.rest() == {"7-0-out": LiveLine("three", 13)}


def test_a_character_split_between_two_pieces_is_shown_whole_and_the_state_keeps_its_first_bytes() -> None:
    follower = LiveFollower("7", TAG)
    data = "température 20 °C ✓\n".encode()
    split = data.index("✓".encode()) + 1  # inside the three bytes of ✓
    assert follower.take(piece(0), data[:split]) == []
    follower = LiveFollower.from_dict(json.loads(json.dumps(follower.to_dict())))  # a trigger started again
    assert follower.take(piece(1), data[split:]) == [LiveLine("température 20 °C ✓", len(data))]


def test_bytes_that_are_not_utf8_are_still_replaced() -> None:
    follower = LiveFollower("7", TAG)
    assert texts(follower.take(piece(0), b"bad \xff byte\n")) == ["bad \ufffd byte"]
    assert texts(follower.take(piece(1), b"\xe2\x9c\n")) == ["\ufffd"]  # an unfinished character before a newline


def test_a_progress_bar_costs_no_more_than_its_last_state() -> None:
    follower = LiveFollower("7", TAG)
    for seq in range(50):
        bar = "".join(f"\r{percent:3d}%|{'#' * (percent // 10):<10}|" for percent in range(seq * 2, seq * 2 + 2))
        assert follower.take(piece(seq), bar.encode()) == []
    assert len(json.dumps(follower.to_dict())) < 600
    assert texts(list(follower.rest().values())) == [" 99%|######### |"]
    assert texts(follower.take(piece(50), b"\r100%|##########|\n")) == ["100%|##########|"]


def test_a_line_ending_in_a_carriage_return_keeps_its_last_non_empty_segment() -> None:
    follower = LiveFollower("7", TAG)
    follower.take(piece(0), b"loading 10%\rloading 90%\r")
    assert texts(list(follower.rest().values())) == ["loading 90%"]
    assert texts(follower.take(piece(1), b"\n")) == ["loading 90%"]
    assert texts(follower.take(piece(2), b"a\rb\n" + b"windows line\r\n")) == ["b", "windows line"]


def test_a_line_that_never_ends_is_kept_to_the_cap_and_tells_what_was_cut() -> None:
    follower = LiveFollower("7", TAG)
    for seq in range(10):
        follower.take(piece(seq), b"." * 3000)
    assert len(json.dumps(follower.to_dict())) < LINE_CAP + 600
    [line] = follower.take(piece(10), b"end\n")
    assert line == LiveLine("." * LINE_CAP, 30_004, 30_003 - LINE_CAP)


def test_an_old_saved_state_loads_its_unended_line_capped() -> None:
    old = {
        "job": "7", "tag": TAG, "since": 5, "next_seq": {"7-0-out": 3},
        "partial": {"7-0-out": "x" * 100_000}, "taken": {"7-0-out": 120_000},
    }  # fmt: skip
    follower = LiveFollower.from_dict(old)
    assert follower.next_seq == {"7-0-out": 3} and follower.since == 5
    assert len(follower.partial["7-0-out"]) == LINE_CAP  # type: ignore[index]
    assert follower.shown_bytes() == {"stdout": 120_000}
    assert follower.take(piece(3), b"!\n") == [LiveLine("x" * LINE_CAP, 120_002, 100_001 - LINE_CAP)]


def test_shown_bytes_end_after_the_last_line_logged_not_the_last_taken() -> None:
    follower = LiveFollower("7", TAG)
    lines = follower.take(piece(0), b"one\ntwo\nthree\nfour")
    follower.logged("7-0-out", lines[0])  # the line cap let one line through
    assert follower.shown_bytes() == {"stdout": 4}
    follower.logged("7-0-out", follower.rest()["7-0-out"])  # the unended line, shown at the end
    assert follower.shown_bytes() == {"stdout": 18}


def test_shown_bytes_of_an_appending_run_count_from_its_start_in_the_file() -> None:
    follower = LiveFollower("7", TAG)
    follower.logged("7-0-out", follower.take(piece(0), b"run 1\n")[0])
    assert follower.shown_bytes() == {"stdout": 6}
    follower.take(piece(0, run=1, start=6), b"")  # the requeued run appends: nothing of it shown yet
    assert follower.shown_bytes() == {"stdout": 6}
    follower.logged("7-1-out", follower.take(piece(1, run=1), b"run 2\n")[0])
    assert follower.shown_bytes() == {"stdout": 12}
    follower.take(piece(0, run=2), b"run 3 anew")  # a run that writes the file anew
    assert follower.shown_bytes() == {}


def test_after_a_skipped_piece_the_offsets_are_not_known_so_shown_bytes_stay_before_it() -> None:
    follower = LiveFollower("7", TAG)
    follower.logged("7-0-out", follower.take(piece(0), b"one\n")[0])
    follower.take(piece(1), b"", gap=True)
    [line] = follower.take(piece(2), b"three\n")
    assert line == LiveLine("three", None)
    follower.logged("7-0-out", line)
    assert follower.shown_bytes() == {"stdout": 4}  # the end shows again what follows the gap, never less
