"""Where a task run keeps its Slurm job's ID for its next try, whatever Slurm's accounting keeps.

A retry finds an earlier try's job by the key in its comment, but accounting keeps comments only
with ``AccountingStoreFlags=job_comment``: without it, a job that finished and left the live queue
(``MinJobAge``) could not be recognised, and a retry after a three-day run would run it again. So
the job ID is recorded as soon as Slurm answers the submit, before the try waits or defers:

- Airflow 3.3+: in the task state store (``context["task_state_store"]``), which Airflow keeps for
  the task run;
- Airflow 2.11, 3.1, 3.2: in an Airflow Variable, ``slurm_job_id.<the key's hex digits>``, one per
  running task run, deleted when the task run is over for good (``JobIdRecord.kept_until_over``)
  and before a user's clear runs the job afresh. A try killed on its last try, or a task a user
  marks failed or successful, leaves its Variable behind: a few bytes, read only by a later clear,
  which deletes it.

The ID is only a lead: ``submit_once`` takes the job it names only if the cluster shows that job is
the task run's. A record that cannot be read or written is logged, never fails the task: the key is
still looked for.

Beside the ID, the same write keeps the try's result nonce (``@task.slurm_python``), so that a
retry that reattaches to, or adopts, that job can derive the key its runner signed the result with
and check what it wrote. The value is then ``{"job_id": ..., "result_nonce": ...}`` (JSON text in a
Variable); a plain job ID, as earlier versions wrote it, still reads. The record holds no key:
whoever may read the task instance reads the task state store, and whoever may read Variables reads
the Variable, unmasked. The key is derived from the nonce with the deployment's secret, kept apart
(``decorators/result_secret.py``); a record with a ``result_key`` instead, as an earlier release
wrote it, gives no nonce, and its job's result is refused.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Protocol

from airflow.providers.common.compat.sdk import TaskDeferred

from airflow_provider_slurmapi.client.paths import validate_job_id
from airflow_provider_slurmapi.client.submission import KEY_PREFIX
from airflow_provider_slurmapi.version_compat import variables as _variables

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


def _text(value: object) -> str | None:
    return str(value) if value not in (None, "") else None


def _entry(value: object) -> tuple[str | None, str | None]:
    """(job ID, result nonce) of a recorded value: a plain ID, or the JSON object (a dict in the task
    state store, its text in a Variable) that carries a result nonce too."""
    if isinstance(value, str) and value.startswith("{"):
        try:
            value = json.loads(value)
        except ValueError:
            return None, None
    if isinstance(value, dict):
        nonce = value.get("result_nonce")
        return _text(value.get("job_id")), nonce if isinstance(nonce, str) and nonce else None
    return _text(value), None


def _job_id(value: str | None, where: str) -> str | None:
    """The recorded value if it is a job ID; anything else (an edited Variable) is not a lead."""
    if value is None:
        return None
    try:
        return str(validate_job_id(value))
    except ValueError:
        log.warning("%s holds %r, not a Slurm job ID: ignored", where, value[:40])
        return None


class JobIdRecord:
    """The job ID of one task run, kept across its tries (``key``: its submission key)."""

    def __init__(self, context: Any, key: str) -> None:
        self.ti: TaskTry = context["ti"]
        self._store = context.get("task_state_store")  # Airflow 3.3+
        self.key = key
        self.variable = VARIABLE_PREFIX + key.removeprefix(KEY_PREFIX)
        self._recorded: str | None = None
        self._result_nonce: str | None = None  # recorded with _recorded
        self._known = False  # whether _recorded is what the Variable holds (else: unknown, resumed try)

    @property
    def where(self) -> str:
        return "the task state store" if self._store is not None else f"Airflow Variable {self.variable!r}"

    def read(self, *, afresh: bool = False) -> str | None:
        """The job ID an earlier try recorded, or None.

        ``afresh``: this try runs the job afresh (a user cleared the task and no completed job may
        be taken): a Variable left by an earlier round is deleted rather than read, so that it can
        never stand for this round's job, even if this try fails before recording its own. (The
        task state store is read as ever: the job this try submits replaces its value.)
        """
        if self._store is None and self.ti.try_number <= 1:  # nothing recorded yet: spare the backends a lookup
            self._known = True
            return None
        if self._store is None and afresh:
            self.forget()
            return None
        if not self._load("the earlier job is looked for by its key only"):
            return None
        return _job_id(self._recorded, self.where)

    def result_nonce_of(self, job_id: str) -> str | None:
        """The result nonce recorded with ``job_id``; None if none was, or the record names another job."""
        if not self._known:
            self._load("its result cannot be checked")
        return self._result_nonce if self._recorded == job_id else None

    def _load(self, otherwise: str) -> bool:
        """Read the record into ``_recorded`` and ``_result_nonce``; False (logged) if it cannot be read."""
        try:
            if self._store is not None:
                value = self._store.get(STATE_STORE_KEY)
            else:
                value = _variables().get(self.variable, None)
        except Exception as error:
            log.warning("Cannot read %s (%s): %s", self.where, otherwise, error)
            return False
        self._recorded, self._result_nonce = _entry(value)
        self._known = self._store is None  # the task state store is read each time, as ever
        return True

    def write(self, job_id: str, result_nonce: str | None = None) -> None:
        """Record ``job_id``, and its result nonce if it has one, for the next tries (nothing to do
        when they are what is already recorded)."""
        entry = {"job_id": job_id, "result_nonce": result_nonce} if result_nonce is not None else None
        if self._store is not None:
            self._store.set(STATE_STORE_KEY, entry or job_id)
            self._recorded, self._result_nonce = job_id, result_nonce
            return
        if self._known and (job_id, result_nonce) == (self._recorded, self._result_nonce):
            return
        ti = self.ti
        description = (
            f"Slurm job of {ti.dag_id}.{ti.task_id} in {ti.run_id}, for its next try; deleted when the "
            "task run ends (airflow-provider-slurmapi)"
        )
        try:
            _variables().set(self.variable, json.dumps(entry) if entry else job_id, description=description)
        except Exception as error:
            self._known = False
            log.warning(
                "Cannot record Slurm job %s in %s (a retry after the job left the live queue may not find it): %s",
                job_id,
                self.where,
                error,
            )
            return
        self._recorded, self._result_nonce, self._known = job_id, result_nonce, True

    def forget(self) -> None:
        """Delete the Variable, if there may be one (the task state store is Airflow's to keep)."""
        if self._store is not None or (self._known and self._recorded is None):
            return
        try:
            _variables().delete(self.variable)
        except Exception as error:
            log.warning("Cannot delete %s (it is left behind, unused): %s", self.where, error)
            return
        self._recorded, self._result_nonce, self._known = None, None, True

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
