"""The emulator's job records: what a Slurm controller would remember about each job."""

from __future__ import annotations

import re
import signal
import time
from dataclasses import dataclass, field
from enum import StrEnum

from airflow_provider_slurmapi.emulator.gres_request import NO_GRES, GresAllocation


class State(StrEnum):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    TIMEOUT = "TIMEOUT"
    NODE_FAIL = "NODE_FAIL"
    PREEMPTED = "PREEMPTED"
    # accounting only: a run that scontrol requeue ended (shown there as [PENDING, REQUEUED])
    REQUEUED = "REQUEUED"


TERMINAL = frozenset(
    {State.COMPLETED, State.FAILED, State.CANCELLED, State.TIMEOUT, State.NODE_FAIL, State.PREEMPTED, State.REQUEUED}
)
# the node of the first partition (the default one); each partition has a node of its own
NODE_NAME = "node1"

# Slurm's NO_VAL: accounting's start time of a job that never started (cancelled while pending),
# and what %a expands to for a job that is not part of an array
NO_VAL = 4294967294


# the signal names Slurm knows (its sig_name2num / sig_num2name): it names any other signal by its number
SLURM_SIGNAL_NAMES = {
    sig.name.removeprefix("SIG"): sig
    for sig in (
        signal.SIGHUP, signal.SIGINT, signal.SIGQUIT, signal.SIGABRT, signal.SIGKILL, signal.SIGALRM,
        signal.SIGTERM, signal.SIGCHLD, signal.SIGUSR1, signal.SIGUSR2, signal.SIGPIPE, signal.SIGURG,
        signal.SIGCONT, signal.SIGSTOP, signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU, signal.SIGXCPU,
    )
}  # fmt: skip


def signal_name(number: int) -> str:
    """How Slurm names a signal in its replies: ``KILL``, ``USR1``, but ``11`` for SIGSEGV."""
    return next((name for name, sig in SLURM_SIGNAL_NAMES.items() if sig == number), str(number))


def parse_signal(value: str | int) -> int:
    """A signal as Slurm reads one: a number, or a name it knows, with or without SIG, in any case.

    Raises ValueError for anything else, or a number no process can be sent."""
    text = str(value).strip().upper()
    number = int(text) if text.isdigit() else SLURM_SIGNAL_NAMES.get(text.removeprefix("SIG"), 0)
    if not 0 < number < signal.NSIG:
        raise ValueError(f"unknown signal {value!r}")
    return number


def epoch_seconds() -> int:
    """The time now as Slurm keeps it: whole seconds since the epoch."""
    return int(time.time())


@dataclass
class ExitInfo:
    """One exit code as Slurm reports it: a return code, or the signal that ended the process."""

    return_code: int = 0
    signal: int | None = None

    @property
    def status(self) -> str:
        if self.signal is not None:
            return "SIGNALED"
        return "SUCCESS" if self.return_code == 0 else "ERROR"

    @property
    def signal_name(self) -> str:
        return "" if self.signal is None else signal_name(self.signal)

    @staticmethod
    def from_returncode(returncode: int) -> ExitInfo:
        # asyncio reports "killed by signal N" as -N.
        if returncode < 0:
            return ExitInfo(return_code=0, signal=-returncode)
        return ExitInfo(return_code=returncode)


TERM_EXIT = ExitInfo(signal=signal.SIGTERM.value)


@dataclass
class Step:
    """An ``srun`` step recorded by the srun shim, or the batch step itself."""

    step_id: str  # "batch" or "0", "1", ...
    name: str
    state: State
    exit: ExitInfo
    start: int
    end: int  # 0 while running


@dataclass
class Job:
    job_id: int
    name: str
    user_name: str
    user_id: int
    group_id: int
    group_name: str
    script: str
    environment: dict[str, str]
    cwd: str
    stdout_pattern: str  # as submitted (or the default), unexpanded
    stderr_pattern: str  # "" when not given: stderr then goes to the stdout file
    stdin: str
    partition: str
    comment: str
    time_limit: int | None  # minutes; None = unlimited
    hold: bool
    submit_time: int
    begin_time: int  # 0 = eligible at once
    tasks: int | None = None  # as requested (None: not given)
    tasks_per_node: int = 0  # as requested (0: not given, like Slurm)
    cpus_per_task: int = 1
    min_nodes: int = 1
    default_partition: bool = True  # no partition was requested: Slurm assigned its default
    node: str = NODE_NAME  # its partition's node, where it runs
    gres: GresAllocation = NO_GRES  # the GPUs (and other GRES) it asked for and got on the node
    dependent: bool = False  # Slurm's DEPENDENT flag: held jobs and arrays, until a scheduler pass
    # array bookkeeping: array_job_id 0 and array_task_id None for plain jobs, like Slurm. An array
    # is one record (its "meta" record, with the array's own id) until a task starts: each task is
    # then split off into a record of its own with a new id, and the record keeps the tasks not
    # started yet (pending_tasks) until one is left, which it then becomes (see Scheduler._split_task).
    array_job_id: int = 0
    array_task_id: int | None = None
    array_max_tasks: int = 0
    pending_tasks: list[int] = field(default_factory=list)
    list_seq: int = 0  # position in slurmctld's job list (GET /jobs order)
    array_seq: int = 0  # position among its array's records (GET /job/{array} and jobs/state order)
    state: State = State.PENDING
    state_reason: str = "None"
    state_description: str = ""
    completing: bool = False
    start_time: int = 0
    end_time: int = 0
    ended_at: float = 0.0  # wall clock when it became terminal, for the min_job_age purge
    exit: ExitInfo = field(default_factory=ExitInfo)
    steps: list[Step] = field(default_factory=list)
    kill_request_user: str = ""
    stop_reason: State | None = None  # CANCELLED or TIMEOUT once we decided to stop it
    last_change: int = 0
    ran: bool = False  # it reached RUNNING (allocated a node), even if it failed at once
    queued_at: float = field(default_factory=time.monotonic)  # for the scheduler's start delay
    # requeue: Slurm requeues the job on a node failure or preemption (sbatch --requeue, default)
    requeue: bool = True
    open_append: bool = False  # open_mode "append": a new run adds to the output files
    restart_cnt: int = 0
    hold_reason: str = "JobHeldUser"  # the pending reason while held: JobHeldUser or JobHeldAdmin
    failed_node: str = ""
    # sbatch --signal=[B:]SIG[@TIME]: the signal sent warn_delay seconds before the time limit,
    # to the batch shell alone (B:, BATCH_JOB) or to all the job's processes
    warn_signal: int | None = None
    warn_delay: int = 0
    warn_batch_only: bool = False
    skip_tres: bool = False  # SKIP_TRES_STRING_ACCOUNTING, set by a node failure
    # how accounting shows this run: slurmdbd keeps the hold of submission or requeuehold, and
    # the reason the job waited for once it became eligible (release, or BeginTime after a requeue)
    db_hold: bool = False
    db_reason: str = "None"
    # earlier runs of a requeued job, oldest first: accounting keeps a record of each
    runs: list[Job] = field(default_factory=list)
    settled: bool = False  # an action already decided how the current run ends (requeue, node failure)
    repass: bool = False  # released, or requeued after a node failure: reason None until the next pass

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL

    @property
    def is_array_meta(self) -> bool:
        """The record that stands for the array's tasks not started yet (array_task_id unset)."""
        return self.array_job_id != 0 and self.array_task_id is None

    @property
    def state_ids(self) -> list[str]:
        """How ``jobs/state`` names this record: ``123``, one entry per pending task of an array's
        meta record (``ARRAYID_TASK``), and ``JOBID_TASK`` for a task record: real slurmctld uses
        the task record's own job id there (``99_0`` for task 0 of array 98), unlike squeue."""
        if self.is_array_meta:
            return [f"{self.job_id}_{task}" for task in self.pending_tasks]
        if self.array_task_id is None:
            return [str(self.job_id)]
        return [f"{self.job_id}_{self.array_task_id}"]

    @property
    def array_task_string(self) -> str:
        """The meta record's pending tasks as Slurm prints them ("2-3", "1,3,5-7", "1-3%2"), else ""."""
        if not self.is_array_meta:
            return ""
        text = format_ranges(self.pending_tasks)
        return f"{text}%{self.array_max_tasks}" if self.array_max_tasks else text

    @property
    def array_task_mask(self) -> str:
        """The meta record's pending tasks as accounting's hex bitmap ("0xC" for tasks 2 and 3), else ""."""
        if not self.is_array_meta:
            return ""
        return f"0x{sum(1 << task for task in self.pending_tasks):X}"

    @property
    def task_count(self) -> int | None:
        """``tasks`` as slurmctld shows it: as requested, or derived from tasks_per_node; None if
        neither was given, which reads 1 except for a job cancelled before it ran (then unset)."""
        if self.tasks is not None:
            return self.tasks
        if self.tasks_per_node:
            return self.tasks_per_node * self.min_nodes
        return None

    @property
    def cpus(self) -> int:
        return (self.task_count or 1) * self.cpus_per_task

    def expand(self, pattern: str) -> str:
        """Expand Slurm filename patterns (%j %A %a %x %u %%) and make it absolute under cwd."""
        if not pattern:
            return ""
        array_id = self.array_job_id or self.job_id
        task = NO_VAL if self.array_task_id is None else self.array_task_id
        values = {
            "j": str(self.job_id),
            "A": str(array_id),
            "a": str(task),
            "x": self.name,
            "u": self.user_name,
            "%": "%",
        }
        expanded = re.sub(r"%([jAaxu%])", lambda m: values[m.group(1)], pattern)
        if not expanded.startswith("/"):
            expanded = f"{self.cwd.rstrip('/')}/{expanded}"
        return expanded

    @property
    def derived_exit(self) -> ExitInfo:
        """The worst srun step's exit code, as Slurm's derived_exit_code."""
        worst = ExitInfo()
        for step in self.steps:
            if step.step_id == "batch":
                continue
            if (
                step.exit.signal is not None
                and worst.signal is None
                or worst.signal is None
                and step.exit.return_code > worst.return_code
            ):
                worst = step.exit
        return worst


def format_ranges(tasks: list[int]) -> str:
    """Sorted task ids as Slurm's range string: runs as "a-b", others comma-separated."""
    parts: list[str] = []
    start = prev = None
    for task in [*sorted(tasks), None]:
        if prev is not None and task == prev + 1:
            prev = task
            continue
        if start is not None:
            parts.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = task
    return ",".join(parts)


_ARRAY_PART = re.compile(r"^(\d+)(?:-(\d+)(?::(\d+))?)?$")


def parse_array(spec: str) -> tuple[list[int], int]:
    """Parse an sbatch --array spec ("0-3", "0-7:2", "1,3,5", "0-15%4") into (task ids, max running)."""
    spec = spec.strip()
    max_running = 0
    if "%" in spec:
        spec, _, limit = spec.partition("%")
        if not limit.isdigit() or int(limit) < 1:
            raise ValueError("invalid array throttle")
        max_running = int(limit)
    tasks: list[int] = []
    for part in spec.split(","):
        match = _ARRAY_PART.match(part.strip())
        if not match:
            raise ValueError(f"invalid array part {part!r}")
        first = int(match.group(1))
        last = int(match.group(2)) if match.group(2) is not None else first
        stride = int(match.group(3)) if match.group(3) is not None else 1
        if last < first or stride < 1:
            raise ValueError(f"invalid array range {part!r}")
        tasks.extend(range(first, last + 1, stride))
    tasks = sorted(set(tasks))
    if not tasks or len(tasks) > 1001:
        raise ValueError("array must have 1 to 1001 tasks")
    return tasks, max_running
