"""What a finished job used, read from its accounting records (``/slurmdb/vX/job/{id}``)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


def _allocated(record: dict[str, Any]) -> dict[str, int]:
    """``tres.allocated`` (``[{type, name, id, count}]``) as ``{"cpu": 8, "mem": 1024, "gres/gpu": 2}``."""
    tres = record.get("tres")
    if not isinstance(tres, dict):
        return {}
    counts: dict[str, int] = {}
    for entry in tres.get("allocated") or []:
        if not isinstance(entry, dict) or not isinstance(entry.get("count"), int) or entry["count"] < 0:
            continue  # energy reads -2 when not measured
        name = f"{entry.get('type')}/{entry['name']}" if entry.get("name") else str(entry.get("type"))
        counts[name] = counts.get(name, 0) + entry["count"]
    return counts


@dataclass(frozen=True)
class JobUsage:
    """Elapsed time and allocated resources; for an array, the sums over its tasks."""

    job_id: str
    elapsed_seconds: int
    nodes: int
    cpus: int
    memory_mb: int | None  # None when accounting does not allocate memory as a TRES
    gpus: int
    gpu_hours: float  # allocated GPUs x elapsed hours
    tres: dict[str, int]  # every allocated TRES by name ("cpu", "mem", "gres/gpu", "billing"...)

    @classmethod
    def from_accounting(cls, job_id: str, records: list[dict[str, Any]]) -> JobUsage | None:
        """The usage of the job's accounting records, or None when there are none."""
        if not records:
            return None
        tres: dict[str, int] = {}
        elapsed = 0
        gpu_seconds = 0
        for record in records:
            allocated = _allocated(record)
            times = record.get("time")
            seconds = times.get("elapsed") if isinstance(times, dict) else None
            seconds = seconds if isinstance(seconds, int) else 0
            elapsed += seconds
            gpu_seconds += allocated.get("gres/gpu", 0) * seconds
            for name, count in allocated.items():
                tres[name] = tres.get(name, 0) + count
        return cls(
            job_id=job_id,
            elapsed_seconds=elapsed,
            nodes=tres.get("node", 0),
            cpus=tres.get("cpu", 0),
            memory_mb=tres.get("mem"),
            gpus=tres.get("gres/gpu", 0),
            gpu_hours=round(gpu_seconds / 3600, 4),
            tres=tres,
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def describe(self) -> str:
        memory = f", {self.memory_mb} MB memory" if self.memory_mb is not None else ""
        return (
            f"Slurm job {self.job_id} used {self.nodes} node(s), {self.cpus} CPU(s){memory}, {self.gpus} GPU(s) "
            f"for {self.elapsed_seconds} s: {self.gpu_hours:g} GPU-hours"
        )
