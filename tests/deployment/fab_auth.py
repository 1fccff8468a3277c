"""The FAB auth manager in a deployment: its users and DAG-level roles, made with the FAB provider's CLI.

FAB's token endpoint (``POST /auth/token``) takes and answers what SimpleAuthManager's does, so
``Airflow.token()`` serves both; ``Airflow.users`` names each user's FAB role here.
"""

from __future__ import annotations

import json
import subprocess

from tests.deployment.airflow_services import AIRFLOW, Airflow

FAB_AUTH_MANAGER = "airflow.providers.fab.auth_manager.fab_auth_manager.FabAuthManager"
# FAB checks a DAG's own resource (DAG:<dag_id>), and for what is in a DAG a resource of every DAG:
# reading a task instance needs can_read on "Task Instances" and "DAG Runs", changing one can_edit on
# both and on the DAG itself
IN_EVERY_DAG = {"DAG Runs": "can_read,can_edit", "Task Instances": "can_read,can_edit", "Task Logs": "can_read"}


def cli(airflow: Airflow, *args: str) -> None:
    result = subprocess.run([AIRFLOW, *args], env=airflow.env, capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, f"airflow {' '.join(args[:2])}:\n{(result.stdout + result.stderr)[-5000:]}"


def create_users(airflow: Airflow, *users: str) -> None:
    """Create ``users`` with their roles (``Airflow.users``) and passwords; the roles must exist."""
    for user in users:
        cli(airflow, "users", "create", "--role", airflow.users[user], "--username", user,
            f"--password={airflow.passwords[user]}",  # one that starts with "-" is not an option
            "--firstname", user, "--lastname", "User", "--email", f"{user}@example.com")  # fmt: skip


def create_dag_roles(airflow: Airflow, roles: dict[str, list[str]]) -> None:
    """Create each role that may read its DAGs, their runs, task instances and task logs, and change
    their task instances. Its DAGs must have been parsed: the dag-processor creates their resources."""
    grants = [{"name": role, "resource": f"DAG:{dag_id}", "action": "can_read,can_edit"}
              for role, dag_ids in roles.items() for dag_id in dag_ids]  # fmt: skip
    grants += [{"name": role, "resource": resource, "action": actions}
               for role in roles for resource, actions in IN_EVERY_DAG.items()]  # fmt: skip
    file = airflow.home / "fab-roles.json"
    file.write_text(json.dumps(grants))
    cli(airflow, "roles", "import", str(file))
