"""The error replies the built-in backend's routes share, as slurmrestd words them."""

from __future__ import annotations

from typing import Any

from airflow_provider_slurmapi.emulator import replies
from airflow_provider_slurmapi.emulator.backend_api import SlurmAnswer


def slurm_error(
    status: int,
    number: int,
    error: str,
    description: str,
    source: str,
    kind: str,
    version: str,
    cluster: str,
    **fields: Any,
) -> SlurmAnswer:
    reply = replies.envelope(kind, version, cluster, fields, errors=[replies.error(number, error, description, source)])
    return status, reply


def bad_method(cluster: str, kind: str, version: str, source: str) -> SlurmAnswer:
    return slurm_error(
        422,
        9000,
        replies.PARSE_ERROR,
        "Rejecting request. Failure parsing parameters",
        source,
        kind,
        version,
        cluster,
    )


def unparsable_query(cluster: str, kind: str, version: str, source: str) -> SlurmAnswer:
    # real slurmrestd answers 400 text/plain "Unable to parse query."; we keep the reply JSON
    # so structuredBody stays an object
    return slurm_error(400, 9000, replies.PARSE_ERROR, "Unable to parse query.", source, kind, version, cluster)
