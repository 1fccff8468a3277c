"""Unit tests of the submit and cancel operators and their base classes, with a fake hook."""

from __future__ import annotations

import datetime
import time
from typing import Any

import pytest
from airflow.providers.common.compat.sdk import AirflowException, TaskDeferred

from airflow_provider_slurmapi.client.errors import InvalidRequestError
from airflow_provider_slurmapi.client.jobs import JobStatus, RecordSource
from airflow_provider_slurmapi.client.live_output import LiveOutputSettings
from airflow_provider_slurmapi.client.operations import JobRecords
from airflow_provider_slurmapi.client.output import OutputSettings
from airflow_provider_slurmapi.client.staging import staged_mark
from airflow_provider_slurmapi.client.submission import Outcome, Submission, submission_key
from airflow_provider_slurmapi.client.usage import JobUsage
from airflow_provider_slurmapi.links import SlurmJobOutputLink
from airflow_provider_slurmapi.operators import job as job_module
from airflow_provider_slurmapi.operators.base import (
    CONNECTION_ARGUMENTS,
    CONNECTION_TEMPLATE_FIELDS,
    SlurmBaseOperator,
)
from airflow_provider_slurmapi.operators.job import (
    STATE_STORE_KEY,
    ReuseCompletedJob,
    SlurmCancelJobOperator,
    SlurmSubmitJobOperator,
    is_automatic_retry,
    mask_environment,
    with_output_paths,
)
from airflow_provider_slurmapi.operators.waiting import (
    SlurmWaitingOperator,
    check_seconds,
    task_deadline,
)
from airflow_provider_slurmapi.sensors.job import SlurmJobSensor
from airflow_provider_slurmapi.ui.task_job import CONNECTION_XCOM
from tests.unit.task_fakes import FakeStore, FakeTI, FakeVariables, ctx, status

SCRIPT = "#!/bin/bash\necho hi\n"


class FakeCluster:
    cluster_id = "c1"


class FakeHook:
    """Stands in for SlurmJobApiHook at the operators' boundary; records every call."""

    def __init__(
        self,
        *,
        submission: Submission | None = None,
        waited: JobStatus | Exception | None = None,
        usage: JobUsage | None = None,
        settings: OutputSettings | None = None,
        job: JobStatus | None = None,
    ) -> None:
        self.submission = submission or Submission("42", Outcome.SUBMITTED)
        self.waited = waited if waited is not None else status()
        self.usage = usage
        self.settings = settings or OutputSettings()
        self.job = job or status()
        self.objects: dict[str, bytes] = {}  # what read_object finds, by location
        self.cluster = FakeCluster()
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

    def _record(self, name: str, *args: Any, **kwargs: Any) -> None:
        self.calls.append((name, args, kwargs))

    def named(self, name: str) -> list[tuple[tuple[Any, ...], dict[str, Any]]]:
        return [(args, kwargs) for called, args, kwargs in self.calls if called == name]

    def submit_once(self, *args: Any, **kwargs: Any) -> Submission:
        self._record("submit_once", *args, **kwargs)
        return self.submission

    def fit_script(
        self, job: dict[str, Any], script: str, settings: OutputSettings, *, dag_id: str | None = None
    ) -> str:
        self._record("fit_script", job, script, settings)
        return script

    def wait_for_job(self, *args: Any, **kwargs: Any) -> JobStatus:
        self._record("wait_for_job", *args, **kwargs)
        if isinstance(self.waited, Exception):
            raise self.waited
        return self.waited

    def cancel_job(self, *args: Any) -> bool:
        self._record("cancel_job", *args)
        return True

    def get_job(self, *args: Any) -> JobStatus:
        self._record("get_job", *args)
        return self.job

    def job_records(self, job_id: str) -> JobRecords:
        self._record("job_records", job_id)
        return JobRecords(RecordSource.ACCOUNTING, [{"job_id": int(job_id)}])

    def get_job_usage(self, job_id: str, records: JobRecords | None = None) -> JobUsage | None:
        self._record("get_job_usage", job_id)
        return self.usage

    def read_job_output(self, *args: Any) -> list[Any]:
        self._record("read_job_output", *args)
        return []

    def read_object(self, location: str, wait: float, max_bytes: int, within: str | None = None) -> bytes:
        self._record("read_object", location, wait, max_bytes=max_bytes)
        if location not in self.objects:
            raise FileNotFoundError(f"{location} was not found")
        if len(self.objects[location]) > max_bytes:
            from airflow_provider_slurmapi.hooks.object_store import ObjectTooLargeError

            raise ObjectTooLargeError(location, len(self.objects[location]), max_bytes)
        return self.objects[location]

    def resolve_output_settings(self, **overrides: Any) -> OutputSettings:
        self._record("resolve_output_settings", **overrides)
        return self.settings

    def resolve_live_output(self, **task: Any) -> LiveOutputSettings:
        return LiveOutputSettings.resolve({}, task)  # a connection without live output extras

    def _object_store(self) -> FakeObjectStore:
        return FakeObjectStore(self.objects)


class FakeObjectStore:
    """The object store of ``FakeHook.objects``: what live output lists and reads."""

    def __init__(self, objects: dict[str, bytes]) -> None:
        self.objects = objects

    def names_from(self, folder: str, offset: str) -> list[str]:
        names = (location[len(folder) + 1 :] for location in self.objects if location.startswith(folder + "/"))
        return sorted(name for name in names if name >= offset)

    def read_head(self, location: str, max_bytes: int, within: str | None = None) -> bytes:
        return self.objects[location][:max_bytes]


class FakeLog:
    def __init__(self) -> None:
        self.warnings: list[str] = []

    def warning(self, msg: str, *args: Any) -> None:
        self.warnings.append(msg % args)


def submit_op(hook: FakeHook | None = None, **kwargs: Any) -> SlurmSubmitJobOperator:
    arguments: dict[str, Any] = {"task_id": "task", "job": {"partition": "a3"}, "script": SCRIPT, "deferrable": False}
    op = SlurmSubmitJobOperator(**{**arguments, **kwargs})
    op.hook = hook or FakeHook()  # type: ignore[misc]
    return op


# --- base classes ----------------------------------------------------------------------------


def test_connection_arguments_are_the_base_keyword_parameters() -> None:
    assert CONNECTION_ARGUMENTS == (
        "slurm_conn_id",
        "project_id",
        "region",
        "cluster_id",
        "api_version",
        "impersonation_chain",
        "retry_attempts",
        "retry_max_seconds",
    )


def test_hook_kwargs_carry_every_connection_argument_and_list_the_chain() -> None:
    op = SlurmCancelJobOperator(
        task_id="c",
        job_id=1,
        slurm_conn_id="conn",
        project_id="p",
        region="r",
        cluster_id="cl",
        api_version="v0.0.41",
        impersonation_chain=("a@x", "b@x"),
        retry_attempts=3,
        retry_max_seconds=9.0,
    )
    assert op.hook_kwargs == {
        "slurm_conn_id": "conn",
        "project_id": "p",
        "region": "r",
        "cluster_id": "cl",
        "api_version": "v0.0.41",
        "impersonation_chain": ["a@x", "b@x"],
        "retry_attempts": 3,
        "retry_max_seconds": 9.0,
    }


def test_hook_kwargs_keep_a_single_impersonation_account_as_text() -> None:
    op = SlurmCancelJobOperator(task_id="c", job_id=1, impersonation_chain="sa@x")
    assert op.hook_kwargs["impersonation_chain"] == "sa@x"
    assert op.hook_kwargs["slurm_conn_id"] == "slurm_job_api_default"


def test_hook_is_built_from_the_connection_and_the_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    extra = '{"project_id": "conn-project", "region": "conn-region", "cluster_id": "conn-cluster"}'
    monkeypatch.setenv("AIRFLOW_CONN_UNIT_SLURM", f'{{"conn_type": "slurm_job_api", "extra": {extra}}}')
    op = SlurmCancelJobOperator(task_id="c", job_id=1, slurm_conn_id="unit_slurm", cluster_id="other", retry_attempts=2)
    hook = op.hook
    assert (hook.cluster.project_id, hook.cluster.region, hook.cluster.cluster_id) == (
        "conn-project",
        "conn-region",
        "other",
    )
    assert hook.retry.max_attempts == 2
    assert op.hook is hook  # built once per task


@pytest.mark.parametrize(
    "build",
    [
        lambda **kw: SlurmSubmitJobOperator(task_id="s", job={}, script=SCRIPT, **kw),
        lambda **kw: SlurmCancelJobOperator(task_id="c", job_id=1, **kw),
        lambda **kw: SlurmJobSensor(task_id="w", job_id=1, **kw),
    ],
    ids=["submit", "cancel", "sensor"],
)
def test_default_args_reach_hook_kwargs(build: Any) -> None:
    from airflow.providers.common.compat.sdk import DAG

    defaults = {"slurm_conn_id": "x", "project_id": "p"}
    with DAG("defaults_dag", default_args=defaults, schedule=None):
        in_dag = build()
    direct = build(default_args=defaults)
    for op in (in_dag, direct):
        assert (op.hook_kwargs["slurm_conn_id"], op.hook_kwargs["project_id"]) == ("x", "p")


@pytest.mark.parametrize("cls", [SlurmSubmitJobOperator, SlurmCancelJobOperator, SlurmJobSensor])
def test_template_fields_include_the_connection_fields(cls: type[SlurmBaseOperator]) -> None:
    assert set(CONNECTION_TEMPLATE_FIELDS) <= set(cls.template_fields)
    assert issubclass(cls, SlurmBaseOperator)


def test_own_template_fields() -> None:
    assert {"job", "script"} <= set(SlurmSubmitJobOperator.template_fields)
    assert {"job_id", "signal"} <= set(SlurmCancelJobOperator.template_fields)


# --- helpers ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("try_number", "max_tries", "retries", "expected"),
    [
        (1, 1, 1, False),  # first try of the first round
        (2, 1, 1, True),  # its automatic retry
        (3, 3, 1, False),  # a user's clear after two tries: max_tries = 2 + retries
        (4, 3, 1, True),  # the retry of that round
        (1, 0, None, False),  # no retries at all
        (2, 2, 0, False),  # cleared, without retries
    ],
)
def test_is_automatic_retry(try_number: int, max_tries: int, retries: int | None, expected: bool) -> None:
    assert is_automatic_retry(FakeTI(try_number=try_number, max_tries=max_tries), retries) is expected


@pytest.fixture
def masked(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    values: list[str] = []
    monkeypatch.setattr(job_module, "mask_secret", values.append)
    monkeypatch.setenv("AIRFLOW__LOGGING__MIN_LENGTH_MASKED_SECRET", "5")
    return values


def test_mask_environment_masks_dict_values_long_enough(masked: list[str]) -> None:
    mask_environment({"environment": {"TOKEN": "s3cr3t-value", "SHORT": "abc", "N": 123456}})
    assert masked == ["s3cr3t-value", "123456"]


def test_mask_environment_masks_the_values_of_a_list(masked: list[str]) -> None:
    mask_environment({"environment": ["PASSWORD=hunter2hunter2", "X=1", "NOVALUE"]})
    assert masked == ["hunter2hunter2"]


@pytest.mark.parametrize("job", [{}, {"environment": "A=bcdefgh"}, "not a dict", {"environment": None}])
def test_mask_environment_ignores_other_shapes(masked: list[str], job: Any) -> None:
    mask_environment(job)
    assert masked == []


READABLE = OutputSettings(uri="gs://bucket/out", cluster_path="/mnt/out")


def test_with_output_paths_unchanged_when_output_is_not_readable() -> None:
    job = {"name": "x"}
    assert with_output_paths(job, OutputSettings(uri="gs://bucket/out"), FakeTI(), FakeLog()) is job


def test_with_output_paths_sets_per_try_paths() -> None:
    job = with_output_paths({"name": "x"}, READABLE, FakeTI(try_number=2), FakeLog())
    assert job["standard_output"] == "/mnt/out/dag/run1/task/try-2/%j.out"
    assert job["standard_error"] == "/mnt/out/dag/run1/task/try-2/%j.err"
    assert job["name"] == "x"


def test_with_output_paths_names_the_map_index_and_array_tasks() -> None:
    job = with_output_paths({"array": "0-3"}, READABLE, FakeTI(map_index=3), FakeLog())
    assert job["standard_output"] == "/mnt/out/dag/run1/task/map-3/try-1/%A_%a.out"


def test_with_output_paths_keeps_given_paths_and_warns_when_outside() -> None:
    log = FakeLog()
    job = {"standard_output": "/home/me/out.txt"}
    assert with_output_paths(job, READABLE, FakeTI(), log) == {"standard_output": "/home/me/out.txt"}
    assert len(log.warnings) == 1 and "/home/me/out.txt" in log.warnings[0] and "/mnt/out" in log.warnings[0]


def test_with_output_paths_keeps_given_paths_under_the_cluster_path_quietly() -> None:
    log = FakeLog()
    job = {"standard_error": "/mnt/out/mine.err"}
    assert with_output_paths(job, READABLE, FakeTI(), log) == {"standard_error": "/mnt/out/mine.err"}
    assert log.warnings == []


def test_check_seconds() -> None:
    check_seconds("x", 0.5)
    check_seconds("x", None, optional=True)
    for bad in (0, -1, None, True, "5"):
        with pytest.raises(InvalidRequestError, match="^x: "):
            check_seconds("x", bad)


def test_task_deadline_without_limits_is_none() -> None:
    assert task_deadline(ctx(), None, None) is None


def test_task_deadline_is_the_earliest_limit() -> None:
    start = datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=100)
    context = ctx(FakeTI(start_date=start))
    before = time.time()
    assert task_deadline(context, 50, None) == pytest.approx(before + 50, abs=2)
    # execution_timeout counts from the task's start: 100 s ago + 120 s is sooner than now + 50 s
    assert task_deadline(context, 50, datetime.timedelta(seconds=120)) == pytest.approx(start.timestamp() + 120)
    assert task_deadline(context, 10, datetime.timedelta(seconds=120)) == pytest.approx(before + 10, abs=2)


def test_task_deadline_without_a_start_date_counts_from_now() -> None:
    before = time.time()
    assert task_deadline(ctx(), None, datetime.timedelta(minutes=1)) == pytest.approx(before + 60, abs=2)


# --- argument checks -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        ({"poll_interval": 0}, "poll_interval"),
        ({"poll_interval": -5}, "poll_interval"),
        ({"timeout": 0}, "timeout"),
        ({"lost_grace": -1}, "lost_grace"),
        ({"output_tail_lines": 0}, "output_tail_lines"),
        ({"output_tail_bytes": 10}, "output_tail_bytes"),
        ({"output_wait": 601}, "output_wait"),
        ({"output_uri": "s3://bucket/x"}, "output_uri"),
        ({"output_cluster_path": "relative/dir"}, "output_cluster_path"),
    ],
)
def test_bad_arguments_refused_at_construction(arguments: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidRequestError, match=f"^{field}: ") as raised:
        SlurmSubmitJobOperator(task_id="s", job={}, script=SCRIPT, **arguments)
    assert raised.value.field == field


def test_reuse_completed_job_refused_listing_the_allowed_values() -> None:
    with pytest.raises(ValueError, match="sometimes") as raised:
        SlurmSubmitJobOperator(task_id="s", job={}, script=SCRIPT, reuse_completed_job="sometimes")
    assert all(repr(value) in str(raised.value) for value in ("on_retry", "always", "never"))


def test_reuse_completed_job_text_becomes_the_enum() -> None:
    op = SlurmSubmitJobOperator(task_id="s", job={}, script=SCRIPT, reuse_completed_job="always")
    assert op.reuse_completed_job is ReuseCompletedJob.ALWAYS


def test_sensor_refuses_bad_output_arguments_too() -> None:
    with pytest.raises(InvalidRequestError, match="^lost_grace: "):
        SlurmJobSensor(task_id="w", job_id=1, lost_grace=0)
    with pytest.raises(InvalidRequestError, match="^output_tail_lines: "):
        SlurmJobSensor(task_id="w", job_id=1, output_tail_lines=10_001)


# --- SlurmWaitingOperator ----------------------------------------------------------------------


def test_output_settings_pass_every_output_argument_to_the_hook() -> None:
    hook = FakeHook(settings=READABLE)
    op = submit_op(hook, output_uri="gs://b/p", output_tail_lines=7, output_wait=2.5, output_staged_retention_days=0)
    assert op.output_settings is READABLE
    passed = {"uri": "gs://b/p", "cluster_path": None, "tail_lines": 7, "tail_bytes": 64 * 1024, "wait": 2.5}
    assert hook.named("resolve_output_settings") == [((), {**passed, "staged_retention_days": 0})]


def test_finish_job_success_pushes_usage() -> None:
    usage = JobUsage("42", 60, 1, 4, 1024, 0, 0.0, {"cpu": 4})
    op = submit_op(FakeHook(usage=usage))
    context = ctx()
    op.finish_job(context, status())
    assert context["ti"].pushes == {"usage": usage.to_dict()}
    assert (op.final_status.state, op.final_usage) == ("COMPLETED", usage)


def test_finish_job_failure_names_state_reason_and_exit_code() -> None:
    op = submit_op(FakeHook())
    context = ctx()
    with pytest.raises(AirflowException, match=r"Slurm job 42 is FAILED; reason: NonZeroExitCode; exit code 3"):
        op.finish_job(context, status(state="FAILED", code=3, reason="NonZeroExitCode"))
    assert "usage" not in context["ti"].pushes
    assert op.final_status.state == "FAILED"


def test_show_output_link_only_for_gs_locations() -> None:
    op = submit_op()
    context = ctx()
    op.show_output_link(context, "file:///shared/out/42.out")
    assert context["ti"].pushes == {}
    op.show_output_link(context, "gs://bucket/out/42.out")
    url = "https://console.cloud.google.com/storage/browser/_details/bucket/out/42.out"
    assert context["ti"].pushes == {SlurmJobOutputLink.key: url}
    assert op.output_console_url == url


def test_defer_until_finished_raises_task_deferred_with_the_trigger() -> None:
    op = submit_op(
        lost_grace=45,
        shared_polling=False,
        project_id="p",
        impersonation_chain=["a@x"],
        execution_timeout=datetime.timedelta(seconds=600),
    )
    before = time.time()
    with pytest.raises(TaskDeferred) as deferred:
        op.defer_until_finished(ctx(FakeTI(try_number=3)), "77", poll_interval=4, timeout=30, cancel_on_kill=True)
    classpath, kwargs = deferred.value.trigger.serialize()
    assert classpath == "airflow_provider_slurmapi.triggers.job.SlurmJobTrigger"
    deadline = kwargs.pop("deadline")
    assert deadline == pytest.approx(before + 30, abs=2)
    assert kwargs == {
        "job_id": "77",
        "poll_interval": 4,
        "hook_kwargs": op.hook_kwargs,
        "lost_grace": 45,
        "cancel_on_kill": True,
        "shared_polling": False,
        "live_output": None,
    }
    assert kwargs["hook_kwargs"]["impersonation_chain"] == ["a@x"]
    assert deferred.value.method_name == "execute_complete"
    assert deferred.value.kwargs == {"deferred_in_try": 3}


@pytest.mark.parametrize(("deferred_in_try", "expected"), [(None, False), (2, False), (1, True)])
def test_resumed_by_an_earlier_try(deferred_in_try: int | None, expected: bool) -> None:
    assert submit_op().resumed_by_an_earlier_try(ctx(FakeTI(try_number=2)), deferred_in_try) is expected


def test_waiting_operator_is_the_shared_base() -> None:
    assert issubclass(SlurmSubmitJobOperator, SlurmWaitingOperator)
    assert issubclass(SlurmJobSensor, SlurmWaitingOperator)
    assert not issubclass(SlurmCancelJobOperator, SlurmWaitingOperator)


def without_connection(pushes: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in pushes.items() if key != CONNECTION_XCOM}


# --- SlurmSubmitJobOperator.execute ----------------------------------------------------------


def test_execute_without_waiting_returns_the_job_id_and_records_it() -> None:
    hook = FakeHook()
    store = FakeStore()
    context = ctx(store=store)
    assert submit_op(hook, wait_for_completion=False).execute(context) == "42"
    pushes = dict(context["ti"].pushes)
    # how the Slurm job tab reaches the job: the connection's ID and names, no secret
    assert pushes.pop(CONNECTION_XCOM)["connection"]["slurm_conn_id"] == "slurm_job_api_default"
    assert pushes == {"job_id": "42"}
    assert store.values == {STATE_STORE_KEY: "42"}
    assert hook.named("wait_for_job") == []
    [(args, kwargs)] = hook.named("submit_once")
    job, script, key = args
    assert job == {"name": "task", "partition": "a3"}  # named after the task by default
    assert (script, key) == (SCRIPT, submission_key("dag", "task", "run1", -1))
    assert kwargs == {
        "known_job_id": None,
        "adopt_completed": False,
        "earlier_tries": False,
        "replace_active": True,
        "since": None,
    }


@pytest.mark.parametrize(("try_number", "max_tries", "replace"), [(2, 1, False), (3, 3, True), (4, 3, False)])
def test_a_users_clear_replaces_a_running_job_and_a_retry_watches_it(
    try_number: int, max_tries: int, replace: bool
) -> None:
    hook = FakeHook()
    submit_op(hook, wait_for_completion=False, retries=1).execute(
        ctx(FakeTI(try_number=try_number, max_tries=max_tries))
    )
    assert hook.named("submit_once")[0][1]["replace_active"] is replace


RUN_AFTER = datetime.datetime(2026, 12, 1, 8, tzinfo=datetime.UTC)
LOGICAL_DATE = RUN_AFTER - datetime.timedelta(days=1)  # a daily run's interval starts a day earlier
LATER = RUN_AFTER + datetime.timedelta(days=2)  # what clearing a task makes of queued_at and start_date


class FakeDagRun:
    def __init__(self, **times: Any) -> None:
        self.__dict__.update(times)


@pytest.mark.parametrize(
    ("dag_run", "since"),
    [
        # Airflow 3: not before run_after (the scheduler starts no run earlier), whatever a clear did
        (FakeDagRun(run_after=RUN_AFTER, logical_date=LOGICAL_DATE, queued_at=LATER, start_date=LATER), RUN_AFTER),
        (FakeDagRun(run_after=RUN_AFTER, logical_date=None, queued_at=LATER, start_date=None), RUN_AFTER),
        # Airflow 2.11: no run_after; a run starts after its logical date
        (FakeDagRun(logical_date=LOGICAL_DATE, execution_date=LOGICAL_DATE, queued_at=LATER), LOGICAL_DATE),
        (FakeDagRun(execution_date=LOGICAL_DATE, queued_at=LATER), LOGICAL_DATE),
        (None, None),
    ],
)
def test_execute_searches_for_earlier_tries_from_when_the_dag_run_could_start(
    dag_run: Any, since: datetime.datetime | None
) -> None:
    hook = FakeHook()
    context = ctx(FakeTI(try_number=2, max_tries=1))
    if dag_run is not None:
        context["dag_run"] = dag_run
    submit_op(hook, wait_for_completion=False, retries=1).execute(context)
    assert hook.named("submit_once")[0][1]["since"] == (since.timestamp() if since else None)


def test_execute_keeps_the_jobs_own_name() -> None:
    hook = FakeHook()
    submit_op(hook, job={"name": "train"}, wait_for_completion=False).execute(ctx())
    assert hook.named("submit_once")[0][0][0]["name"] == "train"


@pytest.mark.parametrize(("stored", "known"), [(17, "17"), ("", None), (None, None)])
def test_execute_passes_the_stored_job_id(stored: Any, known: str | None) -> None:
    hook = FakeHook()
    store = FakeStore(**({STATE_STORE_KEY: stored} if stored is not None else {}))
    submit_op(hook, wait_for_completion=False).execute(ctx(FakeTI(try_number=2, max_tries=1), store))
    kwargs = hook.named("submit_once")[0][1]
    assert kwargs["known_job_id"] == known
    assert kwargs["earlier_tries"] is True


RECORD = "slurm_job_id." + submission_key("dag", "task", "run1", -1).removeprefix("airflow-key=")


class RecordSeenWhileWaiting(FakeHook):
    def __init__(self, variables: FakeVariables) -> None:
        super().__init__()
        self.variables, self.recorded_while_waiting = variables, dict(variables.values)

    def wait_for_job(self, *args: Any, **kwargs: Any) -> JobStatus:
        self.recorded_while_waiting = dict(self.variables.values)
        raise AirflowException("the job failed")


def test_without_a_state_store_the_job_id_is_in_a_variable_before_the_try_waits(variables: FakeVariables) -> None:
    hook = RecordSeenWhileWaiting(variables)
    with pytest.raises(AirflowException):
        submit_op(hook, retries=1).execute(ctx(FakeTI(try_number=1, max_tries=1)))
    assert hook.recorded_while_waiting == {RECORD: "42"} == variables.values  # kept for the retry


class RefusingHook(FakeHook):
    def submit_once(self, *args: Any, **kwargs: Any) -> Submission:
        self._record("submit_once", *args, **kwargs)
        raise AirflowException("Slurm refused the submit")


@pytest.mark.parametrize(
    ("reuse", "try_number", "max_tries", "known", "left"),
    [
        ("on_retry", 2, 2, "17", "17"),  # an automatic retry reads it
        ("on_retry", 4, 5, None, None),  # a user's clear runs the job afresh: the record goes first
        ("always", 4, 5, "17", "17"),  # ... unless a completed job of the earlier round may be taken
        ("never", 2, 2, "17", "17"),  # a retry still reattaches a running job
    ],
)
def test_an_earlier_rounds_record_is_deleted_before_a_clear_runs_the_job_afresh(
    variables: FakeVariables, reuse: str, try_number: int, max_tries: int, known: str | None, left: str | None
) -> None:
    variables.values[RECORD] = "17"
    hook = RefusingHook()
    with pytest.raises(AirflowException):  # the submit fails: what this try leaves for the next
        submit_op(hook, reuse_completed_job=reuse, retries=2).execute(ctx(FakeTI(try_number, max_tries)))
    assert hook.named("submit_once")[0][1]["known_job_id"] == known
    assert variables.values.get(RECORD) == left


@pytest.mark.parametrize(
    ("reuse", "try_number", "max_tries", "adopt"),
    [
        ("on_retry", 2, 1, True),
        ("on_retry", 1, 1, False),
        ("on_retry", 3, 3, False),  # cleared by a user
        ("always", 1, 1, True),
        ("never", 2, 1, False),
    ],
)
def test_execute_adopts_completed_jobs_as_reuse_completed_job_says(
    reuse: str, try_number: int, max_tries: int, adopt: bool
) -> None:
    hook = FakeHook()
    op = submit_op(hook, wait_for_completion=False, reuse_completed_job=reuse, retries=1)
    op.execute(ctx(FakeTI(try_number=try_number, max_tries=max_tries)))
    assert hook.named("submit_once")[0][1]["adopt_completed"] is adopt


def test_execute_adopted_job_finishes_without_waiting() -> None:
    hook = FakeHook(submission=Submission("41", Outcome.ADOPTED, status(job_id="41")))
    context = ctx()
    assert submit_op(hook).execute(context) == "41"
    assert without_connection(context["ti"].pushes) == {"job_id": "41", "job_state": "COMPLETED", "exit_code": 0}
    assert hook.named("wait_for_job") == []


def test_execute_waits_and_fails_naming_the_exit_code() -> None:
    hook = FakeHook(waited=status(state="FAILED", code=3))
    context = ctx()
    with pytest.raises(AirflowException, match="is FAILED; exit code 3"):
        submit_op(hook, poll_interval=2, timeout=9, lost_grace=12).execute(context)
    assert (context["ti"].pushes["job_state"], context["ti"].pushes["exit_code"]) == ("FAILED", 3)
    assert hook.named("wait_for_job") == [(("42",), {"poll_interval": 2, "timeout": 9, "lost_grace": 12})]


def test_execute_cancelled_job_pushes_no_exit_code() -> None:
    hook = FakeHook(waited=status(state="CANCELLED", code=0))
    context = ctx()
    with pytest.raises(AirflowException, match="is CANCELLED"):
        submit_op(hook).execute(context)
    assert context["ti"].pushes["exit_code"] is None


def test_execute_success_returns_the_job_id() -> None:
    hook = FakeHook()
    context = ctx()
    assert submit_op(hook).execute(context) == "42"
    assert without_connection(context["ti"].pushes) == {"job_id": "42", "job_state": "COMPLETED", "exit_code": 0}


def test_execute_timeout_cancels_the_job() -> None:
    hook = FakeHook(waited=TimeoutError("Slurm job 42 did not finish within 5 s"))
    with pytest.raises(AirflowException, match="did not finish within 5 s"):
        submit_op(hook, timeout=5).execute(ctx())
    assert hook.named("cancel_job") == [(("42",), {})]


def test_execute_timeout_leaves_the_job_without_cancel_on_kill() -> None:
    hook = FakeHook(waited=TimeoutError("late"))
    with pytest.raises(AirflowException, match="late"):
        submit_op(hook, timeout=5, cancel_on_kill=False).execute(ctx())
    assert hook.named("cancel_job") == []


def test_execute_deferrable_defers_after_submitting() -> None:
    hook = FakeHook()
    with pytest.raises(TaskDeferred) as deferred:
        submit_op(hook, deferrable=True, poll_interval=3, cancel_on_kill=False).execute(ctx(FakeTI(try_number=1)))
    _, kwargs = deferred.value.trigger.serialize()
    assert (kwargs["job_id"], kwargs["poll_interval"], kwargs["cancel_on_kill"], kwargs["deadline"]) == (
        "42",
        3,
        False,
        None,
    )
    assert deferred.value.kwargs == {"deferred_in_try": 1}
    assert hook.named("wait_for_job") == []


def test_execute_shows_the_output_link_of_a_submitted_job() -> None:
    hook = FakeHook(settings=READABLE)
    context = ctx()
    submit_op(hook, wait_for_completion=False).execute(context)
    submitted = hook.named("submit_once")[0][0][0]
    assert submitted["standard_output"] == "/mnt/out/dag/run1/task/try-1/%j.out"
    assert context["ti"].pushes[SlurmJobOutputLink.key] == (
        "https://console.cloud.google.com/storage/browser/_details/bucket/out/dag/run1/task/try-1/42.out"
    )


def test_execute_shows_no_link_for_a_reattached_job() -> None:
    hook = FakeHook(settings=READABLE, submission=Submission("40", Outcome.REATTACHED, status("RUNNING", job_id="40")))
    context = ctx(FakeTI(try_number=2))
    assert submit_op(hook, wait_for_completion=False).execute(context) == "40"
    assert SlurmJobOutputLink.key not in context["ti"].pushes


def test_execute_masks_the_environment(masked: list[str]) -> None:
    submit_op(job={"environment": {"API_KEY": "abcdefgh12"}}, wait_for_completion=False).execute(ctx())
    assert "abcdefgh12" in masked


def test_execute_complete_finished_event() -> None:
    from airflow_provider_slurmapi.triggers.events import finished_event

    context = ctx()
    assert submit_op().execute_complete(context, finished_event(status(job_id="55")), deferred_in_try=1) == "55"
    assert context["ti"].pushes == {"job_state": "COMPLETED", "exit_code": 0}


@pytest.mark.parametrize(
    ("event", "message"),
    [
        ({"status": "error", "job_id": "5", "message": "Slurm job 5 was lost"}, "Slurm job 5 was lost"),
        ({"status": "timeout", "job_id": "5", "message": "too slow"}, "too slow"),
        (None, "Slurm job None: no status received"),
    ],
)
def test_execute_complete_without_a_status_fails_with_the_reason(event: Any, message: str) -> None:
    with pytest.raises(AirflowException, match=message):
        submit_op().execute_complete(ctx(), event)


def test_execute_complete_of_an_earlier_try_starts_over() -> None:
    from airflow_provider_slurmapi.triggers.events import finished_event

    hook = FakeHook()
    context = ctx(FakeTI(try_number=2, max_tries=1))
    assert (
        submit_op(hook, wait_for_completion=False).execute_complete(
            context, finished_event(status("FAILED", code=1, job_id="99")), deferred_in_try=1
        )
        == "42"
    )
    assert len(hook.named("submit_once")) == 1
    assert "job_state" not in context["ti"].pushes  # the stale event was not reported


def test_on_kill_cancels_the_submitted_job() -> None:
    hook = FakeHook()
    op = submit_op(hook)
    op.on_kill()
    assert hook.named("cancel_job") == []  # nothing submitted yet
    op.job_id = "42"
    op.on_kill()
    assert hook.named("cancel_job") == [(("42",), {})]


def test_on_kill_leaves_the_job_without_cancel_on_kill() -> None:
    hook = FakeHook()
    op = submit_op(hook, cancel_on_kill=False)
    op.job_id = "42"
    op.on_kill()
    assert hook.named("cancel_job") == []


# --- SlurmCancelJobOperator ----------------------------------------------------------------


def cancel_op(hook: FakeHook, **kwargs: Any) -> SlurmCancelJobOperator:
    op = SlurmCancelJobOperator(**{"task_id": "c", "job_id": 42, **kwargs})
    op.hook = hook  # type: ignore[misc]
    return op


def test_cancel_waits_and_returns_the_final_state() -> None:
    hook = FakeHook(waited=status(state="CANCELLED"))
    assert cancel_op(hook, signal="KILL", poll_interval=1, timeout=7).execute(ctx()) == "CANCELLED"
    assert hook.named("cancel_job") == [(("42", "KILL"), {})]
    assert hook.named("wait_for_job") == [(("42",), {"poll_interval": 1, "timeout": 7})]


def test_cancel_without_waiting_returns_the_current_state() -> None:
    hook = FakeHook(job=status(state="RUNNING"))
    assert cancel_op(hook, signal="USR1", wait_for_completion=False).execute(ctx()) == "RUNNING"
    assert hook.named("get_job") == [(("42",), {})]
    assert hook.named("wait_for_job") == []


def test_cancel_timeout_fails_the_task() -> None:
    hook = FakeHook(waited=TimeoutError("Slurm job 42 did not finish within 7 s"))
    with pytest.raises(AirflowException, match="within 7 s"):
        cancel_op(hook, timeout=7).execute(ctx())


def test_cancel_of_a_finished_job_returns_its_state() -> None:
    hook = FakeHook(waited=status(state="COMPLETED"))
    # a job that already finished counts as cancelled: its final state is returned, no failure
    assert cancel_op(hook).execute(ctx()) == "COMPLETED"


# --- live output: on by default where it can work ----------------------------------------------


def submitted_script(hook: FakeHook) -> str:
    *_, ((_, script, _), _) = hook.named("fit_script")
    return script


class StagingHook(FakeHook):
    """Stages every script but its own wrappers: the wrapper names what it runs."""

    def fit_script(
        self, job: dict[str, Any], script: str, settings: OutputSettings, *, dag_id: str | None = None
    ) -> str:
        self._record("fit_script", job, script, settings)
        return script if "# wrapper" in script else f"#!/bin/bash\n# wrapper of {len(script)} bytes\n"


@pytest.mark.parametrize("live_output", [True, False])
def test_a_job_that_runs_a_staged_script_carries_its_mark_in_its_comment(live_output: bool) -> None:
    hook = StagingHook(settings=READABLE)
    submit_op(hook, job={"partition": "a3", "comment": "mine"}, live_output=live_output).execute(ctx())
    [((job, *_), _)] = hook.named("submit_once")
    assert job["comment"] == f"mine {staged_mark(SCRIPT)}"  # the key is added by submit_once


def test_a_job_whose_script_fits_carries_no_staged_mark() -> None:
    hook = FakeHook(settings=READABLE)
    submit_op(hook, live_output=False).execute(ctx())
    [((job, *_), _)] = hook.named("submit_once")
    assert "comment" not in job


def test_live_output_is_on_by_default_where_the_output_locations_are_set() -> None:
    hook = FakeHook(settings=READABLE)
    submit_op(hook).execute(ctx())
    script = submitted_script(hook)
    assert "__live_folder=/mnt/out/live" in script and script.endswith('/bin/bash /dev/fd/9 "$@"\n')
    assert SCRIPT in script  # the batch script itself, unchanged, which the wrapper becomes


def test_without_output_locations_the_default_leaves_the_script_alone() -> None:
    hook = FakeHook()
    submit_op(hook).execute(ctx())
    assert submitted_script(hook) == SCRIPT


def test_live_output_false_leaves_the_script_alone() -> None:
    hook = FakeHook(settings=READABLE)
    submit_op(hook, live_output=False).execute(ctx())
    assert submitted_script(hook) == SCRIPT


def test_live_output_asked_for_without_output_locations_is_refused_before_anything_is_sent() -> None:
    hook = FakeHook()
    with pytest.raises(InvalidRequestError, match="live_output: needs output_uri and output_cluster_path"):
        submit_op(hook, live_output=True).execute(ctx())
    assert hook.named("submit_once") == []


def test_a_script_of_any_interpreter_is_wrapped() -> None:
    hook = FakeHook(settings=READABLE)
    python = "#!/usr/bin/env python3\n#SBATCH --gres=gpu:1\nprint('step 1')\n"
    submit_op(hook, script=python).execute(ctx())
    script = submitted_script(hook)
    assert script.startswith("#!/bin/bash\n#SBATCH --gres=gpu:1\n")
    assert '/usr/bin/env python3 /dev/fd/9 "$@"' in script


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        ({"live_output": "yes"}, "live_output"),
        ({"live_output_period": 1}, "live_output_period"),
        ({"live_output_max_lines": 0}, "live_output_max_lines"),
        ({"live_output_max_bytes": 10}, "live_output_max_bytes"),
    ],
)
def test_bad_live_output_arguments_are_refused_when_the_dag_is_parsed(arguments: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidRequestError, match=f"^{field}: "):
        submit_op(**arguments)
