"""The fault kinds of a failing slurmrestd: ``slurmctld_unreachable`` plays back what real slurmrestd
24.11.5 answered with slurmctld (or slurmdbd) stopped, ``slurm_internal`` its own 500; both inside
Google's 200 envelope, and neither creates nor cancels a job."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from emulator_testkit import FIXTURES, Api, load_fixture
from test_emulator_faults import job_desc, submitted_names, sync_client

from airflow_provider_slurmapi.client.errors import SlurmError
from airflow_provider_slurmapi.emulator import FAULT_HEADER, Emulator, ScriptedFault
from tests.shapes import shape_diff

INDEX = {row.split("\t")[0]: row.split("\t") for row in (FIXTURES / "_index.tsv").read_text().splitlines()[1:]}


@pytest.fixture(autouse=True)
def no_faults(emu: Emulator) -> Iterator[None]:
    emu.faults.clear()
    yield
    emu.faults.clear()


@pytest.fixture(scope="module")
def job_id(api: Api, tmp_path_factory: pytest.TempPathFactory) -> int:
    job_id = api.submit("#!/bin/sh\ntrue\n", current_working_directory=str(tmp_path_factory.mktemp("outage")))
    api.wait(job_id)
    return job_id


def forced(api: Api, kind: str, method: str, path: str, body: object = None) -> tuple[int, dict]:
    payload: dict[str, object] = {"method": f"HTTP_METHOD_{method}", "path": path}
    if body is not None:
        payload["body"] = body
    response = api.session.post(api.url, json=payload, headers={FAULT_HEADER: kind}, timeout=10)
    assert response.status_code == 200, response.text  # Google's part of the call went well
    return response.json()["status"], response.json()["structuredBody"]


CAPTURED = [
    ("slurmctld_down_job_get.json", "GET", "/slurm/v0.0.42/job/{job}"),
    ("slurmctld_down_jobs_list.json", "GET", "/slurm/v0.0.42/jobs/"),
    ("slurmctld_down_jobs_update_time.json", "GET", "/slurm/v0.0.42/jobs/?update_time=1"),
    ("slurmctld_down_jobs_state.json", "GET", "/slurm/v0.0.42/jobs/state/?job_id={job}"),
    ("slurmctld_down_submit.json", "POST", "/slurm/v0.0.42/job/submit"),
    ("slurmctld_down_delete.json", "DELETE", "/slurm/v0.0.42/job/{job}"),
    ("slurmctld_down_ping.json", "GET", "/slurm/v0.0.42/ping"),
    ("slurmdbd_down_slurmdb_job.json", "GET", "/slurmdb/v0.0.42/job/{job}"),
    ("slurmdbd_down_slurmdb_jobs_by_name.json", "GET", "/slurmdb/v0.0.42/jobs/?job_name=t"),
]


@pytest.mark.parametrize(("fixture", "method", "path"), CAPTURED)
def test_slurmctld_unreachable_answers_as_the_real_slurmrestd(
    api: Api, job_id: int, workdir: Path, fixture: str, method: str, path: str
) -> None:
    captured, captured_job = load_fixture(fixture), INDEX[fixture][2].rsplit("/", 1)[-1]
    body = {"job": job_desc(workdir), "script": "#!/bin/sh\ntrue\n"} if method == "POST" else None
    status, reply = forced(api, "slurmctld_unreachable", method, path.format(job=job_id), body)
    assert status == int(INDEX[fixture][3])
    assert shape_diff(reply, captured) == []
    was, now = f"JobId={captured_job}", f"JobId={job_id}"
    expected = [{**e, "description": e["description"].replace(was, now)} for e in captured["errors"]]
    assert reply["errors"] == expected
    if "pings" in captured:
        assert [(p["pinged"], p["responding"]) for p in reply["pings"]] == [("DOWN", False)]


@pytest.mark.parametrize(("fixture", "method", "path"), CAPTURED[:6] + CAPTURED[7:])
def test_slurm_internal_is_a_500_with_slurms_errors(
    api: Api, job_id: int, workdir: Path, fixture: str, method: str, path: str
) -> None:
    body = {"job": job_desc(workdir), "script": "#!/bin/sh\ntrue\n"} if method == "POST" else None
    status, reply = forced(api, "slurm_internal", method, path.format(job=job_id), body)
    assert status == 500
    assert [(e["error_number"], e["error"]) for e in reply["errors"]] == [(-1, "Unspecified error")]
    assert shape_diff(reply, load_fixture(fixture)) == []


@pytest.mark.parametrize("kind", ["slurmctld_unreachable", "slurm_internal"])
def test_a_failed_submit_creates_no_job_and_a_failed_cancel_cancels_nothing(
    emu: Emulator, api: Api, workdir: Path, kind: str
) -> None:
    job = job_desc(workdir)
    emu.faults.script(ScriptedFault(kind, method="POST", path="job/submit$"))
    with pytest.raises(SlurmError):
        sync_client(emu).submit_job(job, "#!/bin/sh\ntrue\n")
    assert job["name"] not in submitted_names(api)

    running = api.submit("#!/bin/sh\nsleep 30\n", current_working_directory=str(workdir))
    emu.faults.script(ScriptedFault(kind, method="DELETE"))
    with pytest.raises(SlurmError):
        sync_client(emu).cancel_job(running)
    assert api.job(running)["job_state"][0] in ("PENDING", "RUNNING")
    api.call("DELETE", f"/slurm/v0.0.42/job/{running}")


@pytest.mark.parametrize("kind", ["slurmctld_unreachable", "slurm_internal"])
def test_the_clients_see_a_transient_slurm_error_on_a_read(emu: Emulator, job_id: int, kind: str) -> None:
    emu.faults.script(ScriptedFault(kind, method="GET"))
    with pytest.raises(SlurmError) as caught:
        sync_client(emu).get_job(job_id)
    assert caught.value.status in (500, 502) and caught.value.retryable
    assert sync_client(emu).get_job(job_id).state == "COMPLETED"  # the next call is answered
