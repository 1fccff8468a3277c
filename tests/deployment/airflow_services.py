"""Airflow components as separate processes in a temporary AIRFLOW_HOME, and its REST API.

Nothing here imports Airflow: the same test files are collected under Airflow 2, where
``require_airflow_3()`` skips them.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from importlib.metadata import version
from pathlib import Path
from typing import Any, TypeVar

import psutil
import pytest
import requests

AIRFLOW = str(Path(sys.executable).with_name("airflow"))
USER = "admin"
# What the triggerer logs when its event loop was late past [triggerer] blocked_main_thread_warning_threshold
BLOCKED_LOOP_WARNING = "Triggerer's async thread was blocked"
T = TypeVar("T")


def require_airflow_3() -> None:
    installed = version("apache-airflow")
    if int(installed.split(".")[0]) < 3:
        pytest.skip(f"needs Airflow 3 (api-server, dag-processor, REST API v2); Airflow {installed} is installed")


def require_slurm_tab() -> None:
    """The Slurm job tab's deployments: an api-server that serves plugins' task instance views."""
    require_airflow_3()
    from airflow_provider_slurmapi.ui.plugin import TAB_ENABLED

    if not TAB_ENABLED:
        pytest.skip("the tab needs Airflow 3.1 or later")


def require_airflow_2() -> None:
    installed = version("apache-airflow")
    if int(installed.split(".")[0]) != 2:
        pytest.skip(f"needs Airflow 2 (webserver, REST API v1); Airflow {installed} is installed")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def airflow_home(tmp_path_factory: pytest.TempPathFactory, name: str, *dag_files: Path) -> Path:
    """A new AIRFLOW_HOME whose dags folder holds ``dag_files``."""
    home = tmp_path_factory.mktemp(name)
    (home / "dags").mkdir()
    for dag_file in dag_files:
        shutil.copy(dag_file, home / "dags")
    return home


def wait_for(check: Callable[[], T | None], timeout: float, what: str, interval: float = 0.5) -> T:
    """Poll ``check`` until it returns something truthy; fail saying what never happened."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


class RestApi:
    """The public REST API (``/api/v2``) with a bearer token; an error status fails with the body."""

    def __init__(self, url: str, token: str | None = None, *, basic: tuple[str, str] | None = None) -> None:
        self.url = url
        self.session = requests.Session()
        self.session.headers.update({"Accept": "application/json"})
        if token is not None:
            self.session.headers["Authorization"] = f"Bearer {token}"
        self.session.auth = basic  # Airflow 2's REST API: basic auth

    def request(self, method: str, path: str, *, missing_ok: bool = False, **kwargs: Any) -> Any:
        response = self.session.request(method, self.url + path, timeout=30, **kwargs)
        if missing_ok and response.status_code == 404:
            return None
        if not response.ok:
            raise AssertionError(f"{method} {path}: HTTP {response.status_code}: {response.text[:2000]}")
        return response.json() if response.content else None

    def get(self, path: str, **kwargs: Any) -> Any:
        return self.request("GET", path, **kwargs)

    def post(self, path: str, body: Any) -> Any:
        return self.request("POST", path, json=body)

    def patch(self, path: str, body: Any) -> Any:
        return self.request("PATCH", path, json=body)


class Airflow:
    """One AIRFLOW_HOME (SQLite, LocalExecutor, SimpleAuthManager) and the components started in it."""

    API = "/api/v2"

    def __init__(self, home: Path, users: dict[str, str] | None = None, **env: str) -> None:
        """``users``: SimpleAuthManager's users and their roles (default: ``admin``, an admin); under the
        FAB auth manager, the FAB roles that ``fab_auth.create_users`` gives them."""
        self.home = home
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.users = users or {USER: "admin"}
        self.passwords = {user: secrets.token_urlsafe(12) for user in self.users}
        self.password = self.passwords.get(USER, "")
        passwords = home / "passwords.json"
        passwords.write_text(json.dumps(self.passwords))
        (home / "dags").mkdir(exist_ok=True)
        # Only our settings: an AIRFLOW__* variable of the caller must not change the deployment.
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW_")}
        self.env.update(
            {
                # executors that run `airflow tasks run` (Airflow 2's) find this environment's airflow
                "PATH": os.pathsep.join([str(Path(AIRFLOW).parent), os.environ.get("PATH", "")]),
                "AIRFLOW_HOME": str(home),
                "AIRFLOW__CORE__DAGS_FOLDER": str(home / "dags"),
                "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
                "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
                "AIRFLOW__CORE__PARALLELISM": "4",
                "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": ",".join(f"{u}:{r}" for u, r in self.users.items()),
                "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords),
                "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.url}/execution/",
                "AIRFLOW__API__BASE_URL": self.url,
                # every component must sign and check the same JWTs (tasks call the execution API)
                "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_urlsafe(32),
                "AIRFLOW__API__SECRET_KEY": secrets.token_urlsafe(32),
                # free ports, so that parallel runs do not collide on the defaults 8793/8794
                "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
                "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(free_port()),
                **env,
            }
        )
        self.processes: dict[str, subprocess.Popen[bytes]] = {}

    def log_file(self, component: str) -> Path:
        return self.home / f"{component}.out"

    def migrate(self) -> None:
        result = subprocess.run(
            [AIRFLOW, "db", "migrate"], env=self.env, capture_output=True, text=True, timeout=300, check=False
        )
        if result.returncode != 0:
            raise AssertionError(f"airflow db migrate failed:\n{(result.stdout + result.stderr)[-5000:]}")

    def start(self, component: str, *args: str, name: str | None = None, **env: str) -> None:
        """Start ``airflow <component>``, known as ``name`` (two triggerers need two names), with more ``env``."""
        if component == "api-server":
            args = ("--host", "127.0.0.1", "--port", str(self.port), "--workers", "1", *args)
        name = name or component
        with self.log_file(name).open("wb") as log:
            # a session of its own: stop() signals the whole process group
            self.processes[name] = subprocess.Popen(
                [AIRFLOW, component, *args],
                env={**self.env, **env},
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def wait_until_up(self, timeout: float = 180) -> None:
        """Wait for the api-server to answer its health check (and not to have died)."""

        def healthy() -> bool:
            self.check_alive()
            with contextlib.suppress(requests.RequestException):
                return requests.get(f"{self.url}/api/v2/monitor/health", timeout=5).ok
            return False

        wait_for(healthy, timeout, "the api-server to answer /api/v2/monitor/health")

    def check_alive(self) -> None:
        dead = {name: p.returncode for name, p in self.processes.items() if p.poll() is not None}
        if dead:
            raise AssertionError(f"Airflow components exited: {dead}")

    def token(self, user: str = USER) -> str:
        """A JWT from the auth manager's token endpoint, for ``user`` (default: the admin): SimpleAuthManager's
        and FAB's take the same request."""
        response = requests.post(
            f"{self.url}/auth/token", json={"username": user, "password": self.passwords[user]}, timeout=30
        )
        assert response.status_code == 201, f"POST /auth/token: HTTP {response.status_code}: {response.text}"
        return str(response.json()["access_token"])

    def api(self) -> RestApi:
        return RestApi(self.url, self.token())

    def api_for(self, dag_id: str) -> RestApi:
        """A REST API client with a token, once the dag-processor has parsed ``dag_id``, which it unpauses."""
        api, dags = self.api(), f"{self.API}/dags/{dag_id}"
        with self.explained():
            wait_for(lambda: api.get(dags, missing_ok=True), 180, f"the DAG {dag_id} to be parsed")
            assert api.patch(dags, {"is_paused": False})["is_paused"] is False
        return api

    def stop(self) -> None:
        """Stop every component: SIGTERM to its process group, SIGKILL to whatever is left."""
        for process in self.processes.values():
            stop_process_group(process)

    def print_blocked_loop_warnings(self) -> None:
        """How many times each triggerer said its event loop was blocked (a figure, not a check:
        on a shared 2-core machine a stall may be the machine's)."""
        for name in self.processes:
            if name.startswith("triggerer") and self.log_file(name).exists():
                count = self.log_file(name).read_text(errors="replace").count(BLOCKED_LOOP_WARNING)
                print(f'\n== {name}: {count} "{BLOCKED_LOOP_WARNING}" lines in its log')

    def tails(self, lines: int = 40) -> str:
        """The end of each component's output, for failure messages."""
        parts = []
        for name, process in self.processes.items():
            text = self.log_file(name).read_text(errors="replace").splitlines()[-lines:]
            status = "running" if process.poll() is None else f"exited with {process.returncode}"
            parts.append(f"----- airflow {name} ({status}), last {len(text)} lines -----\n" + "\n".join(text))
        return "\n".join(parts)

    @contextlib.contextmanager
    def explained(self) -> Iterator[None]:
        """Re-raise any failure with the tail of every component's log, so that CI failures are diagnosable."""
        try:
            yield
        except Exception as error:
            what = str(error) if isinstance(error, AssertionError) else f"{type(error).__name__}: {error}"
            raise AssertionError(f"{what}\n\n{self.tails()}") from error


class Airflow2(Airflow):
    """Airflow 2.11 in one AIRFLOW_HOME: webserver (REST API v1, basic auth), scheduler, triggerer;
    SQLite with the SequentialExecutor (2.x runs nothing else on SQLite)."""

    API = "/api/v1"

    def __init__(self, home: Path, **env: str) -> None:
        super().__init__(
            home,
            AIRFLOW__CORE__EXECUTOR="SequentialExecutor",
            AIRFLOW__API__AUTH_BACKENDS="airflow.api.auth.backend.basic_auth",
            **env,
        )

    def migrate(self) -> None:
        super().migrate()
        result = subprocess.run(
            [AIRFLOW, "users", "create", "--role", "Admin", "--username", USER, "--password", self.password,
             "--firstname", "A", "--lastname", "Admin", "--email", "admin@example.com"],
            env=self.env, capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        if result.returncode != 0:
            raise AssertionError(f"airflow users create failed:\n{(result.stdout + result.stderr)[-5000:]}")

    def start(self, component: str, *args: str, name: str | None = None, **env: str) -> None:
        if component == "webserver":
            args = ("--hostname", "127.0.0.1", "--port", str(self.port), "--workers", "1", *args)
        super().start(component, *args, name=name, **env)

    def wait_until_up(self, timeout: float = 180) -> None:
        def healthy() -> bool:
            self.check_alive()
            with contextlib.suppress(requests.RequestException, ValueError):
                return requests.get(f"{self.url}/health", timeout=5).json()["metadatabase"]["status"] == "healthy"
            return False

        wait_for(healthy, timeout, "the webserver to answer /health")

    def api(self) -> RestApi:
        return RestApi(self.url, basic=(USER, self.password))


def stop_process_group(process: subprocess.Popen[bytes], grace: float = 20) -> None:
    # Task processes put themselves in groups of their own: collect the whole tree first.
    try:
        tree = psutil.Process(process.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        tree = []
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        pass
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    for child in tree:  # psutil checks that the PID still names the same process
        with contextlib.suppress(psutil.NoSuchProcess):
            child.kill()
    process.wait(timeout=10)


@contextlib.contextmanager
def running(
    home: Path,
    components: list[str],
    prepare: Callable[[Airflow], None] | None = None,
    kind: type[Airflow] = Airflow,
    users: dict[str, str] | None = None,
    **env: str,
) -> Iterator[Airflow]:
    """Migrate the database, ``prepare`` it (add a connection...), start the components and wait for
    the api-server (Airflow 2: the webserver); stop them all at the end."""
    airflow = kind(home, users, **env) if users else kind(home, **env)
    airflow.migrate()
    if prepare is not None:
        prepare(airflow)
    try:
        for component in components:
            airflow.start(component)
        with airflow.explained():
            airflow.wait_until_up()
        yield airflow
    finally:
        airflow.stop()
        airflow.print_blocked_loop_warnings()
