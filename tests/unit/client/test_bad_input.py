"""Bad input is refused before anything is sent, by an error naming the field, the value and what
is allowed there."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import requests

from airflow_provider_slurmapi.client.cluster import ClusterRef
from airflow_provider_slurmapi.client.errors import InvalidRequestError
from airflow_provider_slurmapi.client.numbers import checked_number
from airflow_provider_slurmapi.client.retry import RetryPolicy
from airflow_provider_slurmapi.client.sync import SlurmJobApiClient

CLUSTER = {"project_id": "my-project", "region": "us-central1", "cluster_id": "my-cluster"}
SCRIPT = "#!/bin/bash\ntrue\n"


class NothingSent(requests.Session):
    def request(self, *args: Any, **kwargs: Any) -> requests.Response:
        raise AssertionError(f"a request was sent: {args} {kwargs}")


def client(**kwargs: Any) -> SlurmJobApiClient:
    return SlurmJobApiClient(NothingSent(), ClusterRef(**CLUSTER), **kwargs)


def get_job(job_id: object) -> Callable[[], object]:
    return lambda: client().get_job(job_id)  # type: ignore[arg-type]


def cancel(job_id: object, signal: object = None) -> Callable[[], object]:
    return lambda: client().cancel_job(job_id, signal)  # type: ignore[arg-type]


def cancel_batch_only(batch_only: object) -> Callable[[], object]:
    return lambda: client().cancel_job(1, "USR1", batch_only)  # type: ignore[arg-type]


def submit(job: object, script: object = SCRIPT) -> Callable[[], object]:
    return lambda: client().submit_job(job, script)  # type: ignore[arg-type]


def version(api_version: object) -> Callable[[], object]:
    return lambda: client(api_version=api_version)


def cluster(**fields: Any) -> Callable[[], object]:
    return lambda: ClusterRef(**{**CLUSTER, **fields})


def retries(**settings: Any) -> Callable[[], object]:
    return lambda: RetryPolicy.from_settings(**settings)


def seconds(field: str, value: object) -> Callable[[], object]:
    return lambda: checked_number(field, value, low=0, above_low=True)


JOB_ID_ALLOWED = "expected a number (123), an array task (123_4) or a heterogeneous job component (123+1)"

# (case id, action, field named, text the message must hold: the value and what is allowed)
CASES: list[tuple[str, Callable[[], object], str, list[str]]] = [
    *[
        (f"job_id {value!r}", action(value), "job_id", [repr(value), JOB_ID_ALLOWED])
        for value in ("../1", "1/../../slurmdb", "1?x=y", "-1", "", "abc", "1 2", "1;2", "0", "%2e%2e", "1_", "_1")
        for action in (get_job, cancel)
    ],
    ("job_id None", get_job(None), "job_id", ["None", JOB_ID_ALLOWED]),
    ("job_id True", get_job(True), "job_id", ["True", JOB_ID_ALLOWED]),
    ("job_id 1.5", get_job(1.5), "job_id", ["1.5", JOB_ID_ALLOWED]),
    ("job_id 12345678901", get_job(12345678901), "job_id", ["12345678901", JOB_ID_ALLOWED]),
    *[
        (f"api_version {value!r}", version(value), "api_version", [repr(value), "expected v0.0.NN"])
        for value in ("v9", "../v0.0.42", "v0.0.42/", "", "V0.0.42", "v0.0.42?x=1", "latest", None)
    ],
    *[
        (f"signal {value!r}", cancel(1, value), "signal", [repr(value), "KILL, TERM, USR1"])
        for value in ("KILL; rm -rf /", "", "../TERM", "123", "sig kill")
    ],
    *[
        (f"batch_only {value!r}", cancel_batch_only(value), "batch_only", [repr(value), "True or False"])
        for value in ("yes", 1, None)
    ],
    ("project_id missing", cluster(project_id=""), "project_id", ["is required"]),
    ("project_id with a space", cluster(project_id="My Project"), "project_id", ["'My Project'", "project ID"]),
    ("region missing", cluster(region=None), "region", ["is required"]),
    ("region with a slash", cluster(region="us/central1"), "region", ["'us/central1'", "us-central1"]),
    ("cluster_id missing", cluster(cluster_id=""), "cluster_id", ["is required"]),
    ("cluster_id traversal", cluster(cluster_id="../x"), "cluster_id", ["'../x'", "letters, digits"]),
    ("cluster_id with a colon", cluster(cluster_id="a:b"), "cluster_id", ["'a:b'", "letters, digits"]),
    ("endpoint ftp", cluster(endpoint="ftp://example.com"), "endpoint", ["'ftp://example.com'", "https://"]),
    ("endpoint without a host", cluster(endpoint="https://"), "endpoint", ["'https://'", "https://"]),
    ("endpoint not a URL", cluster(endpoint="example.com"), "endpoint", ["'example.com'", "https://"]),
    *[
        (f"endpoint {value}", cluster(endpoint=value), "endpoint", [repr(value), "leak the access token"])
        for value in ("http://aiplatform.example.com", "http://10.0.0.1:8780", "http://[2001:db8::1]")
    ],
    ("job not a dict", submit(["name"]), "job", ["list", "Slurm job description"]),
    ("script empty", submit({}, ""), "script", ["non-empty"]),
    ("script without shebang", submit({}, "echo hi\n"), "script", ["shebang", "#!/bin/bash"]),
    ("script inside job", submit({"script": SCRIPT}), "job.script", ["`script`"]),
    ("script over 1 MB", submit({}, "#!/bin/bash\n" + "#" * 1_100_000), "request", ["bytes", "under 1,048,576"]),
    ("minimum_nodes abc", submit({"minimum_nodes": "abc"}), "job.minimum_nodes", ["'abc'", "integer"]),
    ("time_limit five", submit({"time_limit": "five"}), "job.time_limit", ["'five'", "expected"]),
    ("environment a number", submit({"environment": 5}), "job.environment", ["a int", "hidden", "array"]),
    (
        "environment value hidden",
        submit({"environment": "TOKEN=s3cret-value"}),
        "job.environment",
        ["a str", "hidden", "array"],
    ),
    ("name a list", submit({"name": ["a"]}), "job.name", ["['a']", "string"]),
    ("hold a string", submit({"hold": "yes"}), "job.hold", ["'yes'", "boolean"]),
    ("typo partion", submit({"partion": "a3"}), "job.partion", ["partion", "did you mean 'partition'?"]),
    ("typo time_limt", submit({"time_limt": 5}), "job.time_limt", ["time_limt", "did you mean 'time_limit'?"]),
    ("unknown field", submit({"gpus_wanted": 8}), "job.gpus_wanted", ["gpus_wanted", "job_desc_msg"]),
    *[
        (
            f"retry_attempts {value!r}",
            retries(attempts=value),
            "retry_attempts",
            [repr(value), "an integer from 1 to 20"],
        )
        for value in (0, "abc", 21, "2.5", True)
    ],
    *[
        (
            f"retry_max_seconds {value!r}",
            retries(max_seconds=value),
            "retry_max_seconds",
            [repr(value), "from 0 to 3600"],
        )
        for value in (-1, "forever", 7200, "nan", float("nan"), "inf", float("inf"), "-inf", "NaN")
    ],
    *[
        (
            f"submit_settle_seconds {value!r}",
            retries(settle_seconds=value),
            "submit_settle_seconds",
            [repr(value), "from 0 to 600"],
        )
        for value in (-1, "soon", 900, "nan")
    ],
    # NaN compares false with every bound, and infinity passes a bound that is not set
    *[
        (f"poll_interval {value!r}", seconds("poll_interval", value), "poll_interval", [repr(value), "greater than 0"])
        for value in (float("nan"), float("inf"), "nan")
    ],
]


def test_at_least_forty_cases() -> None:
    assert len(CASES) >= 40


@pytest.mark.parametrize(("action", "field", "fragments"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_refused_before_sending(action: Callable[[], object], field: str, fragments: list[str]) -> None:
    with pytest.raises(InvalidRequestError) as refused:
        action()
    assert refused.value.field == field
    message = str(refused.value)
    assert message.startswith(f"{field}: ")
    for fragment in fragments:
        assert fragment in message
    assert "s3cret" not in message  # environment values may be secrets: never repeated in errors


@pytest.mark.parametrize(
    "endpoint",
    ["https://europe-west4-aiplatform.googleapis.com", "http://127.0.0.1:8780", "http://localhost:1", "http://[::1]:2"],
)
def test_allowed_endpoints(endpoint: str) -> None:
    assert ClusterRef(**CLUSTER, endpoint=endpoint).url.startswith(endpoint)


def test_retry_settings_from_text_or_numbers() -> None:
    assert RetryPolicy.from_settings("3", "45.5") == RetryPolicy(max_attempts=3, max_elapsed=45.5)
    assert RetryPolicy.from_settings(settle_seconds="30").submit_settle == 30.0
    assert RetryPolicy.from_settings(None, "") == RetryPolicy()
