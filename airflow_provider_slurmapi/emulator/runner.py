"""Run a job's batch script as a local process group, as slurmstepd would, and tell how it ended.

The runner changes no job state: ``run`` answers a ``RunOutcome`` for the scheduler to apply.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shlex
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from airflow_provider_slurmapi.emulator.job_model import ExitInfo, Job, State, Step

log = logging.getLogger(__name__)

IO_SETUP_SIGNAL = 53  # what real Slurm reports when the job's output file cannot be opened

# the srun shim: runs its command as a "step" and records the exit status, so the batch job's
# derived_exit_code can report the worst step like real Slurm does
_SRUN_SHIM = r"""#!/bin/sh
# emulator srun: strip srun's own options, run the command, record "rc start end name"
while [ $# -gt 0 ]; do
  case "$1" in
    --) shift; break ;;
    --*=*) shift ;;
    --ntasks|--nodes|--cpus-per-task|--partition|--job-name|--time|--output|--error|--input|\
--nodelist|--exclude|--chdir|--gpus|--gpus-per-node|--gpus-per-task|--account|--mem|--mem-per-cpu|\
--ntasks-per-node|--gres|--cpu-bind|--distribution|--export|--constraint|--qos|--reservation|\
--dependency|--mpi|--het-group) shift 2 ;;
    -[nNcpJtoeiwxCDGAdmq]) shift 2 ;;
    -*) shift ;;
    *) break ;;
  esac
done
if [ $# -eq 0 ]; then echo "srun: fatal: No command given to execute." >&2; exit 1; fi
start=$(date +%s)
"$@"
rc=$?
end=$(date +%s)
printf '%s %s %s %s\n' "$rc" "$start" "$end" "$(basename "$1")" >> STEPS_FILE
exit $rc
"""


# Run before the script, in its process: like slurmstepd, start it with every signal at its default
# disposition and none blocked, whatever the emulator's own are (started in the background from a
# non-interactive shell, it ignores SIGINT and SIGQUIT, and a child keeps ignored signals across exec).
# Then exec the script in place (same pid); if that fails, say so and exit with errno as slurmstepd does.
_DEFAULT_SIGNALS_SHIM = r"""
import os, signal, sys
for sig in signal.valid_signals():
    if sig not in (signal.SIGKILL, signal.SIGSTOP):
        try:
            signal.signal(sig, signal.SIG_DFL)
        except (OSError, ValueError):
            pass  # the C library's own real-time signals
signal.pthread_sigmask(signal.SIG_SETMASK, [])
node, argv = sys.argv[1], sys.argv[2:]
try:
    os.execv(argv[0], argv)
except OSError as exc:
    what = argv[0]
    if exc.errno == 2 and os.path.exists(what):  # the script is there: its interpreter is not
        with open(what, "rb") as script:
            what = "bad interpreter(" + script.readline().decode(errors="replace")[2:].rstrip("\n") + ")"
    os.write(2, f"slurmstepd-{node}: error: execve(): {what}: {exc.strerror}\n".encode())
    os._exit(exc.errno or 1)
"""


def _with_default_signals(argv: list[str], node: str) -> list[str]:
    """``argv`` run through the shim above (-I -S: no site or user paths to import)."""
    return [sys.executable or "python3", "-I", "-S", "-c", _DEFAULT_SIGNALS_SHIM, node, *argv]


@dataclass(frozen=True)
class KillWarning:
    """sbatch --signal: ``send`` is called ``after`` seconds into the run."""

    after: float
    send: Callable[[], None]


@dataclass(frozen=True)
class RunOutcome:
    """How a batch script ended: its exit, why it could not start (if so), and its srun steps."""

    exit: ExitInfo
    description: str = ""
    steps: list[Step] = field(default_factory=list)


class _OutputFailure(Exception):
    """The output files cannot be opened (e.g. their directory does not exist)."""


class ProcessRunner:
    """Runs each job in a process group of its own, with its files under ``state_dir/jobs/<job id>``.

    With ``virtual``, a job runs no process, for scale tests: it lasts ``EMULATOR_RUNTIME`` seconds
    (its environment, default 0) and exits with ``EMULATOR_EXIT_CODE`` (default 0).
    """

    def __init__(self, cluster: str, state_dir: Path, *, virtual: bool = False) -> None:
        self.cluster = cluster
        self.state_dir = state_dir
        self.virtual = virtual
        self._processes: dict[int, asyncio.subprocess.Process] = {}  # by job id, while they run

    async def run(
        self,
        job: Job,
        time_limit: float | None,
        on_time_limit: Callable[[], None],
        warning: KillWarning | None = None,
    ) -> RunOutcome:
        """Run ``job`` to its end; after ``time_limit`` seconds call ``on_time_limit`` and wait on."""
        if self.virtual:
            return await self._run_virtual(job)
        try:
            argv, env, out_fd, err_fd, cwd = await asyncio.to_thread(self._prepare, job)
        except _OutputFailure as exc:
            # slurmstepd cannot connect the batch step's IO: the step dies by "signal" 53
            log.info("job %s: %s", job.job_id, exc)
            return RunOutcome(ExitInfo(return_code=0, signal=IO_SETUP_SIGNAL))
        except OSError as exc:
            return RunOutcome(ExitInfo(return_code=1), f"emulator: {exc}")
        stdin: int = asyncio.subprocess.DEVNULL
        with contextlib.suppress(OSError):
            stdin = os.open(job.stdin, os.O_RDONLY)
        try:
            process = await asyncio.create_subprocess_exec(
                *argv, stdin=stdin, stdout=out_fd, stderr=err_fd, cwd=cwd, env=env, start_new_session=True
            )  # own process group, so cancel can signal all of it
        except OSError as exc:
            return RunOutcome(ExitInfo(return_code=1), f"emulator: cannot start the script: {exc.strerror}")
        finally:
            os.close(out_fd)
            if err_fd != out_fd:
                os.close(err_fd)
            if isinstance(stdin, int) and stdin >= 0:
                os.close(stdin)
        self._processes[job.job_id] = process
        try:
            returncode = await self._wait(job, process, time_limit, on_time_limit, warning)
        finally:
            del self._processes[job.job_id]
        steps = await asyncio.to_thread(self._read_steps, job)
        return RunOutcome(ExitInfo.from_returncode(returncode), steps=steps)

    def send_signal(self, job: Job, sig: int, *, batch_only: bool = False) -> None:
        """Send ``sig`` to the job's whole process group, if it has one running; with ``batch_only``
        to its batch shell alone (the group's leader), like slurmstepd for the BATCH_JOB flag."""
        process = self._processes.get(job.job_id)
        if process is None:
            return
        if batch_only:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(process.pid, sig)
        else:
            _signal_group(process, sig)

    def kill_all(self) -> None:
        """SIGKILL every job still running (emulator shutdown)."""
        for process in self._processes.values():
            if process.returncode is None:
                _signal_group(process, signal.SIGKILL)

    async def _wait(
        self,
        job: Job,
        process: asyncio.subprocess.Process,
        time_limit: float | None,
        on_time_limit: Callable[[], None],
        warning: KillWarning | None,
    ) -> int:
        log.info("job %s started (pid %s)", job.job_id, process.pid)
        if job.stop_reason is not None:  # cancelled while we were setting up
            self.send_signal(job, signal.SIGTERM)
        waiter = asyncio.ensure_future(process.wait())
        warning_timer = None
        if warning is not None:
            warning_timer = asyncio.get_running_loop().call_later(warning.after, warning.send)
        try:
            await asyncio.wait_for(asyncio.shield(waiter), timeout=time_limit)
        except TimeoutError:
            on_time_limit()
            await waiter
        except asyncio.CancelledError:  # emulator shutdown: the shielded waiter must go too
            waiter.cancel()
            raise
        finally:
            if warning_timer is not None:
                warning_timer.cancel()
        # like proctrack, the job's end takes down whatever it left behind in its group
        self.send_signal(job, signal.SIGKILL)
        return waiter.result()

    async def _run_virtual(self, job: Job) -> RunOutcome:
        """A cancel takes effect when the job's runtime is over."""
        try:
            runtime = float(job.environment.get("EMULATOR_RUNTIME", "0"))
            code = int(job.environment.get("EMULATOR_EXIT_CODE", "0"))
        except ValueError as exc:
            return RunOutcome(ExitInfo(return_code=1), f"emulator: {exc}")
        await asyncio.sleep(runtime)
        return RunOutcome(ExitInfo(return_code=code))

    def _job_dir(self, job: Job) -> Path:
        return self.state_dir / "jobs" / str(job.job_id)

    def _prepare(self, job: Job) -> tuple[list[str], dict[str, str], int, int, str]:
        """Blocking setup (run in a thread): script, srun shim, environment, output files."""
        script_path, bin_dir = self._write_job_files(job)
        out_fd, err_fd = _open_output(job)
        cwd = job.cwd
        if not os.path.isdir(cwd):  # slurmstepd says so in the job's output and runs in /tmp
            cwd = "/tmp"
            os.write(
                err_fd,
                f"slurmstepd-{job.node}: error: couldn't chdir to `{job.cwd}': No such file or directory: "
                "going to /tmp instead\n".encode(),
            )
        # honour the shebang (the kernel does it when we exec the file); no shebang -> bash
        argv = [str(script_path)] if job.script.startswith("#!") else ["/bin/bash", str(script_path)]
        return _with_default_signals(argv, job.node), self._environment(job, bin_dir), out_fd, err_fd, cwd

    def _write_job_files(self, job: Job) -> tuple[Path, Path]:
        """The batch script, and an ``srun`` shim that records the job's steps."""
        job_dir = self._job_dir(job)
        bin_dir = job_dir / "bin"
        bin_dir.mkdir(parents=True, exist_ok=True)
        script_path = job_dir / "script"
        script_path.write_text(job.script)
        script_path.chmod(0o700)
        steps_file = job_dir / "steps"
        steps_file.write_text("")
        shim = bin_dir / "srun"
        shim.write_text(_SRUN_SHIM.replace("STEPS_FILE", shlex.quote(str(steps_file))))
        shim.chmod(0o755)
        return script_path, bin_dir

    def _environment(self, job: Job, bin_dir: Path) -> dict[str, str]:
        """The job's environment with the variables slurmstepd sets."""
        env = dict(job.environment)
        env["PATH"] = f"{bin_dir}:{env.get('PATH') or '/usr/local/bin:/usr/bin:/bin'}"
        env["SLURM_JOB_ID"] = str(job.job_id)
        env["SLURM_JOB_NAME"] = job.name
        env["SLURM_SUBMIT_DIR"] = job.cwd
        env["SLURM_CLUSTER_NAME"] = self.cluster
        if job.restart_cnt:  # slurmstepd sets it only for a requeued job
            env["SLURM_RESTART_COUNT"] = str(job.restart_cnt)
        if job.array_task_id is not None:
            env["SLURM_ARRAY_JOB_ID"] = str(job.array_job_id)
            env["SLURM_ARRAY_TASK_ID"] = str(job.array_task_id)
        if job.gres.gpus:  # the gpu plugin's variables, for the devices it got (numbered from 0)
            devices = ",".join(str(index) for index in range(job.gres.gpus))
            env["CUDA_VISIBLE_DEVICES"] = env["GPU_DEVICE_ORDINAL"] = env["SLURM_JOB_GPUS"] = devices
            env["SLURM_GPUS_ON_NODE"] = str(job.gres.gpus)
        return env

    def _read_steps(self, job: Job) -> list[Step]:
        steps = []
        try:
            lines = (self._job_dir(job) / "steps").read_text().splitlines()
        except OSError:
            return []
        for index, line in enumerate(lines):
            parts = line.split(" ", 3)
            if len(parts) < 3 or not all(p.lstrip("-").isdigit() for p in parts[:3]):
                continue
            rc, start, end = (int(p) for p in parts[:3])
            info = ExitInfo(return_code=rc)
            state = State.COMPLETED if rc == 0 else State.FAILED
            steps.append(Step(str(index), parts[3] if len(parts) > 3 else "", state, info, start, end))
        return steps


def _signal_group(process: asyncio.subprocess.Process, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, sig)


def _with_parents(path: str) -> str:
    """Slurm 24.11's slurmstepd creates an output file's missing directories as the job's user, an
    ordinary user: one who can create them under /tmp or a mount, never directly under /."""
    parent = os.path.dirname(os.path.abspath(path))
    existing = parent
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if existing != parent and existing != "/":
        try:
            os.makedirs(parent, exist_ok=True)
        except OSError:
            pass  # opening the file then fails and says why
    return path


def _open_output(job: Job) -> tuple[int, int]:
    """The job's stdout and stderr descriptors (one file when stderr is not set apart). Like
    slurmstepd, each run truncates the files, unless open_mode is append."""
    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if job.open_append else os.O_TRUNC)
    try:
        out_fd = os.open(_with_parents(job.expand(job.stdout_pattern)), flags, 0o644)
    except OSError as exc:
        raise _OutputFailure(f"cannot open standard_output: {exc.strerror}") from None
    if not job.stderr_pattern:
        return out_fd, out_fd
    try:
        return out_fd, os.open(_with_parents(job.expand(job.stderr_pattern)), flags, 0o644)
    except OSError as exc:
        os.close(out_fd)
        raise _OutputFailure(f"cannot open standard_error: {exc.strerror}") from None
