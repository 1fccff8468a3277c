"""The one model of a Slurm job's status, read from /slurm (live queue) or /slurmdb (accounting).

Every reader of job state goes through here: what is finished, what counts as success, how exit
codes are read. Success means the job ended COMPLETED with exit code 0; a batch script that
exits 0 after a failed srun step is still COMPLETED, and its ``derived_exit_code`` is reported
beside it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from airflow_provider_slurmapi.client.records import accounting_record_id, live_record_id, number, state_list

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
NO_STATE = "UNKNOWN"  # a record that names no state
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
    def from_reply(cls, value: object) -> ExitCode | None:
        if isinstance(value, int):  # older versions give a plain number
            return cls(status="SUCCESS" if value == 0 else "ERROR", return_code=value)
        if not isinstance(value, dict):
            return None
        statuses = value.get("status") or ["SUCCESS"]
        status = statuses[0] if isinstance(statuses, list) else str(statuses)
        signal = value.get("signal") or {}
        return cls(
            status=status,
            return_code=number(value.get("return_code")),
            signal=number(signal.get("id")) if isinstance(signal, dict) else None,
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


class RecordSource(StrEnum):
    """Where a status was read."""

    LIVE = "slurm"  # the live queue, /slurm
    ACCOUNTING = "slurmdb"  # accounting, /slurmdb
    STATE_LIST = "state"  # the bulk state list: state and flags only

    @property
    def label(self) -> str:
        return {"slurm": "live queue", "slurmdb": "accounting", "state": "bulk state list"}[self.value]


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
    source: RecordSource = RecordSource.LIVE
    restarts: int = 0  # Slurm's restart_cnt: how often the job was requeued (the bulk state list has none)
    held: bool = False  # pending until someone releases it
    submit_time: int | None = None  # epoch seconds (the bulk state list has none)
    # epoch seconds: when Slurm expects a pending job to start, if it computed it (live queue only)
    expected_start: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_slurm(cls, job: dict[str, Any]) -> JobStatus:
        """A job object of ``GET /slurm/vX/job/{id}`` or ``/jobs``."""
        return cls._from_reply(
            job,
            job_id=live_record_id(job),
            states=state_list(job.get("job_state")),
            reason=job.get("state_reason"),
            comment=job.get("comment"),
            submit_time=number(job.get("submit_time")),
            start_time=number(job.get("start_time")),
            source=RecordSource.LIVE,
            extra={"state_description": job.get("state_description") or ""},
        )

    @classmethod
    def from_slurmdb(cls, job: dict[str, Any]) -> JobStatus:
        """A job object of ``GET /slurmdb/vX/job/{id}``: state under ``state.current``."""
        state = job.get("state") or {}
        comment, times = job.get("comment"), job.get("time")
        return cls._from_reply(
            job,
            job_id=accounting_record_id(job),
            states=state_list(state.get("current") if isinstance(state, dict) else state),
            reason=state.get("reason") if isinstance(state, dict) else None,
            comment=comment.get("job") if isinstance(comment, dict) else comment,
            submit_time=number(times.get("submission")) if isinstance(times, dict) else None,
            source=RecordSource.ACCOUNTING,
        )

    @classmethod
    def from_record(cls, job: dict[str, Any], source: RecordSource) -> JobStatus:
        """A record of the live queue or of accounting, as ``source`` says."""
        return cls.from_slurmdb(job) if source == RecordSource.ACCOUNTING else cls.from_slurm(job)

    @classmethod
    def _from_reply(
        cls,
        job: dict[str, Any],
        *,
        job_id: str,
        states: list[str],
        reason: Any,
        comment: Any,
        start_time: int | None = None,
        **more: Any,
    ) -> JobStatus:
        """What /slurm and /slurmdb name alike; the callers read what they name differently.
        ``start_time``: a live record's, whose meaning for a pending job accounting does not share."""
        reason = reason if reason and reason != "None" else None
        state = states[0] if states else NO_STATE
        # REQUEUE_HOLD is a state flag of older Slurm; 24.11 shows a requeuehold as JobHeldUser
        held = state == "PENDING" and (reason in HELD_REASONS or "REQUEUE_HOLD" in states)
        # A pending job's start_time is the scheduler's estimate (0: none yet), but a held job keeps
        # a stale one and a requeued job still COMPLETING shows its last run's start.
        waits_to_start = state == "PENDING" and not held and "COMPLETING" not in states
        return cls(
            job_id=job_id,
            state=state,
            flags=tuple(states[1:]),
            reason=reason,
            exit_code=ExitCode.from_reply(job.get("exit_code")),
            derived_exit_code=ExitCode.from_reply(job.get("derived_exit_code")),
            name=str(job.get("name") or ""),
            comment=str(comment or ""),
            restarts=number(job.get("restart_cnt")) or 0,
            held=held,
            expected_start=start_time if waits_to_start and start_time else None,
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
        """One line for logs and task failures: state, reason, expected start, exit code, derived exit code."""
        parts = [f"Slurm job {self.job_id} is {self.state}"]
        if self.flags:
            parts[0] += f" ({', '.join(self.flags)})"
        if self.reason:
            parts.append(f"reason: {self.reason}")
        if self.expected_start is not None:
            parts.append(f"expected start {datetime.fromtimestamp(self.expected_start, UTC):%Y-%m-%d %H:%M} UTC")
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
        return {**asdict(self), "source": self.source.value}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> JobStatus:
        values = dict(data)
        for key in ("exit_code", "derived_exit_code"):
            if values.get(key) is not None:
                values[key] = ExitCode(**values[key])
        values["flags"] = tuple(values.get("flags") or ())
        values["source"] = RecordSource(values.get("source") or RecordSource.LIVE)
        return cls(**values)
