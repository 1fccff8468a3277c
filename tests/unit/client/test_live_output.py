"""The live-output wrapper, run as Slurm runs a batch script: the file executed with the job's
arguments, its stdout and stderr going to the job's files, in a session of its own. Most cases run
the user's script twice, bare and wrapped, and expect the same job."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_slurmapi.client.errors import InvalidRequestError
from airflow_provider_slurmapi.client.jobs import ExitCode, JobStatus
from airflow_provider_slurmapi.client.live_output import LiveOutputSettings, Piece, folder_tag
from airflow_provider_slurmapi.client.live_wrapper import LIVE_SCRIPT_UNCOPIED, live_script, uncopied_script_headline
from airflow_provider_slurmapi.client.output import OutputSettings
from airflow_provider_slurmapi.client.staging import StagedScript

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
# a job starts with every signal's default action, whatever the shell running the tests ignores
LAUNCH = ("env", "--default-signal")
# a script is written and started under this lock: a process forked meanwhile would hold it open
# for writing, and its exec fail ("Text file busy")
STARTING = threading.Lock()
REFUSAL = re.compile(
    r"slurm-job-api: cannot make a private copy of the batch script in (.+?): (.+); the job runs none of it"
)


@dataclass
class Ended:
    code: int
    out: bytes
    err: bytes
    pid: int
    seen: Any = None  # what the case's action saw while the job ran


class Job:
    """A job's try folder and live folder, and how Slurm starts its batch script."""

    def __init__(self, root: Path, job_id: str = "42", tmpdir: Path | None = None) -> None:
        self.root, self.try_folder, self.live = root, root / "try-1", root / "live"
        self.try_folder.mkdir(parents=True)
        self.job_id, self.tmpdir = job_id, tmpdir or root
        self.out, self.err = self.try_folder / f"{job_id}.out", self.try_folder / f"{job_id}.err"

    def wrap(self, script: str, *, period: int = 2, array: bool = False) -> str:
        return live_script(
            script, try_folder=str(self.try_folder), live_folder=str(self.live), period=period, array=array
        )

    def start(
        self,
        batch: str,
        *args: str,
        stdin: Path | None = None,
        env: dict[str, str] | None = None,
        launch: tuple[str, ...] = LAUNCH,
        append: bool = False,
        one_file: bool = False,
    ) -> subprocess.Popen[bytes]:
        path = self.root / "slurm_script"
        environment = {"PATH": os.environ["PATH"], "SLURM_JOB_ID": self.job_id, "TMPDIR": str(self.tmpdir)}
        mode = "ab" if append else "wb"
        with (
            self.out.open(mode) as out,
            self.err.open(mode) as err,
            stdin.open("rb") if stdin else open(os.devnull, "rb") as given,  # noqa: SIM115
            STARTING,
        ):
            path.write_text(batch)
            path.chmod(0o700)
            return subprocess.Popen(
                [*launch, str(path), *args],
                stdin=given,
                stdout=out,
                stderr=subprocess.STDOUT if one_file else err,
                env={**environment, **(env or {})},
                cwd=self.root.parent,
                start_new_session=True,
            )

    def ready(self) -> None:
        """Until the script says it is ready (its handlers set)."""
        deadline = time.monotonic() + 20
        while b"ready\n" not in self.out.read_bytes():
            assert time.monotonic() < deadline, "the script never said it was ready"
            time.sleep(0.05)

    def end(self, process: subprocess.Popen[bytes]) -> int:
        """The job's end, once its batch process and the publisher have ended (Slurm's end of the
        job then kills what is left of the session)."""
        try:
            code = process.wait(timeout=20)
            deadline = time.monotonic() + 20
            while session_lives(process.pid) and time.monotonic() < deadline:
                time.sleep(0.05)
            return code
        finally:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def pieces(self, stream: str) -> list[tuple[Piece, bytes]]:
        found = sorted((piece, path) for path in self.live.iterdir() if (piece := Piece.parse(path.name)))
        assert all(piece.tag == folder_tag(str(self.try_folder)) for piece, _ in found)
        return [(piece, path.read_bytes()) for piece, path in found if piece.stream == stream]

    def published(self, stream: str) -> bytes:
        return b"".join(data for _, data in self.pieces(stream))


def session_lives(pid: int) -> bool:
    """Whether a process of the job's session (its own group, as started) is still there."""
    try:
        os.killpg(pid, 0)
    except ProcessLookupError:
        return False
    return True


def children(pid: int) -> list[int]:
    found = []
    for entry in os.scandir("/proc"):
        try:
            if entry.name.isdigit() and Path(f"/proc/{entry.name}/stat").read_text().rsplit(")", 1)[1].split()[
                1
            ] == str(pid):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


Action = Callable[[subprocess.Popen[bytes]], Any]


def run_job(root: Path, script: str, *args: str, wrap: bool, act: Action | None = None, **start: Any) -> Ended:
    job = Job(root, tmpdir=root.parent)
    process = job.start(job.wrap(script) if wrap else script, *args, **start)
    seen = None
    try:
        if act is not None:
            job.ready()
            seen = act(process)
    finally:
        code = job.end(process)
    ended = Ended(code, job.out.read_bytes(), job.err.read_bytes(), process.pid, seen)
    if wrap:  # every byte the job printed was published, whatever its end
        assert (job.published("out"), job.published("err")) == (ended.out, ended.err)
    return ended


def bare_and_wrapped(root: Path, cases: dict[str, tuple[Any, ...]], **start: Any) -> dict[str, tuple[Ended, Ended]]:
    """Each case (script, args, action) run bare and wrapped, side by side."""

    def one(name: str, wrap: bool, script: str, args: tuple[str, ...], act: Action | None) -> Ended:
        return run_job(root / name / ("wrapped" if wrap else "bare"), script, *args, wrap=wrap, act=act, **start)

    with ThreadPoolExecutor(12) as pool:
        futures = {
            (name, wrap): pool.submit(one, name, wrap, *case) for name, case in cases.items() for wrap in (False, True)
        }
        return {name: (futures[name, False].result(), futures[name, True].result()) for name in cases}


def same(ended: tuple[Ended, Ended]) -> tuple[int, bytes, bytes]:
    bare, wrapped = ended
    assert (wrapped.code, wrapped.out, wrapped.err) == (bare.code, bare.out, bare.err)
    return bare.code, bare.out, bare.err


def test_the_job_prints_the_same_bytes_and_ends_the_same_and_every_byte_is_published(tmp_path: Path) -> None:
    ended = bare_and_wrapped(tmp_path, {"training": (SCRIPT, ("run-a", "3"), None)})["training"]
    assert same(ended)[0] == 3
    live = tmp_path / "training" / "wrapped" / "live"
    pieces = [Piece.parse(path.name) for path in live.iterdir()]
    assert len([p for p in pieces if p and p.stream == "out"]) >= 2  # published while it ran
    assert not list(live.glob(".*")) and not list(tmp_path.glob("**/slurm-job-script.*"))


def test_every_exit_code_is_the_scripts_own(tmp_path: Path) -> None:
    script = '#!/bin/bash\necho "ending with $1"\necho "to stderr" >&2\nexit "$1"\n'
    codes = (0, 1, 3, 127, 128, 129, 143, 147, 159, 255)
    ended = bare_and_wrapped(tmp_path, {str(code): (script, (str(code),), None) for code in codes})
    assert [same(ended[str(code)])[0] for code in codes] == list(codes)  # 147 (SIGSTOP's number) too


def _signal(number: signal.Signals) -> Action:
    def send(process: subprocess.Popen[bytes]) -> None:
        os.kill(process.pid, number)  # the script's own process, not its group

    return send


def test_a_script_killed_by_a_signal_dies_of_it_and_its_output_is_untouched(tmp_path: Path) -> None:
    # it waits in bash itself (a read that never ends): bash would outlive an INT that a child survives
    script = '#!/bin/bash\necho "to stderr" >&2\necho ready\nread -r -t 30 _ <> <(:)\necho "not reached"\n'
    deaths = (signal.SIGKILL, signal.SIGSEGV, signal.SIGABRT, signal.SIGTERM, signal.SIGINT)
    ended = bare_and_wrapped(tmp_path, {number.name: (script, (), _signal(number)) for number in deaths})
    for number in deaths:
        code, out, err = same(ended[number.name])
        assert (code, out, err) == (-number, b"ready\n", b"to stderr\n")  # no "Segmentation fault" line


HANDLED_IN_BASH = """#!/bin/bash
trap 'echo "got $1"; exit 7' "$1"
echo ready
while :; do sleep 0.1; done
"""
HANDLED_IN_PYTHON = f"""#!{sys.executable}
import signal, sys, time

def handler(number, frame):
    print("got", signal.Signals(number).name[3:], flush=True)
    sys.exit(7)

signal.signal(getattr(signal, "SIG" + sys.argv[1]), handler)
print("ready", flush=True)
while True:
    time.sleep(0.1)
"""


def test_a_signal_for_the_batch_process_alone_reaches_the_scripts_handler(tmp_path: Path) -> None:
    names = ("USR1", "USR2", "TERM", "INT", "QUIT", "HUP")

    def send(name: str) -> Action:
        def act(process: subprocess.Popen[bytes]) -> list[int]:
            found = children(process.pid)  # the publisher is no child of the script's process
            os.kill(process.pid, signal.Signals[f"SIG{name}"])  # --signal=B:..., scancel --batch
            return found

        return act

    cases = {
        f"{lang}-{name}": (script, (name,), send(name))
        for name in names
        for lang, script in (("bash", HANDLED_IN_BASH), ("python", HANDLED_IN_PYTHON))
    }
    ended = bare_and_wrapped(tmp_path, cases)
    for name in names:
        for lang in ("bash", "python"):
            assert same(ended[f"{lang}-{name}"])[:2] == (7, f"ready\ngot {name}\n".encode())
        assert [run.seen for run in ended[f"python-{name}"]] == [[], []]


PROBE_BASH = """#!/bin/bash
echo "pid $$ args $# $*"
grep '^SigIgn:' /proc/$$/status  # (what bash blocks and catches changes as it runs)
fds=(/proc/$$/fd/*)
echo "fds ${fds[*]##*/}"
env | sort
echo "stdin: $(cat)"
"""
PROBE_PYTHON = f"""#!{sys.executable}
import os, sys
print("pid", os.getpid(), "args", len(sys.argv) - 1, *sys.argv[1:])
print(*[line for line in open("/proc/self/status").read().splitlines() if line.startswith(("SigBlk", "SigIgn", "SigCgt"))], sep="\\n")
print("fds", *sorted(os.listdir("/proc/self/fd"), key=int))
print(*sorted(key + "=" + value for key, value in os.environ.items()), sep="\\n")
print("stdin:", sys.stdin.read(), flush=True)
"""


def test_the_script_is_the_batch_process_with_its_stdin_environment_dispositions_and_fds(tmp_path: Path) -> None:
    given = tmp_path / "input"
    given.write_text("the job's --input\nsecond line\n")
    cases = {"bash": (PROBE_BASH, ("a b", "c"), None), "python": (PROBE_PYTHON, ("a b", "c"), None)}
    env = {"SLURM_RESTART_COUNT": "0", "BASH_FUNC_module%%": '() {  echo module "$@"\n}'}
    ended = bare_and_wrapped(tmp_path, cases, stdin=given, env=env)
    for lang in cases:
        bare, wrapped = ended[lang]
        assert (bare.code, wrapped.code, bare.err, wrapped.err) == (0, 0, b"", b""), (bare.err, wrapped.err)
        lines = [run.out.decode().replace(str(run.pid), "PID").splitlines() for run in (bare, wrapped)]
        # the script's process is the one Slurm started: the same PID
        assert lines[0][0] == lines[1][0] == "pid PID args 2 a b c"
        fds = [next(line for line in run if line.startswith("fds ")).split()[1:] for run in lines]
        assert sorted(fds[1], key=int) == sorted([*fds[0], "9"], key=int)  # and the copy it runs, open as fd 9
        differing = set(lines[0]) ^ set(lines[1])
        assert {line for line in differing if not line.startswith("fds ")} == set(), (lang, differing)


@pytest.mark.parametrize(
    ("case", "launch"),
    [
        pytest.param("a file", LAUNCH, id="TMPDIR a file"),
        pytest.param("missing", LAUNCH, id="TMPDIR missing"),
        # a full disk: a write past the limit fails (its signal ignored, as a full disk has none)
        pytest.param("full", ("prlimit", "--fsize=4096", *LAUNCH, "--ignore-signal=XFSZ"), id="TMPDIR full"),
    ],
)
def test_a_script_that_cannot_be_copied_runs_none_of_it_and_says_why(
    tmp_path: Path, case: str, launch: tuple[str, ...]
) -> None:
    tmpdir = tmp_path / "tmp"
    if case == "a file":
        tmpdir.write_text("not a folder")
    elif case == "full":
        tmpdir.mkdir()
    marker = tmp_path / "ran"
    script = f"#!/bin/bash\ntouch {marker}\necho ran\n" + "# padding\n" * 1000
    job = Job(tmp_path / "job", tmpdir=tmpdir)
    assert job.end(job.start(job.wrap(script), launch=launch)) == LIVE_SCRIPT_UNCOPIED == 96
    assert job.out.read_bytes() == b"" and not marker.exists()
    lines = job.err.read_text().splitlines()
    assert len(lines) == 1 and (found := REFUSAL.fullmatch(lines[0])), lines
    assert found[1] == str(tmpdir)
    assert (
        found[2]
        == {"a file": "Not a directory", "missing": "No such file or directory", "full": "File too large"}[case]
    )
    assert not tmpdir.is_dir() or list(tmpdir.iterdir()) == []  # no copy left behind


def test_the_task_failure_says_the_script_could_not_be_copied() -> None:
    excerpt = (
        "\n[job 7 stderr] slurm-job-api: cannot make a private copy of the batch script in /tmp: "
        "No space left on device; the job runs none of it"
    )
    refused = JobStatus(job_id="7", state="FAILED", exit_code=ExitCode("ERROR", LIVE_SCRIPT_UNCOPIED))
    headline = uncopied_script_headline(refused, excerpt)
    assert headline.startswith("The job could not make a private copy of its batch script in /tmp")
    assert "No space left on device" in headline and f"exit code {LIVE_SCRIPT_UNCOPIED}" in headline
    other = JobStatus(job_id="7", state="FAILED", exit_code=ExitCode("ERROR", 1))
    assert uncopied_script_headline(other, excerpt) == ""  # the same words with the job's own code
    assert uncopied_script_headline(refused, "\n[job 7 stderr] out of memory") == ""


def test_a_link_planted_where_the_output_was_is_never_followed(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_bytes(b"only the job's user may read this\n" * 10)
    script = '#!/bin/bash\necho ready\nfor i in 1 2 3 4 5 6; do echo "line $i"; echo "err $i" >&2; sleep 0.5; done\n'
    job = Job(tmp_path / "job")
    process = job.start(job.wrap(script))
    own = job.try_folder / "own.out"
    job.ready()
    os.link(job.out, own)  # the job's own file, kept apart
    job.out.unlink()
    job.out.symlink_to(secret)  # another job, through a shared mount
    assert job.end(process) == 0
    assert job.published("out") == own.read_bytes() == b"ready\n" + b"".join(b"line %d\n" % i for i in range(1, 7))
    assert job.published("err") == job.err.read_bytes()


def test_a_requeued_run_appending_to_the_files_publishes_only_its_own_bytes(tmp_path: Path) -> None:
    job = Job(tmp_path / "job")
    earlier = b"the first run's line\n" * 50
    job.out.write_bytes(earlier)
    script = "#!/bin/bash\necho 'second run'\nsleep 0.5\necho 'second run again'\necho 'second run err' >&2\n"
    process = job.start(job.wrap(script), env={"SLURM_RESTART_COUNT": "1"}, append=True)
    assert job.end(process) == 0
    assert job.out.read_bytes() == earlier + b"second run\nsecond run again\n"
    assert job.published("out") == b"second run\nsecond run again\n"
    assert job.published("err") == b"second run err\n"
    (first, _), *_ = job.pieces("out")
    assert (first.run, first.seq, first.start) == (1, 0, len(earlier))
    assert first.name.endswith(f"-1-out-000000+{len(earlier)}")
    assert job.pieces("err")[0][0].start == 0  # a new file starts at 0: no offset in the name


def test_one_file_for_stdout_and_stderr_is_published_once_and_array_tasks_by_their_ref(tmp_path: Path) -> None:
    job = Job(tmp_path / "job")
    script = "#!/bin/bash\necho one\necho two >&2\necho three\n"
    env = {"SLURM_ARRAY_JOB_ID": "40", "SLURM_ARRAY_TASK_ID": "3"}
    assert job.end(job.start(job.wrap(script, array=True), env=env, one_file=True)) == 0
    assert job.published("out") == job.out.read_bytes() == b"one\ntwo\nthree\n"
    assert job.pieces("err") == [] and {piece.job for piece, _ in job.pieces("out")} == {"40_3"}


def test_a_staged_live_script_runs_the_same(tmp_path: Path) -> None:
    job = Job(tmp_path / "job")
    script = "#!/bin/bash\n" + "# padding\n" * 100 + 'echo "pid $$ args $*"\necho "to stderr" >&2\nexit 5\n'
    staged = StagedScript.plan(job.wrap(script), OutputSettings(uri=f"file://{tmp_path}", cluster_path=str(tmp_path)))
    Path(staged.cluster_file).parent.mkdir(parents=True)
    Path(staged.cluster_file).write_bytes(staged.data)
    process = job.start(staged.wrapper, "a", "b")
    assert job.end(process) == 5
    assert job.out.read_bytes() == f"pid {process.pid} args a b\n".encode()
    assert (job.published("out"), job.published("err")) == (job.out.read_bytes(), b"to stderr\n")


def test_a_cancelled_job_ends_as_its_script_does_and_publishes_its_last_words(tmp_path: Path) -> None:
    def cancel(process: subprocess.Popen[bytes]) -> None:
        os.killpg(process.pid, signal.SIGTERM)  # a cancel or the time limit: every process of the job

    # (the loop's stderr: bash may say a sleep was "Terminated", or not, as the signal finds it)
    cleaning = (
        "#!/bin/bash\ntrap 'echo cleaning up; exit 143' TERM\necho ready\nwhile :; do sleep 0.1; done 2>/dev/null\n"
    )
    killed = "#!/bin/bash\necho ready\nwhile :; do sleep 0.1; done 2>/dev/null\n"
    ended = bare_and_wrapped(tmp_path, {"cleaning": (cleaning, (), cancel), "killed": (killed, (), cancel)})
    assert same(ended["cleaning"]) == (143, b"ready\ncleaning up\n", b"")
    assert same(ended["killed"]) == (-signal.SIGTERM, b"ready\n", b"")


def test_a_live_folder_that_cannot_be_written_never_fails_the_job_and_is_said_once(tmp_path: Path) -> None:
    job = Job(tmp_path / "job")
    job.live.write_text("a file where the folder should be")
    assert job.end(job.start(job.wrap(SCRIPT), "run-b")) == 0
    err = job.err.read_text().splitlines()
    notes = [line for line in err if "could not publish live output" in line]
    assert len(notes) == 1 and [line for line in err if line not in notes] == [f"warning {n}" for n in range(1, 5)]


def test_the_same_script_wraps_the_same() -> None:
    def wrapped() -> str:
        return live_script(SCRIPT, try_folder="/mnt/out/t/try-1", live_folder="/mnt/out/live", period=10, array=False)

    assert wrapped() == wrapped()
    assert wrapped().splitlines()[:2] == ["#!/bin/bash", "#SBATCH --gres=gpu:1"]


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
