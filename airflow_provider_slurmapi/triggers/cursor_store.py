"""Where a job-event watcher keeps its cursor, so that a triggerer restart neither repeats nor skips
jobs, and when it writes it.

Airflow 3.3 gives a watcher trigger the state store of the asset it watches
(``asset_state_store``): the cursor is kept there, beside the asset. Airflow 3.1 and 3.2 have no
such store for triggers, and neither has 3.3 for a trigger that watches several assets at once
(the same trigger in two ``AssetWatcher``\\ s): the cursor is then kept in an Airflow Variable,
``slurm_job_events.<key>``, which triggers can read and write on every Airflow 3.

Each save is a write to Airflow's database. A watcher saves after the jobs it reports; a cursor
that moved without a report (the cluster's other jobs ended) is saved once ``IDLE_SAVE_SECONDS``
and a delay of the watcher's own passed since its last save (``save_idle``): a thousand watchers
that saved together (started together, or all reporting one job) spread their next idle saves
evenly instead of all writing at once, and a watcher that reports often makes none.
"""

from __future__ import annotations

import hashlib
import logging
import time
from typing import Any

from asgiref.sync import sync_to_async

from airflow_provider_slurmapi.client.job_events import EventCursor

log = logging.getLogger(__name__)

# A watcher whose cursor moved without reporting anything saves it at most this often, and at the
# latest twice as late: a restart re-reads at most these seconds more (twice), and idle watchers do
# not write at every interval.
IDLE_SAVE_SECONDS = 600


class CursorStore:
    """Loads and saves one watcher's ``EventCursor`` under ``key``."""

    def __init__(self, key: str, asset_state_store: Any = None) -> None:
        self.key = key
        self._asset_store = asset_state_store
        self._saved: EventCursor | None = None  # what the store holds, as far as this watcher knows
        self._saved_at = time.time()
        # this watcher's delay after IDLE_SAVE_SECONDS, as a fraction of it: a stable hash of its key
        self._idle_delay = int(hashlib.sha256(key.encode()).hexdigest()[:8], 16) / 16**8

    @property
    def where(self) -> str:
        return "the asset state store" if self._asset_store is not None else f"Airflow Variable {self.key!r}"

    async def load(self) -> EventCursor | None:
        cursor = await self._load()
        self._saved, self._saved_at = cursor, time.time()
        return cursor

    async def _load(self) -> EventCursor | None:
        if self._asset_store is not None:
            try:
                return EventCursor.from_dict(await self._asset_store.aget(self.key))
            except ValueError as error:  # the trigger watches several assets: no single store
                log.info("Keeping the cursor in an Airflow Variable: %s", error)
                self._asset_store = None
        from airflow.sdk import Variable

        return EventCursor.from_dict(await sync_to_async(Variable.get)(self.key, None, deserialize_json=True))

    async def save_idle(self, cursor: EventCursor) -> None:
        """Save a cursor that moved without a report, once ``IDLE_SAVE_SECONDS`` and this watcher's
        own delay (up to as long again) passed since its last save."""
        due = self._saved_at + IDLE_SAVE_SECONDS * (1 + self._idle_delay)
        if cursor != self._saved and time.time() >= due:
            await self.save(cursor)

    async def save(self, cursor: EventCursor) -> None:
        """Save the cursor; a failed save is logged (the watcher goes on, its cursor in memory)."""
        self._saved, self._saved_at = cursor, time.time()  # a failed save is not tried again at once
        try:
            if self._asset_store is not None:
                await self._asset_store.aset(self.key, cursor.to_dict())
                return
            from airflow.sdk import Variable

            await sync_to_async(Variable.set)(
                self.key,
                cursor.to_dict(),
                description="Cursor of a Slurm job-event watcher (airflow-provider-slurmapi)",
                serialize_json=True,
            )
        except Exception as error:
            log.warning("Cannot save the job-event cursor in %s (a restart may repeat jobs): %s", self.where, error)
