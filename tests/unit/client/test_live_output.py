"""The live-output wrapper, run by a real bash as Slurm would run the batch script: its stdout and
stderr going to the job's files, its pieces under the live folder."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from airflow_provider_slurmapi.client.errors import InvalidRequestError
from airflow_provider_slurmapi.client.live_output import LiveOutputSettings, Piece, folder_tag
from airflow_provider_slurmapi.client.live_wrapper import live_script

SCRIPT = """#!/bin/bash
#SBATCH --gres=gpu:1
# a training run
for step in 1 2 3 4; do
    echo "step $step of $1"
    echo "warning $step" >&2
    printf 'partial line without an end '
    echo
    sleep 0.7
done
exit "${2:-0}"
"""


class Job:
    """A job's try folder and live folder, and how Slurm starts its batch script."""

    def __init__(self, root: Path, job_id: str = "42") -> None:
        self.try_folder, self.live = root / "try-1", root / "live"
        self.try_folder.mkdir(parents=True)
        self.job_id = job_id

    def run(self, script: str, *args: str, period: float = 2, signal_after: float | None = None) -> int:
        wrapper = live_script(
            script, try_folder=str(self.try_folder), live_folder=str(self.live), period=period, array=False
        )
        return self.start(wrapper, *args, signal_after=signal_after)

    def start(self, batch: str, *args: str, signal_after: float | None = None, name: str = "") -> int:
        out = self.try_folder / f"{self.job_id}{name}.out"
        err = self.try_folder / f"{self.job_id}{name}.err"
        env = {"PATH": os.environ["PATH"], "SLURM_JOB_ID": self.job_id, "TMPDIR": str(self.try_folder.parent)}
        with out.open("wb") as stdout, err.open("wb") as stderr:
            process = subprocess.Popen(
                ["bash", "-c", batch, "slurm_script", *args],
                stdout=stdout,
                stderr=stderr,
                env=env,
                start_new_session=True,
            )
            if signal_after is not None:
                time.sleep(signal_after)
                os.killpg(process.pid, signal.SIGTERM)  # what a cancel or the time limit does: every process
            return process.wait(timeout=60)

    def pieces(self, stream: str) -> bytes:
        found = sorted((Piece.parse(p.name), p) for p in self.live.iterdir() if Piece.parse(p.name))
        assert all(piece.tag == folder_tag(str(self.try_folder)) for piece, _ in found)
        return b"".join(path.read_bytes() for piece, path in found if piece.stream == stream)


def test_the_job_prints_the_same_bytes_and_ends_the_same_and_every_byte_is_published(tmp_path: Path) -> None:
    job = Job(tmp_path)
    plain = job.start(SCRIPT, "run-a", "3", name="-plain")
    assert job.run(SCRIPT, "run-a", "3") == plain == 3
    for stream in ("out", "err"):
        mine = (job.try_folder / f"42.{stream}").read_bytes()
        assert mine == (job.try_folder / f"42-plain.{stream}").read_bytes()
        assert job.pieces(stream) == mine  # the last piece came after the last line
    pieces = [Piece.parse(p.name) for p in job.live.iterdir()]
    assert len([p for p in pieces if p and p.stream == "out"]) >= 2  # published while it ran
    assert not list(job.live.glob(".*")) and not list(tmp_path.glob("slurm-job-script.*"))


def test_a_cancelled_job_ends_by_the_signal_and_publishes_its_last_words(tmp_path: Path) -> None:
    script = "#!/bin/bash\ntrap 'echo cleaning up; exit 143' TERM\necho started\nsleep 30 & wait\n"
    job = Job(tmp_path)
    # bash cannot tell an exit code of 129-159 from the signal it stands for: reported as the signal
    assert job.run(script, signal_after=1.0) == -signal.SIGTERM
    assert (job.try_folder / "42.out").read_bytes() == b"started\ncleaning up\n"
    assert job.pieces("out") == b"started\ncleaning up\n"
    killed = Job(tmp_path / "killed")
    assert killed.run("#!/bin/bash\necho started\nsleep 30\n", signal_after=1.0) == -signal.SIGTERM
    assert killed.pieces("out") == b"started\n"


def test_a_signal_for_the_batch_shell_reaches_the_batch_script(tmp_path: Path) -> None:
    script = "#!/bin/bash\ntrap 'echo got USR1; exit 0' USR1\nsleep 30 & wait\n"
    job = Job(tmp_path)
    wrapper = live_script(script, try_folder=str(job.try_folder), live_folder=str(job.live), period=2, array=False)
    out = job.try_folder / "42.out"
    with out.open("wb") as stdout:
        env = {"PATH": os.environ["PATH"], "SLURM_JOB_ID": "42"}
        process = subprocess.Popen(["bash", "-c", wrapper], stdout=stdout, env=env)
        time.sleep(1.0)
        process.send_signal(signal.SIGUSR1)  # --signal=B:USR1: the batch shell alone
        assert process.wait(timeout=30) == 0
    assert out.read_bytes() == b"got USR1\n"


def test_a_live_folder_that_cannot_be_written_never_fails_the_job_and_is_said_once(tmp_path: Path) -> None:
    job = Job(tmp_path)
    job.live.write_text("a file where the folder should be")
    assert job.run(SCRIPT, "run-b") == 0
    err = (job.try_folder / "42.err").read_text().splitlines()
    notes = [line for line in err if "could not publish live output" in line]
    assert len(notes) == 1 and [line for line in err if line not in notes] == [f"warning {n}" for n in range(1, 5)]


@pytest.mark.parametrize(
    ("field", "settings"),
    [
        ("live_output_period", {"period": 1}),
        ("live_output_period", {"period": 7200}),
        ("live_output_max_lines", {"max_lines": 0}),
        ("live_output_max_bytes", {"max_bytes": 10}),
        ("live_output", {"enabled": "yes"}),
    ],
)
def test_bad_settings_are_refused_naming_the_field(field: str, settings: dict[str, object]) -> None:
    with pytest.raises(InvalidRequestError) as refused:
        LiveOutputSettings(**settings)  # type: ignore[arg-type]
    assert refused.value.field == field


def test_a_piece_name_reads_back_and_sorts_by_time() -> None:
    piece = Piece(1796561180, "42_3", "0123abcd", 1, "err", 7)
    assert Piece.parse(f"gs://b/p/live/{piece.name}") == piece
    assert Piece.parse("live/.1796561180-42-0123abcd-0-out-000001.tmp") is None
    assert sorted([Piece(2, "1", "0123abcd", 0, "out", 0).name, piece.name]) == [
        Piece(2, "1", "0123abcd", 0, "out", 0).name,
        piece.name,
    ]


def test_the_task_wins_over_the_connection_which_wins_over_the_defaults() -> None:
    connection = {"live_output": "false", "live_output_period": "30", "live_output_max_lines": None}
    assert LiveOutputSettings.resolve(connection, {}) == LiveOutputSettings(False, 30, explicit=True)
    task = {"live_output": True, "live_output_period": None, "live_output_max_bytes": 4096}
    assert LiveOutputSettings.resolve(connection, task) == LiveOutputSettings(True, 30, max_bytes=4096, explicit=True)
    assert LiveOutputSettings.resolve({"live_output": ""}, {}) == LiveOutputSettings(True, explicit=False)


@pytest.mark.parametrize(
    ("connection", "field"),
    [({"live_output": "maybe"}, "live_output"), ({"live_output_period": "1"}, "live_output_period")],
)
def test_a_bad_connection_extra_is_refused_naming_it(connection: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidRequestError, match=f"^{field}: must be"):
        LiveOutputSettings.resolve(connection, {})


def test_a_python_batch_script_runs_under_the_wrapper_with_the_same_output(tmp_path: Path) -> None:
    job = Job(tmp_path)
    script = "#!/usr/bin/env python3\nimport sys, time\nfor i in range(3):\n    print(f'step {i}', flush=True)\n    time.sleep(0.5)\nsys.exit(4)\n"
    assert job.run(script) == 4
    assert (job.try_folder / "42.out").read_bytes() == b"step 0\nstep 1\nstep 2\n"
    published = b"".join(path.read_bytes() for path in sorted(job.live.iterdir()) if "-out-" in path.name)
    assert published == b"step 0\nstep 1\nstep 2\n"
