"""The replies that describe the emulated cluster: ``/slurm/V/partitions/``, ``/partition/{name}``,
``/nodes/``, ``/node/{name}`` and ``/slurmdb/V/tres/``, shaped as slurmrestd 24.11's.

Built from v0.0.42's OpenAPI schemas (``v0.0.42_openapi_partition_resp``, ``..._nodes_resp``,
``..._tres_resp``) and the data parser's dump rules; each object carries the fields a client reads
about a partition, a node or a TRES, with the names and value types of the real replies.
"""

from __future__ import annotations

import platform
from typing import Any

from airflow_provider_slurmapi.emulator import replies
from airflow_provider_slurmapi.emulator.backend_api import SlurmAnswer
from airflow_provider_slurmapi.emulator.job_model import Job, State, format_ranges
from airflow_provider_slurmapi.emulator.replies import number
from airflow_provider_slurmapi.emulator.slurm_conf import NODE_CPUS, NODE_MEMORY_MB, Gres, Partition, SlurmConf

SLURM_VERSION = "24.11.5"
SLURMD_PORT = 6818


def _infinite() -> dict[str, Any]:
    return number(0, is_set=False, infinite=True)


def _unset() -> dict[str, Any]:  # NO_VAL: "GLOBAL" or not set
    return number(0, is_set=False)


# A cluster without slurmdbd (no AccountingStorageType), not one whose slurmdbd is down (that is
# outages.py's 502, error 7000): slurmrestd's openapi/slurmdbd plugin then refuses to load, so no
# /slurmdb path exists and each answers as an unknown URL does (404 text/plain, unknown_path.txt)
NO_SLURMDBD: SlurmAnswer = (404, "Unable find requested URL. Please view /openapi/v3 for API reference.")


def _tres_string(conf: SlurmConf, partition: Partition, *, nodes: int | None) -> str:
    """``cpu=2,mem=21694M,node=1,billing=2,gres/gpu=8``: a partition's (with ``node``) or a node's."""
    parts = [f"cpu={NODE_CPUS}", f"mem={NODE_MEMORY_MB}M"]
    parts += [f"node={nodes}"] if nodes is not None else []
    parts += [f"billing={NODE_CPUS}"]
    parts += [f"{tres.key}={count}" for tres, count in conf.gres_tres(partition.gres)]
    return ",".join(parts)


def partition_info(conf: SlurmConf, partition: Partition) -> dict[str, Any]:
    """One partition as ``Nodes=nodeN MaxTime=INFINITE State=UP`` defines it (slurmrestd 24.11 does
    not show which one is ``Default=YES``: its parser skips the partition's flags)."""
    return {
        "nodes": {"allowed_allocation": "", "configured": partition.node, "total": 1},
        "accounts": {"allowed": "", "deny": ""},
        "groups": {"allowed": ""},
        "qos": {"allowed": "", "deny": "", "assigned": ""},
        "alternate": "",
        "tres": {"billing_weights": "", "configured": _tres_string(conf, partition, nodes=1)},
        "cluster": "",
        "cpus": {"task_binding": 0, "total": NODE_CPUS},
        "defaults": {"memory_per_cpu": 0, "time": _unset(), "job": ""},
        "grace_time": 0,
        "maximums": {
            "cpus_per_node": _infinite(),
            "cpus_per_socket": _infinite(),
            "memory_per_cpu": 0,
            "nodes": _infinite(),
            "shares": 1,
            "oversubscribe": {"jobs": 1, "flags": []},
            "time": _infinite(),
            "over_time_limit": _unset(),
        },
        "minimums": {"nodes": 0},
        "name": partition.name,
        "node_sets": "",
        "priority": {"job_factor": 1, "tier": 1},
        "timeouts": {"resume": _unset(), "suspend": _unset()},
        "partition": {"state": ["UP"]},
        "suspend_time": _unset(),
    }


def node_info(conf: SlurmConf, partition: Partition, running: list[Job], booted: int) -> dict[str, Any]:
    """The partition's node, busy with ``running`` (its jobs that run now)."""
    cpus = min(NODE_CPUS, sum(job.cpus for job in running))
    state = "IDLE" if not running else "ALLOCATED" if cpus >= NODE_CPUS else "MIXED"
    return {
        "architecture": platform.machine(),
        "boards": 1,
        "boot_time": number(booted),
        "cores": 1,
        "cpu_binding": 0,
        "cpus": NODE_CPUS,
        "effective_cpus": NODE_CPUS,
        "features": [],
        "active_features": [],
        "gres": partition.gres_text,
        "gres_drained": "N/A",
        "gres_used": _gres_used(partition, running),
        "last_busy": number(booted),
        "name": partition.node,
        "address": "127.0.0.1",
        "hostname": partition.node,
        "state": [state],
        "operating_system": f"{platform.system()} {platform.release()}",
        "owner": "",
        "partitions": [partition.name],
        "port": SLURMD_PORT,
        "real_memory": NODE_MEMORY_MB,
        "comment": "",
        "reason": "",
        "reservation": "",
        "alloc_memory": 0,  # SelectTypeParameters=CR_Core: memory is not a consumable resource
        "alloc_cpus": cpus,
        "alloc_idle_cpus": NODE_CPUS - cpus,
        "tres_used": _tres_used(conf, cpus, running),
        "slurmd_start_time": number(booted),
        "sockets": NODE_CPUS,
        "threads": 1,
        "temporary_disk": 0,
        "weight": 1,
        "tres": _tres_string(conf, partition, nodes=None),
        "version": SLURM_VERSION,
    }


def _gres_used(partition: Partition, running: list[Job]) -> str:
    """``gpu:h100:2(IDX:0-1)``, or ``gpu:h100:0(IDX:N/A)`` when none is in use."""
    used = []
    for gres in partition.gres:
        taken = sum(g.count for job in running for g in job.gres.gres if (g.name, g.type) == (gres.name, gres.type))
        count = min(gres.count, taken)
        devices = format_ranges(list(range(count))) if count else "N/A"
        used.append(f"{Gres(gres.name, gres.type, count)}(IDX:{devices})")
    return ",".join(used)


def _tres_used(conf: SlurmConf, cpus: int, running: list[Job]) -> str:
    if not running:
        return ""
    gres = [(tres.key, count) for job in running for tres, count in job.gres.tres]
    totals: dict[str, int] = {}
    for key, count in gres:
        totals[key] = totals.get(key, 0) + count
    return ",".join([f"cpu={cpus}", *(f"{key}={count}" for key, count in totals.items())])


class ClusterView:
    """Answers the cluster's description routes for one backend: ``conf`` and its jobs."""

    def __init__(self, conf: SlurmConf, cluster: str, booted: int) -> None:
        self.conf, self.cluster, self.booted = conf, cluster, booted

    def partitions(self, version: str, name: str | None) -> SlurmAnswer:
        """All partitions, or the one named (case-insensitively, as slurmrestd compares)."""
        found = [p for p in self.conf.partitions if name is None or p.name.lower() == name.lower()]
        if name is not None and not found:
            error = replies.error(9000, replies.PARSE_ERROR, f"Unable to find partition {name}", "op_handler_partition")
            return 422, replies.envelope("slurmctld", version, self.cluster, {}, errors=[error])
        fields = {
            "partitions": [partition_info(self.conf, p) for p in found],
            "last_update": number(self.booted),
        }
        return 200, replies.envelope("slurmctld", version, self.cluster, fields)

    def nodes(self, version: str, name: str | None, jobs: list[Job]) -> SlurmAnswer:
        """All nodes, or the one named; an unknown node is no error to slurmctld, only an empty
        answer, which slurmrestd reports with error number 0."""
        found = [p for p in self.conf.partitions if name is None or p.node == name]
        if name is not None and not found:
            error = replies.error(0, "No error", f"Failure to query node {name}", "_dump_nodes")
            return 200, replies.envelope("slurmctld", version, self.cluster, {}, errors=[error])
        running = [job for job in jobs if job.state is State.RUNNING]
        fields = {
            "nodes": [
                node_info(self.conf, p, [job for job in running if job.node == p.node], self.booted) for p in found
            ],
            "last_update": number(max([self.booted, *(job.last_change for job in running)])),
        }
        return 200, replies.envelope("slurmctld", version, self.cluster, fields)

    def tres(self, version: str) -> SlurmAnswer:
        """What accounting tracks; slurmdbd keeps no count for a TRES of its list (0)."""
        fields = {"TRES": [tres.record(0) for tres in self.conf.tres]}
        return 200, replies.envelope("slurmdbd", version, self.cluster, fields)
