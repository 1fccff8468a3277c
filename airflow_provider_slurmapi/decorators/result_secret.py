"""The deployment's secret that ``@task.slurm_python`` derives each try's result key from.

A try's key cannot be kept with its job's ID: the task state store is read, unmasked, by whoever may
read the task instance, and the record's Variable by whoever may read Variables. So the record keeps
a random nonce, and the key is HMAC-SHA256 of that nonce under this secret (``result_key``): whoever
reads the record but not the secret cannot sign a result.

The secret is one Airflow Variable, ``slurm_python_result_secret``. Its name contains ``secret``, so
Airflow shows its value as ``***`` in the UI and, on Airflow 3, the REST API, as for every Variable
with a sensitive name (Airflow 2.11's REST API shows Variables unmasked); Airflow's administrators,
with the metadata database or the secrets backend, can still read it, as can any task's code.
The first try that finds no such Variable creates it. Administrators may create it themselves
beforehand, in the Variables or a secrets backend; changing it makes the results of running tasks
unverifiable until they are cleared.
"""

from __future__ import annotations

import json
import secrets

from airflow.providers.common.compat.sdk import AirflowException, AirflowFailException

from airflow_provider_slurmapi.version_compat import mask_secret
from airflow_provider_slurmapi.version_compat import variables as _variables

RESULT_SECRET_VARIABLE = "slurm_python_result_secret"
MIN_SECRET_LENGTH = 32
DESCRIPTION = (
    "The secret @task.slurm_python derives each try's result key from (airflow-provider-slurmapi). "
    "Created by the first such task if absent. Changing it makes the results of running tasks "
    "unverifiable until they are cleared."
)


def new_result_secret() -> str:
    """A new secret: 256 random bits, as hex digits after a letter. Airflow's REST API masks a
    sensitive Variable's value only if it does not read as JSON, and hex digits alone may."""
    return "s" + secrets.token_hex(32)


def result_secret() -> str:
    """The deployment's secret, created if there is none yet; registered with the secrets masker."""
    secret = _read() or _create()
    _check(secret)
    mask_secret(secret)
    return secret


def _read() -> str | None:
    try:
        value = _variables().get(RESULT_SECRET_VARIABLE, None)
    except Exception as error:
        raise AirflowException(
            f"Cannot read Airflow Variable {RESULT_SECRET_VARIABLE!r}, from which @task.slurm_python "
            f"derives the key to its results: {error}"
        ) from error
    return str(value) if value else None


def _create() -> str:
    """Store a new secret, then use what is stored: of two tries that create it at once, the one
    that wrote first then reads the other's, as the other does."""
    secret = new_result_secret()
    mask_secret(secret)
    try:
        _variables().set(RESULT_SECRET_VARIABLE, secret, description=DESCRIPTION)
    except Exception as error:
        raise AirflowException(
            f"Cannot create Airflow Variable {RESULT_SECRET_VARIABLE!r}, from which @task.slurm_python "
            f"derives the key to its results (an administrator may create it): {error}"
        ) from error
    stored = _read()
    if stored is None:
        raise AirflowException(f"Airflow Variable {RESULT_SECRET_VARIABLE!r} was created but reads as empty")
    return stored


def _check(secret: str) -> None:
    """Refuse a secret too short to guess at, or one Airflow would show unmasked (JSON text)."""
    if len(secret) < MIN_SECRET_LENGTH:
        raise AirflowFailException(
            f"Airflow Variable {RESULT_SECRET_VARIABLE!r} holds {len(secret)} characters: it takes at least "
            f"{MIN_SECRET_LENGTH} characters of random text (delete it to have a new one created)"
        )
    if _reads_as_json(secret):
        raise AirflowFailException(
            f"Airflow Variable {RESULT_SECRET_VARIABLE!r} reads as JSON, which Airflow's REST API may show "
            "unmasked: use random text that is not JSON, such as letters and digits starting with a letter "
            "(delete it to have a new one created)"
        )


def _reads_as_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True
