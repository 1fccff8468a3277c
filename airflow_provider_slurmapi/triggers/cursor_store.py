"""Where a job-event watcher keeps its cursor, so that a triggerer restart neither repeats nor skips jobs.

Airflow 3.3 gives a watcher trigger the state store of the asset it watches
(``asset_state_store``): the cursor is kept there, beside the asset. Airflow 3.1 and 3.2 have no
such store for triggers, and neither has 3.3 for a trigger that watches several assets at once
(the same trigger in two ``AssetWatcher``\\ s): the cursor is then kept in an Airflow Variable,
``slurm_job_events.<key>``, which triggers can read and write on every Airflow 3.
"""

from __future__ import annotations

import logging
from typing import Any

from asgiref.sync import sync_to_async

from airflow_provider_slurmapi.client.job_events import EventCursor

log = logging.getLogger(__name__)


class CursorStore:
    """Loads and saves one watcher's ``EventCursor`` under ``key``."""

    def __init__(self, key: str, asset_state_store: Any = None) -> None:
        self.key = key
        self._asset_store = asset_state_store

    @property
    def where(self) -> str:
        return "the asset state store" if self._asset_store is not None else f"Airflow Variable {self.key!r}"

    async def load(self) -> EventCursor | None:
        if self._asset_store is not None:
            try:
                return EventCursor.from_dict(await self._asset_store.aget(self.key))
            except ValueError as error:  # the trigger watches several assets: no single store
                log.info("Keeping the cursor in an Airflow Variable: %s", error)
                self._asset_store = None
        from airflow.sdk import Variable

        return EventCursor.from_dict(await sync_to_async(Variable.get)(self.key, None, deserialize_json=True))

    async def save(self, cursor: EventCursor) -> None:
        """Save the cursor; a failed save is logged (the watcher goes on, its cursor in memory)."""
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
