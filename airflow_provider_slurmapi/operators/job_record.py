"""Where a task run keeps its Slurm job's ID for its next try, whatever Slurm's accounting keeps.

A retry finds an earlier try's job by the key in its comment, but accounting keeps comments only
with ``AccountingStoreFlags=job_comment``: without it, a job that finished and left the live queue
(``MinJobAge``) could not be recognised, and a retry after a three-day run would run it again. So
the job ID is recorded as soon as the job is submitted, before the try waits or defers:

- Airflow 3.3+: in the task state store (``context["task_state_store"]``), which Airflow keeps for
  the task run;
- Airflow 2.11, 3.1, 3.2: in an Airflow Variable, ``slurm_job_id.<the key's hex digits>``, one per
  running task run, deleted when the task run is over for good (``JobIdRecord.kept_until_over``).
  A try killed on its last try, or a task a user marks failed or successful, leaves its Variable
  behind: a few bytes, read by no one, overwritten if the task is cleared.

A record that cannot be read or written is logged, never fails the task: the key is still looked for.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Protocol

from airflow.providers.common.compat.sdk import TaskDeferred

from airflow_provider_slurmapi.client.submission import KEY_PREFIX
from airflow_provider_slurmapi.version_compat import AIRFLOW_V_3_0_PLUS

log = logging.getLogger(__name__)

# The task state store's key (Airflow 3.3+) and the Variables' prefix (older Airflow).
STATE_STORE_KEY = "slurm_job_id"
VARIABLE_PREFIX = "slurm_job_id."


class TaskTry(Protocol):
    """What the operators read of a task instance (Airflow 2's and the Task SDK's alike)."""

    dag_id: str
    task_id: str
    run_id: str
    try_number: int
    max_tries: int


def _variables() -> Any:
    if AIRFLOW_V_3_0_PLUS:
        from airflow.sdk import Variable
    else:
        from airflow.models import Variable
    return Variable


def _text(value: object) -> str | None:
    return str(value) if value not in (None, "") else None


class JobIdRecord:
    """The job ID of one task run, kept across its tries (``key``: its submission key)."""

    def __init__(self, context: Any, key: str) -> None:
        self.ti: TaskTry = context["ti"]
        self._store = context.get("task_state_store")  # Airflow 3.3+
        self.key = key
        self.variable = VARIABLE_PREFIX + key.removeprefix(KEY_PREFIX)
        self._recorded: str | None = None
        self._known = False  # whether _recorded is what the Variable holds (else: unknown, resumed try)

    @property
    def where(self) -> str:
        return "the task state store" if self._store is not None else f"Airflow Variable {self.variable!r}"

    def read(self) -> str | None:
        """The job ID an earlier try recorded, or None."""
        if self._store is not None:
            return _text(self._store.get(STATE_STORE_KEY))
        self._known = True
        if self.ti.try_number > 1:  # a first try has nothing to read: spare the secrets backends a lookup
            try:
                self._recorded = _text(_variables().get(self.variable, None))
            except Exception as error:
                self._known = False
                log.warning("Cannot read %s (the earlier job is looked for by its key only): %s", self.where, error)
        return self._recorded

    def write(self, job_id: str) -> None:
        """Record ``job_id`` for the next tries (nothing to do when it is the one already recorded)."""
        if self._store is not None:
            self._store.set(STATE_STORE_KEY, job_id)
            return
        if self._known and job_id == self._recorded:
            return
        ti = self.ti
        description = (
            f"Slurm job of {ti.dag_id}.{ti.task_id} in {ti.run_id}, for its next try; deleted when the "
            "task run ends (airflow-provider-slurmapi)"
        )
        try:
            _variables().set(self.variable, job_id, description=description)
        except Exception as error:
            self._known = False
            log.warning(
                "Cannot record Slurm job %s in %s (a retry after the job left the live queue may not find it): %s",
                job_id,
                self.where,
                error,
            )
            return
        self._recorded, self._known = job_id, True

    def forget(self) -> None:
        """Delete the Variable, if there may be one (the task state store is Airflow's to keep)."""
        if self._store is not None or (self._known and self._recorded is None):
            return
        try:
            _variables().delete(self.variable)
        except Exception as error:
            log.warning("Cannot delete %s (it is left behind, unused): %s", self.where, error)
            return
        self._recorded, self._known = None, True

    @contextmanager
    def kept_until_over(self, retries: int | None) -> Iterator[JobIdRecord]:
        """Forget the record when this try ends the task run: it succeeded, or failed on its last
        try. A try that defers goes on in ``execute_complete``, which keeps or forgets it then."""
        try:
            yield self
        except TaskDeferred:
            raise
        except BaseException:
            if is_last_try(self.ti, retries):
                self.forget()
            raise
        self.forget()


def is_last_try(ti: TaskTry, retries: int | None) -> bool:
    """Whether a failure of this try ends the task run: Airflow retries a task that has retries
    while ``try_number <= max_tries``."""
    return not retries or ti.try_number > ti.max_tries
