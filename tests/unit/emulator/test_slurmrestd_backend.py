"""The slurmrestd backend: every call forwarded to a (fake) slurmrestd, its answer passed back."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests
from aiohttp import web
from emulator_testkit import CLUSTER, FIXTURES, PROJECT, REGION, Api, load_fixture

from airflow_provider_slurmapi.client.cluster import ClusterRef
from airflow_provider_slurmapi.client.errors import InvalidArgumentError, SlurmError, UnavailableError
from airflow_provider_slurmapi.client.retry import NO_RETRY
from airflow_provider_slurmapi.client.sync import SlurmJobApiClient
from airflow_provider_slurmapi.emulator import Emulator, EmulatorConfig, SlurmRequest
from airflow_provider_slurmapi.emulator.backend_api import BackendUnavailable
from airflow_provider_slurmapi.emulator.cli import config_from_args, describe
from airflow_provider_slurmapi.emulator.slurmrestd import SlurmrestdBackend

AUTH_FAILURE = (FIXTURES / "auth_missing_headers.txt").read_text()  # slurmrestd's text/plain 401


@dataclass
class Received:
    method: str
    raw_path: str  # path and query exactly as they came over the wire
    user: str | None
    token: str | None
    content_type: str | None
    body: bytes


class FakeSlurmrestd:
    """Records every request and answers with ``status``/``reply`` (a dict as JSON, a str as text/plain)."""

    def __init__(self) -> None:
        self.received: list[Received] = []
        self.status: int = 200
        self.reply: dict[str, Any] | str = {}
        self.delay = 0.0
        self.url = ""
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._runner: web.AppRunner | None = None

    def answer(self, status: int, reply: dict[str, Any] | str) -> None:
        self.received.clear()
        self.status, self.reply = status, reply

    def start(self) -> None:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._listen(), self._loop).result(10)

    def stop(self) -> None:
        assert self._runner is not None
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    async def _listen(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}"

    async def _handle(self, request: web.Request) -> web.Response:
        self.received.append(
            Received(
                method=request.method,
                raw_path=request.raw_path,
                user=request.headers.get("X-SLURM-USER-NAME"),
                token=request.headers.get("X-SLURM-USER-TOKEN"),
                content_type=request.headers.get("Content-Type"),
                body=await request.read(),
            )
        )
        if self.delay:
            await asyncio.sleep(self.delay)
        if isinstance(self.reply, str):
            return web.Response(status=self.status, text=self.reply, content_type="text/plain")
        return web.json_response(self.reply, status=self.status)


def forwarding_config(url: str, tmp: Path, **overrides: Any) -> EmulatorConfig:
    fields: dict[str, Any] = {"slurm_user": "testuser", "slurm_token": "tok", "key_file": tmp / "key.json"}
    return EmulatorConfig(backend="slurmrestd", slurmrestd_url=url, **{**fields, **overrides})


def client_for(emu: Emulator) -> SlurmJobApiClient:
    session = requests.Session()
    session.headers["Authorization"] = f"Bearer {emu.issue_token()}"
    cluster = ClusterRef(PROJECT, REGION, CLUSTER, endpoint=emu.url)
    return SlurmJobApiClient(session, cluster, retry=NO_RETRY, timeout=10)


def closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"  # nothing listens there any more: connection refused


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeSlurmrestd]:
    server = FakeSlurmrestd()
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def forwarding(fake: FakeSlurmrestd, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Emulator]:
    with Emulator(forwarding_config(fake.url, tmp_path_factory.mktemp("fwd"))) as emu:
        yield emu


@pytest.fixture
def client(forwarding: Emulator) -> SlurmJobApiClient:
    return client_for(forwarding)


# --- what reaches slurmrestd ---------------------------------------------------------------------


def test_get_with_repeated_query_arrives_verbatim(fake: FakeSlurmrestd, client: SlurmJobApiClient) -> None:
    fake.answer(200, {"jobs": [], "errors": [], "warnings": []})
    assert client.call("GET", "/slurm/v0.0.42/jobs/state?job_id=1&job_id=2") == fake.reply
    assert len(fake.received) == 1
    got = fake.received[0]
    assert (got.method, got.raw_path) == ("GET", "/slurm/v0.0.42/jobs/state?job_id=1&job_id=2")
    assert (got.user, got.token) == ("testuser", "tok")
    assert got.body == b""


def test_percent_encoded_query_is_not_re_encoded(fake: FakeSlurmrestd, client: SlurmJobApiClient) -> None:
    fake.answer(200, {"jobs": [], "errors": []})
    client.call("GET", "/slurm/v0.0.42/jobs/?update_time=1%2C2&x=a+b")
    assert fake.received[0].raw_path == "/slurm/v0.0.42/jobs/?update_time=1%2C2&x=a+b"


def test_post_body_is_sent_as_json(fake: FakeSlurmrestd, client: SlurmJobApiClient) -> None:
    submitted = load_fixture("submit_response.json")
    fake.answer(200, submitted)
    body = {"job": {"name": "t", "current_working_directory": "/tmp"}, "script": "#!/bin/bash\ntrue\n"}
    assert client.call("POST", "/slurm/v0.0.42/job/submit", body) == submitted
    got = fake.received[0]
    assert (got.method, got.raw_path) == ("POST", "/slurm/v0.0.42/job/submit")
    assert got.content_type == "application/json"
    assert json.loads(got.body) == body
    assert (got.user, got.token) == ("testuser", "tok")


def test_delete_with_signal(fake: FakeSlurmrestd, client: SlurmJobApiClient) -> None:
    fake.answer(200, load_fixture("delete_running_signal_kill.json"))
    client.call("DELETE", "/slurm/v0.0.42/job/6?signal=KILL")
    got = fake.received[0]
    assert (got.method, got.raw_path, got.body) == ("DELETE", "/slurm/v0.0.42/job/6?signal=KILL", b"")


def test_unknown_path_is_rejected_before_slurmrestd(fake: FakeSlurmrestd, client: SlurmJobApiClient) -> None:
    fake.answer(200, {})
    for path in ("/slurm/v0.0.42/licenses", "/slurm/v0.0.39/ping", "/slurmdb/v0.0.42/jobs/state"):
        with pytest.raises(InvalidArgumentError) as raised:
            client.call("GET", path)
        assert raised.value.http_status == 400 and raised.value.status == "INVALID_ARGUMENT"
    assert fake.received == []


def test_the_cluster_description_routes_reach_slurmrestd(fake: FakeSlurmrestd, forwarding: Emulator) -> None:
    fake.answer(200, {"TRES": []})
    paths = [f"/slurm/v0.0.42/{route}" for route in ("partitions/", "partition/a3", "nodes/", "node/node1")]
    for path in [*paths, "/slurmdb/v0.0.42/tres/"]:
        response = Api(forwarding).raw("GET", path)
        assert response.json() == {"status": 200, "structuredBody": {"TRES": []}}
    assert [r.raw_path for r in fake.received] == [*paths, "/slurmdb/v0.0.42/tres/"]


# --- what comes back -----------------------------------------------------------------------------


def test_json_reply_and_status_pass_through_structured(
    fake: FakeSlurmrestd, forwarding: Emulator, client: SlurmJobApiClient
) -> None:
    unknown = load_fixture("job_unknown.json")
    fake.answer(404, unknown)
    response = Api(forwarding).raw("GET", "/slurm/v0.0.42/job/999999")
    assert response.status_code == 200
    assert response.json() == {"status": 404, "structuredBody": unknown}
    with pytest.raises(SlurmError) as raised:
        client.call("GET", "/slurm/v0.0.42/job/999999")
    assert raised.value.status == 404 and raised.value.error_numbers == [2017]


def test_json_reply_and_status_pass_through_body_shape(fake: FakeSlurmrestd, tmp_path: Path) -> None:
    running = load_fixture("job_running.json")
    fake.answer(200, running)
    with Emulator(forwarding_config(fake.url, tmp_path, reply_shape="body")) as emu:
        envelope = Api(emu).raw("GET", "/slurm/v0.0.42/job/1").json()
        assert set(envelope) == {"status", "body"} and envelope["status"] == 200
        assert json.loads(envelope["body"]) == running
        assert client_for(emu).call("GET", "/slurm/v0.0.42/job/1") == running
        fake.answer(404, load_fixture("job_unknown.json"))
        envelope = Api(emu).raw("GET", "/slurm/v0.0.42/job/999999").json()
        assert envelope["status"] == 404 and json.loads(envelope["body"])["errors"][0]["error_number"] == 2017


@pytest.mark.parametrize("shape", ["structured", "body"])
def test_text_plain_reply_is_a_body_string(fake: FakeSlurmrestd, tmp_path: Path, shape: str) -> None:
    assert AUTH_FAILURE == "Authentication failure"
    fake.answer(401, AUTH_FAILURE)
    with Emulator(forwarding_config(fake.url, tmp_path, reply_shape=shape)) as emu:
        response = Api(emu).raw("GET", "/slurm/v0.0.42/jobs/")
        assert response.status_code == 200
        assert response.json() == {"status": 401, "body": "Authentication failure"}
        with pytest.raises(SlurmError) as raised:
            client_for(emu).call("GET", "/slurm/v0.0.42/jobs/")
    assert raised.value.status == 401
    assert [e.error for e in raised.value.errors] == ["Authentication failure"]
    assert "Authentication failure" in str(raised.value)


def test_slurmrestd_down_is_unavailable(tmp_path: Path) -> None:
    url = closed_port_url()
    with Emulator(forwarding_config(url, tmp_path)) as emu:
        response = Api(emu).raw("GET", "/slurm/v0.0.42/ping")
        assert response.status_code == 503, response.text
        error = response.json()["error"]
        assert (error["code"], error["status"]) == (503, "UNAVAILABLE")
        assert url in error["message"] and "unreachable" in error["message"]
        with pytest.raises(UnavailableError) as raised:
            client_for(emu).call("GET", "/slurm/v0.0.42/ping")
    assert raised.value.http_status == 503 and url in raised.value.message


async def test_slow_slurmrestd_times_out_as_unavailable(fake: FakeSlurmrestd) -> None:
    fake.answer(200, {"pings": []})
    fake.delay = 1.0
    backend = SlurmrestdBackend(fake.url, "testuser", "tok", timeout=0.2)
    await backend.start()
    try:
        with pytest.raises(BackendUnavailable, match=r"did not answer within 0\.2s") as raised:
            await backend.handle(SlurmRequest("GET", "/slurm/v0.0.42/ping"))
        assert fake.url in str(raised.value)
    finally:
        fake.delay = 0.0
        await backend.close()


async def test_backend_answers_json_and_text_directly(fake: FakeSlurmrestd) -> None:
    backend = SlurmrestdBackend(fake.url + "/", "testuser", "tok")
    await backend.start()
    try:
        fake.answer(200, {"pings": [{"pinged": "UP"}]})
        assert await backend.handle(SlurmRequest("GET", "/slurm/v0.0.42/ping")) == (200, fake.reply)
        assert fake.received[0].raw_path == "/slurm/v0.0.42/ping"  # no doubled slash from the base URL
        fake.answer(400, "Unable to parse query.")
        assert await backend.handle(SlurmRequest("GET", "/slurm/v0.0.42/jobs/", raw_query="a=%zz")) == (
            400,
            "Unable to parse query.",
        )
        assert fake.received[0].raw_path == "/slurm/v0.0.42/jobs/?a=%zz"
    finally:
        await backend.close()
    assert backend.is_known_path("/slurm/v0.0.42/job/submit") and not backend.is_known_path("/slurm/v0.0.42/licenses")


# --- configuration -------------------------------------------------------------------------------


def test_config_rejects_an_unknown_backend() -> None:
    with pytest.raises(ValueError, match=r"backend must be 'builtin' or 'slurmrestd', not 'pbs'"):
        EmulatorConfig(backend="pbs")


def test_config_names_the_missing_slurmrestd_options() -> None:
    with pytest.raises(ValueError) as raised:
        EmulatorConfig(backend="slurmrestd", slurm_user="testuser")
    assert str(raised.value) == "backend 'slurmrestd' needs slurmrestd_url, slurm_token"
    with pytest.raises(ValueError, match="slurmrestd_url must be an http"):
        EmulatorConfig(backend="slurmrestd", slurmrestd_url="slurm:6820", slurm_user="u", slurm_token="t")


def test_config_defaults_and_token_not_in_repr() -> None:
    assert EmulatorConfig().backend == "builtin"
    config = EmulatorConfig(backend="slurmrestd", slurmrestd_url="http://h:6820", slurm_user="u", slurm_token="s3cr3t")
    assert config.slurm_token == "s3cr3t" and "s3cr3t" not in repr(config)


def test_cli_flags(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_JOB_API_EMULATOR_SLURM_USER", "from-env")
    config = config_from_args(
        [
            "--key-file",
            str(tmp_path / "k.json"),
            "--backend",
            "slurmrestd",
            "--slurmrestd-url",
            "http://head:6820",
            "--slurm-user",
            "alice",
            "--slurm-token",
            "jwt",
        ]
    )
    assert (config.backend, config.slurmrestd_url, config.slurm_user, config.slurm_token) == (
        "slurmrestd",
        "http://head:6820",
        "alice",  # the flag wins over the variable
        "jwt",
    )
    assert config_from_args(["--key-file", str(tmp_path / "k.json")]).backend == "builtin"


def test_cli_env_vars(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_JOB_API_EMULATOR_BACKEND", "slurmrestd")
    monkeypatch.setenv("SLURM_JOB_API_EMULATOR_SLURMRESTD_URL", "http://head:6820")
    monkeypatch.setenv("SLURM_JOB_API_EMULATOR_SLURM_USER", "bob")
    monkeypatch.setenv("SLURM_JOB_API_EMULATOR_SLURM_TOKEN", "envjwt")
    config = config_from_args(["--key-file", str(tmp_path / "k.json")])
    assert (config.backend, config.slurmrestd_url, config.slurm_user, config.slurm_token) == (
        "slurmrestd",
        "http://head:6820",
        "bob",
        "envjwt",
    )


def test_cli_missing_options_exit_with_a_clear_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SLURM_JOB_API_EMULATOR_SLURM_USER", "bob")
    with pytest.raises(SystemExit) as raised:
        config_from_args(["--backend", "slurmrestd", "--key-file", str(tmp_path / "k.json")])
    assert raised.value.code == 2
    err = capsys.readouterr().err
    assert (
        "--backend slurmrestd needs --slurmrestd-url (or SLURM_JOB_API_EMULATOR_SLURMRESTD_URL), "
        "--slurm-token (or SLURM_JOB_API_EMULATOR_SLURM_TOKEN)" in err
    )
    assert "--slurm-user (" not in err


def test_cli_bad_backend(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        config_from_args(["--backend", "pbs"])
    assert "invalid choice: 'pbs'" in capsys.readouterr().err
    monkeypatch.setenv("SLURM_JOB_API_EMULATOR_BACKEND", "pbs")  # argparse does not check a default
    with pytest.raises(SystemExit) as raised:
        config_from_args(["--key-file", str(tmp_path / "k.json")])
    assert raised.value.code == 2
    assert "backend must be 'builtin' or 'slurmrestd', not 'pbs'" in capsys.readouterr().err


def test_banner_names_the_backend_but_never_the_token(fake: FakeSlurmrestd, tmp_path: Path) -> None:
    with Emulator(forwarding_config(fake.url, tmp_path, slurm_token="s3cr3t-jwt")) as emu:
        lines = describe(emu)
    assert f"Backend: slurmrestd at {fake.url} as user testuser" in lines
    assert not any("s3cr3t" in line for line in lines)
    with Emulator(EmulatorConfig(key_file=tmp_path / "key.json", state_dir=tmp_path / "state")) as builtin:
        assert "Backend: builtin" in describe(builtin)
