"""The batch script of a Python function run on the cluster, run here by bash and python3 as a
node would, and what it leaves behind."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pytest

from airflow_provider_slurmapi.client.errors import InvalidRequestError, UntrustedResultError
from airflow_provider_slurmapi.client.python_function import (
    RESULT_KEY_VARIABLE,
    RESULT_SUFFIX,
    FunctionOutcome,
    check_python,
    encode_arguments,
    function_script,
    new_result_nonce,
    result_key,
    with_result_key,
)

SECRET = "s" + "5e" * 32  # the deployment's
KEY = result_key(SECRET, new_result_nonce())


def passthrough(function):  # a decorator, as @task.slurm_python is, left out of the source sent
    return function


@passthrough
def train(learning_rate, *, epochs=2):
    import math

    if learning_rate < 0:
        raise ValueError(f"learning_rate must be positive, got {learning_rate}")
    return {"loss": round(math.exp(-epochs * learning_rate), 4), "epochs": epochs}


def run_on_node(
    script: str, folder: Path, job_id: str = "7"
) -> tuple[subprocess.CompletedProcess[str], FunctionOutcome]:
    env = {**os.environ, "SLURM_JOB_ID": job_id, RESULT_KEY_VARIABLE: KEY}  # as the job's environment holds it
    result = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=60)
    written = folder / f"{job_id}{RESULT_SUFFIX}"
    return result, FunctionOutcome.verified(written.read_bytes(), str(written), job_id=job_id, key=KEY)


def sees_the_key() -> object:
    import os

    return os.environ.get("SLURM_PYTHON_RESULT_KEY")


def test_the_function_and_what_it_starts_do_not_see_the_key(tmp_path: Path) -> None:
    script = function_script(sees_the_key, [], {}, python=sys.executable, result_folder=str(tmp_path))
    _, outcome = run_on_node(script, tmp_path)
    assert outcome == FunctionOutcome(value=None)


@pytest.mark.parametrize(
    ("environment", "expected"),
    [
        (None, ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", f"{RESULT_KEY_VARIABLE}=k"]),
        (["PATH=/bin", f"{RESULT_KEY_VARIABLE}=old"], ["PATH=/bin", f"{RESULT_KEY_VARIABLE}=k"]),
        ({"PATH": "/bin"}, {"PATH": "/bin", RESULT_KEY_VARIABLE: "k"}),
    ],
)
def test_the_key_joins_the_jobs_environment_as_given(environment: object, expected: object) -> None:
    job = {"name": "j"} if environment is None else {"name": "j", "environment": environment}
    assert with_result_key(job, "k") == {"name": "j", "environment": expected}


def test_a_result_is_taken_only_with_the_signature_its_job_and_key_make(tmp_path: Path) -> None:
    script = function_script(train, [0.5], {}, python=sys.executable, result_folder=str(tmp_path))
    run_on_node(script, tmp_path)
    data = (tmp_path / f"7{RESULT_SUFFIX}").read_bytes()
    assert KEY not in data.decode()  # the key itself is never written back
    for job_id, key, why in [
        ("8", KEY, "it was written by Slurm job 7, not by job 8"),
        ("7", result_key(SECRET, new_result_nonce()), "its signature does not match"),  # another try's
        ("7", None, "the key of the try that submitted Slurm job 7 was not recorded"),
    ]:
        with pytest.raises(UntrustedResultError, match=f"^gs://b/7.return.json is refused: {why}"):
            FunctionOutcome.verified(data, "gs://b/7.return.json", job_id=job_id, key=key)
    for forged in (b'{"return_value": 1}', b"[" * 100_000, b"\xff"):
        with pytest.raises(UntrustedResultError, match="is refused: it is not signed"):
            FunctionOutcome.verified(forged, "gs://b/7.return.json", job_id="7", key=KEY)


def test_a_tries_key_is_hmac_sha256_of_its_nonce_under_the_deployments_secret() -> None:
    # RFC 4231, test case 2: the key is exactly HMAC-SHA256(secret, nonce), as hex
    expected = "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
    assert result_key("Jefe", "what do ya want for nothing?") == expected


def test_each_nonce_is_fresh_and_gives_its_key_only_with_the_secret() -> None:
    nonces = {new_result_nonce() for _ in range(100)}
    assert len(nonces) == 100 and all(re.fullmatch("[0-9a-f]{32}", nonce) for nonce in nonces)
    keys = {result_key(SECRET, nonce) for nonce in nonces}
    assert len(keys) == 100 and not keys & nonces
    nonce = nonces.pop()
    assert result_key(SECRET, nonce) != result_key("s" + "5f" * 32, nonce)  # another deployment's secret


def test_the_function_runs_with_its_arguments_and_its_return_value_is_written(tmp_path: Path) -> None:
    script = function_script(train, [0.5], {"epochs": 3}, python=sys.executable, result_folder=str(tmp_path / "try-1"))
    assert script.startswith("#!/bin/bash\n") and "def passthrough" not in script
    result, outcome = run_on_node(script, tmp_path / "try-1")
    assert result.returncode == 0, result.stderr
    assert outcome == FunctionOutcome(value={"loss": 0.2231, "epochs": 3})


def test_an_exception_is_written_with_its_type_message_and_a_traceback_into_the_dag_file(tmp_path: Path) -> None:
    script = function_script(train, [-1], {}, python=sys.executable, result_folder=str(tmp_path))
    result, outcome = run_on_node(script, tmp_path)
    assert result.returncode == 1  # the job fails
    assert outcome.error is not None and outcome.error["type"] == "ValueError"
    assert outcome.error["message"] == "learning_rate must be positive, got -1"
    raising = next(n for n, line in enumerate(Path(__file__).read_text().splitlines(), 1) if "raise ValueError" in line)
    assert f'File "{__file__}", line {raising}, in train\n    raise ValueError' in outcome.error["traceback"]
    assert "raise ValueError" in result.stderr  # in the job's stderr too
    error = outcome.remote_error("train", "7")
    assert str(error) == "train() raised ValueError: learning_rate must be positive, got -1 (Slurm job 7)"


def returns_a_set():
    return {1, 2}


def test_a_return_value_that_is_not_json_is_the_functions_error(tmp_path: Path) -> None:
    script = function_script(returns_a_set, [], {}, python=sys.executable, result_folder=str(tmp_path))
    _, outcome = run_on_node(script, tmp_path)
    assert outcome.error is not None and outcome.error["type"] == "TypeError"
    assert "the return value of returns_a_set() does not serialize to JSON" in outcome.error["message"]


@pytest.mark.parametrize(
    ("args", "kwargs", "field", "says"),
    [
        ([Decimal("0.1")], {}, "op_args[0]", "is a Decimal"),
        ([], {"config": {"lr": {0.1}}}, "op_kwargs['config']['lr']", "is a set"),
        ([], {"grid": [1, float("nan")]}, "op_kwargs['grid'][1]", "nan is not a JSON number"),
        ([{1: "a"}], {}, "op_args[0]", "JSON objects take string keys only"),
    ],
)
def test_arguments_that_do_not_travel_as_json_are_refused_naming_the_value(
    args: list[object], kwargs: dict[str, object], field: str, says: str
) -> None:
    with pytest.raises(InvalidRequestError) as refused:
        encode_arguments(args, kwargs)
    assert refused.value.field == field and says in str(refused.value)


def test_json_arguments_are_encoded() -> None:
    encoded = encode_arguments([1, "a", None, [True]], {"nested": {"x": 1.5}})
    assert json.loads(encoded) == {"args": [1, "a", None, [True]], "kwargs": {"nested": {"x": 1.5}}}


@pytest.mark.parametrize("python", ["python3", "python3.11", "/opt/venvs/train/bin/python", "/usr/bin/python3"])
def test_an_absolute_path_or_a_command_name_is_an_interpreter(python: str) -> None:
    assert check_python(python) == python


@pytest.mark.parametrize("python", ["", "bin/python", "python3 -u", "/opt/my venv/python", "$(rm -rf ~)", 3])
def test_anything_else_is_refused_naming_python(python: object) -> None:
    with pytest.raises(InvalidRequestError, match="^python: must be an absolute path"):
        check_python(python)


def test_a_lambda_cannot_be_sent() -> None:
    with pytest.raises(InvalidRequestError, match="python_callable"):
        function_script(lambda: 1, [], {}, python="python3", result_folder="/tmp")


def test_an_outcome_file_of_another_shape_is_named() -> None:
    with pytest.raises(ValueError, match="gs://b/x holds neither"):
        FunctionOutcome.parse(b'{"other": 1}', "gs://b/x")
