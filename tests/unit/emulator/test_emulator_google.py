"""The Google side: OAuth with real google-auth, error envelopes, reply shapes, the CLI banner."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from emulator_testkit import Api, call_url
from google.auth.transport.requests import AuthorizedSession
from google.oauth2 import service_account

from airflow_provider_slurmapi.emulator import Emulator, EmulatorConfig
from airflow_provider_slurmapi.emulator.cli import config_from_args, describe

DENIED = "denied@test-project.iam.gserviceaccount.com"
PING = {"method": "HTTP_METHOD_GET", "path": "/slurm/v0.0.42/ping"}


@pytest.fixture(scope="module")
def gemu(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Emulator]:
    config = EmulatorConfig(
        token_lifetime=1, denied_principals=(DENIED,), key_file=tmp_path_factory.mktemp("key") / "key.json"
    )
    with Emulator(config) as emulator:
        yield emulator


def _error(response: requests.Response, code: int, status: str) -> str:
    assert response.status_code == code, response.text
    error = response.json()["error"]
    assert (error["code"], error["status"]) == (code, status)
    return str(error["message"])


def test_google_auth_service_account_can_call_the_api(gemu: Emulator) -> None:
    key = json.loads(Path(gemu.key_file).read_text())  # type: ignore[arg-type]
    assert key["type"] == "service_account" and key["token_uri"] == gemu.url + "/token"
    assert key["client_email"] == "emulator@test-project.iam.gserviceaccount.com"
    credentials = service_account.Credentials.from_service_account_file(
        str(gemu.key_file), scopes=["https://www.googleapis.com/auth/cloud-platform"]
    )
    session = AuthorizedSession(credentials)
    response = session.post(call_url(gemu.url), json=PING, timeout=10)
    assert response.status_code == 200, response.text
    assert response.json()["status"] == 200
    assert response.json()["structuredBody"]["pings"][0]["pinged"] == "UP"


def test_token_endpoint_rejects_a_forged_assertion(gemu: Emulator, tmp_path: Path) -> None:
    # same email and token_uri, but a different private key: the signature must not verify
    other = Emulator(EmulatorConfig(key_file=tmp_path / "other.json"))
    other.start()
    other.stop()
    forged = json.loads((tmp_path / "other.json").read_text())
    forged["token_uri"] = gemu.url + "/token"
    credentials = service_account.Credentials.from_service_account_info(
        forged, scopes=["https://www.googleapis.com/auth/cloud-platform"]
    )
    from google.auth.exceptions import RefreshError
    from google.auth.transport.requests import Request

    with pytest.raises(RefreshError):
        credentials.refresh(Request())


def test_expired_and_missing_tokens_are_unauthenticated(gemu: Emulator) -> None:
    token = gemu.issue_token()
    ok = requests.post(call_url(gemu.url), json=PING, headers={"Authorization": f"Bearer {token}"}, timeout=10)
    assert ok.status_code == 200
    time.sleep(1.1)  # token_lifetime=1
    expired = requests.post(call_url(gemu.url), json=PING, headers={"Authorization": f"Bearer {token}"}, timeout=10)
    _error(expired, 401, "UNAUTHENTICATED")
    _error(requests.post(call_url(gemu.url), json=PING, timeout=10), 401, "UNAUTHENTICATED")
    _error(
        requests.post(call_url(gemu.url), json=PING, headers={"Authorization": "Bearer junk"}, timeout=10),
        401,
        "UNAUTHENTICATED",
    )


def test_denied_principal_unknown_cluster_bad_path_and_size(gemu: Emulator) -> None:
    denied = requests.post(
        call_url(gemu.url),
        json=PING,
        timeout=10,
        headers={"Authorization": f"Bearer {gemu.issue_token(DENIED, lifetime=60)}"},
    )
    assert "modelDevelopmentClusters.run" in _error(denied, 403, "PERMISSION_DENIED")

    headers = {"Authorization": f"Bearer {gemu.issue_token(lifetime=60)}"}
    unknown = requests.post(call_url(gemu.url, cluster="nosuch"), json=PING, headers=headers, timeout=10)
    assert "nosuch" in _error(unknown, 404, "NOT_FOUND")

    for bad in (
        {"method": "HTTP_METHOD_GET", "path": "/etc/passwd"},
        {"method": "HTTP_METHOD_GET", "path": "/slurm/v0.0.42/nosuch"},
        {"method": "HTTP_METHOD_GET", "path": "/slurm/v0.0.39/jobs"},
        {"method": "GET", "path": "/slurm/v0.0.42/ping"},
    ):
        response = requests.post(call_url(gemu.url), json=bad, headers=headers, timeout=10)
        _error(response, 400, "INVALID_ARGUMENT")

    big = {
        "method": "HTTP_METHOD_POST",
        "path": "/slurm/v0.0.42/job/submit",
        "body": {"job": {}, "script": "#" * (1024 * 1024)},
    }
    message = _error(requests.post(call_url(gemu.url), json=big, headers=headers, timeout=10), 400, "INVALID_ARGUMENT")
    assert "1048576" in message


def test_body_string_reply_shape(tmp_path: Path) -> None:
    with Emulator(EmulatorConfig(reply_shape="body", state_dir=tmp_path)) as emu:
        api = Api(emu)
        response = api.raw("GET", "/slurm/v0.0.42/job/42")
        envelope = response.json()
        assert set(envelope) == {"status", "body"} and isinstance(envelope["body"], str)
        assert envelope["status"] == 404
        assert json.loads(envelope["body"])["errors"][0]["error_number"] == 2017


def test_key_file_is_reused(tmp_path: Path) -> None:
    key_file = tmp_path / "key.json"
    with Emulator(EmulatorConfig(key_file=key_file)) as first:
        email, private = first.service_account_info["client_email"], first.service_account_info["private_key"]
    with Emulator(EmulatorConfig(key_file=key_file)) as second:
        assert second.service_account_info["private_key"] == private
        assert second.service_account_info["client_email"] == email
        assert json.loads(key_file.read_text())["token_uri"] == second.url + "/token"
    assert key_file.stat().st_mode & 0o077 == 0


def test_cli_config_and_banner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_JOB_API_EMULATOR_MIN_JOB_AGE", "5")
    config = config_from_args(
        [
            "--port",
            "0",
            "--cluster",
            "a",
            "--cluster",
            "b",
            "--key-file",
            str(tmp_path / "k.json"),
            "--reply-shape",
            "body",
        ]
    )
    assert config.clusters == (("test-project", "us-central1", "a"), ("test-project", "us-central1", "b"))
    assert config.min_job_age == 5.0 and config.reply_shape == "body"
    with Emulator(config) as emu:
        lines = describe(emu)
    assert lines[0] == f"URL: {emu.url}"
    conn = json.loads(lines[-1].split("=", 1)[1].strip("'"))
    assert conn["conn_type"] == "slurm_job_api"
    assert conn["extra"]["endpoint"] == emu.url and conn["extra"]["cluster_id"] == "a"
