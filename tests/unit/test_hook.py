"""Unit tests of SlurmJobApiHook: an environment connection, and a scripted client in place of HTTP."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from typing import Any

import pytest

from airflow_provider_slurmapi.client.api import SyncOperations
from airflow_provider_slurmapi.client.envelope import SlurmCall, SlurmReply
from airflow_provider_slurmapi.client.errors import (
    ERROR_ALREADY_COMPLETING,
    InvalidArgumentError,
    InvalidRequestError,
    JobNotFoundError,
    PermissionDeniedError,
    SlurmJobApiError,
)
from airflow_provider_slurmapi.client.jobs import RecordSource
from airflow_provider_slurmapi.client.operations import JobRecords
from airflow_provider_slurmapi.client.output import OutputSettings
from airflow_provider_slurmapi.client.steps import ApiSettings, Operation, T
from airflow_provider_slurmapi.hooks.shared_files import UnsafeOutputPath
from airflow_provider_slurmapi.hooks.slurm_job_api import SlurmJobApiHook
from tests.unit.scripted_operations import run_answered

V = "v0.0.42"
LIVE = f"/slurm/{V}/job/42"
ACCOUNTING = f"/slurmdb/{V}/job/42"

Answer = SlurmReply | SlurmJobApiError | Exception


class ScriptedClient(SyncOperations):
    """Answers each request with the next scripted answer for its (method, path); the last repeats."""

    def __init__(self, script: dict[tuple[str, str], list[Answer]]) -> None:
        self.settings = ApiSettings()
        self.script = script
        self.calls: list[tuple[str, str]] = []

    def _run(self, operation: Operation[T]) -> T:
        return run_answered(operation, self._answer)

    def _answer(self, step: SlurmCall) -> Any:
        self.calls.append((step.method, step.path))
        key = (step.method, step.path)
        answers = self.script[key if key in self.script else (step.method, step.path.split("?")[0])]
        outcome = answers.pop(0) if len(answers) > 1 else answers[0]
        if not isinstance(outcome, (SlurmReply, SlurmJobApiError)):
            raise outcome
        return outcome


def live(state: str, restarts: int = 0, code: int = 0) -> SlurmReply:
    record = {
        "job_id": 42,
        "job_state": [state],
        "restart_cnt": restarts,
        "exit_code": {"status": ["SUCCESS" if code == 0 else "ERROR"], "return_code": code},
    }
    return SlurmReply(200, {"jobs": [record]})


def accounting_record(elapsed: int = 1800) -> dict[str, Any]:
    return {
        "job_id": 42,
        "state": {"current": ["COMPLETED"]},
        "exit_code": {"status": ["SUCCESS"], "return_code": 0},
        "time": {"elapsed": elapsed},
        "tres": {
            "allocated": [
                {"type": "cpu", "count": 8},
                {"type": "node", "count": 2},
                {"type": "mem", "count": 4096},
                {"type": "gres", "name": "gpu", "count": 4},
                {"type": "energy", "count": -2},
            ]
        },
    }


NOT_LIVE = SlurmReply(404, {})
NO_RECORDS = SlurmReply(200, {"jobs": []})


@pytest.fixture
def make_hook(monkeypatch: pytest.MonkeyPatch) -> Callable[..., SlurmJobApiHook]:
    """``make_hook(script, **extra)``: a hook on an environment connection, with a scripted client."""

    def make(script: dict[tuple[str, str], list[Answer]] | None = None, **extra: Any) -> SlurmJobApiHook:
        fields = {"project_id": "proj", "region": "us-central1", "cluster_id": "c1", **extra}
        monkeypatch.setenv("AIRFLOW_CONN_UNIT_SLURM", json.dumps({"conn_type": "slurm_job_api", "extra": fields}))
        hook = SlurmJobApiHook("unit_slurm")
        hook.client = ScriptedClient(script or {})  # type: ignore[misc]
        return hook

    return make


def test_get_job_reads_through_the_client(make_hook: Callable[..., SlurmJobApiHook]) -> None:
    hook = make_hook({("GET", LIVE): [live("RUNNING")]})
    job = hook.get_job(42)
    assert (job.job_id, job.state, job.source) == ("42", "RUNNING", RecordSource.LIVE)
    assert hook.client.calls == [("GET", LIVE)]


def test_get_job_falls_back_to_accounting(make_hook: Callable[..., SlurmJobApiHook]) -> None:
    hook = make_hook(
        {("GET", LIVE): [NOT_LIVE], ("GET", ACCOUNTING): [SlurmReply(200, {"jobs": [accounting_record()]})]}
    )
    job = hook.get_job("42")
    assert (job.state, job.source, job.is_success) == ("COMPLETED", RecordSource.ACCOUNTING, True)


def test_unknown_job_find_gives_none_and_get_raises(make_hook: Callable[..., SlurmJobApiHook]) -> None:
    hook = make_hook({("GET", LIVE): [NOT_LIVE], ("GET", ACCOUNTING): [NO_RECORDS]})
    assert hook.find_job(42) is None
    with pytest.raises(JobNotFoundError, match="42"):
        hook.get_job(42)


def test_bad_job_id_refused_before_any_call(make_hook: Callable[..., SlurmJobApiHook]) -> None:
    hook = make_hook()
    with pytest.raises(InvalidRequestError, match="job_id"):
        hook.find_job("1/../2")
    assert hook.client.calls == []


def test_cancel_job(make_hook: Callable[..., SlurmJobApiHook]) -> None:
    hook = make_hook(
        {
            ("DELETE", LIVE): [SlurmReply(200, {"status": []})],
            ("DELETE", f"{LIVE}?signal=KILL"): [
                SlurmReply(200, {"status": [{"error": {"code": ERROR_ALREADY_COMPLETING}}]})
            ],
        }
    )
    assert hook.cancel_job(42) is True
    assert hook.cancel_job(42, "KILL") is False  # already finished counts as success
    assert hook.client.calls == [("DELETE", LIVE), ("DELETE", f"{LIVE}?signal=KILL")]


def test_wait_for_job_returns_the_final_status(make_hook: Callable[..., SlurmJobApiHook]) -> None:
    hook = make_hook({("GET", LIVE): [live("PENDING"), live("RUNNING"), live("FAILED", code=3)]})
    final = hook.wait_for_job(42, poll_interval=0.01, timeout=10)
    assert (final.state, final.exit_code.return_code, final.is_success) == ("FAILED", 3, False)
    assert hook.client.calls == [("GET", LIVE)] * 3


def test_wait_for_job_timeout_names_the_timeout(make_hook: Callable[..., SlurmJobApiHook]) -> None:
    hook = make_hook({("GET", LIVE): [live("RUNNING")]})
    with pytest.raises(TimeoutError, match=r"Slurm job 42 did not finish within 0.2 s: Slurm job 42 is RUNNING"):
        hook.wait_for_job(42, poll_interval=0.01, timeout=0.2)


def test_wait_for_job_logs_a_requeue_once(
    make_hook: Callable[..., SlurmJobApiHook], task_log: Callable[[], str]
) -> None:
    hook = make_hook(
        {
            ("GET", LIVE): [live("RUNNING"), live("PENDING", 1), live("RUNNING", 1), live("COMPLETED", 1)],
            ("GET", ACCOUNTING): [NO_RECORDS],
        }
    )
    task_log()
    final = hook.wait_for_job(42, poll_interval=0.01, timeout=10)
    assert (final.state, final.restarts) == ("COMPLETED", 1)
    assert task_log().count("Slurm job 42 was requeued (restart 1)") == 1
    assert hook.client.calls.count(("GET", ACCOUNTING)) == 1  # the requeue's cause is asked once


def test_get_job_usage_from_given_accounting_records(make_hook: Callable[..., SlurmJobApiHook]) -> None:
    hook = make_hook()
    usage = hook.get_job_usage(42, JobRecords(RecordSource.ACCOUNTING, [accounting_record(elapsed=1800)]))
    assert usage is not None
    assert (usage.job_id, usage.nodes, usage.cpus, usage.memory_mb, usage.gpus, usage.gpu_hours) == (
        "42",
        2,
        8,
        4096,
        4,
        2.0,
    )
    assert "energy" not in usage.tres
    assert hook.client.calls == []  # the records given are not read again


def test_get_job_usage_none_without_accounting(make_hook: Callable[..., SlurmJobApiHook]) -> None:
    hook = make_hook()
    assert hook.get_job_usage(42, JobRecords(RecordSource.LIVE, [{"job_id": 42}])) is None


def test_get_job_usage_reads_the_records_when_not_given(make_hook: Callable[..., SlurmJobApiHook]) -> None:
    hook = make_hook({("GET", ACCOUNTING): [SlurmReply(200, {"jobs": [accounting_record(elapsed=3600)]})]})
    usage = hook.get_job_usage("42")
    assert usage is not None and (usage.elapsed_seconds, usage.gpu_hours) == (3600, 4.0)
    assert hook.client.calls == [("GET", ACCOUNTING)]


def test_resolve_output_settings_from_the_connection_then_overrides(
    make_hook: Callable[..., SlurmJobApiHook],
) -> None:
    hook = make_hook(output_uri="gs://bucket/conn", output_cluster_path="/mnt/out")
    assert (hook.resolve_output_settings().uri, hook.resolve_output_settings().cluster_path) == (
        "gs://bucket/conn",
        "/mnt/out",
    )
    settings = hook.resolve_output_settings(uri="file:///shared", cluster_path=None, tail_lines=5, wait=None)
    assert (settings.uri, settings.cluster_path, settings.tail_lines, settings.wait) == (
        "file:///shared",
        "/mnt/out",
        5,
        30.0,
    )


def test_resolve_output_settings_without_connection_values(make_hook: Callable[..., SlurmJobApiHook]) -> None:
    settings = make_hook().resolve_output_settings()
    assert (settings.uri, settings.cluster_path, settings.readable) == (None, None, False)


@pytest.mark.parametrize(
    ("extra", "overrides", "field"),
    [
        ({}, {"tail_lines": 0}, "output_tail_lines"),
        ({}, {"cluster_path": "relative"}, "output_cluster_path"),
        ({"output_uri": "http://example.com/x"}, {}, "output_uri"),
    ],
)
def test_resolve_output_settings_validates(
    make_hook: Callable[..., SlurmJobApiHook], extra: dict[str, str], overrides: dict[str, Any], field: str
) -> None:
    hook = make_hook(**extra)
    with pytest.raises(InvalidRequestError, match=f"^{field}: "):
        hook.resolve_output_settings(**overrides)


def answered_reads(**replaced: list[Answer]) -> dict[tuple[str, str], list[Answer]]:
    """The reads of the cluster check without its probe job, answered as a small cluster would."""
    reads: dict[str, list[Answer]] = {
        "ping": [SlurmReply(200, {"pings": [{"pinged": "UP"}]})],
        "partitions/": [SlurmReply(200, {"partitions": [{"name": "debug", "nodes": {"total": 1}}]})],
        "nodes/": [SlurmReply(200, {"nodes": [{"name": "n1", "gres": "gpu:l4:1", "partitions": ["debug"]}]})],
        "jobs/": [SlurmReply(200, {"jobs": [{"job_id": 1, "user_name": "alice"}, {"job_id": 2, "user_name": "bob"}]})],
    }
    accounting: dict[str, list[Answer]] = {
        "jobs/": [SlurmReply(200, {"jobs": []})],
        "tres/": [SlurmReply(200, {"TRES": [{"type": "gres", "name": "gpu", "id": 1001}]})],
    }
    script = {("GET", f"/slurm/{V}/{k}"): v for k, v in reads.items()}
    script |= {("GET", f"/slurmdb/{V}/{k}"): v for k, v in accounting.items()}
    return script | {("GET", f"/slurm/{V}/{k}"): v for k, v in replaced.items()}


def test_test_connection_runs_the_cluster_checks_reads(make_hook: Callable[..., SlurmJobApiHook]) -> None:
    hook = make_hook(answered_reads())
    ok, message = hook.test_connection()
    assert ok and message.startswith("Connected to c1 (us-central1): "), message
    # what the probe job would tell is said to be unchecked; the rest was ok
    assert message.count("unknown: not checked without the probe job") == 2 and "failed" not in message, message
    assert not [call for call in hook.client.calls if call[0] != "GET"]


def test_test_connection_lists_jobs_when_ping_is_not_forwarded(make_hook: Callable[..., SlurmJobApiHook]) -> None:
    refused = InvalidArgumentError(400, "INVALID_ARGUMENT", "no such path")
    ok, message = make_hook(answered_reads(ping=[refused])).test_connection()
    assert ok, message
    hook = make_hook(answered_reads(ping=[refused]))
    report = hook.check_cluster(probe_job=False)
    assert report.findings[0].found == "the API answers and forwards to slurmrestd (2 jobs in the queue)"


def test_test_connection_reports_a_refusal(make_hook: Callable[..., SlurmJobApiHook]) -> None:
    denied = PermissionDeniedError(403, "PERMISSION_DENIED", "no access to c1")
    ok, message = make_hook({("GET", f"/slurm/{V}/ping"): [denied]}).test_connection()
    assert not ok
    assert (
        message
        == "Cannot use c1 (us-central1): access failed: permission denied: PERMISSION_DENIED (403): no access to c1"
    )


def test_test_connection_reports_other_errors_by_type(make_hook: Callable[..., SlurmJobApiHook]) -> None:
    ok, message = make_hook({("GET", f"/slurm/{V}/ping"): [RuntimeError("bad key")]}).test_connection()
    assert (ok, message) == (False, "RuntimeError: bad key")


def test_test_connection_reports_a_missing_cluster_field(make_hook: Callable[..., SlurmJobApiHook]) -> None:
    hook = make_hook({("GET", f"/slurm/{V}/ping"): [SlurmReply(200, {"pings": [{}]})]}, cluster_id="")
    ok, message = hook.test_connection()
    assert not ok and "cluster_id" in message


def test_hook_arguments_override_the_connection(make_hook: Callable[..., SlurmJobApiHook]) -> None:
    make_hook(api_version="v0.0.41", retry_attempts="4")
    hook = SlurmJobApiHook("unit_slurm", region="europe-west4", retry_attempts=2)
    assert (hook.cluster.region, hook.cluster.cluster_id, hook.api_version, hook.retry.max_attempts) == (
        "europe-west4",
        "c1",
        "v0.0.41",
        2,
    )
    assert SlurmJobApiHook("unit_slurm").retry.max_attempts == 4


def test_bad_api_version_refused(make_hook: Callable[..., SlurmJobApiHook]) -> None:
    make_hook()
    with pytest.raises(InvalidRequestError, match="api_version"):
        SlurmJobApiHook("unit_slurm", api_version="latest")


def test_output_settings_is_resolve_output_settings_only() -> None:
    """The name before 0.4.1 is gone; the operators' ``output_settings`` property is theirs."""
    assert not hasattr(SlurmJobApiHook, "output_settings")
    assert callable(SlurmJobApiHook.resolve_output_settings)


# --- scripts past the request limit ------------------------------------------------------------

BIG = "#!/bin/bash\n#SBATCH --gres=gpu:8\n" + "# data\n" * 200_000 + "echo done\n"


def test_a_script_that_fits_is_submitted_as_it_is(make_hook: Callable[..., SlurmJobApiHook], tmp_path: Any) -> None:
    settings = OutputSettings(uri=f"file://{tmp_path}", cluster_path="/mnt/out")
    assert make_hook().fit_script({"name": "a"}, "#!/bin/bash\necho hi\n", settings) == "#!/bin/bash\necho hi\n"
    assert list(tmp_path.iterdir()) == []


def test_a_script_past_the_limit_is_staged_once_and_a_wrapper_submitted(
    make_hook: Callable[..., SlurmJobApiHook],
    tmp_path: Any,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    settings = OutputSettings(uri=f"file://{tmp_path}", cluster_path="/mnt/out")
    hook = make_hook()
    with caplog.at_level("INFO"):
        wrapper = hook.fit_script({"name": "a"}, BIG, settings, dag_id="train/../x")
        assert hook.fit_script({"name": "a"}, BIG, settings, dag_id="train/../x") == wrapper
    [folder] = (tmp_path / "staged").iterdir()
    assert folder.name == "train_.._x"  # a folder of the DAG's own, whatever its ID holds
    [staged] = folder.iterdir()
    assert staged.read_text() == BIG
    assert wrapper.splitlines()[:2] == ["#!/bin/bash", "#SBATCH --gres=gpu:8"]
    assert f"staged=/mnt/out/staged/train_.._x/{staged.name}\n" in wrapper
    assert 'exec /bin/bash /dev/fd/9 "$@"' in wrapper
    logged = caplog.text + capsys.readouterr().out  # Airflow 3 logs through structlog, to stdout
    said = [line for line in logged.splitlines() if "too large for the request" in line]
    assert [" staged at " in said[0], "already staged at" in said[1]] == [True, True], said


QUEUE = f"/slurm/{V}/jobs/"


def queue_of(*comments: str) -> SlurmReply:
    """The live queue: one job for each comment."""
    return SlurmReply(
        200, {"jobs": [{"job_id": n, "job_state": ["PENDING"], "comment": c} for n, c in enumerate(comments)]}
    )


def test_a_staged_script_changed_since_is_staged_again_and_old_ones_removed(
    make_hook: Callable[..., SlurmJobApiHook], tmp_path: Any, task_log: Callable[[], str]
) -> None:
    settings = OutputSettings(uri=f"file://{tmp_path}", cluster_path="/mnt/out", staged_retention_days=1)
    hook = make_hook({("GET", QUEUE): [queue_of("airflow-key=1")]})
    hook.fit_script({"name": "a"}, BIG, settings, dag_id="d")
    [staged] = (tmp_path / "staged" / "d").iterdir()
    staged.write_text("#!/bin/bash\necho someone else\n")
    old = tmp_path / "staged" / "d" / ("0" * 64 + ".script")
    old.write_text("an old script")
    other_dag = tmp_path / "staged" / "e" / ("1" * 64 + ".script")
    other_dag.parent.mkdir()
    other_dag.write_text("another DAG's script")
    for path in (staged, old, other_dag):
        os.utime(path, (time.time() - 2 * 86400,) * 2)
    task_log()
    hook.fit_script({"name": "a"}, BIG, settings, dag_id="d")
    logged = task_log()
    assert staged.read_text() == BIG and time.time() - staged.stat().st_mtime < 60
    assert "staged again (the object there had been changed) at" in logged, logged
    assert not old.exists() and other_dag.exists()  # only the DAG's own folder is cleaned
    assert "Removed 1 staged script(s)" in logged, logged


def old_staged(tmp_path: Any, *digits: str) -> list[Any]:
    """Scripts of DAG ``d`` last staged two days ago, one for each hex digit."""
    folder = tmp_path / "staged" / "d"
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / (digit * 64 + ".script") for digit in digits]
    for path in paths:
        path.write_text("an old script")
        os.utime(path, (time.time() - 2 * 86400,) * 2)
    return paths


def test_an_old_staged_script_a_job_in_the_queue_runs_is_kept(
    make_hook: Callable[..., SlurmJobApiHook], tmp_path: Any, task_log: Callable[[], str]
) -> None:
    settings = OutputSettings(uri=f"file://{tmp_path}", cluster_path="/mnt/out", staged_retention_days=1)
    held, unused = old_staged(tmp_path, "a", "b")
    hook = make_hook({("GET", QUEUE): [queue_of("", f"airflow-key=1 airflow-staged={'a' * 16}")]})
    task_log()
    hook.fit_script({"name": "a"}, BIG, settings, dag_id="d")
    logged = task_log()
    assert held.exists() and not unused.exists()
    assert hook.client.calls == [("GET", QUEUE)]  # type: ignore[attr-defined]  # the queue, once
    assert "Kept 1 staged script(s)" in logged and "Removed 1 staged script(s)" in logged, logged


def test_no_old_staged_script_is_removed_when_the_queue_cannot_be_read(
    make_hook: Callable[..., SlurmJobApiHook], tmp_path: Any, task_log: Callable[[], str]
) -> None:
    settings = OutputSettings(uri=f"file://{tmp_path}", cluster_path="/mnt/out", staged_retention_days=1)
    old = old_staged(tmp_path, "a", "b")
    hook = make_hook({("GET", QUEUE): [PermissionDeniedError(403, "PERMISSION_DENIED", "no access to c1")]})
    task_log()
    assert hook.fit_script({"name": "a"}, BIG, settings, dag_id="d").startswith("#!/bin/bash")
    assert all(path.exists() for path in old)
    assert "Kept the old staged scripts under" in task_log()


def test_the_queue_is_not_read_while_no_staged_script_is_old(
    make_hook: Callable[..., SlurmJobApiHook], tmp_path: Any
) -> None:
    settings = OutputSettings(uri=f"file://{tmp_path}", cluster_path="/mnt/out", staged_retention_days=1)
    hook = make_hook()
    hook.fit_script({"name": "a"}, BIG, settings, dag_id="d")
    hook.fit_script({"name": "a"}, BIG + "echo again\n", settings, dag_id="d")
    assert hook.client.calls == []  # type: ignore[attr-defined]
    assert len(list((tmp_path / "staged" / "d").iterdir())) == 2


def test_staging_writes_no_file_through_a_planted_link(
    make_hook: Callable[..., SlurmJobApiHook], tmp_path: Any
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    root = tmp_path / "out"
    (root / "staged").mkdir(parents=True)
    (root / "staged" / "d").symlink_to(outside)
    settings = OutputSettings(uri=f"file://{root}", cluster_path="/mnt/out")
    with pytest.raises(UnsafeOutputPath, match=r"staged/d is a symbolic link: not written"):
        make_hook().fit_script({"name": "a"}, BIG, settings, dag_id="d")
    assert list(outside.iterdir()) == []


@pytest.mark.parametrize("days", [-1, 3651, "soon", float("nan")])
def test_a_bad_staged_retention_is_refused_naming_the_field(days: object) -> None:
    with pytest.raises(InvalidRequestError, match=r"output_staged_retention_days.*a number of days from 0 to 3650"):
        OutputSettings(staged_retention_days=days)  # type: ignore[arg-type]


def test_a_script_past_the_limit_without_an_output_location_names_the_settings(
    make_hook: Callable[..., SlurmJobApiHook],
) -> None:
    hook = make_hook()
    with pytest.raises(InvalidRequestError, match="Set output_uri and output_cluster_path") as refused:
        hook.fit_script({"name": "a"}, BIG, OutputSettings())
    assert refused.value.field == "request"
    assert hook.client.calls == []  # type: ignore[attr-defined]


def test_the_staged_retention_reads_a_connections_text_and_zero_keeps_scripts() -> None:
    assert OutputSettings(staged_retention_days="3").staged_retention_seconds == 3 * 86400  # type: ignore[arg-type]
    assert OutputSettings().staged_retention_seconds == 7 * 86400
    assert OutputSettings(staged_retention_days=0).staged_retention_seconds is None
