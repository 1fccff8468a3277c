"""Staging in Cloud Storage, through the real google-cloud-storage client and the stand-in: an
object written once, left (its time refreshed) while it holds the script, written again when
someone changed it, and a DAG's old scripts removed while other DAGs' and those kept stay."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from airflow_provider_slurmapi.hooks.object_store import ObjectStore, Staged
from tests.storage import BUCKET

PREFIX = f"gs://{BUCKET}/staging"


@pytest.fixture
def store(storage_host: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[ObjectStore]:
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    monkeypatch.setenv("STORAGE_EMULATOR_HOST", storage_host)
    client = storage.Client(project="test", credentials=AnonymousCredentials())

    class Hook:
        def get_conn(self) -> Any:
            return client

    yield ObjectStore(gcs_hook=Hook, principal=lambda: "airflow@test")  # type: ignore[arg-type,return-value]


def blob(name: str) -> Any:
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    return storage.Client(project="someone", credentials=AnonymousCredentials()).bucket(BUCKET).get_blob(name)


def test_an_object_is_written_left_and_written_again_when_changed(store: ObjectStore) -> None:
    location = f"{PREFIX}/staged/d/{'a' * 64}.script"
    name = location.split("/", 3)[3]
    assert store.stage(location, b"the script", within=PREFIX) is Staged.WRITTEN
    first = blob(name)
    time.sleep(1.1)  # the stand-in's times are in seconds
    assert store.stage(location, b"the script", within=PREFIX) is Staged.UNCHANGED
    again = blob(name)
    assert again.generation == first.generation  # not uploaded again
    assert float(again.metadata["airflow-staged-at"]) > float(
        first.metadata["airflow-staged-at"]
    )  # the retention's clock
    blob(name).upload_from_string(b"someone else's script")
    assert store.stage(location, b"the script", within=PREFIX) is Staged.REPLACED
    assert blob(name).download_as_bytes() == b"the script"


def test_a_dags_scripts_older_than_the_retention_are_removed_and_no_others(store: ObjectStore) -> None:
    folder = f"{PREFIX}/staged/old"
    for name in ("1.script", "2.script"):
        store.stage(f"{folder}/{name}", name.encode(), within=PREFIX)
    store.stage(f"{PREFIX}/staged/other/3.script", b"3", within=PREFIX)
    asked: list[list[str]] = []

    def keep_first(old: list[str]) -> set[str]:
        asked.append(old)
        return {"1.script"}

    assert store.remove_older(folder, 3600, keep=keep_first) == []  # all younger than an hour
    assert asked == []  # nothing old: nothing to ask about
    removed = store.remove_older(folder, -60, keep=keep_first)  # a cutoff ahead: every one is older
    assert removed == [f"{folder}/2.script"] and asked == [["1.script", "2.script"]]
    assert blob("staging/staged/old/1.script") is not None and blob("staging/staged/old/2.script") is None
    assert blob("staging/staged/other/3.script") is not None
