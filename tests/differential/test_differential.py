"""The live-output wrapper changes nothing about the user's job: each case runs bare (the user's
script as the user would submit it) and wrapped (``live_script`` around it, with the job
description the operator builds), and what was observed is compared field by field.

Bare on real Slurm is the cluster's own ``sbatch``, run as the user the provider's jobs run as;
bare on the built-in emulator is the hook submitting the user's script. Wrapped is the hook
submitting ``live_script(...)`` (and, for the staged cases, ``live_script`` around the staged
wrapper, with the staged copy in place). Every independent case is submitted at once and waited
for together; the preemption runs apart (it preempts every job of the node).

Observed per run: the state, the exit code (return code or signal), the bytes of the job's stdout
and stderr, and what the script records in a side file: the traps or handlers that ran, what it
read from stdin, whether ``$$`` is the batch step's task (``SLURM_TASK_PID``) and its parent's
name, the ignored and blocked signals its programs inherit, and its environment.

What differs per job, not per wrapper, is taken out before comparing: in the output and the
environment the job's ID becomes ``{job}``, its run folder ``{run}`` and a time stamp ``{time}``;
the environment leaves out ``PER_JOB`` (and, on real Slurm, ``BY_SUBMISSION``: what ``sbatch``
sets and a job submitted through slurmrestd does not, or the other way round).

The real-Slurm table is in docs/output.md; ``python -m tests.differential.table`` rewrites it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_slurmapi.client.jobs import JobStatus
from airflow_provider_slurmapi.client.live_output import LIVE_FOLDER
from airflow_provider_slurmapi.client.live_wrapper import live_script
from airflow_provider_slurmapi.client.output import OutputSettings
from airflow_provider_slurmapi.client.staging import StagedScript
from airflow_provider_slurmapi.emulator import Emulator, EmulatorConfig
from airflow_provider_slurmapi.hooks.slurm_job_api import SlurmJobApiHook
from tests.conftest import connection_json
from tests.differential import table
from tests.real_slurm import NODE, RealSlurm

PATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"  # the hook's default environment
PARTITION = "shared"  # scripts/slurm-up.sh: many small jobs at once on the one node
WARNING_DELAY = 30  # seconds before the time limit (2 minutes) that --signal=B:SIG@T signals
SIGNALS = ("USR1", "USR2", "TERM", "INT", "QUIT", "HUP")
INPUT = b"first line\nsecond line\n"
# the environment's variables that differ from one job to the next (or one run to the next)
PER_JOB = frozenset({"SLURM_JOB_ID", "SLURM_JOBID", "SLURM_TASK_PID", "SLURM_JOB_START_TIME", "SLURM_JOB_END_TIME"})
# what sbatch puts in a job's environment and slurmrestd does not (the MPI launchers' settings,
# the options given as -c), or with another value (the submitting process's nice value)
BY_SUBMISSION = frozenset(
    {
        "HYDRA_BOOTSTRAP",
        "HYDRA_LAUNCHER_EXTRA_ARGS",
        "I_MPI_HYDRA_BOOTSTRAP",
        "I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS",
        "OMPI_MCA_plm_slurm_args",
        "PRTE_MCA_plm_slurm_args",
        "SLURM_CPUS_PER_TASK",
        "SLURM_TRES_PER_TASK",
        "SLURM_PRIO_PROCESS",
        "SLURM_SUBMIT_DIR",
        "SLURM_SUBMIT_HOST",
    }
)

# --- the cases ----------------------------------------------------------------------------------

# What every script records first: its run, its PID, its parent, the dispositions its programs
# inherit, its environment.
BASH = r"""#!/bin/bash
side=$PWD/side
echo "run ${SLURM_RESTART_COUNT:-0}" >>"$side"
if [ "$$" = "${SLURM_TASK_PID:-}" ]; then echo "pid task" >>"$side"; else echo "pid other" >>"$side"; fi
echo "parent $(cat /proc/$(awk '/^PPid:/{print $2}' /proc/$$/status)/comm)" >>"$side"
grep -E '^Sig(Ign|Blk):' /proc/self/status >>"$side"
env >"$PWD/env"
"""
PYTHON = r"""#!/usr/bin/python3
import os, signal, sys, time
side = os.path.join(os.getcwd(), "side")
def note(line):
    with open(side, "a") as file:
        file.write(line + "\n")
note("run " + os.environ.get("SLURM_RESTART_COUNT", "0"))
note("pid task" if str(os.getpid()) == os.environ.get("SLURM_TASK_PID") else "pid other")
with open(f"/proc/{os.getppid()}/comm") as file:
    note("parent " + file.read().strip())
with open("/proc/self/status") as file:
    for line in file:
        if line.startswith(("SigIgn:", "SigBlk:")):
            note(line.strip())
with open(os.path.join(os.getcwd(), "env"), "w") as file:
    file.writelines(f"{key}={value}\n" for key, value in os.environ.items())
"""
OUTPUT = 'echo "stdout of the job"\necho "stderr of the job" >&2\n'
# a trap for each signal that records it and exits 3 a second later (Slurm may follow a signal with
# a SIGCONT: a process already gone has slurmstepd write an error into the job's stderr, bare or
# not); the job waits a few minutes for one
BASH_TRAPS = (
    f'for s in {" ".join(SIGNALS)}; do trap "echo \'trap $s\' >>\\"\\$side\\"; sleep 1; exit 3" $s; done\n'
    'echo ready >>"$side"\n'
    "for i in $(seq 300); do sleep 1; done\n"
    'echo "no signal" >>"$side"\n'
)
PYTHON_HANDLERS = f"""def handler(number, frame):
    note("handler " + signal.Signals(number).name[3:])
    time.sleep(1)
    sys.exit(3)
for name in {SIGNALS!r}:
    signal.signal(getattr(signal, "SIG" + name), handler)
note("ready")
for _ in range(300):
    time.sleep(1)
note("no signal")
"""


@dataclass(frozen=True)
class Case:
    name: str  # the table's row
    script: str
    act: str = ""  # "batch SIG" (scancel --batch --signal), "cancel" (scancel), "preempt"
    warning: str = ""  # --signal=B:SIG@WARNING_DELAY (kill_warning_*, flags BATCH_JOB)
    time_limit: int = 1  # minutes
    stdin: bool = False  # INPUT as the job's standard input
    staged: bool = False  # the wrapped run is the live wrapper around the staged wrapper

    @property
    def slug(self) -> str:
        return re.sub(r"[^a-z0-9]+", "-", self.name.lower()).strip("-")

    @property
    def trapping(self) -> bool:
        return "ready" in self.script


def _cases() -> list[Case]:
    cases = [
        Case(f"exit {code}", BASH + OUTPUT + f"exit {code}\n") for code in (0, 1, 2, 127, 128, 129, 143, 147, 159, 255)
    ]
    cases += [
        Case(f"killed by {name}", BASH + OUTPUT + f'kill -{name} $$\necho "still running" >>"$side"\nexit 0\n')
        for name in ("KILL", "SEGV", "ABRT", "TERM", "INT")
    ]
    for name in SIGNALS:
        # Slurm may send the warning up to 60 s early: a 2-minute limit keeps it well after the start
        for script, kind in ((BASH + BASH_TRAPS, "bash trap"), (PYTHON + PYTHON_HANDLERS, "Python handler")):
            cases.append(Case(f"--signal=B:{name}@{WARNING_DELAY}, {kind}", script, warning=name, time_limit=2))
    for name in SIGNALS:
        cases.append(Case(f"scancel -b -s {name}, bash trap", BASH + BASH_TRAPS, act=f"batch {name}"))
        cases.append(Case(f"scancel -b -s {name}, Python handler", PYTHON + PYTHON_HANDLERS, act=f"batch {name}"))
    time_limit = (
        'trap \'echo "trap TERM" >>"$side"\' TERM\necho ready >>"$side"\nfor i in $(seq 300); do sleep 1; done\n'
    )
    reads = 'read -r first\nread -r second\necho "read $first|$second" >>"$side"\n'
    cases += [
        Case("scancel", BASH + OUTPUT + BASH_TRAPS, act="cancel"),
        Case("time limit", BASH + OUTPUT + time_limit),
        Case("standard input", BASH + OUTPUT + reads, stdin=True),
        Case("exit 147, staged", BASH + OUTPUT + "exit 147\n", staged=True),
        Case("killed by SEGV, staged", BASH + OUTPUT + "kill -SEGV $$\nexit 0\n", staged=True),
        Case("scancel -b -s USR1, bash trap, staged", BASH + BASH_TRAPS, act="batch USR1", staged=True),
        Case("preempted and requeued", BASH + OUTPUT + PREEMPTED, act="preempt"),
    ]
    return cases


# the first run is preempted (its TERM trap records it and goes on); the run after the requeue ends
PREEMPTED = (
    'trap \'echo "trap TERM" >>"$side"\' TERM\n'
    'if [ "${SLURM_RESTART_COUNT:-0}" -gt 0 ]; then exit 0; fi\n'
    'echo ready >>"$side"\n'
    "for i in $(seq 300); do sleep 1; done\n"
)
CASES = _cases()
KINDS = ("bare", "wrapped")

# --- what a run shows ---------------------------------------------------------------------------


@dataclass
class Run:
    """What one run of a case showed (after the per-job values are taken out)."""

    state: str
    exit: str
    restarts: int
    stdout: bytes
    stderr: bytes
    events: list[str]  # the traps and handlers that ran, what was read, in order, by run
    pid: str
    dispositions: str
    environment: dict[str, str] = field(repr=False)

    def compared(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "exit": self.exit,
            "restarts": self.restarts,
            "stdout": self.stdout,
            "stderr": self.stderr,
            "events": self.events,
            "pid": self.pid,
            "dispositions": self.dispositions,
            "environment": self.environment,
        }

    def cell(self, case: Case) -> str:
        text = f"{self.state} {self.exit}"
        if self.restarts:
            text += f" after {self.restarts} requeue{'s' if self.restarts > 1 else ''}"
        ran = [event for event in self.events if event.startswith(("trap ", "handler "))]
        text += "".join(f", {event} ran" for event in ran)
        if case.trapping and not ran:
            text += ", no trap ran" if case.script.startswith("#!/bin/bash") else ", no handler ran"
        text += "".join(f", {event}" for event in self.events if event.startswith(("read ", "still ")))
        return text


SIGNAL_NAMES = dict(
    enumerate(
        "HUP INT QUIT ILL TRAP ABRT BUS FPE KILL USR1 SEGV USR2 PIPE ALRM TERM STKFLT CHLD CONT STOP TSTP TTIN "
        "TTOU URG XCPU XFSZ VTALRM PROF WINCH IO PWR SYS".split(),
        start=1,
    )
)


def _mask(hex_mask: str) -> str:
    bits = int(hex_mask, 16)
    names = [SIGNAL_NAMES.get(number, str(number)) for number in range(1, 65) if bits >> (number - 1) & 1]
    return ", ".join(names) or "none"


def _exit(status: JobStatus) -> str:
    code = status.exit_code
    if code is None:
        return "no exit code"
    if code.signal is not None and code.status in ("SIGNALED", "CORE_DUMPED"):
        return f"by {SIGNAL_NAMES.get(code.signal, code.signal)}" + (
            " (core dumped)" if code.status == "CORE_DUMPED" else ""
        )
    return str(code.return_code)


def _normal(text: str, job_id: str, run: str) -> str:
    text = text.replace(run, "{run}")
    text = re.sub(rf"(?i)\b(job |jobs/){re.escape(job_id)}\b", r"\1{job}", text)
    return re.sub(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d", "{time}", text)


def observe(status: JobStatus, host: Path, run: str, dropped: frozenset[str]) -> Run:
    job_id = status.job_id

    def read(name: str) -> str:
        path = host / name
        return _normal(path.read_text(errors="replace"), job_id, run) if path.exists() else ""

    side = read("side").splitlines()
    ignored = sorted({_mask(line.split()[1]) for line in side if line.startswith("SigIgn:")})
    blocked = sorted({_mask(line.split()[1]) for line in side if line.startswith("SigBlk:")})
    pids = sorted({line for line in side if line.startswith("pid ")})
    parents = sorted({line.split(" ", 1)[1] for line in side if line.startswith("parent ")})
    environment = dict(line.split("=", 1) for line in read("env").splitlines() if "=" in line)
    return Run(
        state=status.state,
        exit=_exit(status),
        restarts=status.restarts,
        stdout=read(f"{job_id}.out").encode(),
        stderr=read(f"{job_id}.err").encode(),
        events=[
            line for line in side if line.startswith(("run ", "trap ", "handler ", "read ", "still ", "no signal"))
        ],
        pid=", ".join(
            ["$$ is the batch task" if pid == "pid task" else "$$ is not the batch task" for pid in pids]
            + [f"its parent {parent}" for parent in parents]
        ),
        dispositions=f"ignored {' or '.join(ignored) or '?'}, blocked {' or '.join(blocked) or '?'}",
        environment={key: value for key, value in environment.items() if key not in dropped},
    )


# --- the backends ---------------------------------------------------------------------------------


@dataclass
class Backend:
    """Submits and acts on the runs of one backend: real Slurm (through the emulator's slurmrestd
    backend for the hook, the chroot's own commands for bare runs) or the built-in emulator."""

    hook: SlurmJobApiHook
    root: str  # the runs' folder, as jobs see it
    real: RealSlurm | None = None
    emulator: Emulator | None = None

    def host(self, path: str) -> Path:
        return self.real.host_path(path) if self.real else Path(path)

    def folder(self, case: Case, kind: str) -> str:
        return f"{self.root}/{case.slug}/{kind}"

    def prepare(self, case: Case) -> None:
        for kind in KINDS:
            self.host(self.folder(case, kind)).mkdir(parents=True, mode=0o777)
            self.host(self.folder(case, kind)).chmod(0o777)
        if case.stdin:
            self.host(f"{self.root}/{case.slug}/input").write_bytes(INPUT)

    def description(self, case: Case, kind: str) -> dict[str, Any]:
        run = self.folder(case, kind)
        job: dict[str, Any] = {
            "name": f"diff-{case.slug}",
            "current_working_directory": run,
            "standard_output": f"{run}/%j.out",
            "standard_error": f"{run}/%j.err",
            "time_limit": case.time_limit,
            "environment": [PATH],
        }
        if self.real:
            job["partition"] = "debug" if case.act == "preempt" else PARTITION
        if case.act == "preempt":
            job |= {"requeue": True, "cpus_per_task": 1}
        if case.stdin:
            job["standard_input"] = f"{self.root}/{case.slug}/input"
        if case.warning:
            job |= {
                "kill_warning_signal": case.warning,
                "kill_warning_delay": WARNING_DELAY,
                "kill_warning_flags": ["BATCH_JOB"],
            }
        return job

    def submit(self, case: Case, kind: str) -> str:
        job = self.description(case, kind)
        if kind == "bare":
            return self._sbatch(job, case.script) if self.real else self.hook.submit_job(job, case.script)
        script = case.script
        if case.staged:
            settings = OutputSettings(uri=f"file://{self.host(self.root)}", cluster_path=self.root)
            staged = StagedScript.plan(script, settings, dag_id="differential")
            copy = self.host(staged.cluster_file)
            copy.parent.mkdir(parents=True, exist_ok=True)
            copy.write_bytes(staged.data)
            script = staged.wrapper
        wrapped = live_script(
            script,
            try_folder=job["current_working_directory"],
            live_folder=f"{self.root}/{LIVE_FOLDER}",
            period=2,
            array=False,
        )
        return self.hook.submit_job(job, wrapped)

    def _sbatch(self, job: dict[str, Any], script: str) -> str:
        assert self.real is not None
        script_file = f"{job['current_working_directory']}/../script"
        self.host(script_file).write_text(script)
        options = [
            f"--job-name={job['name']}",
            f"--chdir={job['current_working_directory']}",
            f"--output={job['standard_output']}",
            f"--error={job['standard_error']}",
            f"--time={job['time_limit']}",
            f"--partition={job['partition']}",
        ]
        if "standard_input" in job:
            options.append(f"--input={job['standard_input']}")
        if "kill_warning_signal" in job:
            options.append(f"--signal=B:{job['kill_warning_signal']}@{job['kill_warning_delay']}")
        if job.get("requeue"):
            options += ["--requeue", f"--cpus-per-task={job['cpus_per_task']}"]
        sbatch = ("/usr/bin/env", f"--chdir={job['current_working_directory']}", "sbatch", "--parsable")
        return self.as_user(*sbatch, *options, script_file).strip().split(";")[0]

    def as_user(self, *command: str) -> str:
        """A command run inside the chroot as the user the provider's jobs run as, with the
        environment the hook gives its jobs."""
        assert self.real is not None
        uid, gid = (self.real.admin("id", option, self.real.user).strip() for option in ("-u", "-g"))
        chroot = ["chroot", f"--userspec={uid}:{gid}", str(self.real.chroot), "/usr/bin/env", "-i", PATH]
        result = subprocess.run([*chroot, *command], capture_output=True, text=True, timeout=60)
        if result.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} failed (rc {result.returncode}): {result.stderr.strip()}")
        return result.stdout

    def act(self, case: Case, job_id: str) -> None:
        what, _, name = case.act.partition(" ")
        if self.real:
            if what == "batch":
                self.as_user("scancel", "--batch", f"--signal={name}", job_id)
            else:
                self.as_user("scancel", job_id)
        elif what == "batch":
            self.hook.call("DELETE", f"/slurm/v0.0.42/job/{job_id}?signal={name}&flags=BATCH_JOB")
        else:
            self.hook.cancel_job(job_id)

    def preempt(self, job_ids: list[str]) -> None:
        if self.real is None:
            assert self.emulator is not None
            for job_id in job_ids:
                self.emulator.control(job_id, "preempt")
            return
        cpus = self.real.admin("sinfo", "-h", "-n", NODE, "-o", "%c").split()[0]
        self.real.admin("sbatch", "-p", "urgent", "-c", cpus, "-o", "/dev/null", "--wrap", "sleep 2")
        for job_id in job_ids:  # a requeued job waits out a begin time of about 121 s: it starts now
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                status = self.hook.get_job(job_id)
                if status.state == "PENDING" and not status.flags and status.restarts > 0:
                    break
                time.sleep(0.5)
            self.real.admin("scontrol", "update", f"jobid={job_id}", "starttime=now")

    def ready(self, case: Case, kind: str) -> bool:
        side = self.host(f"{self.folder(case, kind)}/side")
        return side.exists() and "ready" in side.read_text().split()

    def run(self, cases: list[Case]) -> dict[tuple[str, str], Run]:
        """Submits every run of the cases at once, acts on each once its script is ready (a
        preemption once all are), and observes each when it has ended."""
        for case in cases:
            self.prepare(case)
        jobs = {(case.name, kind): self.submit(case, kind) for case in cases for kind in KINDS}
        by_name = {case.name: case for case in cases}
        acted: set[tuple[str, str]] = set()
        preempting = [key for key in jobs if by_name[key[0]].act == "preempt"]
        observed: dict[tuple[str, str], Run] = {}
        deadline = time.monotonic() + 300
        while len(observed) < len(jobs):
            assert time.monotonic() < deadline, f"runs still going: {sorted(set(jobs) - set(observed))}"
            if preempting and all(self.ready(by_name[name], kind) for name, kind in preempting):
                self.preempt([jobs[key] for key in preempting])
                preempting = []
            for key, job_id in jobs.items():
                case = by_name[key[0]]
                if key in observed:
                    continue
                if case.act and case.act != "preempt" and key not in acted and self.ready(case, key[1]):
                    acted.add(key)
                    self.act(case, job_id)
                status = self.hook.get_job(job_id)
                if status.is_finished:
                    run = self.folder(case, key[1])
                    dropped = PER_JOB | BY_SUBMISSION if self.real else PER_JOB
                    observed[key] = observe(status, self.host(run), run, dropped)
            time.sleep(1)
        return observed


@contextmanager
def _hook(emulator: Emulator, name: str) -> Iterator[SlurmJobApiHook]:
    variable = f"AIRFLOW_CONN_{name.upper()}"
    os.environ[variable] = connection_json(emulator)
    try:
        yield SlurmJobApiHook(slurm_conn_id=name)
    finally:
        os.environ.pop(variable, None)


def _observe_all(backend: Backend) -> dict[tuple[str, str], Run]:
    """The cases at once, then the preemption apart (it preempts every job on the node)."""
    together = [case for case in CASES if case.act != "preempt"]
    apart = [case for case in CASES if case.act == "preempt"]
    return backend.run(together) | backend.run(apart)


@pytest.fixture(scope="module")
def real_runs(real_slurm: RealSlurm, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[tuple[str, str], Run]]:
    if "shared" not in real_slurm.admin("sinfo", "-h", "-o", "%R").split():  # a Slurm started before it was added
        real_slurm.admin(
            "scontrol",
            "create",
            "PartitionName=shared",
            "Nodes=node1",
            "MaxTime=INFINITE",
            "OverSubscribe=FORCE:32",
            "State=UP",
        )
    work = tmp_path_factory.mktemp("differential-real")
    root = f"/tmp/differential-{uuid.uuid4().hex[:8]}"
    real_slurm.host_path(root).mkdir(mode=0o777)
    real_slurm.host_path(root).chmod(0o777)
    config = real_slurm.emulator_config(key_file=work / "key.json", state_dir=work / "jobs")
    with Emulator(config) as emulator:
        with _hook(emulator, "slurm_differential_real") as hook:
            yield _observe_all(Backend(hook, root, real=real_slurm))
    shutil.rmtree(real_slurm.host_path(root), ignore_errors=True)


@pytest.fixture(scope="module")
def builtin_runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[tuple[str, str], Run]]:
    work = tmp_path_factory.mktemp("differential-builtin")
    config = EmulatorConfig(
        key_file=work / "key.json",
        state_dir=work / "jobs",
        min_job_age=60,
        sched_delay=0.5,
        seconds_per_minute=5,
        kill_wait=1,
        requeue_delay=1,
    )
    root = work / "runs"
    root.mkdir()
    with Emulator(config) as emulator:
        with _hook(emulator, "slurm_differential_builtin") as hook:
            yield _observe_all(Backend(hook, str(root), emulator=emulator))


BACKENDS = ("builtin", pytest.param("real", marks=pytest.mark.real_slurm))


@pytest.mark.parametrize("case", CASES, ids=[case.slug for case in CASES])
@pytest.mark.parametrize("backend", BACKENDS)
def test_wrapped_is_bare(request: pytest.FixtureRequest, backend: str, case: Case) -> None:
    runs = request.getfixturevalue(f"{backend}_runs")
    assert runs[(case.name, "wrapped")].compared() == runs[(case.name, "bare")].compared()


def rows(runs: dict[tuple[str, str], Run]) -> list[tuple[str, str, str]]:
    """The table's rows: each case's state, exit code and what its script recorded (with the
    output that differs from bare's), then the PID, dispositions and environment over all cases."""
    found = []
    for case in CASES:
        bare, wrapped = runs[(case.name, "bare")], runs[(case.name, "wrapped")]
        differing = [name for name in ("stdout", "stderr") if getattr(bare, name) != getattr(wrapped, name)]
        note = f"; {' and '.join(differing)} differ" if differing else ""
        found.append((case.name, bare.cell(case), wrapped.cell(case) + note))

    def over_cases(describe: Callable[[Run, Run], str]) -> tuple[str, str]:
        cells = []
        for kind in KINDS:
            seen = {
                f"{'bash' if case.script.startswith('#!/bin/bash') else 'Python'}: "
                + describe(runs[(case.name, kind)], runs[(case.name, "bare")])
                for case in CASES
            }
            cells.append("; ".join(sorted(seen)))
        return cells[0], cells[1]

    def environment(run: Run, bare: Run) -> str:
        if run is bare:
            return "as Slurm sets it"
        names = sorted(set(run.environment.items()) ^ set(bare.environment.items()))
        return f"differs: {', '.join(sorted({name for name, _ in names}))}" if names else "as bare"

    found.append(("PID", *over_cases(lambda run, bare: run.pid)))
    found.append(("signals ignored and blocked", *over_cases(lambda run, bare: run.dispositions)))
    found.append(("environment", *over_cases(environment)))
    return found


@pytest.mark.real_slurm
def test_the_docs_show_the_real_table(real_runs: dict[tuple[str, str], Run]) -> None:
    observed = table.markdown(rows(real_runs))
    if table.rewriting():
        table.write(observed)
    assert table.documented() == observed, "docs/output.md: rewrite the table with python -m tests.differential.table"
