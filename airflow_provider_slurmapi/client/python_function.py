"""A Python function run on the cluster as a Slurm job (``@task.slurm_python``): the batch script
that carries its source and arguments, and what the job leaves behind, its return value or its
exception with the cluster-side traceback.

Arguments and the return value travel as JSON. The job writes its outcome to
``{result folder}/{job ID}.return.json`` under ``output_cluster_path``, where Airflow reads it at
``output_uri``. Whoever may write that location could write that file too, so the runner signs
what it writes: an HMAC-SHA256, under a key of the try that submitted the job, of the job ID and
the outcome. The key travels in the job's environment (which Slurm shows only to the job's
owner and administrators), not in the script, which may be staged where others read it; the
runner takes it out of the environment before the function runs. The key is derived from a random
nonce of the try and the deployment's secret (``result_key``): the job's record (``JobIdRecord``),
which whoever may read the task run reads too, keeps only the nonce with the job ID, and Airflow
derives the key again to take a result only if its signature is the one that key makes
(``FunctionOutcome.verified``). No I/O and no Airflow import here.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import inspect
import json
import re
import secrets
import textwrap
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from airflow_provider_slurmapi.client.errors import InvalidRequestError, UntrustedResultError
from airflow_provider_slurmapi.client.job_description import DEFAULT_ENVIRONMENT

RESULT_SUFFIX = ".return.json"
RESULT_KEY_VARIABLE = "SLURM_PYTHON_RESULT_KEY"  # the job's environment variable holding the try's key
# A result is read with this cap: it becomes an XCom, kept in Airflow's metadata database, which is
# not a place for bulk data (pass a path to it instead).
MAX_RESULT_BYTES = 16 * 1024 * 1024
_SIGNED = "airflow-provider-slurmapi function result v1\n{job_id}\n"  # what the signature covers, then the outcome
_COMMAND_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")

# Runs on the cluster under the task's interpreter: any Python 3 with only the standard library.
_RUNNER = r"""
import base64, hashlib, hmac, json, linecache, os, sys, traceback
task = json.loads(base64.b64decode(PAYLOAD))
key = os.environ.pop(task["key_variable"], "")  # not seen by the function, nor by what it starts
job_id = os.environ.get("SLURM_JOB_ID", "unknown")
result = os.path.join(task["result_folder"], job_id + task["suffix"])

def write(outcome):
    signed = (task["signed"].format(job_id=job_id) + outcome).encode()
    mac = hmac.new(key.encode(), signed, hashlib.sha256).hexdigest()
    os.makedirs(task["result_folder"], exist_ok=True)
    with open(result + ".partial", "w") as file:
        json.dump({"job_id": job_id, "outcome": outcome, "mac": mac}, file)
    os.replace(result + ".partial", result)

try:
    linecache.cache[task["file"]] = (len(task["source"]), None, task["source"].splitlines(True), task["file"])
    scope = {"__name__": "__slurm_python_task__"}
    exec(compile(task["source"], task["file"], "exec"), scope)
    arguments = json.loads(task["arguments"])
    value = scope[task["name"]](*arguments["args"], **arguments["kwargs"])
    try:
        outcome = json.dumps({"return_value": value})
    except (TypeError, ValueError) as error:
        raise TypeError(f"the return value of {task['name']}() does not serialize to JSON: {error}") from None
except BaseException as error:
    traceback.print_exc()
    kind = type(error)
    name = kind.__qualname__ if kind.__module__ in ("builtins", "__slurm_python_task__") else f"{kind.__module__}.{kind.__qualname__}"
    write(json.dumps({"error": {"type": name, "message": str(error), "traceback": traceback.format_exc()}}))
    sys.exit(1)
write(outcome)
"""


def check_python(python: object) -> str:
    """The interpreter to run the function: an absolute path or a bare command name on PATH."""
    if isinstance(python, str) and (python.startswith("/") and " " not in python or _COMMAND_NAME.fullmatch(python)):
        return python
    raise InvalidRequestError(
        "python",
        f"must be an absolute path (/opt/venv/bin/python) or a bare command name (python3), got {python!r}",
    )


def function_source(function: Callable[..., Any]) -> tuple[str, str]:
    """The function's module-level source with its decorators blanked out, and its file's name.

    Lines keep their numbers in the DAG file, so the cluster-side traceback points at them.
    """
    if inspect.iscoroutinefunction(function) or function.__name__ == "<lambda>":
        raise InvalidRequestError("python_callable", "must be a plain def function (not async, not a lambda)")
    lines, first = inspect.getsourcelines(function)
    body = textwrap.dedent("".join(lines)).splitlines(keepends=True)
    start = next(i for i, line in enumerate(body) if line.lstrip().startswith("def "))
    blank = ["\n"] * (max(first, 1) - 1 + start)  # the file's lines before the def, and the decorators
    return "".join(blank + body[start:]), inspect.getsourcefile(function) or "<dag file>"


def encode_arguments(args: Sequence[Any], kwargs: Mapping[str, Any]) -> str:
    """The call's arguments as JSON, refused before anything is sent, naming the value that is not
    JSON (str, int, float, bool, None, lists, and dicts with string keys)."""
    for index, value in enumerate(args):
        _check_json(value, f"op_args[{index}]")
    for key, value in kwargs.items():
        _check_json(value, f"op_kwargs[{key!r}]")
    return json.dumps({"args": list(args), "kwargs": dict(kwargs)}, separators=(",", ":"), allow_nan=False)


def _check_json(value: Any, where: str) -> None:
    if value is None or isinstance(value, (str, bool, int)):
        return
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise InvalidRequestError(where, f"{value!r} is not a JSON number")
        return
    if isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            _check_json(item, f"{where}[{index}]")
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise InvalidRequestError(where, f"has the key {key!r}: JSON objects take string keys only")
            _check_json(item, f"{where}[{key!r}]")
        return
    raise InvalidRequestError(
        where,
        f"is a {type(value).__name__}, which does not travel as JSON: pass str, int, float, bool, None, "
        "lists or dicts with string keys (e.g. a path or an ID instead of an object)",
    )


def function_script(
    function: Callable[..., Any], args: Sequence[Any], kwargs: Mapping[str, Any], *, python: str, result_folder: str
) -> str:
    """The batch script that runs ``function(*args, **kwargs)`` under ``python`` on the cluster."""
    source, file = function_source(function)
    task = {
        "name": function.__name__,
        "source": source,
        "file": file,
        "arguments": encode_arguments(args, kwargs),
        "result_folder": result_folder,
        "suffix": RESULT_SUFFIX,
        "key_variable": RESULT_KEY_VARIABLE,
        "signed": _SIGNED,
    }
    payload = base64.b64encode(json.dumps(task).encode()).decode()
    return (
        "#!/bin/bash\n"
        f"# @task.slurm_python: {function.__name__}() from {file}, run by {check_python(python)}\n"
        f"exec {python} - <<'__SLURM_PYTHON_TASK__'\n"
        f"PAYLOAD = {payload!r}\n"
        f"{_RUNNER.strip()}\n"
        "__SLURM_PYTHON_TASK__\n"
    )


def new_result_nonce() -> str:
    """A try's nonce, recorded with its job's ID: random, 128 bits, not secret."""
    return secrets.token_hex(16)


def result_key(secret: str, nonce: str) -> str:
    """The key a try's runner signs its result with: HMAC-SHA256 of the try's ``nonce`` under the
    deployment's ``secret``, so that whoever reads the nonce in the record, but not the secret,
    cannot sign a result."""
    return hmac.new(secret.encode(), nonce.encode(), hashlib.sha256).hexdigest()


def with_result_key(job: dict[str, Any], key: str) -> dict[str, Any]:
    """The job description with ``key`` in the job's environment (Slurm's defaults kept when the
    description sets none)."""
    environment = job.get("environment")
    if isinstance(environment, dict):
        return {**job, "environment": {**environment, RESULT_KEY_VARIABLE: key}}
    given = list(DEFAULT_ENVIRONMENT) if environment is None else [str(item) for item in environment]
    kept = [item for item in given if item.partition("=")[0] != RESULT_KEY_VARIABLE]
    return {**job, "environment": [*kept, f"{RESULT_KEY_VARIABLE}={key}"]}


def result_signature(key: str, job_id: str, outcome: str) -> str:
    """What the runner of ``job_id``'s job, given ``key``, signs ``outcome`` with."""
    signed = (_SIGNED.format(job_id=job_id) + outcome).encode()
    return hmac.new(key.encode(), signed, hashlib.sha256).hexdigest()


class RemoteFunctionError(Exception):
    """The function raised on the cluster: its type, message and the cluster-side traceback."""

    def __init__(self, function: str, job_id: str, kind: str, message: str, traceback: str) -> None:
        super().__init__(f"{function}() raised {kind}: {message} (Slurm job {job_id})")
        self.kind, self.message, self.traceback = kind, message, traceback


@dataclass(frozen=True)
class FunctionOutcome:
    """What the job wrote: the return value, or the error it raised."""

    value: Any = None
    error: dict[str, str] | None = None

    @classmethod
    def verified(cls, data: bytes, location: str, *, job_id: str, key: str | None) -> FunctionOutcome:
        """The outcome in ``data``, the object at ``location``, if it provably is what the runner of
        Slurm job ``job_id`` wrote, given its try's ``key``; else ``UntrustedResultError``, naming
        the object and why (nothing of it is taken)."""
        try:
            signed = json.loads(data)
        except (ValueError, RecursionError):
            signed = None
        fields = ("job_id", "outcome", "mac")
        if not (isinstance(signed, dict) and all(isinstance(signed.get(name), str) for name in fields)):
            raise UntrustedResultError(location, "it is not signed as a @task.slurm_python runner signs its result")
        if signed["job_id"] != job_id:
            raise UntrustedResultError(
                location,
                f"it was written by Slurm job {signed['job_id']}, not by job {job_id} whose result it stands for",
            )
        if key is None:
            raise UntrustedResultError(
                location,
                f"the key of the try that submitted Slurm job {job_id} was not recorded (that try ended before "
                "its record was written, or an earlier release wrote a record this one does not take), so the "
                "result cannot be checked; clear the task to run the job afresh",
            )
        if not hmac.compare_digest(signed["mac"], result_signature(key, job_id, signed["outcome"])):
            raise UntrustedResultError(
                location,
                "its signature does not match: it was changed, or written by something other than this task "
                "run's job (another try or run, or anyone who can write the output location)",
            )
        return cls.parse(signed["outcome"].encode(), location)

    @classmethod
    def parse(cls, data: bytes, location: str) -> FunctionOutcome:
        try:
            outcome = json.loads(data)
        except (ValueError, RecursionError) as error:
            raise ValueError(f"{location} is not the JSON a @task.slurm_python job writes: {error}") from error
        if isinstance(outcome, dict) and "return_value" in outcome:
            return cls(value=outcome["return_value"])
        if isinstance(outcome, dict) and isinstance(outcome.get("error"), dict):
            return cls(error={key: str(value) for key, value in outcome["error"].items()})
        raise ValueError(f"{location} holds neither a return value nor an error")

    def remote_error(self, function: str, job_id: str) -> RemoteFunctionError:
        error = self.error or {}
        return RemoteFunctionError(
            function, job_id, error.get("type", "Exception"), error.get("message", ""), error.get("traceback", "")
        )
