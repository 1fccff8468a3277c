"""The built-in cluster's slurm.conf as options: partitions with GPUs, PrivateData=jobs, GPU
accounting, no accounting; the routes that describe the cluster, checked against slurmrestd
24.11.5's own OpenAPI schemas; GPU jobs accepted and refused as slurmctld does."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from emulator_testkit import FIXTURES, Api

from airflow_provider_slurmapi.client.usage import JobUsage
from airflow_provider_slurmapi.emulator import Emulator, EmulatorConfig
from airflow_provider_slurmapi.emulator.cli import config_from_args, describe

GPU_PARTITIONS = ("a3:gpu:h100:8", "debug")
SUBMIT = "/slurm/v0.0.42/job/submit"
SCHEMAS = FIXTURES.parent / "slurm-24.11.5-openapi-v0.0.42-cluster.json"


def _strict(node: Any) -> Any:
    """The schemas, refusing any property they do not name: no invented field passes."""
    if isinstance(node, dict):
        node = {key: _strict(value) for key, value in node.items()}
        if "properties" in node and "additionalProperties" not in node:
            node["additionalProperties"] = False
        return node
    return [_strict(item) for item in node] if isinstance(node, list) else node


@cache
def _components() -> dict[str, Any]:
    return {"components": _strict(json.loads(SCHEMAS.read_text())["components"])}


def assert_schema(reply: dict[str, Any], name: str) -> None:
    schema = {"$ref": f"#/components/schemas/{name}", **copy.deepcopy(_components())}
    errors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(reply), key=lambda e: list(e.path))
    assert not errors, [f"{list(e.path)}: {e.message}" for e in errors[:5]]


def test_the_strict_schema_can_fail() -> None:
    reply: dict[str, Any] = {"TRES": [{"type": "cpu", "name": "", "id": 1, "count": 0}], "meta": {}}
    assert_schema({**reply, "errors": [], "warnings": []}, "v0.0.42_openapi_tres_resp")
    broken: list[dict[str, Any]] = [{**reply, "invented": 1}, {**reply, "TRES": [{"type": "cpu", "id": "1"}]}, {}]
    for bad in broken:
        with pytest.raises(AssertionError):
            assert_schema(bad, "v0.0.42_openapi_tres_resp")


def _start(tmp_path_factory: pytest.TempPathFactory, **settings: Any) -> Iterator[Emulator]:
    config = EmulatorConfig(
        sched_delay=0.1, min_job_age=30, state_dir=tmp_path_factory.mktemp("emu-cluster"), **settings
    )
    with Emulator(config) as emulator:
        yield emulator


@pytest.fixture(scope="module")
def gpu(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Emulator]:
    yield from _start(tmp_path_factory, partitions=GPU_PARTITIONS)


@pytest.fixture(scope="module")
def gpu_api(gpu: Emulator) -> Api:
    return Api(gpu)


def _job(cwd: Path, script: str = "#!/bin/sh\ntrue\n", **desc: Any) -> dict[str, Any]:
    job = {"name": "t", "environment": ["PATH=/bin:/usr/bin"], "current_working_directory": str(cwd), **desc}
    return {"job": job, "script": script}


def _refusal(api: Api, cwd: Path, **desc: Any) -> tuple[int, str]:
    status, reply = api.call("POST", SUBMIT, _job(cwd, **desc))
    assert status == 500 and "job_id" not in reply, reply
    [error] = reply["errors"]
    assert (error["description"], error["source"]) == ("Batch job submission failed", "slurm_submit_batch_job()")
    return error["error_number"], error["error"]


# --- options ---


def test_options_default_to_one_debug_partition_with_accounting() -> None:
    config = config_from_args([])
    assert config.partitions == ("debug",)
    assert (config.private_data, config.gpu_accounting, config.accounting) == (False, True, True)
    assert [(p.name, p.node, p.gres) for p in config.slurm_conf().partitions] == [("debug", "node1", ())]


def test_options_set_partitions_and_the_accounting_settings() -> None:
    config = config_from_args(
        ["--partition", "a3:gpu:h100:8,nic:2", "--partition", "debug", "--private-data", "--no-gpu-accounting"]
        + ["--no-accounting"]
    )
    assert config.partitions == ("a3:gpu:h100:8,nic:2", "debug")
    assert (config.private_data, config.gpu_accounting, config.accounting) == (True, False, False)
    conf = config.slurm_conf()
    assert [(p.name, p.node, p.gres_text) for p in conf.partitions] == [
        ("a3", "node1", "gpu:h100:8,nic:2"),
        ("debug", "node2", ""),
    ]
    assert conf.default_partition.name == "a3"


def test_every_option_is_also_an_environment_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    # space-separated: one partition's GRES may hold commas
    monkeypatch.setenv("SLURM_JOB_API_EMULATOR_PARTITION", "a3:gpu:h100:8,nic:2  debug")
    for name in ("PRIVATE_DATA", "NO_GPU_ACCOUNTING", "NO_ACCOUNTING"):
        monkeypatch.setenv(f"SLURM_JOB_API_EMULATOR_{name}", "1")
    config = config_from_args([])
    assert config.partitions == ("a3:gpu:h100:8,nic:2", "debug")
    assert (config.private_data, config.gpu_accounting, config.accounting) == (True, False, False)
    assert config_from_args(["--partition", "b"]).partitions == ("b",)  # options win


@pytest.mark.parametrize(
    ("spec", "why"),
    [
        ("a3:", "nothing follows the ':'"),
        ("a 3", "the partition name may hold only"),
        ("a3:gpu:h100:0", "a count of 1 or more"),
        ("a3:gpu:h100:8:2", "is not name[:type][:count]"),
        ("a3::8", "has no GRES name"),
    ],
)
def test_a_bad_partition_is_refused_naming_the_option_and_its_form(
    spec: str, why: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(ValueError, match="--partition") as refused:
        EmulatorConfig(partitions=(spec,))
    assert why in str(refused.value) and "allowed: NAME or NAME:GRES" in str(refused.value)
    with pytest.raises(SystemExit):
        config_from_args(["--partition", spec])
    assert f"--partition {spec!r}" in capsys.readouterr().err


def test_a_partition_given_twice_or_none_is_refused() -> None:
    with pytest.raises(ValueError, match="partition 'debug' is given twice"):
        EmulatorConfig(partitions=("debug", "debug:gpu:1"))
    with pytest.raises(ValueError, match="at least one partition"):
        EmulatorConfig(partitions=())
    one = EmulatorConfig(partitions="a3:gpu:h100:8")  # type: ignore[arg-type]  # a str is one spec, not letters
    assert one.partitions == ("a3:gpu:h100:8",)


def test_the_banner_names_the_partitions_and_the_settings(gpu: Emulator) -> None:
    lines = describe(gpu)
    assert "Partitions: a3 (default, gpu:h100:8), debug" in lines
    assert not any(line.startswith("Slurm: ") for line in lines)  # nothing changed from a usual cluster
    restricted = EmulatorConfig(private_data=True, accounting=False).slurm_conf().describe()
    assert restricted == ["Partitions: debug (default)", "Slurm: PrivateData=jobs, no accounting (no slurmdbd)"]


# --- the routes that describe the cluster ---


def test_partitions_as_slurmrestd_lists_them(gpu_api: Api) -> None:
    status, reply = gpu_api.call("GET", "/slurm/v0.0.42/partitions/")
    assert status == 200 and reply["errors"] == [], reply
    assert_schema(reply, "v0.0.42_openapi_partition_resp")
    a3, debug = reply["partitions"]
    assert (a3["name"], a3["nodes"]["configured"], a3["nodes"]["total"]) == ("a3", "node1", 1)
    assert a3["tres"]["configured"] == "cpu=2,mem=21694M,node=1,billing=2,gres/gpu=8,gres/gpu:h100=8"
    assert debug["tres"]["configured"] == "cpu=2,mem=21694M,node=1,billing=2"
    assert a3["partition"]["state"] == ["UP"] and a3["maximums"]["time"] == {
        "set": False,
        "infinite": True,
        "number": 0,
    }
    assert reply["last_update"]["set"] and reply["last_update"]["number"] > 0
    status, one = gpu_api.call("GET", "/slurm/v0.0.42/partition/debug")
    assert status == 200 and [p["name"] for p in one["partitions"]] == ["debug"]
    assert_schema(one, "v0.0.42_openapi_partition_resp")


def test_an_unknown_partition_is_refused_as_slurmrestd_does(gpu_api: Api) -> None:
    status, reply = gpu_api.call("GET", "/slurm/v0.0.42/partition/nosuch")
    assert status == 422 and "partitions" not in reply
    assert reply["errors"] == [
        {
            "description": "Unable to find partition nosuch",
            "error_number": 9000,
            "error": "Query empty or not RFC7320 compliant",
            "source": "op_handler_partition",
        }
    ]


def test_nodes_one_per_partition_with_its_gres(gpu_api: Api) -> None:
    status, reply = gpu_api.call("GET", "/slurm/v0.0.42/nodes/")
    assert status == 200 and reply["errors"] == [], reply
    assert_schema(reply, "v0.0.42_openapi_nodes_resp")
    summary = [(n["name"], n["partitions"], n["gres"], n["cpus"], n["real_memory"]) for n in reply["nodes"]]
    assert summary == [("node1", ["a3"], "gpu:h100:8", 2, 21694), ("node2", ["debug"], "", 2, 21694)]
    assert reply["nodes"][0]["tres"] == "cpu=2,mem=21694M,billing=2,gres/gpu=8,gres/gpu:h100=8"
    status, one = gpu_api.call("GET", "/slurm/v0.0.42/node/node2")
    assert status == 200 and [n["name"] for n in one["nodes"]] == ["node2"]
    # slurmctld answers an unknown node with no node, which slurmrestd reports as error 0
    status, unknown = gpu_api.call("GET", "/slurm/v0.0.42/node/node9")
    assert status == 200 and "nodes" not in unknown
    assert [(e["error_number"], e["description"]) for e in unknown["errors"]] == [(0, "Failure to query node node9")]


def test_tres_as_accounting_lists_them(gpu_api: Api) -> None:
    status, reply = gpu_api.call("GET", "/slurmdb/v0.0.42/tres/")
    assert status == 200 and reply["errors"] == [], reply
    assert_schema(reply, "v0.0.42_openapi_tres_resp")
    listed = [(t["type"], t["name"], t["id"]) for t in reply["TRES"]]
    assert listed[:8] == [
        ("cpu", "", 1),
        ("mem", "", 2),
        ("energy", "", 3),
        ("node", "", 4),
        ("billing", "", 5),
        ("fs", "disk", 6),
        ("vmem", "", 7),
        ("pages", "", 8),
    ]
    # AccountingStorageTRES=gres/gpu,gres/gpu:h100; tracking gres/gpu adds gpumem and gpuutil
    assert listed[8:] == [("gres", "gpu", 1001), ("gres", "gpu:h100", 1002), ("gres", "gpumem", 1003)] + [
        ("gres", "gpuutil", 1004)
    ]
    assert {t["count"] for t in reply["TRES"]} == {0}


def test_without_gpus_accounting_tracks_no_gres(api: Api) -> None:
    status, reply = api.call("GET", "/slurmdb/v0.0.42/tres/")
    assert status == 200 and [t["type"] for t in reply["TRES"]].count("gres") == 0
    status, nodes = api.call("GET", "/slurm/v0.0.42/nodes")
    assert [(n["name"], n["partitions"], n["gres"]) for n in nodes["nodes"]] == [("node1", ["debug"], "")]


# --- GPU jobs ---


def test_a_gpu_job_gets_its_gpus_their_environment_and_accounting(gpu_api: Api, workdir: Path) -> None:
    script = "#!/bin/sh\necho $CUDA_VISIBLE_DEVICES/$SLURM_GPUS_ON_NODE/$SLURM_JOB_GPUS\nsleep 1.5\n"
    job_id = gpu_api.submit(
        script, current_working_directory=str(workdir), partition="a3", tres_per_node="gres/gpu:h100:2"
    )
    running = gpu_api.wait(job_id, {"RUNNING"})
    nodes = gpu_api.call("GET", "/slurm/v0.0.42/node/node1")[1]["nodes"]
    assert (nodes[0]["state"], nodes[0]["gres_used"]) == (["MIXED"], "gpu:h100:2(IDX:0-1)")
    assert nodes[0]["tres_used"] == "cpu=1,gres/gpu=2,gres/gpu:h100=2"
    live = gpu_api.wait(job_id)
    assert live["job_state"] == ["COMPLETED"] and running["nodes"] == live["nodes"] == live["batch_host"] == "node1"
    assert live["tres_per_node"] == "gres/gpu:h100:2" and live["gres_detail"] == ["gpu:h100:2(IDX:0-1)"]
    assert live["tres_alloc_str"] == "cpu=1,node=1,billing=1,gres/gpu=2,gres/gpu:h100=2"
    assert (workdir / f"slurm-{job_id}.out").read_text() == "0,1/2/0,1\n"
    record = gpu_api.db_job(job_id)
    gres = [(t["name"], t["id"], t["count"]) for t in record["tres"]["allocated"] if t["type"] == "gres"]
    assert gres == [("gpu", 1001, 2), ("gpu:h100", 1002, 2)] and record["nodes"] == "node1"
    usage = JobUsage.from_accounting(str(job_id), [record])
    assert usage is not None and usage.gpus == 2 and usage.tres["gres/gpu:h100"] == 2
    assert usage.gpu_hours == round(2 * record["time"]["elapsed"] / 3600, 4)


def test_gpus_without_a_type_per_job_or_per_task(gpu_api: Api, workdir: Path) -> None:
    cwd = str(workdir)
    any_type = gpu_api.submit(
        "#!/bin/sh\ntrue\n", current_working_directory=cwd, partition="a3", tres_per_job="gres/gpu:3"
    )
    per_task = gpu_api.submit(
        "#!/bin/sh\ntrue\n", current_working_directory=cwd, partition="a3", tasks=4, tres_per_task="gres/gpu:2"
    )
    for job_id, gpus in ((any_type, 3), (per_task, 8)):
        live = gpu_api.wait(job_id)
        assert live["gres_detail"] == [f"gpu:h100:{gpus}(IDX:0-{gpus - 1})"], live
        tres = gpu_api.db_job(job_id)["tres"]["allocated"]
        # a typed TRES counts only GPUs asked for by their type
        assert [(t["name"], t["count"]) for t in tres if t["type"] == "gres"] == [("gpu", gpus)]


def test_a_job_in_another_partition_runs_on_that_partitions_node(gpu_api: Api, workdir: Path) -> None:
    job_id = gpu_api.submit("#!/bin/sh\ntrue\n", current_working_directory=str(workdir), partition="debug")
    live = gpu_api.wait(job_id)
    assert (live["partition"], live["nodes"], live["tres_per_node"], live["gres_detail"]) == ("debug", "node2", "", [])
    assert "USING_DEFAULT_PARTITION" not in live["flags"]
    default = gpu_api.wait(gpu_api.submit("#!/bin/sh\ntrue\n", current_working_directory=str(workdir)))
    assert (default["partition"], default["nodes"]) == ("a3", "node1") and "USING_DEFAULT_PARTITION" in default["flags"]


@pytest.mark.parametrize(
    ("desc", "error"),
    [
        ({"partition": "a3", "tres_per_node": "gres/gpu:a100:1"}, 2014),  # a type its node lacks
        ({"partition": "a3", "tres_per_node": "gres/gpu:9"}, 2014),  # more than its node has
        ({"partition": "a3", "tasks": 2, "tres_per_task": "gres/gpu:h100:5"}, 2014),
        ({"partition": "debug", "tres_per_node": "gres/gpu:1"}, 2014),  # a partition without GPUs
        ({"partition": "a3", "tres_per_node": "gres/tpu:1"}, 2072),  # a GRES no node has
        ({"partition": "a3", "tres_per_node": "gpu:1"}, 2115),  # not a gres/ TRES
        ({"partition": "a3", "tres_per_node": "gres/gpu:"}, 2115),
        ({"partition": "nosuch", "tres_per_node": "gres/gpu:1"}, 2000),  # the partition is checked first
    ],
)
def test_gpu_requests_the_partition_cannot_meet_are_refused(
    gpu_api: Api, workdir: Path, desc: dict[str, Any], error: int
) -> None:
    texts = {
        2014: "Requested node configuration is not available",
        2072: "Invalid generic resource (gres) specification",
        2115: "Invalid Trackable RESource (TRES) specification",
        2000: "Invalid partition name specified",
    }
    before = len(gpu_api.call("GET", "/slurm/v0.0.42/jobs/")[1]["jobs"])
    assert _refusal(gpu_api, workdir, **desc) == (error, texts[error])
    assert len(gpu_api.call("GET", "/slurm/v0.0.42/jobs/")[1]["jobs"]) == before  # no job was created


def test_gpus_on_a_cluster_without_any_are_an_invalid_gres(api: Api, workdir: Path) -> None:
    # no node has GPUs: gpu is not among the cluster's GresTypes
    assert _refusal(api, workdir, tres_per_node="gres/gpu:1") == (2072, "Invalid generic resource (gres) specification")
    assert _refusal(api, workdir, partition="a3") == (2000, "Invalid partition name specified")


# --- accounting settings ---


@pytest.fixture(scope="module")
def untracked(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Emulator]:
    yield from _start(tmp_path_factory, partitions=GPU_PARTITIONS, gpu_accounting=False)


def test_without_gpu_accounting_no_gres_is_tracked(untracked: Emulator, workdir: Path) -> None:
    api = Api(untracked)
    tres = api.call("GET", "/slurmdb/v0.0.42/tres/")[1]["TRES"]
    assert [t["type"] for t in tres] == ["cpu", "mem", "energy", "node", "billing", "fs", "vmem", "pages"]
    partitions = api.call("GET", "/slurm/v0.0.42/partitions/")[1]["partitions"]
    assert partitions[0]["tres"]["configured"] == "cpu=2,mem=21694M,node=1,billing=2"
    assert api.call("GET", "/slurm/v0.0.42/node/node1")[1]["nodes"][0]["gres"] == "gpu:h100:8"  # still there
    job_id = api.submit(
        "#!/bin/sh\necho $CUDA_VISIBLE_DEVICES\n", current_working_directory=str(workdir), tres_per_node="gres/gpu:2"
    )
    live = api.wait(job_id)
    assert live["gres_detail"] == ["gpu:h100:2(IDX:0-1)"] and live["tres_alloc_str"] == "cpu=1,node=1,billing=1"
    assert (workdir / f"slurm-{job_id}.out").read_text() == "0,1\n"
    record = api.db_job(job_id)
    assert [t["type"] for t in record["tres"]["allocated"] + record["tres"]["requested"]].count("gres") == 0
    usage = JobUsage.from_accounting(str(job_id), [record])
    assert usage is not None and (usage.gpus, usage.gpu_hours) == (0, 0)


@pytest.fixture(scope="module")
def no_slurmdbd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Emulator]:
    yield from _start(tmp_path_factory, accounting=False)


@pytest.mark.parametrize(
    "path",
    ["/slurmdb/v0.0.42/job/1", "/slurmdb/v0.0.42/jobs", "/slurmdb/v0.0.42/jobs/?users=x", "/slurmdb/v0.0.42/tres/"],
)
def test_without_accounting_no_slurmdb_path_is_served(no_slurmdbd: Emulator, path: str) -> None:
    response = Api(no_slurmdbd).raw("GET", path)
    # slurmrestd loads no /slurmdb paths without slurmdbd: each is an unknown URL, as text/plain
    assert response.status_code == 200
    assert response.json() == {"status": 404, "body": (FIXTURES / "unknown_path.txt").read_text().strip()}


def test_without_accounting_the_live_queue_still_answers(no_slurmdbd: Emulator, workdir: Path) -> None:
    api = Api(no_slurmdbd)
    job_id = api.submit("#!/bin/sh\ntrue\n", current_working_directory=str(workdir))
    assert api.wait(job_id)["job_state"] == ["COMPLETED"]
    assert api.call("GET", "/slurm/v0.0.42/partitions/")[0] == 200


@pytest.fixture(scope="module")
def private(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Emulator]:
    yield from _start(tmp_path_factory, private_data=True)


def _visible_to(api: Api, job_id: int) -> dict[str, Any]:
    """Whether each read shows the job: live by id and in the list, accounting by id and in the list."""
    live_status, live = api.call("GET", f"/slurm/v0.0.42/job/{job_id}")
    db_status, db = api.call("GET", f"/slurmdb/v0.0.42/job/{job_id}")
    return {
        "job": (live_status, [j["job_id"] for j in live["jobs"]]),
        "jobs": job_id in [j["job_id"] for j in api.call("GET", "/slurm/v0.0.42/jobs/")[1]["jobs"]],
        "db job": (db_status, [j["job_id"] for j in db["jobs"]]),
        "db jobs": job_id in [j["job_id"] for j in api.call("GET", "/slurmdb/v0.0.42/jobs")[1]["jobs"]],
        # slurmctld does not filter job states by PrivateData
        "state": [j["job_id"] for j in api.call("GET", f"/slurm/v0.0.42/jobs/state/?job_id={job_id}")[1]["jobs"]],
    }


@pytest.mark.parametrize("private_data", [True, False])
def test_private_data_hides_other_users_jobs(
    private: Emulator, emu: Emulator, workdir: Path, private_data: bool
) -> None:
    cluster = private if private_data else emu
    owner = Api(cluster, cluster.issue_token("alice@example.iam.gserviceaccount.com"))
    other = Api(cluster, cluster.issue_token("bob@example.iam.gserviceaccount.com"))
    job_id = owner.submit("#!/bin/sh\ntrue\n", current_working_directory=str(workdir), hold=True)
    try:
        seen = {
            "job": (200, [job_id]),
            "jobs": True,
            "db job": (200, [job_id]),
            "db jobs": True,
            "state": [str(job_id)],
        }
        assert _visible_to(owner, job_id) == seen
        hidden = {"job": (404, []), "jobs": False, "db job": (200, []), "db jobs": False, "state": [str(job_id)]}
        assert _visible_to(other, job_id) == (hidden if private_data else seen)
        if private_data:  # another user's job reads exactly as a job that never existed
            assert other.call("GET", f"/slurm/v0.0.42/job/{job_id}")[1]["errors"] == [
                {**e, "description": f"Unable to query JobId={job_id}"}
                for e in other.call("GET", "/slurm/v0.0.42/job/999999")[1]["errors"]
            ]
            warnings = other.call("GET", f"/slurmdb/v0.0.42/job/{job_id}")[1]["warnings"]
            assert [w["source"] for w in warnings] == ["_dump_jobs"] and "found nothing" in warnings[0]["description"]
    finally:
        owner.call("DELETE", f"/slurm/v0.0.42/job/{job_id}")
