"""The one model of a Slurm job's status, read from /slurm (live queue) or /slurmdb (accounting).

Every reader of job state goes through here: what is finished, what counts as success, how exit
codes are read. Success means the job ended COMPLETED with exit code 0; a batch script that
exits 0 after a failed srun step is still COMPLETED, and its ``derived_exit_code`` is reported
beside it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any

# A base state not in either set (a state added by a newer Slurm...) counts as active, for a while.
ACTIVE_STATES = frozenset({"PENDING", "RUNNING", "SUSPENDED"})
FINISHED_STATES = frozenset(
    {
        "COMPLETED",
        "FAILED",
        "CANCELLED",
        "TIMEOUT",
        "NODE_FAIL",
        "PREEMPTED",
        "BOOT_FAIL",
        "DEADLINE",
        "OUT_OF_MEMORY",
        "REVOKED",
    }
)
# A pending job held by its user (``hold``, ``scontrol requeuehold``) or an administrator: it
# waits until someone runs ``scontrol release``.
HELD_REASONS = frozenset({"JobHeldUser", "JobHeldAdmin"})
# Ends that say the cluster took the job's node or slot away, not that the job's code failed.
INTERRUPTION_CAUSES = {
    "NODE_FAIL": "a node it ran on failed",
    "PREEMPTED": "it was preempted for a job of higher priority",
    "BOOT_FAIL": "its node failed to boot",
}


@dataclass(frozen=True)
class ExitCode:
    """Slurm's ``{status, return_code, signal}`` exit code."""

    status: str = "SUCCESS"  # SUCCESS, ERROR, SIGNALED, CORE_DUMPED, PENDING, INVALID
    return_code: int | None = 0
    signal: int | None = None
    signal_name: str | None = None

    @classmethod
    def from_reply(cls, value: Any) -> ExitCode | None:
        if isinstance(value, int):  # older versions give a plain number
            return cls(status="SUCCESS" if value == 0 else "ERROR", return_code=value)
        if not isinstance(value, dict):
            return None
        statuses = value.get("status") or ["SUCCESS"]
        status = statuses[0] if isinstance(statuses, list) else str(statuses)
        signal = value.get("signal") or {}
        return cls(
            status=status,
            return_code=_number(value.get("return_code")),
            signal=_number(signal.get("id")) if isinstance(signal, dict) else None,
            signal_name=(signal.get("name") or None) if isinstance(signal, dict) else None,
        )

    @property
    def is_zero(self) -> bool:
        return self.status == "SUCCESS" and not self.return_code and self.signal is None

    def __str__(self) -> str:
        if self.signal is not None:
            name = f" (SIG{self.signal_name})" if self.signal_name else ""
            return f"killed by signal {self.signal}{name}"
        return f"exit code {self.return_code}" if self.return_code is not None else self.status.lower()


def _number(value: Any) -> int | None:
    """Read Slurm's ``{set, infinite, number}`` wrapper (or a plain int); unset gives None."""
    if isinstance(value, dict):
        return int(value["number"]) if value.get("set") and not value.get("infinite") else None
    if isinstance(value, bool):
        return None
    return int(value) if isinstance(value, (int, float)) else None


def _state_list(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value] if value else []
    return [str(v) for v in value or []]


@dataclass(frozen=True)
class JobStatus:
    """What the provider knows of one Slurm job at one moment."""

    job_id: str
    state: str
    flags: tuple[str, ...] = ()
    reason: str | None = None
    exit_code: ExitCode | None = None
    derived_exit_code: ExitCode | None = None
    name: str = ""
    comment: str = ""
    source: str = "slurm"  # "slurm" (live queue), "slurmdb" (accounting) or "state" (bulk state list)
    restarts: int = 0  # Slurm's restart_cnt: how often the job was requeued (the bulk state list has none)
    held: bool = False  # pending until someone releases it
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_slurm(cls, job: dict[str, Any]) -> JobStatus:
        """A job object of ``GET /slurm/vX/job/{id}`` or ``/jobs``."""
        return cls._from_reply(
            job,
            job_id=_slurm_job_id(job),
            states=_state_list(job.get("job_state")),
            reason=job.get("state_reason"),
            comment=job.get("comment"),
            source="slurm",
            extra={"state_description": job.get("state_description") or ""},
        )

    @classmethod
    def from_slurmdb(cls, job: dict[str, Any]) -> JobStatus:
        """A job object of ``GET /slurmdb/vX/job/{id}``: state under ``state.current``."""
        state = job.get("state") or {}
        comment = job.get("comment")
        return cls._from_reply(
            job,
            job_id=_slurmdb_job_id(job),
            states=_state_list(state.get("current") if isinstance(state, dict) else state),
            reason=state.get("reason") if isinstance(state, dict) else None,
            comment=comment.get("job") if isinstance(comment, dict) else comment,
            source="slurmdb",
        )

    @classmethod
    def _from_reply(
        cls, job: dict[str, Any], *, job_id: str, states: list[str], reason: Any, comment: Any, **more: Any
    ) -> JobStatus:
        """What /slurm and /slurmdb name alike; the callers read what they name differently."""
        reason = reason if reason and reason != "None" else None
        state = states[0] if states else "UNKNOWN"
        # REQUEUE_HOLD is a state flag of older Slurm; 24.11 shows a requeuehold as JobHeldUser
        held = state == "PENDING" and (reason in HELD_REASONS or "REQUEUE_HOLD" in states)
        return cls(
            job_id=job_id,
            state=state,
            flags=tuple(states[1:]),
            reason=reason,
            exit_code=ExitCode.from_reply(job.get("exit_code")),
            derived_exit_code=ExitCode.from_reply(job.get("derived_exit_code")),
            name=str(job.get("name") or ""),
            comment=str(comment or ""),
            restarts=_number(job.get("restart_cnt")) or 0,
            held=held,
            **more,
        )

    @property
    def is_finished(self) -> bool:
        # A base state still COMPLETING is not over yet: the job's processes are being cleaned up.
        return self.state in FINISHED_STATES and "COMPLETING" not in self.flags

    @property
    def is_active(self) -> bool:
        return not self.is_finished

    @property
    def is_known_state(self) -> bool:
        return self.state in ACTIVE_STATES or self.state in FINISHED_STATES

    @property
    def is_success(self) -> bool:
        return self.state == "COMPLETED" and (self.exit_code is None or self.exit_code.is_zero)

    @property
    def is_interrupted(self) -> bool:
        """It ended because the cluster took its node or slot away (and Slurm did not requeue it)."""
        return self.is_finished and self.state in INTERRUPTION_CAUSES

    @property
    def effective_exit_code(self) -> ExitCode | None:
        """The exit code worth showing, or None when Slurm's SUCCESS/0 means nothing.

        /slurmdb reports SUCCESS/0 for CANCELLED and TIMEOUT jobs, and a job cancelled while
        pending still carries its placeholder SUCCESS/0: only a COMPLETED job's 0 is real.
        """
        if self.state != "COMPLETED" and self.exit_code is not None and self.exit_code.is_zero:
            return None
        return self.exit_code

    def describe(self) -> str:
        """One line for logs and task failures: state, reason, exit code, derived exit code."""
        parts = [f"Slurm job {self.job_id} is {self.state}"]
        if self.flags:
            parts[0] += f" ({', '.join(self.flags)})"
        if self.reason:
            parts.append(f"reason: {self.reason}")
        if self.held:
            parts.append(f"held: it will not start until released (scontrol release {self.job_id})")
        if self.restarts:
            parts.append(f"requeued {self.restarts} time{'s' if self.restarts > 1 else ''}")
        if self.is_finished and self.effective_exit_code is not None:
            parts.append(str(self.effective_exit_code))
        if self.is_finished and self.derived_exit_code is not None and not self.derived_exit_code.is_zero:
            parts.append(f"derived (worst step) {self.derived_exit_code}")
        if self.is_interrupted:
            parts.append(
                f"the job's work was interrupted ({INTERRUPTION_CAUSES[self.state]}) and Slurm did not requeue it; "
                "its own code did not fail. A retry of the task submits a new job"
            )
        return "; ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-serialisable form, for trigger events and XCom."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> JobStatus:
        values = dict(data)
        for key in ("exit_code", "derived_exit_code"):
            if values.get(key) is not None:
                values[key] = ExitCode(**values[key])
        values["flags"] = tuple(values.get("flags") or ())
        return cls(**values)


def _slurm_job_id(job: dict[str, Any]) -> str:
    array_task = _number(job.get("array_task_id"))
    array_job = _number(job.get("array_job_id"))
    if array_task is not None and array_job:
        return f"{array_job}_{array_task}"
    if array_job and job.get("array_task_string"):
        # the array's meta record: the tasks not started yet, named like squeue does ("86_[2-3]")
        return f"{array_job}_[{job['array_task_string']}]"
    het_offset = _number(job.get("het_job_offset"))
    het_job = _number(job.get("het_job_id"))
    if het_job and het_offset is not None and het_job != job.get("job_id"):
        return f"{het_job}+{het_offset}"
    return str(job.get("job_id"))


def _slurmdb_job_id(job: dict[str, Any]) -> str:
    array = job.get("array") or {}
    task = _number(array.get("task_id")) if isinstance(array, dict) else None
    if task is not None and array.get("job_id"):
        return f"{array['job_id']}_{task}"
    if isinstance(array, dict) and array.get("job_id") and array.get("task"):
        # the meta record: accounting gives its pending tasks as a hex bitmap ("0xC" = tasks 2-3)
        return f"{array['job_id']}_[{_mask_to_ranges(str(array['task']), array)}]"
    het = job.get("het") or {}
    offset = _number(het.get("job_offset")) if isinstance(het, dict) else None
    if offset is not None and het.get("job_id"):
        return f"{het['job_id']}+{offset}"
    return str(job.get("job_id"))


def latest_runs(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Accounting's job records with only the last run of each job.

    A requeued job (``scontrol requeue``, a node failure or a preemption with ``requeue``) has one
    record per run under the same ID, oldest first; the earlier ones end PENDING+REQUEUED,
    NODE_FAIL or PREEMPTED with a lower ``restart_cnt``, and only the last one tells the outcome.
    """
    latest: dict[str, dict[str, Any]] = {}
    for record in records:
        key = _slurmdb_job_id(record)
        kept = latest.get(key)
        if kept is None or (_number(record.get("restart_cnt")) or 0) >= (_number(kept.get("restart_cnt")) or 0):
            latest[key] = record
    return list(latest.values())


def run_that_ended(records: list[dict[str, Any]], job_id: str, restarts: int) -> str | None:
    """How the run before restart ``restarts`` of ``job_id`` ended, from accounting's records:
    ``NODE_FAIL on node1``, ``PREEMPTED on node1``, ``REQUEUED on node1`` (``scontrol requeue``);
    None while accounting has no record of its end."""
    earlier = [r for r in records if _slurmdb_job_id(r) == job_id and (_number(r.get("restart_cnt")) or 0) < restarts]
    if not earlier:
        return None
    run = max(earlier, key=lambda r: _number(r.get("restart_cnt")) or 0)
    state = run.get("state") or {}
    states = _state_list(state.get("current") if isinstance(state, dict) else state)
    if "REQUEUED" in states:
        cause = "REQUEUED"
    elif states and states[0] not in ACTIVE_STATES:
        cause = states[0]
    else:
        return None  # accounting has not caught up: the run still reads as going on
    nodes = run.get("nodes")
    return f"{cause} on {nodes}" if nodes and nodes != "None assigned" else cause


def _mask_to_ranges(mask: str, array: dict[str, Any]) -> str:
    """Accounting's task bitmap as the live queue's ``array_task_string`` ("0xE", limit 1 -> "1-3%1")."""
    try:
        bits = int(mask, 16)
    except ValueError:
        return mask
    runs: list[list[int]] = []
    for task in range(bits.bit_length()):
        if bits >> task & 1:
            if runs and runs[-1][1] == task - 1:
                runs[-1][1] = task
            else:
                runs.append([task, task])
    text = ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)
    limits = array.get("limits")
    limit = limits.get("max", {}).get("running", {}).get("tasks") if isinstance(limits, dict) else None
    return f"{text}%{limit}" if isinstance(limit, int) and limit > 0 else text


def _pending_in(meta_id: str, job_id: str) -> bool:
    """Whether task ``ARRAY_TASK`` is among those of the meta record ``ARRAY_[spec]``."""
    array, _, task = job_id.partition("_")
    if not (meta_id.startswith(f"{array}_[") and meta_id.endswith("]") and task.isdigit()):
        return False
    spec = meta_id[len(array) + 2 : -1].partition("%")[0]
    try:
        for part in spec.split(","):
            first, _, rest = part.partition("-")
            last, _, step = rest.partition(":")
            if int(first) <= int(task) <= int(last or first) and (int(task) - int(first)) % int(step or 1) == 0:
                return True
    except ValueError:
        return True  # a range we cannot read: the meta record is still the best answer
    return False


def select_job(job_id: str, jobs: list[JobStatus]) -> JobStatus | None:
    """The status of ``job_id`` in a reply, or None.

    Asking for an array's ID returns all of its records: each task that started, under its own
    job ID, and while some have not, the array's meta record that stands for them (``86_[2-3]``,
    listed first by Slurm, so the array reads PENDING with the reason they wait for). The array
    counts as active while any record is, and as successful only when every task is. Asking for
    one task (``86_2``) gives its record, or the meta record while that task has not started.
    """
    if "_" in job_id:
        exact = [job for job in jobs if job.job_id == job_id]
        if exact:
            return exact[0]
        waiting = [job for job in jobs if _pending_in(job.job_id, job_id)]
        return replace(waiting[0], job_id=job_id) if waiting else None
    if not jobs:
        return None
    if len(jobs) == 1 and jobs[0].job_id == job_id:
        return jobs[0]
    active = [job for job in jobs if job.is_active]
    failed = [job for job in jobs if job.is_finished and not job.is_success]
    lead = active[0] if active else failed[0] if failed else jobs[0]
    return replace(
        lead,
        job_id=job_id,
        extra={**lead.extra, "tasks": {job.job_id: job.state for job in jobs}},
    )
