"""Attacks on the connection's credentials and on templates: a token in a transport error, a redirect
that would carry the request elsewhere, Jinja in a run's conf, hostile job names and comments in
job events. Each test is one attack; it asserts that nothing leaked or was evaluated."""

from __future__ import annotations

import asyncio
import json
import re
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_slurmapi.client.errors import SlurmJobApiError
from airflow_provider_slurmapi.emulator import Emulator, EmulatorConfig
from airflow_provider_slurmapi.hooks.slurm_job_api import SlurmJobApiAsyncHook, SlurmJobApiHook
from airflow_provider_slurmapi.version_compat import AIRFLOW_V_3_0_PLUS
from tests.conftest import connection_json
from tests.jobs import JOB
from tests.security.secrets_support import Recorder, airflow_dags_test, endpoint_connection, http_server

CONN = "AIRFLOW_CONN_SLURM_JOB_API_DEFAULT"
SECRET = "hunter2-the-x-connections-password"


def no_retries(connection: str) -> str:
    conn = json.loads(connection)
    conn["extra"]["retry_attempts"] = 1  # one try: the error, at once
    return json.dumps(conn)


def leaked_tokens(emulator: Emulator, *texts: str) -> list[str]:
    return [token for token in emulator.tokens.history if any(token in text for text in texts)]


def everything_said_about(error: BaseException) -> list[str]:
    """The error as a log, a traceback or a failure message can show it, its causes included."""
    return [str(error), repr(error), *map(str, error.args), "".join(traceback.format_exception(error))]


async def list_jobs_async() -> Any:
    client = await SlurmJobApiAsyncHook().get_client()
    async with client:
        return await client.list_jobs()


def list_jobs_sync() -> Any:
    return SlurmJobApiHook().list_jobs()


async def test_a_redirect_loop_puts_no_token_in_the_transport_error(
    emulator: Emulator, monkeypatch: pytest.MonkeyPatch, task_log: Any
) -> None:
    """The endpoint answers 307 to itself: aiohttp's error for that (a ``ClientResponseError``)
    holds the request's headers in its repr, the bearer token among them."""
    with http_server(Recorder(status=307, location="{url}/again")) as loop:
        monkeypatch.setenv(CONN, no_retries(endpoint_connection(emulator, loop.url)))
        with pytest.raises(SlurmJobApiError) as raised:
            await list_jobs_async()
    assert emulator.tokens.history, "no token was issued: the attack did not happen"
    assert leaked_tokens(emulator, *everything_said_about(raised.value), task_log()) == []


@pytest.mark.parametrize("transport", ["requests", "aiohttp"])
async def test_a_redirect_to_another_server_is_not_followed(
    transport: str, emulator: Emulator, monkeypatch: pytest.MonkeyPatch, task_log: Any
) -> None:
    """The endpoint answers 307 (keep the method and the body) to a server that records what
    reaches it: nothing reaches it, and the task's error names the status and where it pointed."""
    with http_server(Recorder()) as elsewhere, http_server(Recorder(307, elsewhere.url + "/collect")) as redirector:
        monkeypatch.setenv(CONN, no_retries(endpoint_connection(emulator, redirector.url)))
        with pytest.raises(SlurmJobApiError) as raised:
            if transport == "requests":
                await asyncio.to_thread(list_jobs_sync)
            else:
                await list_jobs_async()
    assert elsewhere.requests == []
    # the endpoint itself got the call, with the token
    assert redirector.requests and "authorization" in {name.lower() for name in redirector.requests[0]}
    message = str(raised.value)
    assert "307" in message and elsewhere.url + "/collect" in message, message
    assert leaked_tokens(emulator, *everything_said_about(raised.value), task_log()) == []


def redact(value: str) -> Any:
    from airflow.providers.common.compat.sdk import redact as airflow_redact

    return airflow_redact(value)


@pytest.mark.parametrize("transport", ["requests", "aiohttp"])
async def test_the_token_a_call_sends_is_masked_in_what_the_task_logs(
    transport: str, emulator: Emulator, slurm_connection: str
) -> None:
    """A token that a log line, an error or a job's output repeats shows as *** (Airflow's masker)."""
    issued_before = len(emulator.tokens.history)
    if transport == "requests":
        await asyncio.to_thread(list_jobs_sync)
    else:
        await list_jobs_async()
    sent = emulator.tokens.history[issued_before:]
    assert sent, "no token was issued for the call"
    assert [redact(f"Authorization: Bearer {token}") for token in sent] == ["Authorization: Bearer ***"] * len(sent)


# --- Jinja in a run's conf -------------------------------------------------------------------

JINJA_DAG = """
from datetime import datetime

try:
    from airflow.sdk import dag, task
except ImportError:  # Airflow 2
    from airflow.decorators import dag, task

JOB = {job!r}


@dag(schedule=None, start_date=datetime(2026, 1, 1), catchup=False)
def jinja_in_conf():
    # the safe way the docs show for a value from the run's conf: a templated job environment
    environment = [*JOB["environment"], "MESSAGE={{{{ dag_run.conf['message'] }}}}"]

    @task.slurm(job={{**JOB, "name": "jinja-in-conf", "environment": environment}}, deferrable=False, poll_interval=1)
    def echo(dag_run=None):
        # a value of the run's conf embedded in the script the function returns
        return "#!/bin/bash\\necho 'conf: " + dag_run.conf["message"] + "'\\necho \\"environment: $MESSAGE\\"\\n"

    echo()


jinja_in_conf()
"""


@pytest.fixture(scope="module")
def jinja_emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Emulator]:
    work = tmp_path_factory.mktemp("jinja-emulator")
    config = EmulatorConfig(key_file=work / "key.json", state_dir=work / "jobs", sched_delay=0.2, min_job_age=60)
    with Emulator(config) as emu:
        yield emu


def submitted_scripts(emu: Emulator) -> list[str]:
    state_dir = Path(str(emu.config.state_dir))
    return [path.read_text() for path in state_dir.rglob("script")]


@pytest.mark.skipif(not AIRFLOW_V_3_0_PLUS, reason="the DAG run's conf and the conn accessor as Airflow 3 has them")
def test_jinja_in_a_runs_conf_is_not_evaluated_into_the_job_script(jinja_emulator: Emulator, tmp_path: Path) -> None:
    """A user who may trigger the DAG puts ``{{ conn.x.password }}`` in the run's conf; the
    ``@task.slurm`` function embeds it in its script, the job's environment takes it from the conf."""
    attack = "{{ conn.x.password }}"
    job_output = tmp_path / "job.out"
    result = airflow_dags_test(
        tmp_path / "airflow",
        JINJA_DAG.format(job={**JOB, "standard_output": str(job_output)}),
        "jinja_in_conf",
        {"message": attack},
        {
            CONN: connection_json(jinja_emulator),
            "AIRFLOW_CONN_X": json.dumps({"conn_type": "generic", "login": "x", "password": SECRET}),
        },
    )
    log = result.stdout + result.stderr
    [script] = submitted_scripts(jinja_emulator)
    assert SECRET not in script and SECRET not in log, log[-3000:]
    assert f"echo 'conf: {attack}'" in script, script
    assert result.returncode == 0, log[-3000:]
    # what ran: the conf's text as it was, in the script and in the environment
    assert job_output.read_text() == f"conf: {attack}\nenvironment: {attack}\n"
    assert re.search(r"Slurm job \d+ is COMPLETED", log), log[-3000:]


# --- hostile job names and comments in job events --------------------------------------------

HOSTILE = {
    "jinja": "{{ conn.x.password }}",
    "format": "%s%n%x{0}{job}",
    "path": "../../etc/passwd",
    "escapes": "\x1b[2J\x1b]0;owned\x07\rMarking task as SUCCESS",
    "long": "n" * 5000,
}


@pytest.mark.skipif(not AIRFLOW_V_3_0_PLUS, reason="asset watchers are Airflow 3 only")
async def test_hostile_job_names_and_comments_reach_the_event_as_plain_data(
    emulator: Emulator, slurm_connection: str, task_log: Any
) -> None:
    """Another cluster user names and comments jobs to be evaluated, formatted or followed as a
    path by whoever reads the event; the watcher's events carry them as plain JSON strings, and its
    log shows them escaped."""
    from airflow_provider_slurmapi.client.job_events import EndedJob
    from airflow_provider_slurmapi.triggers.job_events import SlurmJobEventTrigger
    from tests.integration.test_job_events import AssetStateStore

    trigger = SlurmJobEventTrigger(poll_interval=5, comment_contains="hostile-event")
    trigger.asset_state_store = AssetStateStore()
    events = trigger.run()
    first = asyncio.ensure_future(events.__anext__())
    await asyncio.sleep(1)  # the watcher has started: jobs that end from now on are reported
    hook = SlurmJobApiHook()
    submitted = {
        kind: await asyncio.to_thread(
            hook.submit_job, {**JOB, "name": value, "comment": f"hostile-event {value}"}, "#!/bin/bash\nexit 0\n"
        )
        for kind, value in HOSTILE.items()
    }
    received: dict[str, EndedJob] = {}
    try:
        payload = (await asyncio.wait_for(first, 60)).payload
        while True:
            json.dumps(payload, allow_nan=False)  # plain JSON: nothing else would travel as an asset event
            job = EndedJob.from_payload(json.loads(json.dumps(payload)))
            received[job.status.job_id] = job
            if len(received) == len(HOSTILE):
                break
            payload = (await asyncio.wait_for(events.__anext__(), 60)).payload
    finally:
        await events.aclose()
    for kind, value in HOSTILE.items():
        job = received[submitted[kind]]
        assert (job.status.name, job.status.comment) == (value, f"hostile-event {value}"), kind
    log = task_log()
    assert all(f"Slurm job {job_id} is COMPLETED" in log for job_id in submitted.values()), log[-3000:]
    assert "\x1b" not in log and "\r" not in log.replace("\r\n", "\n") and SECRET not in log
    assert HOSTILE["long"] not in log  # a name is cut in the log line (the event keeps it whole)
