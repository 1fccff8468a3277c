"""The running Airflow's version, as Airflow's own providers carry it.

Kept here, not imported from common-compat: the flags a given common-compat release knows depend on
its age (``AIRFLOW_V_3_3_PLUS`` is in 1.15.0 and later), and Cloud Composer images keep the release
they were built with.
"""

from __future__ import annotations

from typing import Any


def get_base_airflow_version_tuple() -> tuple[int, int, int]:
    from airflow import __version__
    from packaging.version import Version

    version = Version(__version__)
    return version.major, version.minor, version.micro


AIRFLOW_V_3_0_PLUS: bool = get_base_airflow_version_tuple() >= (3, 0, 0)
AIRFLOW_V_3_3_PLUS: bool = get_base_airflow_version_tuple() >= (3, 3, 0)


def mask_secret(value: str) -> None:
    """Register a value with the task's secrets masker, wherever this Airflow keeps it."""
    import importlib

    for module in (
        "airflow.sdk.log",  # Airflow 3.2+
        "airflow.sdk.execution_time.secrets_masker",  # Airflow 3.0, 3.1
        "airflow.utils.log.secrets_masker",  # Airflow 2
    ):
        try:
            mask = importlib.import_module(module).mask_secret
        except (ImportError, AttributeError):
            continue
        mask(value)
        return
    raise ImportError("no secrets masker found in this Airflow")


def determine_kwargs(function: Any, args: Any, context: Any) -> Any:
    """The keyword arguments TaskFlow passes ``function``: its own, and the context values it names."""
    try:
        from airflow.sdk.bases.decorator import determine_kwargs as determine  # Airflow 3.2+
    except ImportError:
        from airflow.utils.operator_helpers import determine_kwargs as determine  # Airflow 2, 3.1
    return determine(function, args, context)


def variables() -> Any:
    """Airflow's Variable as a task or trigger reaches it: the Task SDK's on Airflow 3 (through
    the supervisor), the metadata database's on Airflow 2.11."""
    try:
        from airflow.sdk import Variable
    except ImportError:  # Airflow 2
        from airflow.models import Variable
    return Variable
