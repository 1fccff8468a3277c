"""``SlurmConf``: what the emulated cluster's slurm.conf says about its partitions, their nodes'
generic resources (GRES) and its accounting, as the emulator's options set it.

Each partition has a node of its own (``node1``, ``node2``... in the order given), sized like the
one node of the real Slurm the replies were captured from. The first partition is the default one
(``Default=YES``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

DEFAULT_PARTITION = "debug"
NODE_CPUS = 2  # the captured cluster's node: CPUs=2 (two sockets of one core), RealMemory=21694
NODE_MEMORY_MB = 21694

_PARTITION_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")
_GRES_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]*$")
_GRES_TYPE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")
_SPEC_FORM = (
    "NAME or NAME:GRES, GRES being Slurm's node Gres (name[:type][:count], several comma-separated), e.g. a3:gpu:h100:8"
)


@dataclass(frozen=True)
class Gres:
    """One generic resource of a node, or of a job's allocation: ``gpu:h100:8``, ``gpu:2``."""

    name: str
    type: str
    count: int

    def __str__(self) -> str:
        return ":".join(part for part in (self.name, self.type, str(self.count)) if part)


def parse_gres(text: str) -> tuple[Gres, ...]:
    """A node's ``Gres=`` value (``gpu:h100:8,nic:2``); raises ValueError saying what is wrong."""
    found = []
    for item in text.split(","):
        parts = item.strip().split(":")
        if not parts[0]:
            raise ValueError(f"{item.strip()!r} has no GRES name")
        count = 1
        if len(parts) > 1 and parts[-1].isdigit():
            count = int(parts.pop())
        if len(parts) > 2 or count < 1:
            raise ValueError(f"{item.strip()!r} is not name[:type][:count] with a count of 1 or more")
        name, kind = parts[0], parts[1] if len(parts) == 2 else ""
        if not _GRES_NAME.match(name) or (kind and not _GRES_TYPE.match(kind)):
            raise ValueError(f"{item.strip()!r} has a GRES name or type Slurm does not take")
        found.append(Gres(name, kind, count))
    return tuple(found)


@dataclass(frozen=True)
class Partition:
    """A partition and its one node."""

    name: str
    node: str
    gres: tuple[Gres, ...] = ()

    @property
    def gres_text(self) -> str:
        """The node's Gres as slurmctld prints it (``gpu:h100:8``), "" without any."""
        return ",".join(str(gres) for gres in self.gres)


def parse_partition(spec: str, node: str) -> Partition:
    """``--partition``'s ``NAME`` or ``NAME:GRES``; raises ValueError naming the option and its form."""
    name, sep, gres_text = spec.strip().partition(":")
    try:
        if not _PARTITION_NAME.match(name):
            raise ValueError("the partition name may hold only letters, digits, _ . and -")
        if sep and not gres_text:
            raise ValueError("nothing follows the ':'")
        gres = parse_gres(gres_text) if sep else ()
    except ValueError as exc:
        raise ValueError(f"--partition {spec!r}: {exc}; allowed: {_SPEC_FORM}") from None
    return Partition(name, node, gres)


@dataclass(frozen=True)
class Tres:
    """A trackable resource as accounting lists it: ``cpu`` (id 1), ``gres/gpu`` (1001)..."""

    type: str
    name: str
    id: int

    @property
    def key(self) -> str:
        """How TRES strings name it: ``cpu``, ``fs/disk``, ``gres/gpu:h100``."""
        return f"{self.type}/{self.name}" if self.name else self.type

    def record(self, count: int) -> dict[str, Any]:
        return {"type": self.type, "name": self.name, "id": self.id, "count": count}


# the TRES slurmdbd always has, by id (slurmdb_defs.h TRES_CPU..TRES_PAGES)
_STATIC_TRES = (
    Tres("cpu", "", 1),
    Tres("mem", "", 2),
    Tres("energy", "", 3),
    Tres("node", "", 4),
    Tres("billing", "", 5),
    Tres("fs", "disk", 6),
    Tres("vmem", "", 7),
    Tres("pages", "", 8),
)
_FIRST_DYNAMIC_TRES = 1001  # ids slurmdbd gives the TRES a cluster adds, in the order it adds them


@dataclass(frozen=True)
class SlurmConf:
    """The partitions, and the accounting settings a test may change.

    ``private_data``: ``PrivateData=jobs``. ``gpu_accounting``: ``AccountingStorageTRES`` lists
    ``gres/gpu`` and each GPU type of the nodes (``gres/gpu:h100``), when some node has GPUs.
    ``accounting``: slurmdbd (``AccountingStorageType=accounting_storage/slurmdbd``) is set up.
    """

    partitions: tuple[Partition, ...] = (Partition(DEFAULT_PARTITION, "node1"),)
    private_data: bool = False
    gpu_accounting: bool = True
    accounting: bool = True
    _by_name: dict[str, Partition] = field(init=False, repr=False, compare=False, default_factory=dict)

    def __post_init__(self) -> None:
        if not self.partitions:
            raise ValueError("--partition: the cluster needs at least one partition")
        for partition in self.partitions:
            if partition.name in self._by_name:
                raise ValueError(f"--partition: partition {partition.name!r} is given twice")
            self._by_name[partition.name] = partition

    @classmethod
    def from_specs(cls, specs: Iterable[str], **settings: bool) -> SlurmConf:
        """From ``--partition`` specs, in order; each partition's node is ``node1``, ``node2``..."""
        partitions = tuple(parse_partition(spec, f"node{index}") for index, spec in enumerate(specs, start=1))
        return cls(partitions, **settings)

    @property
    def default_partition(self) -> Partition:
        return self.partitions[0]

    def partition(self, name: str) -> Partition | None:
        return self._by_name.get(name)

    @cached_property
    def gres_names(self) -> frozenset[str]:
        """Slurm's ``GresTypes``: the GRES some node has; a job may ask only for these."""
        return frozenset(gres.name for partition in self.partitions for gres in partition.gres)

    @cached_property
    def tres(self) -> tuple[Tres, ...]:
        """What accounting tracks, by id. Tracking gres/gpu also adds gres/gpumem and
        gres/gpuutil (read_config.c), after the types."""
        if not self.gpu_accounting or "gpu" not in self.gres_names:
            return _STATIC_TRES
        types = dict.fromkeys(
            f"gpu:{gres.type}" for p in self.partitions for gres in p.gres if gres.name == "gpu" and gres.type
        )
        names = ["gpu", *types, "gpumem", "gpuutil"]
        return _STATIC_TRES + tuple(Tres("gres", name, _FIRST_DYNAMIC_TRES + i) for i, name in enumerate(names))

    def tracked(self, key: str) -> Tres | None:
        """The TRES accounting tracks as ``key`` (``gres/gpu:h100``), or None."""
        return next((tres for tres in self.tres if tres.key == key), None)

    def gres_tres(self, gres: Iterable[Gres]) -> list[tuple[Tres, int]]:
        """The tracked TRES of GRES a node has or a job got: ``gres/gpu`` counts them all, and
        ``gres/gpu:TYPE`` those of its type."""
        counts: dict[str, int] = {}
        for item in gres:
            counts[f"gres/{item.name}"] = counts.get(f"gres/{item.name}", 0) + item.count
            if item.type:
                typed = f"gres/{item.name}:{item.type}"
                counts[typed] = counts.get(typed, 0) + item.count
        found = [(self.tracked(key), count) for key, count in counts.items()]
        return sorted(((tres, count) for tres, count in found if tres is not None), key=lambda pair: pair[0].id)

    def describe(self) -> list[str]:
        """The banner's lines about the cluster."""
        parts = []
        for partition in self.partitions:
            notes = ["default"] if partition is self.default_partition else []
            notes += [partition.gres_text] if partition.gres else []
            parts.append(f"{partition.name} ({', '.join(notes)})" if notes else partition.name)
        lines = [f"Partitions: {', '.join(parts)}"]
        settings = ["PrivateData=jobs"] if self.private_data else []
        if not self.accounting:
            settings.append("no accounting (no slurmdbd)")
        elif not self.gpu_accounting:
            settings.append("accounting does not track gres/gpu")
        if settings:
            lines.append(f"Slurm: {', '.join(settings)}")
        return lines
