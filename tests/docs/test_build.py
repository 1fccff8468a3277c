"""The documentation builds with Sphinx, warnings as errors, and has the pages and classes it should."""

from __future__ import annotations

import html
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("sphinx", reason="the docs extra is not installed")
pytest.importorskip("myst_parser", reason="the docs extra is not installed")

pytestmark = pytest.mark.docs

DOCS = Path(__file__).parents[2] / "docs"

PAGES = [
    "index",
    "installation",
    "compatibility",
    "connection",
    "testing",
    "deploying",
    "operators/submit-job",
    "operators/cancel-job",
    "sensors/job",
    "triggers/job",
    "hooks",
    "api",
    "benchmarks",
    "changelog",
]

API = [
    "hooks.slurm_job_api.SlurmJobApiHook",
    "hooks.slurm_job_api.SlurmJobApiAsyncHook",
    "client.api.SlurmJobApiOperations",
    "operators.base.SlurmBaseOperator",
    "operators.waiting.SlurmWaitingOperator",
    "operators.job.SlurmSubmitJobOperator",
    "operators.job.SlurmCancelJobOperator",
    "sensors.job.SlurmJobSensor",
    "triggers.job.SlurmJobTrigger",
    "client.jobs.JobStatus",
    "client.errors.SlurmJobApiError",
    "client.errors.PermissionDeniedError",
    "client.errors.SlurmError",
    "client.errors.JobLostError",
    "emulator.Emulator",
    "emulator.EmulatorConfig",
    "emulator.FaultPlan",
    "emulator.ScriptedFault",
    "emulator.FaultInjector",
]


@pytest.fixture(scope="module")
def html_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("docs-html")
    env = {key: value for key, value in os.environ.items() if not key.startswith("AIRFLOW")}
    env["AIRFLOW_HOME"] = str(tmp_path_factory.mktemp("docs-airflow-home"))
    result = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-b", "html", str(DOCS), str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, f"sphinx-build failed:\n{result.stdout[-5000:]}\n{result.stderr}"
    return out


def text_of(page: Path) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", page.read_text()))


def test_every_page_is_built(html_dir: Path) -> None:
    missing = [page for page in PAGES if not (html_dir / f"{page}.html").is_file()]
    assert not missing, f"pages not built: {missing}"


def test_api_reference_has_the_main_classes(html_dir: Path) -> None:
    page = (html_dir / "api.html").read_text()
    missing = [name for name in API if f'id="airflow_provider_slurmapi.{name}"' not in page]
    assert not missing, f"the API reference lacks {missing}"
    # the operators' arguments come from their docstrings
    assert "reuse_completed_job" in text_of(html_dir / "api.html")


def test_version_comes_from_the_package(html_dir: Path) -> None:
    from airflow_provider_slurmapi import __version__

    assert f"Version {__version__}." in text_of(html_dir / "index.html")
    assert "__version__" in (DOCS / "conf.py").read_text()


def test_connection_page_shows_the_form(html_dir: Path) -> None:
    assert (html_dir / "_images" / "connection-form.png").is_file()
    assert "connection-form.png" in (html_dir / "connection.html").read_text()


def test_examples_are_shown_as_tested(html_dir: Path) -> None:
    """The literalinclude'd example text is in the page as it is in the file."""
    page = text_of(html_dir / "operators" / "submit-job.html")
    assert 'script="scripts/train.sbatch",  # a file next to the DAG, rendered with Jinja' in page
    assert "srun --ntasks=1 sleep 1" in page
