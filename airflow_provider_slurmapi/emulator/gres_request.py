"""A job's generic resources (``tres_per_node``, ``tres_per_job``, ``tres_per_task``: ``gres/gpu:2``,
``gres/gpu:h100:2``), checked against its partition's node as slurmctld checks them at submission.

Errors, as Slurm 24.11 gives them (slurm_errno.h):

- a malformed entry, or one that is not ``gres/...``: 2115 ``ESLURM_INVALID_TRES``;
- a GRES no node of the cluster has (not in ``GresTypes``, e.g. GPUs on a cluster without any):
  2072 ``ESLURM_INVALID_GRES`` (gres.c ``_get_next_gres``);
- more than the partition's node has, of a type it lacks, or GPUs in a partition without them:
  2014 ``ESLURM_REQUESTED_NODE_CONFIG_UNAVAILABLE``: no node of the partition could ever run it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from airflow_provider_slurmapi.emulator.slurm_conf import Gres, Partition, SlurmConf, Tres

REQUEST_FIELDS = ("tres_per_node", "tres_per_job", "tres_per_task")
INVALID_TRES = (2115, "Invalid Trackable RESource (TRES) specification")
INVALID_GRES = (2072, "Invalid generic resource (gres) specification")
NODE_CONFIG_UNAVAILABLE = (2014, "Requested node configuration is not available")


class GresRefused(Exception):
    """slurmctld refuses the job's GRES: its error number and text."""

    def __init__(self, error: tuple[int, str]) -> None:
        super().__init__(error[1])
        self.number, self.error = error


@dataclass(frozen=True)
class GresAllocation:
    """What the job asked for and got on its node."""

    requested: tuple[tuple[str, str], ...]  # the request fields as given: (("tres_per_node", "gres/gpu:2"),)
    gres: tuple[Gres, ...]  # what it got on the node, each with the node's type: gpu:h100:2
    tres: tuple[tuple[Tres, int], ...]  # their tracked TRES: gres/gpu, and gres/gpu:h100 if asked by type

    def request(self, key: str) -> str:
        """One of ``REQUEST_FIELDS`` as the job gave it, "" if not."""
        return dict(self.requested).get(key, "")

    @property
    def gpus(self) -> int:
        return sum(item.count for item in self.gres if item.name == "gpu")


NO_GRES = GresAllocation((), (), ())


def _parse_entry(item: str) -> Gres:
    """``gres/gpu``, ``gres/gpu:2``, ``gres/gpu:h100:2`` or ``gres/gpu=2`` (slurm_get_next_tres)."""
    if not item.startswith("gres/"):
        raise GresRefused(INVALID_TRES)
    name, count = item.removeprefix("gres/"), 1
    if "=" in name:
        name, _, text = name.rpartition("=")
        if not text.isdigit():
            raise GresRefused(INVALID_TRES)
        count = int(text)
    elif ":" in name:
        head, _, last = name.rpartition(":")
        if not last:
            raise GresRefused(INVALID_TRES)
        if last.isdigit():  # else a type, with a count of 1
            name, count = head, int(last)
    name, _, kind = name.partition(":")
    if not name:
        raise GresRefused(INVALID_TRES)
    return Gres(name, kind, count)


def _requests(desc: dict[str, Any], tasks: int) -> tuple[tuple[tuple[str, str], ...], dict[tuple[str, str], int]]:
    """The request fields given, and what they ask of the one node, by (name, type): per job and per
    node the count; per task the count times the tasks."""
    requested: list[tuple[str, str]] = []
    demand: dict[tuple[str, str], int] = {}
    for key in REQUEST_FIELDS:
        text = desc.get(key)
        if not isinstance(text, str) or not text:
            continue
        requested.append((key, text))
        for item in filter(None, text.split(",")):
            gres = _parse_entry(item.strip())
            if gres.count == 0:  # Slurm drops a GRES asked with a count of 0
                continue
            wanted = gres.count * (tasks if key == "tres_per_task" else 1)
            demand[(gres.name, gres.type)] = max(demand.get((gres.name, gres.type), 0), wanted)
    return tuple(requested), demand


def allocate(desc: dict[str, Any], partition: Partition, conf: SlurmConf, tasks: int) -> GresAllocation:
    """The GRES ``desc`` asks for, taken from ``partition``'s node; raises ``GresRefused``."""
    requested, demand = _requests(desc, tasks)
    if not demand:
        return GresAllocation(requested, (), ())
    if any(name not in conf.gres_names for name, _ in demand):
        raise GresRefused(INVALID_GRES)
    got: list[Gres] = []
    accounted: list[Gres] = []
    for (name, kind), count in demand.items():
        left = count
        for node_gres in partition.gres:
            if left and node_gres.name == name and kind in ("", node_gres.type):
                take = min(left, node_gres.count)
                got.append(Gres(name, node_gres.type, take))
                left -= take
        if left:
            raise GresRefused(NODE_CONFIG_UNAVAILABLE)
        accounted.append(Gres(name, kind, count))  # a typed TRES counts only a request by type
    return GresAllocation(requested, tuple(got), tuple(conf.gres_tres(accounted)))
