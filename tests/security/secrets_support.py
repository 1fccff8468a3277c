"""What the attacks on secrets and templates need: small local HTTP servers that redirect or record
what reaches them, and a real Airflow run of a DAG file (``airflow dags test``) against an emulator."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from airflow_provider_slurmapi.emulator import Emulator
from tests.conftest import connection_json

AIRFLOW = str(Path(sys.executable).with_name("airflow"))


@dataclass
class Recorder:
    """A server that answers every request with ``status`` (and ``location``) and records its headers."""

    status: int = 200
    location: str = ""
    requests: list[dict[str, str]] = field(default_factory=list)
    url: str = ""


@contextmanager
def http_server(recorder: Recorder, host: str = "127.0.0.1") -> Iterator[Recorder]:
    """``recorder`` served on a free port of ``host`` until the block ends; ``location`` may name
    ``{url}`` (the server itself, for a redirect loop)."""

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            self.rfile.read(length)
            recorder.requests.append({"method": self.command, "path": self.path, **dict(self.headers.items())})
            self.send_response(recorder.status)
            if recorder.location:
                self.send_header("Location", recorder.location.format(url=recorder.url))
            body = b"{}" if recorder.status < 300 or recorder.status >= 400 else b""
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = _answer

        def log_message(self, format: str, *args: object) -> None:  # quiet
            pass

    server = ThreadingHTTPServer((host, 0), Handler)
    recorder.url = f"http://{host}:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield recorder
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def endpoint_connection(emu: Emulator, endpoint: str) -> str:
    """A connection whose tokens are the emulator's (its key file) but whose API endpoint is ``endpoint``."""
    conn = json.loads(connection_json(emu))
    conn["extra"]["endpoint"] = endpoint
    return json.dumps(conn)


def airflow_dags_test(
    home: Path, dag_file: str, dag_id: str, conf: dict[str, object], env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    """``airflow dags test dag_id -c conf`` with ``dag_file`` as the only DAG, in an Airflow home of its own."""
    dags = home / "dags"
    dags.mkdir(parents=True, exist_ok=True)
    (dags / f"{dag_id}.py").write_text(dag_file)
    environment = {
        **os.environ,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        **env,
    }
    subprocess.run([AIRFLOW, "db", "migrate"], env=environment, check=True, capture_output=True, timeout=300)
    command = [AIRFLOW, "dags", "test", dag_id, "-c", json.dumps(conf)]
    return subprocess.run(command, env=environment, capture_output=True, text=True, timeout=300)
