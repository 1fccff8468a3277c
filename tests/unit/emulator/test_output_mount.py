"""The emulator's output mount: which files of which replies it publishes, and bad settings."""

from __future__ import annotations

import json

import pytest

from airflow_provider_slurmapi.emulator import EmulatorConfig
from airflow_provider_slurmapi.emulator.output_mount import OutputMount, _ended_outputs
from tests.conftest import FIXTURES


def jobs(name: str) -> list[dict]:
    return json.loads((FIXTURES / name).read_text())["jobs"]


@pytest.mark.parametrize(
    ("spec", "host"),
    [("relative=gs://b/p", "http://h:1"), ("/d=s3://b/p", "http://h:1"), ("/d", "http://h:1"), ("/d=gs://b", "")],
)
def test_a_bad_mount_is_refused_when_the_emulator_is_configured(spec: str, host: str) -> None:
    with pytest.raises(ValueError, match="output mount must be|storage stand-in's URL must be"):
        EmulatorConfig(output_mount=spec, storage_host=host)


def test_files_under_the_mount_map_to_objects() -> None:
    mount = OutputMount.parse("/mnt/out/=gs://bucket/runs/", "http://127.0.0.1:9")
    assert mount.object_of("/mnt/out/d/r/t/try-1/5.out") == ("bucket", "runs/d/r/t/try-1/5.out")
    assert mount.object_of("/mnt/outer/5.out") is None
    assert OutputMount.parse("/mnt/out=gs://bucket", "http://h:1").object_of("/mnt/out/5.out") == ("bucket", "5.out")
    chroot = OutputMount.parse("/tmp/o=gs://b", "http://h:1", cluster_root="/var/lib/slurm-chroot")
    assert chroot.local_path("/tmp/o/5.out") == "/var/lib/slurm-chroot/tmp/o/5.out"


def test_only_finished_jobs_of_real_replies_are_published() -> None:
    assert _ended_outputs(jobs("job_running.json")[0]) == []
    assert _ended_outputs(jobs("job_completed_output_paths.json")[0]) == ["/tmp/out-outpat-236.out", "/tmp/out-236.err"]
    assert _ended_outputs(jobs("slurmdb_job_completed_output_paths.json")[0]) == [
        "/tmp/out-outpat-236.out",
        "/tmp/out-236.err",
    ]
    assert _ended_outputs(jobs("job_cancelled_immediately.json")[0]) == []  # CANCELLED, still COMPLETING


def test_a_bulk_state_reply_names_no_files() -> None:
    """jobs/state lists states only (a list, not accounting's dict): nothing to publish, no error."""
    assert _ended_outputs({"job_id": "5", "state": ["COMPLETED"]}) == []
    assert _ended_outputs({"job_id": "5", "state": "COMPLETED"}) == []


def test_directories_made_for_fetched_objects_are_writable_by_every_job(tmp_path) -> None:
    """As a FUSE mount's dir-mode: a job of another user writes its output beside a fetched object."""
    import os
    import stat

    from airflow_provider_slurmapi.emulator.output_mount import _make_dirs

    mount = tmp_path / "mount"
    mount.mkdir()
    _make_dirs(str(mount / "example" / "run-1" / "train"))
    for directory in (mount / "example", mount / "example" / "run-1", mount / "example" / "run-1" / "train"):
        assert stat.S_IMODE(os.stat(directory).st_mode) == 0o1777, directory
    assert stat.S_IMODE(os.stat(mount).st_mode) != 0o1777  # what existed is left as it was
