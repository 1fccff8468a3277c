"""Provider metadata and the DAG-parsing import path."""

from __future__ import annotations

import json
import subprocess
import sys

from airflow_provider_slurmapi.get_provider_info import CONN_FIELDS, UI_FIELD_BEHAVIOUR, get_provider_info
from airflow_provider_slurmapi.hooks.slurm_job_api import SlurmJobApiHook

HEAVY = ("google", "aiohttp", "requests", "jsonschema", "openlineage")


def test_operator_sensor_and_decorator_imports_stay_light() -> None:
    """DAG files import these at every parse: no HTTP, Google, schema or lineage library may come along."""
    code = (
        "import sys, json\n"
        "try:\n    import airflow.sdk\nexcept ImportError:  # Airflow 2.x\n    import airflow.models.baseoperator\n"
        "before = set(sys.modules)\n"
        "import airflow_provider_slurmapi.operators.job, airflow_provider_slurmapi.sensors.job\n"
        "import airflow_provider_slurmapi.decorators.slurm, airflow_provider_slurmapi.decorators.slurm_python\n"
        "print(json.dumps(sorted(set(sys.modules) - before)))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    added = json.loads(result.stdout.strip().splitlines()[-1])
    assert {"airflow_provider_slurmapi.operators.job", "airflow_provider_slurmapi.decorators.slurm_python"} <= set(
        added
    )
    heavy = [
        m
        for m in added
        if m.split(".")[0] in HEAVY
        or m.startswith(("airflow.providers.google", "airflow.providers.openlineage"))
        or m == "airflow_provider_slurmapi.lineage"  # imported by the lineage methods only
    ]
    assert heavy == []


def test_connection_type_declares_every_field() -> None:
    info = get_provider_info()
    assert info["package-name"] == "airflow-provider-slurmapi"
    (conn,) = info["connection-types"]
    assert conn["connection-type"] == SlurmJobApiHook.conn_type == "slurm_job_api"
    assert conn["hook-class-name"].endswith(SlurmJobApiHook.__name__)
    assert set(conn["conn-fields"]) == {
        "project_id", "region", "cluster_id", "api_version", "endpoint",
        "key_path", "keyfile_dict", "credential_config_file", "impersonation_chain", "scope",
        "retry_attempts", "retry_max_seconds", "submit_settle_seconds", "output_uri", "output_cluster_path",
        "output_staged_retention_days", "live_output", "live_output_period",
    }  # fmt: skip
    assert conn["conn-fields"]["api_version"]["schema"]["default"] == "v0.0.42"
    assert conn["conn-fields"]["keyfile_dict"]["schema"]["format"] == "password"


def test_airflow_cli_lists_provider_hook_and_trigger(tmp_path) -> None:
    airflow = str(__import__("pathlib").Path(sys.executable).with_name("airflow"))
    env = {"AIRFLOW_HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    listed = {
        what: subprocess.run([airflow, "providers", what], env=env, capture_output=True, text=True).stdout
        for what in ("list", "hooks", "triggers")
    }
    assert "airflow-provider-slurmapi" in listed["list"]
    assert "slurm_job_api" in listed["hooks"] and "SlurmJobApiHook" in listed["hooks"]
    assert "airflow_provider_slurmapi.triggers.job" in listed["triggers"]
    assert "airflow_provider_slurmapi.triggers.job_events" in listed["triggers"]


def test_airflow_registers_the_output_link(tmp_path) -> None:
    """The "Slurm job output" link is a registered extra link of the provider (Airflow refuses unknown ones)."""
    airflow = str(__import__("pathlib").Path(sys.executable).with_name("airflow"))
    env = {"AIRFLOW_HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    links = subprocess.run([airflow, "providers", "links"], env=env, capture_output=True, text=True).stdout
    assert "airflow_provider_slurmapi.links.SlurmJobOutputLink" in links


def test_airflow_2_form_shows_every_field() -> None:
    """Airflow 2.x builds its connection form from the widgets its providers manager registered."""
    import pytest

    from airflow_provider_slurmapi.version_compat import AIRFLOW_V_3_0_PLUS

    if AIRFLOW_V_3_0_PLUS:  # the FAB provider may be installed there too (the auth manager)
        pytest.skip("Airflow 3 reads conn-fields instead of widgets")
    from airflow.providers_manager import ProvidersManager

    manager = ProvidersManager()
    hook = manager.hooks["slurm_job_api"]
    assert (hook.hook_name, hook.package_name) == ("Google Cloud Slurm Job API", "airflow-provider-slurmapi")
    assert hook.connection_testable
    widgets = {
        info.field_name: info
        for name, info in manager.connection_form_widgets.items()
        if name.startswith("extra__slurm_job_api__")
    }
    assert set(widgets) == set(CONN_FIELDS)
    for name, info in widgets.items():
        assert str(info.field.args[0]) == CONN_FIELDS[name]["label"], name
        assert info.field.kwargs["description"] == CONN_FIELDS[name]["description"], name
    assert [name for name, info in widgets.items() if info.is_sensitive] == ["keyfile_dict"]
    assert manager.field_behaviours["slurm_job_api"]["hidden_fields"] == UI_FIELD_BEHAVIOUR["hidden-fields"]


def test_the_output_link_of_a_task_that_ran_needs_no_xcom() -> None:
    """Airflow 3's task runner asks each link as the task ends: ours answers from the task itself."""
    from airflow_provider_slurmapi.links import SlurmJobOutputLink
    from airflow_provider_slurmapi.operators.job import SlurmSubmitJobOperator

    task = SlurmSubmitJobOperator(task_id="t", job={}, script="true")
    assert SlurmJobOutputLink().get_link(task, ti_key=None) == ""  # type: ignore[arg-type]  # no XCom read
    task.output_console_url = "https://console.cloud.google.com/storage/browser/_details/b/o.out"
    assert SlurmJobOutputLink().get_link(task, ti_key=None) == task.output_console_url  # type: ignore[arg-type]
