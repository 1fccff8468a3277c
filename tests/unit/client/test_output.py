"""Where job output goes and how its end is cut and shown (client/output.py), what a job used
(client/usage.py), and the reader's own rules on real files (hooks/output_reader.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from airflow_provider_slurmapi.client.output import (
    OutputFile,
    OutputSettings,
    OutputTail,
    console_url,
    error_excerpt,
    expand_pattern,
    job_lines,
    last_lines,
    output_files,
    visible,
)
from airflow_provider_slurmapi.client.usage import JobUsage
from airflow_provider_slurmapi.hooks.output_reader import OutputReader
from tests.conftest import FIXTURES


def fixture_jobs(name: str) -> list[dict]:
    data = json.loads((FIXTURES / name).read_text())
    return (data.get("reply") or data)["jobs"]


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"uri": "s3://bucket/x"}, "output_uri: must start with gs:// or file://, got 's3://bucket/x'"),
        ({"uri": "gs:///x"}, "output_uri: must name a bucket"),
        ({"uri": "file://host/x"}, "output_uri: must be an absolute file:///path"),
        ({"cluster_path": "out/slurm"}, "output_cluster_path: must be an absolute path, got 'out/slurm'"),
        ({"tail_lines": 0}, "output_tail_lines: must be an integer from 1 to 10000, got 0"),
        ({"tail_lines": 1.5}, "output_tail_lines: must be an integer"),
        ({"tail_bytes": 100}, "output_tail_bytes: must be an integer from 1024 to 16777216, got 100"),
        ({"wait": -1}, "output_wait: must be a number of seconds from 0 to 600, got -1"),
        ({"wait": True}, "output_wait: must be a number of seconds"),
    ],
)
def test_bad_settings_are_refused_naming_the_field(settings: dict, message: str) -> None:
    with pytest.raises(ValueError, match="^" + message.replace("(", r"\(").replace(")", r"\)")):
        OutputSettings(**settings)


def test_per_try_paths_are_safe_and_distinct() -> None:
    settings = OutputSettings(uri="gs://b/p", cluster_path="/mnt/out")
    out, err = settings.per_try_paths("my dag", "manual__2026-12-01T10:00:00+00:00", "train/x", -1, 2, array=False)
    assert out == "/mnt/out/my_dag/manual__2026-12-01T10_00_00+00_00/train_x/try-2/%j.out"
    assert err == out.removesuffix(".out") + ".err"
    mapped, _ = settings.per_try_paths("d", "r", "t", 3, 1, array=True)
    assert mapped == "/mnt/out/d/r/t/map-3/try-1/%A_%a.out"
    long, _ = settings.per_try_paths("d" * 300, "r", "t", -1, 1, array=False)
    assert max(len(segment) for segment in long.split("/")) <= 255
    assert settings.per_try_paths("..", "r", "t", -1, 1, array=False)[0].startswith("/mnt/out/__/")


def test_the_try_folder_holding_a_jobs_output_is_one_of_its_task_runs() -> None:
    settings = OutputSettings(uri="gs://b/p", cluster_path="/mnt/out/")
    held = settings.try_folder_holding
    assert held("/mnt/out/d/r/t/try-3/7.out", "d", "r", "t", -1) == settings.per_try_folder("d", "r", "t", -1, 3)
    assert held("/mnt/out/d/r/t/map-2/try-1/7.out", "d", "r", "t", 2) == "/mnt/out/d/r/t/map-2/try-1"
    assert held("/mnt//out/d/r/t/./try-1/7.out", "d", "r", "t", -1) == "/mnt/out/d/r/t/try-1"
    long = settings.per_try_folder("d" * 300, "r", "t", -1, 1)
    assert held(f"{long}/7.out", "d" * 300, "r", "t", -1) == long  # the same cut names
    for elsewhere in (
        "/mnt/out/d/r/t/map-2/try-1/7.out",  # another map index's
        "/mnt/out/d/r2/t/try-1/7.out",  # another run's
        "/mnt/out/d/r/t/try-1/../../u/try-1/7.out",
        "/mnt/out/d/r/t/7.out",
        "/mnt/out/d/r/t/try-0/7.out",
        "/mnt/out/d/r/t/try-1x/7.out",
        "/mnt/out/d/r/t/try-1/sub/7.out",
        "d/r/t/try-1/7.out",
        "",
    ):
        assert held(elsewhere, "d", "r", "t", -1) is None, elsewhere


def test_locations_map_only_files_under_the_cluster_path() -> None:
    settings = OutputSettings(uri="gs://bucket/prefix/", cluster_path="/mnt/out")
    assert settings.location_of("/mnt/out/a/b.out") == "gs://bucket/prefix/a/b.out"
    assert settings.location_of("/mnt/out/../etc/passwd") is None
    assert settings.location_of("/mnt/outside/x.out") is None
    assert OutputSettings(uri="gs://bucket").location_of("/mnt/out/x") is None  # no cluster path
    assert console_url("gs://bucket/a b/c.out") == (
        "https://console.cloud.google.com/storage/browser/_details/bucket/a%20b/c.out"
    )
    assert console_url("file:///shared/x.out") is None


def test_patterns_are_expanded() -> None:
    assert expand_pattern("/o/%x-%j.out", job_id="12", name="train") == "/o/train-12.out"
    assert expand_pattern("/o/%A_%a.out", job_id="15", array_job_id="12", array_task_id="3") == "/o/12_3.out"
    assert expand_pattern("/o/100%%.out", job_id="1") == "/o/100%.out"


def test_output_files_of_real_records() -> None:
    """Accounting names expanded paths; stderr "" means one file for both streams."""
    (completed,) = output_files(fixture_jobs("slurmdb_job_completed.json"), source="slurmdb")
    assert completed == OutputFile("1", "stdout+stderr", "/tmp/slurm-1.out", failed=False)
    live = output_files(fixture_jobs("job_completed.json"), source="slurm")
    assert [(f.stream, f.cluster_path) for f in live] == [("stdout+stderr", "/tmp/slurm-1.out")]


def test_output_files_of_real_records_with_patterns() -> None:
    """Real Slurm 24.11 expands %x and %j in the live record, and accounting in stdout_expanded."""
    wanted = [OutputFile("236", "stdout", "/tmp/out-outpat-236.out"), OutputFile("236", "stderr", "/tmp/out-236.err")]
    assert output_files(fixture_jobs("job_completed_output_paths.json"), source="slurm") == wanted
    assert output_files(fixture_jobs("slurmdb_job_completed_output_paths.json"), source="slurmdb") == wanted


def test_failed_array_tasks_come_first() -> None:
    records = fixture_jobs("slurmdb_job_array_partly_pending.json")
    records = [dict(r, stdout_expanded=f"/o/{i}.out", stderr_expanded=f"/o/{i}.err") for i, r in enumerate(records)]
    records[-1]["state"] = {"current": ["FAILED"], "reason": "NonZeroExitCode"}
    files = output_files(records, source="slurmdb")
    assert files[0].failed and files[0].cluster_path == f"/o/{len(records) - 1}.out"
    assert [f.stream for f in files[:2]] == ["stdout", "stderr"]


def test_last_lines_drop_a_partial_first_line_and_name_bad_bytes() -> None:
    assert last_lines(b"partial\nb\nc\n", lines=5, started_mid_file=True) == ("b\nc", None)
    assert last_lines(b"a\nb\nc\n", lines=2, started_mid_file=False) == ("b\nc", None)
    text, note = last_lines(b"ok \xff\xfe\n", lines=5, started_mid_file=False)
    assert text == "ok \ufffd\ufffd" and note == "2 bytes that are not UTF-8 shown as \ufffd"


def test_a_frame_names_the_whole_file_and_the_excerpt_prefers_stderr() -> None:
    tail = OutputTail("7", "stderr", "gs://b/7.err", text="Traceback\nValueError: nan", size=5000)
    assert tail.frame().splitlines() == [
        "----- Slurm job 7 stderr: last 2 lines of gs://b/7.err, 4.9 KiB in all -----",
        "[job 7 stderr] Traceback",
        "[job 7 stderr] ValueError: nan",
        "----- end of Slurm job 7 stderr -----",
    ]
    out = OutputTail("7", "stdout", "gs://b/7.out", text="epoch 1", size=8)
    assert error_excerpt([out, tail]).endswith(
        "(gs://b/7.err):\n[job 7 stderr] Traceback\n[job 7 stderr] ValueError: nan"
    )
    assert error_excerpt([out]).endswith("\n[job 7 stdout] epoch 1")
    assert error_excerpt([OutputTail("7", "stderr", "x", problem="missing")]) == ""
    assert (
        OutputTail("7", "stdout", "/x.out", problem="written to /x.out").frame()
        == "Slurm job 7 stdout: written to /x.out"
    )


def test_usage_from_real_accounting_records() -> None:
    usage = JobUsage.from_accounting("1", fixture_jobs("slurmdb_job_completed.json"))
    assert usage is not None
    assert (usage.elapsed_seconds, usage.nodes, usage.cpus, usage.gpus, usage.gpu_hours) == (5, 1, 1, 0, 0.0)
    assert "energy" not in usage.tres  # -2: not measured
    assert JobUsage.from_accounting("1", []) is None


def test_gpu_hours_are_allocated_gpus_times_elapsed() -> None:
    gres = {"type": "gres", "name": "gpu", "id": 1001, "count": 8}
    record = {"time": {"elapsed": 5400}, "tres": {"allocated": [{"type": "cpu", "name": "", "count": 16}, gres]}}
    usage = JobUsage.from_accounting("4", [record, record])  # an array of two tasks: sums
    assert usage is not None
    assert (usage.gpus, usage.gpu_hours, usage.elapsed_seconds, usage.cpus) == (16, 24.0, 10800, 32)
    assert "8 GPU(s)" not in usage.describe() and "24 GPU-hours" in usage.describe()


def reader(tmp_path: Path, **settings: object) -> OutputReader:
    values = {"uri": f"file://{tmp_path}", "cluster_path": "/cluster", "wait": 0.0, **settings}
    return OutputReader(OutputSettings(**values), gcs_hook=lambda: None, principal=lambda: "p")  # type: ignore[arg-type]


def test_a_file_is_read_from_its_end_only(tmp_path: Path) -> None:
    big = tmp_path / "big.out"
    with big.open("wb") as file:
        file.write(b"x" * 5_000_000 + b"\n")
        file.writelines(f"step {i}\n".encode() for i in range(1000))
    (tail,) = reader(tmp_path, tail_lines=3, tail_bytes=2048).tails([OutputFile("5", "stdout", "/cluster/big.out")])
    assert tail.text == "step 997\nstep 998\nstep 999"
    assert tail.size == big.stat().st_size and tail.problem is None


def test_the_caps_are_per_stream_and_shared_by_an_array(tmp_path: Path) -> None:
    for name in ("1.out", "2.out", "1.err"):
        (tmp_path / name).write_text("".join(f"{name} {i}\n" for i in range(10)))
    files = [OutputFile(f"9_{n}", "stdout", f"/cluster/{n}.out") for n in (1, 2)] + [
        OutputFile("9_1", "stderr", "/cluster/1.err")
    ]
    first, second, err = reader(tmp_path, tail_lines=10).tails(files)
    assert len(first.text.splitlines()) == 10 and err.text.count("\n") == 9  # stderr has its own cap
    assert second.problem == "not shown: the caps are used up"


def test_missing_or_unmapped_files_are_reported_not_raised(tmp_path: Path) -> None:
    missing, outside = reader(tmp_path).tails(
        [OutputFile("3", "stdout", "/cluster/nope.out"), OutputFile("3", "stderr", "/home/u/slurm-3.out")]
    )
    assert missing.problem == f"file://{tmp_path}/nope.out was not found"
    assert outside.problem == (
        "written to /home/u/slurm-3.out on the cluster; it is not under output_cluster_path /cluster, "
        "so Airflow cannot read it"
    )
    (unset,) = OutputReader(OutputSettings(), gcs_hook=lambda: None, principal=lambda: "p").tails(
        [OutputFile("3", "stdout+stderr", "/tmp/slurm-3.out")]
    )
    assert unset.problem == (
        "written to /tmp/slurm-3.out on the cluster; Airflow cannot read it: "
        "set output_uri and output_cluster_path to see it here"
    )


def test_a_refused_object_read_names_the_principal_and_the_permission() -> None:
    """Cloud Storage's 403 (which the stand-in cannot give): the reader says who needs what."""
    from google.api_core.exceptions import Forbidden

    class RefusingBucket:
        def get_blob(self, name: str) -> None:
            raise Forbidden("caller does not have storage.objects.get access")

    class Client:
        def bucket(self, name: str) -> RefusingBucket:
            return RefusingBucket()

    class Hook:
        def get_conn(self) -> Client:
            return Client()

    settings = OutputSettings(uri="gs://locked/out", cluster_path="/cluster", wait=0.0)
    (tail,) = OutputReader(settings, gcs_hook=Hook, principal=lambda: "airflow@p.iam.gserviceaccount.com").tails(
        [OutputFile("4", "stderr", "/cluster/4.err")]
    )
    assert tail.problem is not None and tail.problem.startswith(
        "airflow@p.iam.gserviceaccount.com may not read gs://locked/out/4.err: it needs storage.objects.get on bucket locked"
    )


def test_a_file_that_appears_late_is_waited_for(tmp_path: Path) -> None:
    """Cloud Storage FUSE makes the object when the job closes the file: a little after the job ends."""
    import threading

    late = threading.Timer(0.6, lambda: (tmp_path / "late.out").write_text("done\n"))
    late.start()
    try:
        (tail,) = reader(tmp_path, wait=10.0).tails([OutputFile("6", "stdout", "/cluster/late.out")])
    finally:
        late.cancel()
    assert (tail.text, tail.problem) == ("done", None)


def test_job_lines_are_inert_cut_and_prefixed() -> None:
    text = "a\x1b[2Jb\rc\x08\x9b\u202e\td\r\n" + "x" * 4005 + "\n\u2028z"
    assert job_lines(text, "[job 1 stdout] ") == [
        "[job 1 stdout] a\\x1b[2Jb\\rc\\x08\\x9b\\u202e\td",  # a line's own CRLF ending is dropped, tabs stay
        "[job 1 stdout] " + "x" * 4000 + " [... 5 more characters not shown]",
        "[job 1 stdout] \\u2028z",
    ]
    assert visible("ok\nnext") == "ok\\nnext"  # for one-line values: paths, problems


def test_a_single_line_longer_than_the_read_keeps_its_end_with_a_note() -> None:
    assert last_lines(b"yyyy\n", lines=5, started_mid_file=True) == (
        "yyyy",
        "the first line shown is the end of a line longer than the 5 bytes read",
    )
    assert last_lines(b"a\rb\nc", lines=5, started_mid_file=False) == ("a\rb\nc", None)  # \r stays in its line
