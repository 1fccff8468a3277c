"""Slurm REST paths and the callSlurmRestApi URL: only validated values reach a path or URL."""

from __future__ import annotations

import pytest

from airflow_provider_slurmapi.client.cluster import ClusterRef
from airflow_provider_slurmapi.client.errors import InvalidRequestError
from airflow_provider_slurmapi.client.paths import SlurmPaths, validate_api_version, validate_job_id

PATHS = SlurmPaths("v0.0.42")


@pytest.mark.parametrize(
    ("job_id", "text"),
    [
        (123, "123"),
        ("123", "123"),
        ("123_4", "123_4"),
        ("123_0", "123_0"),
        ("123+1", "123+1"),
        ("123+0", "123+0"),
        (1, "1"),
        (4294967294, "4294967294"),
    ],
)
def test_job_ids_accepted(job_id, text):
    assert validate_job_id(job_id) == text
    assert PATHS.job(job_id) == f"/slurm/v0.0.42/job/{text}"
    assert PATHS.accounting_job(job_id) == f"/slurmdb/v0.0.42/job/{text}"


@pytest.mark.parametrize(
    "job_id",
    [
        "abc",
        "1/../2",
        "1?x=1",
        "",
        None,
        True,
        False,
        -1,
        "0",
        0,
        "1 2",
        "12#",
        "1%2F2",
        "../1",
        "1;2",
        1.5,
        "1_",
        "_1",
        "1+",
        "1\n2",
        b"12",
        [1],
    ],
)
def test_job_ids_refused(job_id):
    with pytest.raises(InvalidRequestError) as caught:
        validate_job_id(job_id)
    assert caught.value.field == "job_id"
    assert f"{job_id!r} is not a Slurm job ID" in str(caught.value)  # it names the value refused


@pytest.mark.parametrize("job_id", ["abc", "1/../2", "1?x=1", None, True, "0", "1 2"])
@pytest.mark.parametrize("build", ["job", "cancel", "accounting_job"])
def test_every_path_builder_refuses_bad_ids(job_id, build):
    with pytest.raises(InvalidRequestError) as caught:
        getattr(PATHS, build)(job_id)
    assert caught.value.field == "job_id"


def test_invalid_request_error_is_a_value_error():
    with pytest.raises(ValueError):
        validate_job_id("abc")


@pytest.mark.parametrize("version", ["v0.0.42", "v0.0.41", "v0.0.40"])
def test_api_version_accepted(version):
    assert validate_api_version(version) == version
    paths = SlurmPaths(version)
    assert paths.submit() == f"/slurm/{version}/job/submit"
    assert paths.job(7) == f"/slurm/{version}/job/7"
    assert paths.jobs() == f"/slurm/{version}/jobs/"
    assert paths.accounting_job(7) == f"/slurmdb/{version}/job/7"
    assert paths.ping() == f"/slurm/{version}/ping"


@pytest.mark.parametrize("version", ["v0.0.4", "v1", "../v0.0.42", "v0.0.42/..", "0.0.42", "", None, "v0.0.42?x"])
def test_api_version_refused(version):
    with pytest.raises(InvalidRequestError) as caught:
        SlurmPaths(version)
    assert caught.value.field == "api_version"


def test_default_api_version_is_the_guides():
    assert SlurmPaths().job(1) == "/slurm/v0.0.42/job/1"


def test_cancel_path():
    assert PATHS.cancel(6) == "/slurm/v0.0.42/job/6"
    # the captured request: DELETE /slurm/v0.0.42/job/6?signal=KILL
    assert PATHS.cancel(6, "KILL") == "/slurm/v0.0.42/job/6?signal=KILL"
    assert PATHS.cancel("6", "kill") == "/slurm/v0.0.42/job/6?signal=KILL"
    assert PATHS.cancel(6, "SIGUSR1") == "/slurm/v0.0.42/job/6?signal=SIGUSR1"
    assert PATHS.cancel(6, 9) == "/slurm/v0.0.42/job/6?signal=9"
    assert PATHS.cancel("10_3", "TERM") == "/slurm/v0.0.42/job/10_3?signal=TERM"
    # scancel --batch
    assert PATHS.cancel(6, "USR1", batch_only=True) == "/slurm/v0.0.42/job/6?signal=USR1&flags=BATCH_JOB"
    assert PATHS.cancel(6, batch_only=True) == "/slurm/v0.0.42/job/6?flags=BATCH_JOB"


@pytest.mark.parametrize("signal", ["KILL&x=1", "KILL/..", "", "K ILL", "123", "-9", "KILL?", "#"])
def test_cancel_refuses_bad_signals(signal):
    with pytest.raises(InvalidRequestError) as caught:
        PATHS.cancel(6, signal)
    assert caught.value.field == "signal"


# --------------------------------------------------------------------------- ClusterRef


def test_cluster_url_default_endpoint():
    ref = ClusterRef("my-project", "us-central1", "my-cluster")
    assert ref.url == (
        "https://us-central1-aiplatform.googleapis.com/v1beta1/projects/my-project/locations/us-central1/"
        "modelDevelopmentClusters/my-cluster:callSlurmRestApi"
    )


def test_cluster_url_follows_region():
    ref = ClusterRef("p-1", "europe-west4", "c_1")
    assert ref.url.startswith("https://europe-west4-aiplatform.googleapis.com/")
    assert "/locations/europe-west4/" in ref.url


def test_cluster_url_custom_endpoint():
    ref = ClusterRef("my-project", "us-central1", "c1", endpoint="http://127.0.0.1:8080/")
    assert ref.url == (
        "http://127.0.0.1:8080/v1beta1/projects/my-project/locations/us-central1/"
        "modelDevelopmentClusters/c1:callSlurmRestApi"
    )


@pytest.mark.parametrize("field", ["project_id", "region", "cluster_id"])
@pytest.mark.parametrize("bad", ["a/b", "a?b", "a/../b", "x?alt=1", "", None, "a#b", "a b"])
def test_cluster_ref_refuses_unsafe_values(field, bad):
    values = {"project_id": "my-project", "region": "us-central1", "cluster_id": "my-cluster"}
    values[field] = bad
    with pytest.raises(InvalidRequestError) as caught:
        ClusterRef(**values)
    assert caught.value.field == field


@pytest.mark.parametrize(
    ("field", "suffix"),
    [(f, s) for f in ("project_id", "region", "cluster_id") for s in ("/x", "/../other", "?alt=1", "?", "/", "#frag")]
    + [("region", ":run"), ("cluster_id", ":run")],  # domain-scoped project IDs legitimately contain ':'
)
def test_cluster_ref_refuses_valid_looking_values_with_a_path_or_query(field, suffix):
    values = {"project_id": "my-project", "region": "us-central1", "cluster_id": "my-cluster"}
    values[field] += suffix
    with pytest.raises(InvalidRequestError) as caught:
        ClusterRef(**values)
    assert caught.value.field == field


def test_cluster_ref_accepts_domain_scoped_project():
    ref = ClusterRef("example.com:my-project", "us-central1", "c1")
    assert "/projects/example.com:my-project/" in ref.url


@pytest.mark.parametrize("endpoint", ["ftp://x", "us-central1-aiplatform.googleapis.com", "//x"])
def test_cluster_ref_refuses_non_http_endpoint(endpoint):
    with pytest.raises(InvalidRequestError) as caught:
        ClusterRef("p", "us-central1", "c", endpoint=endpoint)
    assert caught.value.field == "endpoint"


def test_the_accounting_list_by_name_is_bounded_in_time():
    # without state, slurmdbd selects the jobs not ended before start_time (running ones too)
    assert PATHS.accounting_jobs("train", start_time=1_800_000_000) == (
        "/slurmdb/v0.0.42/jobs/?job_name=train&start_time=1800000000"
    )
    assert PATHS.accounting_jobs("a b&c", start_time=5) == "/slurmdb/v0.0.42/jobs/?job_name=a+b%26c&start_time=5"
