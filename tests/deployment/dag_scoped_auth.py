"""SimpleAuthManager with DAG-scoped users, for the deployments that check per-DAG authorisation.

SimpleAuthManager lets every role read every DAG. Here a user named in ``SLURM_DAG_SCOPES`` (JSON:
user -> the DAG IDs they may reach) is refused every other DAG, as a FAB role without that DAG's
permissions, or any auth manager with per-DAG rules, would refuse them.
"""

from __future__ import annotations

import json
import os
from typing import Any

from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager


class DagScopedAuthManager(SimpleAuthManager):
    def is_authorized_dag(self, *, method: Any, user: Any, access_entity: Any = None, details: Any = None) -> bool:
        scope = json.loads(os.environ.get("SLURM_DAG_SCOPES", "{}")).get(user.get_name())
        if scope is not None and (details is None or details.id not in scope):
            return False
        return super().is_authorized_dag(method=method, user=user, access_entity=access_entity, details=details)
