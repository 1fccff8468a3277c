"""The sdist and wheel as users get them: their contents, then the wheel installed in a clean venv
running the example DAG under `airflow dags test` against the emulator from that venv."""

from __future__ import annotations

import configparser
import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
import tarfile
import time
import zipfile
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

import pytest

import airflow_provider_slurmapi

pytestmark = pytest.mark.packaging

ROOT = Path(__file__).parents[2]
PACKAGE = "airflow_provider_slurmapi"
VERSION = airflow_provider_slurmapi.__version__
DAG_ID = "example_slurm_submit_job"


def package_files() -> set[str]:
    """Every file of the package in the source tree, as a path relative to ROOT."""
    return {
        path.relative_to(ROOT).as_posix()
        for path in (ROOT / PACKAGE).rglob("*")
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc"
    }


def uv(*args: str, cwd: Path, timeout: float = 300) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "uv", *args], cwd=cwd, capture_output=True, text=True, timeout=timeout
    )
    assert result.returncode == 0, f"uv {' '.join(args)}:\n{result.stdout}{result.stderr}"


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sdist and, built from it, the wheel."""
    if importlib.util.find_spec("uv") is None:
        pytest.skip("uv is not installed in this environment")
    out = tmp_path_factory.mktemp("dist")
    uv("build", "--out-dir", str(out), str(ROOT), cwd=out)
    return out


def the_one(dist: Path, pattern: str) -> Path:
    found = sorted(dist.glob(pattern))
    assert len(found) == 1, f"{pattern}: {found}"
    return found[0]


def test_sdist_has_sources_pyproject_readme_and_license(dist: Path) -> None:
    sdist = the_one(dist, "*.tar.gz")
    assert sdist.name == f"airflow_provider_slurmapi-{VERSION}.tar.gz"
    prefix = sdist.name.removesuffix(".tar.gz") + "/"
    with tarfile.open(sdist) as tar:
        names = {name.removeprefix(prefix) for name in tar.getnames()}
    missing = (package_files() | {"pyproject.toml", "README.md", "LICENSE"}) - names
    assert not missing, f"missing from the sdist: {sorted(missing)}"
    with tarfile.open(sdist) as tar:
        shipped = tar.extractfile(f"{prefix}LICENSE")
        assert shipped is not None and shipped.read() == (ROOT / "LICENSE").read_bytes()
    stray = [n for n in names if n.startswith((".venv", ".git/")) or "__pycache__" in n]
    assert not stray, f"should not be in the sdist: {stray[:10]}"


def test_wheel_contents_entry_points_and_version(dist: Path) -> None:
    wheel = the_one(dist, "*.whl")
    assert wheel.name.startswith(f"airflow_provider_slurmapi-{VERSION}-")
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        info = f"airflow_provider_slurmapi-{VERSION}.dist-info"
        wheel_metadata = zf.read(f"{info}/METADATA").decode()
        entry_points = configparser.ConfigParser()
        entry_points.read_string(zf.read(f"{info}/entry_points.txt").decode())
        license_text = zf.read(f"{info}/licenses/LICENSE")
    # Loaded at run time with importlib.resources: the job schema and the emulator's reply templates.
    data = {f"{PACKAGE}/py.typed", f"{PACKAGE}/client/schemas/job_desc_msg.json"}
    data |= {f for f in package_files() if f.startswith(f"{PACKAGE}/emulator/templates/")}
    assert f"{PACKAGE}/emulator/templates/slurm_job.json" in data
    missing = (package_files() | data) - names
    assert not missing, f"missing from the wheel: {sorted(missing)}"
    assert f"Version: {VERSION}\n" in wheel_metadata
    # the license text ships with the wheel, and its metadata names it (PEP 639)
    assert license_text == (ROOT / "LICENSE").read_bytes()
    assert license_text.startswith(
        b"\n                                 Apache License\n                           Version 2.0"
    )
    assert "License-Expression: Apache-2.0\n" in wheel_metadata and "License-File: LICENSE\n" in wheel_metadata
    assert dict(entry_points["apache_airflow_provider"]) == {
        "provider_info": f"{PACKAGE}.get_provider_info:get_provider_info"
    }
    assert entry_points["console_scripts"]["slurm-job-api-emulator"] == f"{PACKAGE}.emulator.cli:main"


def test_each_python_requires_python_admits_is_classified_and_has_its_run(dist: Path) -> None:
    """The Pythons claimed: Requires-Python and the classifiers name the same ones, and each has a
    run in scripts/test.sh (3.11, the oldest, as the main one; the others as ENV_PYTHON_3_X)."""
    from packaging.specifiers import SpecifierSet

    with zipfile.ZipFile(the_one(dist, "*.whl")) as zf:
        lines = zf.read(f"airflow_provider_slurmapi-{VERSION}.dist-info/METADATA").decode().splitlines()
    (requires,) = [line.removeprefix("Requires-Python: ") for line in lines if line.startswith("Requires-Python: ")]
    admitted = {f"3.{minor}" for minor in range(30) if f"3.{minor}" in SpecifierSet(requires)}
    classified = {
        line.rsplit(" :: ", 1)[1]
        for line in lines
        if line.startswith("Classifier: Programming Language :: Python :: 3.")
    }
    assert classified == admitted, (requires, sorted(classified))
    environments = (ROOT / "scripts" / "environments.sh").read_text()
    runs = (ROOT / "scripts" / "test.sh").read_text()
    oldest, *others = sorted(admitted, key=lambda version: int(version.split(".")[1]))
    assert oldest == "3.11", admitted  # CI's python3, that of the main run
    for version in others:
        env = f"ENV_PYTHON_{version.replace('.', '_')}"
        assert f"{env}=(" in environments and f"run_python {env} " in runs, version


@pytest.fixture(scope="module")
def venv(dist: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A new venv with the wheel and the running Airflow version; dependencies pinned to the
    running environment's versions, so the install comes from the local cache."""
    work = tmp_path_factory.mktemp("venv")
    path = work / "venv"
    uv("venv", "--python", sys.executable, str(path), cwd=work)
    constraints = work / "constraints.txt"
    constraints.write_text(
        "".join(
            f"{d.metadata['Name']}=={d.version}\n"
            for d in metadata.distributions()
            if d.metadata["Name"] and d.metadata["Name"].lower().replace("_", "-") != "airflow-provider-slurmapi"
        )
    )
    airflow = f"apache-airflow=={metadata.version('apache-airflow')}"
    wheel = the_one(dist, "*.whl")
    uv("pip", "install", "--python", str(path / "bin" / "python"), "-c", str(constraints), str(wheel), airflow,
       cwd=work, timeout=600)  # fmt: skip
    return path


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without anything pointing at the source tree or its Airflow."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("AIRFLOW") and k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")
    }
    return {**env, **extra}


def run_in(
    venv: Path, command: str, *args: str, env: dict[str, str], timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(venv / "bin" / command), *args],
        cwd=venv.parent,  # outside the repository: the source tree cannot be imported by accident
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_installed_package_comes_from_site_packages(venv: Path) -> None:
    code = (
        "import json, sysconfig, airflow_provider_slurmapi as p;"
        "print(json.dumps([p.__file__, p.__version__, sysconfig.get_path('purelib')]))"
    )
    result = run_in(venv, "python", "-c", code, env=clean_env())
    assert result.returncode == 0, result.stderr
    file, version, site_packages = json.loads(result.stdout)
    assert Path(file).is_relative_to(site_packages), file
    assert Path(site_packages).is_relative_to(venv)
    assert version == VERSION


@pytest.fixture(scope="module")
def airflow_env(venv: Path) -> Iterator[dict[str, str]]:
    """Airflow settings for the venv, with the emulator started from the venv's console script."""
    work = venv.parent
    dags = work / "dags"
    dags.mkdir()
    shutil.copy(ROOT / "example_dags" / f"{DAG_ID}.py", dags)
    shutil.copytree(ROOT / "example_dags" / "scripts", dags / "scripts")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    key_file = work / "emulator-key.json"
    log = (work / "emulator.log").open("w")
    emulator = subprocess.Popen(
        [str(venv / "bin" / "slurm-job-api-emulator"), "--port", str(port), "--key-file", str(key_file),
         "--state-dir", str(work / "jobs")],
        cwd=work, env=clean_env(), stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        wait_for_emulator(port, key_file, emulator, work / "emulator.log")
        extra = {
            "project_id": "test-project",
            "region": "us-central1",
            "cluster_id": "test-cluster",
            "endpoint": f"http://127.0.0.1:{port}",
            "key_path": str(key_file),
        }
        env = clean_env(
            AIRFLOW_HOME=str(work / "airflow"),
            AIRFLOW__CORE__DAGS_FOLDER=str(dags),
            AIRFLOW__CORE__LOAD_EXAMPLES="False",
            AIRFLOW_CONN_SLURM_JOB_API_DEFAULT=json.dumps({"conn_type": "slurm_job_api", "extra": extra}),
        )
        yield env
    finally:
        emulator.terminate()
        emulator.wait(timeout=30)
        log.close()


def wait_for_emulator(port: int, key_file: Path, emulator: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        assert emulator.poll() is None, f"the emulator exited:\n{log.read_text()}"
        if key_file.exists():
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                return
            except OSError:
                pass
        time.sleep(0.1)
    pytest.fail(f"the emulator did not start:\n{log.read_text()}")


def test_providers_list_shows_the_provider(venv: Path, airflow_env: dict[str, str]) -> None:
    result = run_in(venv, "airflow", "providers", "list", "--output", "json", env=airflow_env)
    assert result.returncode == 0, result.stdout + result.stderr
    listed = json.loads(result.stdout[result.stdout.index("[") :])
    versions = {p["package_name"]: p["version"] for p in listed}
    assert versions.get("airflow-provider-slurmapi") == VERSION, versions


def test_example_dag_runs_from_the_installed_wheel(venv: Path, airflow_env: dict[str, str]) -> None:
    migrated = run_in(venv, "airflow", "db", "migrate", env=airflow_env)
    assert migrated.returncode == 0, migrated.stdout[-3000:] + migrated.stderr[-3000:]
    result = run_in(venv, "airflow", "dags", "test", DAG_ID, env=airflow_env)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-5000:]
    assert "is COMPLETED; exit code 0" in output, output[-5000:]
