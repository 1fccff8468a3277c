"""Fault injection: every kind as raw HTTP and as the provider's clients see it, plan, script, header, CLI."""

from __future__ import annotations

import asyncio
import json
import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import requests
from emulator_testkit import CLUSTER, PROJECT, REGION, Api, call_url

from airflow_provider_slurmapi.client.aio import AsyncSlurmJobApiClient
from airflow_provider_slurmapi.client.cluster import ClusterRef
from airflow_provider_slurmapi.client.errors import (
    ResourceExhaustedError,
    ServerError,
    SlurmJobApiError,
    TransportError,
    UnauthenticatedError,
    UnavailableError,
)
from airflow_provider_slurmapi.client.retry import NO_RETRY
from airflow_provider_slurmapi.client.sync import SlurmJobApiClient
from airflow_provider_slurmapi.emulator import (
    FAULT_HEADER,
    FAULT_KINDS,
    Emulator,
    EmulatorConfig,
    FaultInjector,
    FaultPlan,
    ScriptedFault,
)
from airflow_provider_slurmapi.emulator.cli import config_from_args, describe
from airflow_provider_slurmapi.emulator.server import UNAUTHENTICATED_MESSAGE

PING = "/slurm/v0.0.42/ping"
SUBMIT = "/slurm/v0.0.42/job/submit"


@pytest.fixture(autouse=True)
def no_faults(emu: Emulator) -> Iterator[None]:
    emu.faults.clear()
    yield
    emu.faults.clear()


def sync_client(emu: Emulator) -> SlurmJobApiClient:
    session = requests.Session()
    session.headers["Authorization"] = f"Bearer {emu.issue_token()}"
    return SlurmJobApiClient(
        session, ClusterRef(PROJECT, REGION, CLUSTER, endpoint=emu.url), retry=NO_RETRY, timeout=10
    )


def async_client(emu: Emulator) -> AsyncSlurmJobApiClient:
    token = emu.issue_token()

    async def tokens(force: bool) -> str:
        return token

    cluster = ClusterRef(PROJECT, REGION, CLUSTER, endpoint=emu.url)
    return AsyncSlurmJobApiClient(cluster, tokens, retry=NO_RETRY, timeout=10)


def forced(api: Api, kind: str, path: str = PING) -> requests.Response:
    payload = {"method": "HTTP_METHOD_GET", "path": path}
    return api.session.post(api.url, json=payload, headers={FAULT_HEADER: kind}, timeout=10)


def forced_free(api: Api) -> int:
    """A call without the header: only the plan or the script can fail it."""
    return api.raw("GET", PING).status_code


def submitted_names(api: Api) -> set[str]:
    status, reply = api.call("GET", "/slurmdb/v0.0.42/jobs")  # accounting keeps every job
    assert status == 200
    return {job["name"] for job in reply["jobs"]}


def job_desc(workdir: Path) -> dict[str, Any]:
    name = f"fault-{uuid.uuid4().hex[:8]}"
    return {"name": name, "current_working_directory": str(workdir), "environment": ["PATH=/bin:/usr/bin"]}


# --- each kind -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "code", "status", "error"),
    [
        ("unavailable", 503, "UNAVAILABLE", UnavailableError),
        ("resource_exhausted", 429, "RESOURCE_EXHAUSTED", ResourceExhaustedError),
        ("internal", 500, "INTERNAL", ServerError),
    ],
)
def test_google_error_kinds_are_retryable(
    emu: Emulator, api: Api, kind: str, code: int, status: str, error: type[SlurmJobApiError]
) -> None:
    response = forced(api, kind)
    assert response.status_code == code
    assert response.json()["error"]["status"] == status and response.json()["error"]["code"] == code

    emu.faults.script(ScriptedFault(kind))
    with pytest.raises(error) as caught:
        sync_client(emu).ping()
    assert caught.value.retryable


def test_token_rejected_looks_like_a_bad_token(emu: Emulator, api: Api) -> None:
    response = forced(api, "token_rejected")
    assert response.status_code == 401
    assert response.json()["error"] == {"code": 401, "message": UNAUTHENTICATED_MESSAGE, "status": "UNAUTHENTICATED"}
    missing = requests.post(api.url, json={"method": "HTTP_METHOD_GET", "path": PING}, timeout=10)
    assert response.headers["WWW-Authenticate"] == missing.headers["WWW-Authenticate"]

    emu.faults.script(ScriptedFault("token_rejected"))
    with pytest.raises(UnauthenticatedError):
        sync_client(emu).ping()


@pytest.mark.parametrize(("kind", "code"), [("bad_gateway", 502), ("gateway_timeout", 504)])
def test_load_balancer_kinds_answer_html(emu: Emulator, api: Api, kind: str, code: int) -> None:
    response = forced(api, kind)
    assert response.status_code == code
    assert response.headers["Content-Type"].startswith("text/html")
    assert response.text.startswith("<!DOCTYPE html>") and f"<b>{code}.</b>" in response.text

    emu.faults.script(ScriptedFault(kind))
    with pytest.raises(ServerError) as caught:
        sync_client(emu).ping()
    assert caught.value.retryable and caught.value.http_status == code


def test_latency_delays_a_normal_answer(emu: Emulator, api: Api) -> None:
    emu.faults.set_plan(FaultPlan(latency=0.2))  # rate 0: the plan only sets the delay
    emu.faults.script(ScriptedFault("latency"))
    started = time.monotonic()
    status, reply = api.call("GET", PING)
    assert time.monotonic() - started >= 0.2
    assert status == 200 and reply["pings"][0]["pinged"] == "UP"
    assert emu.faults.injected == {"latency": 1}


# --- resets --------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["reset_before", "reset_after"])
def test_reset_raises_connection_error_in_requests(api: Api, kind: str) -> None:
    with pytest.raises(requests.ConnectionError):
        forced(api, kind)
    assert api.call("GET", PING)[0] == 200  # the session recovers on a new connection


@pytest.mark.parametrize("kind", ["reset_before", "reset_after"])
def test_reset_raises_client_error_in_aiohttp(emu: Emulator, api: Api, kind: str) -> None:
    async def post() -> None:
        headers = {"Authorization": f"Bearer {emu.issue_token()}", FAULT_HEADER: kind}
        async with aiohttp.ClientSession() as session:
            async with session.post(api.url, json={"method": "HTTP_METHOD_GET", "path": PING}, headers=headers):
                pass

    with pytest.raises(aiohttp.ClientError):
        asyncio.run(post())


def test_reset_sends_no_bytes(emu: Emulator) -> None:
    body = json.dumps({"method": "HTTP_METHOD_GET", "path": PING}).encode()
    head = (
        f"POST {call_url('')} HTTP/1.1\r\nHost: emulator\r\nAuthorization: Bearer {emu.issue_token()}\r\n"
        f"{FAULT_HEADER}: reset_before\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    host, port = emu.url.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.sendall(head.encode() + body)
        try:
            received = sock.recv(1024)
        except ConnectionResetError:  # a RST: what a reset should look like
            received = b""
    assert received == b""


def test_reset_before_submit_creates_no_job(emu: Emulator, api: Api, workdir: Path) -> None:
    emu.faults.script(ScriptedFault("reset_before", method="POST", path="job/submit$"))
    job = job_desc(workdir)
    with pytest.raises(TransportError) as caught:
        sync_client(emu).submit_job(job, "#!/bin/sh\ntrue\n")
    assert caught.value.retryable
    assert job["name"] not in submitted_names(api)


def test_reset_after_submit_leaves_the_job_created(emu: Emulator, api: Api, workdir: Path) -> None:
    emu.faults.script(ScriptedFault("reset_after", method="POST", path="job/submit$"))
    job = job_desc(workdir)
    with pytest.raises(TransportError):
        sync_client(emu).submit_job(job, "#!/bin/sh\ntrue\n")
    assert job["name"] in submitted_names(api)  # the reply was lost, the job was not


def test_late_landing_answers_a_timeout_and_creates_the_job_later(emu: Emulator, api: Api, workdir: Path) -> None:
    emu.faults.set_plan(FaultPlan(rate=0.0, latency=1.0))
    emu.faults.script(ScriptedFault("late_landing", method="POST", path="job/submit$"))
    job = job_desc(workdir)
    with pytest.raises(ServerError) as caught:
        sync_client(emu).submit_job(job, "#!/bin/sh\ntrue\n")
    assert caught.value.status == "DEADLINE_EXCEEDED" and caught.value.retryable
    assert job["name"] not in submitted_names(api)  # not yet: the client gave up first
    deadline = time.monotonic() + 10
    while job["name"] not in submitted_names(api):
        assert time.monotonic() < deadline, "the late submit never landed"
        time.sleep(0.1)


async def test_async_client_sees_resets_as_transport_errors(emu: Emulator, api: Api, workdir: Path) -> None:
    emu.faults.script(ScriptedFault("reset_before"), ScriptedFault("reset_after", path="job/submit$"))
    job = job_desc(workdir)
    async with async_client(emu) as client:
        with pytest.raises(TransportError):
            await client.ping()
        with pytest.raises(TransportError):
            await client.submit_job(job, "#!/bin/sh\ntrue\n")
    assert job["name"] in submitted_names(api)


# --- plan, script, header, counters (through the server) -----------------------------------------


def test_rate_one_fails_every_call_and_counts(emu: Emulator, api: Api) -> None:
    emu.faults.set_plan(FaultPlan(rate=1.0, kinds=("unavailable",), seed=1))
    assert [forced_free(api) for _ in range(3)] == [503, 503, 503]
    assert emu.faults.injected == {"unavailable": 3} and emu.faults.calls == 3
    record = emu.faults.log[0]
    assert (record.kind, record.method, record.path, record.source) == ("unavailable", "GET", PING, "rate")
    emu.faults.set_plan(None)
    assert forced_free(api) == 200
    assert emu.faults.injected == {"unavailable": 3} and emu.faults.calls == 4


def test_plan_from_the_config(tmp_path: Path) -> None:
    plan = FaultPlan(rate=1.0, kinds={"internal": 1}, methods=("POST",))
    with Emulator(EmulatorConfig(faults=plan, state_dir=tmp_path, key_file=tmp_path / "k.json")) as emu:
        api = Api(emu)
        assert api.raw("GET", PING).status_code == 200  # filtered out by method
        assert api.raw("POST", "/slurm/v0.0.42/job/1", {"job": {}}).status_code == 500
        assert emu.faults.plan == plan and emu.faults.injected == {"internal": 1}


def test_header_wins_and_does_not_consume_the_script(emu: Emulator, api: Api) -> None:
    emu.faults.script(ScriptedFault("internal"))
    assert forced(api, "unavailable").status_code == 503
    assert emu.faults.pending == (ScriptedFault("internal"),)
    assert forced_free(api) == 500
    assert [r.source for r in emu.faults.log] == ["header", "script"]


def test_header_with_an_unknown_kind_is_invalid_argument(api: Api) -> None:
    response = forced(api, "explode")
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["status"] == "INVALID_ARGUMENT"
    assert "explode" in error["message"] and "reset_after" in error["message"]


def test_faults_never_hide_google_refusals_or_touch_the_token_endpoint(emu: Emulator, api: Api) -> None:
    emu.faults.set_plan(FaultPlan(rate=1.0, kinds=("reset_before",)))
    headers = {**api.session.headers, FAULT_HEADER: "reset_before"}
    payload = {"method": "HTTP_METHOD_GET", "path": PING}
    assert requests.post(emu.url + "/v1beta1/nosuch", json=payload, headers=headers, timeout=10).status_code == 404
    assert (
        requests.post(call_url(emu.url, cluster="nosuch"), json=payload, headers=headers, timeout=10).status_code == 404
    )
    assert requests.post(api.url, json=payload, headers={FAULT_HEADER: "reset_before"}, timeout=10).status_code == 401
    token = requests.post(emu.token_uri, data={"grant_type": "x"}, headers={FAULT_HEADER: "reset_before"}, timeout=10)
    assert token.status_code == 400  # the token endpoint's own answer, no reset
    assert emu.faults.calls == 0 and not emu.faults.injected


# --- the injector on its own ---------------------------------------------------------------------


def kinds_picked(injector: FaultInjector, calls: int, method: str = "GET", path: str = PING) -> list[str | None]:
    return [injector.pick(method, path) for _ in range(calls)]


def test_same_seed_same_faults() -> None:
    plan = FaultPlan(rate=0.5, kinds={"unavailable": 2, "reset_after": 1, "latency": 1}, seed=123)
    first = kinds_picked(FaultInjector(plan), 200)
    assert first == kinds_picked(FaultInjector(plan), 200)
    other_seed = FaultPlan(rate=0.5, kinds=dict(plan.weights), seed=124)
    assert first != kinds_picked(FaultInjector(other_seed), 200)
    assert {"unavailable", "reset_after", "latency", None} == set(first)
    injector = FaultInjector(plan)
    kinds_picked(injector, 10)
    injector.set_plan(plan)  # restarts the sequence from the seed
    assert kinds_picked(injector, 200) == first


def test_rate_zero_injects_nothing_and_rate_one_everything() -> None:
    none = FaultInjector(FaultPlan(rate=0.0, seed=1))
    assert kinds_picked(none, 100) == [None] * 100 and none.calls == 100 and not none.injected
    every = FaultInjector(FaultPlan(rate=1.0, kinds=("internal", "bad_gateway"), seed=1))
    picked = kinds_picked(every, 100)
    assert None not in picked and set(picked) == {"internal", "bad_gateway"}
    assert sum(every.injected.values()) == 100 and len(every.log) == 100


def test_plan_filters_by_method_and_path() -> None:
    injector = FaultInjector(FaultPlan(rate=1.0, kinds=("unavailable",), methods=("post",), paths=r"job/submit"))
    assert injector.pick("GET", PING) is None
    assert injector.pick("GET", SUBMIT) is None
    assert injector.pick("POST", "/slurm/v0.0.42/job/7") is None
    assert injector.pick("POST", SUBMIT) == "unavailable"


def test_script_runs_in_order_with_times_and_wins_over_the_rate() -> None:
    injector = FaultInjector(FaultPlan(rate=1.0, kinds=("latency",), seed=5))
    injector.script(
        ScriptedFault("reset_after", method="POST", path="job/submit$", times=2),
        ScriptedFault("unavailable", path="ping"),
    )
    assert injector.pick("GET", PING) == "latency"  # the first entry does not match: the rate applies
    assert injector.pending[0].times == 2
    assert injector.pick("POST", SUBMIT) == "reset_after"
    assert injector.pending[0] == ScriptedFault("reset_after", method="POST", path="job/submit$", times=1)
    assert injector.pick("POST", SUBMIT) == "reset_after"
    assert injector.pick("GET", PING) == "unavailable"
    assert injector.pending == ()
    assert [record.source for record in injector.log] == ["rate", "script", "script", "script"]
    injector.clear()
    assert injector.plan is None and injector.calls == 0 and injector.log == [] and injector.pick("GET", PING) is None


def test_forced_kind_is_checked() -> None:
    injector = FaultInjector()
    assert injector.pick("GET", PING, forced="internal") == "internal"
    with pytest.raises(ValueError, match="X-Emulator-Fault: 'nope' is not a fault kind"):
        injector.pick("GET", PING, forced="nope")
    assert injector.calls == 1


# --- validation ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (lambda: FaultPlan(rate=1.5), ["FaultPlan.rate", "1.5", "0 to 1"]),
        (lambda: FaultPlan(rate=-0.1), ["FaultPlan.rate", "-0.1"]),
        (lambda: FaultPlan(rate=float("nan")), ["FaultPlan.rate", "nan"]),
        (lambda: FaultPlan(kinds=("unavailable", "boom")), ["FaultPlan.kinds", "'boom'", ", ".join(FAULT_KINDS)]),
        (lambda: FaultPlan(kinds={"internal": -1}), ["FaultPlan.kinds['internal']", "-1"]),
        (lambda: FaultPlan(kinds=()), ["FaultPlan.kinds", "empty"]),
        (lambda: FaultPlan(latency=-1), ["FaultPlan.latency", "-1"]),
        (lambda: FaultPlan(methods=("FETCH",)), ["FaultPlan.methods", "'FETCH'", "GET, POST"]),
        (lambda: FaultPlan(paths="job/("), ["FaultPlan.paths", "'job/('"]),
        (lambda: ScriptedFault("boom"), ["ScriptedFault.kind", "'boom'", "unavailable"]),
        (lambda: ScriptedFault("internal", times=0), ["ScriptedFault.times", "0"]),
        (lambda: EmulatorConfig(faults=0.1), ["faults", "0.1", "FaultPlan"]),  # type: ignore[arg-type]
        (lambda: EmulatorConfig(fault_script=("internal",)), ["fault_script", "'internal'"]),  # type: ignore[arg-type]
    ],
)
def test_bad_settings_are_refused_by_name(make: Any, words: list[str]) -> None:
    with pytest.raises(ValueError) as caught:
        make()
    for word in words:
        assert word in str(caught.value)


def test_plans_are_normalised_and_hashable() -> None:
    plan = FaultPlan(rate=0.1, kinds={"unavailable": 3, "reset_after": 1}, methods="post")
    assert plan.kinds == ("unavailable", "reset_after") and plan.methods == ("POST",)
    assert plan.weights == (("unavailable", 3.0), ("reset_after", 1.0))
    config = EmulatorConfig(faults=plan, fault_script=[ScriptedFault("internal")])  # type: ignore[arg-type]
    assert hash(config) == hash(EmulatorConfig(faults=plan, fault_script=(ScriptedFault("internal"),)))


# --- CLI -----------------------------------------------------------------------------------------


def test_cli_fault_flags_script_and_banner(tmp_path: Path) -> None:
    script = tmp_path / "faults.json"
    script.write_text(json.dumps([{"kind": "reset_after", "method": "POST", "path": "job/submit$", "times": 2}]))
    config = config_from_args(
        [
            "--port",
            "0",
            "--key-file",
            str(tmp_path / "k.json"),
            "--state-dir",
            str(tmp_path / "state"),
            "--fault-rate",
            "0.1",
            "--fault-kinds",
            "unavailable,reset_after",
            "--fault-seed",
            "1",
            "--fault-latency",
            "0.5",
            "--fault-methods",
            "POST",
            "--fault-script",
            str(script),
        ]
    )
    assert config.faults == FaultPlan(
        rate=0.1, kinds=("unavailable", "reset_after"), seed=1, latency=0.5, methods=("POST",)
    )
    assert config.fault_script == (ScriptedFault("reset_after", method="POST", path="job/submit$", times=2),)
    with Emulator(config) as emu:
        lines = describe(emu)
        assert emu.faults.pending == config.fault_script
    assert "Faults: rate=0.1 kinds=unavailable,reset_after seed=1 latency=0.5s methods=POST" in lines
    assert "Fault script: reset_after x2" in lines
    assert lines[-1].startswith("AIRFLOW_CONN_SLURM_JOB_API_DEFAULT=")


def test_cli_fault_settings_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_JOB_API_EMULATOR_FAULT_RATE", "0.25")
    monkeypatch.setenv("SLURM_JOB_API_EMULATOR_FAULT_KINDS", "unavailable:3,internal:1")
    monkeypatch.setenv("SLURM_JOB_API_EMULATOR_FAULT_SEED", "7")
    monkeypatch.setenv("SLURM_JOB_API_EMULATOR_FAULT_PATHS", "job/submit")
    config = config_from_args(["--port", "0"])
    assert config.faults == FaultPlan(rate=0.25, kinds={"unavailable": 3, "internal": 1}, seed=7, paths="job/submit")
    assert config_from_args(["--port", "0", "--fault-rate", "0.5"]).faults.rate == 0.5  # type: ignore[union-attr]
    monkeypatch.delenv("SLURM_JOB_API_EMULATOR_FAULT_RATE")
    monkeypatch.delenv("SLURM_JOB_API_EMULATOR_FAULT_KINDS")
    monkeypatch.delenv("SLURM_JOB_API_EMULATOR_FAULT_SEED")
    monkeypatch.delenv("SLURM_JOB_API_EMULATOR_FAULT_PATHS")
    assert config_from_args(["--port", "0"]).faults is None


@pytest.mark.parametrize(
    "argv",
    [
        ["--fault-rate", "2"],
        ["--fault-rate", "often"],
        ["--fault-kinds", "unavailable,boom"],
        ["--fault-kinds", "unavailable:lots"],
        ["--fault-script", "/nonexistent/faults.json"],
    ],
)
def test_cli_refuses_bad_fault_settings(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        config_from_args(["--port", "0", *argv])
    assert "fault" in capsys.readouterr().err.lower()
