"""``slurm-job-api-check``: the cluster check from a shell, before a first DAG runs.

Exit status: 0 when nothing failed (warnings and unknowns included), 1 when a finding failed, 2
when the check could not run (a connection that cannot be used)."""

from __future__ import annotations

import argparse
import logging
import sys

from airflow_provider_slurmapi.client.cluster_check import PROBE_TIMEOUT


def _seconds(text: str) -> float:
    value = float(text)
    if not 0 < value <= 3600:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds in (0, 3600]")
    return value


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="slurm-job-api-check",
        description="Check what a training cluster gives the Slurm Job API provider: access, partitions, "
        "GPUs, accounting, job comments, the jobs' Unix user, other users' jobs.",
    )
    p.add_argument("--conn-id", default="slurm_job_api_default", help="the Airflow connection (default: %(default)s)")
    p.add_argument(
        "--no-probe-job",
        dest="probe_job",
        action="store_false",
        help="read only: submit no probe job (the jobs' user and job comments are then not checked)",
    )
    p.add_argument("--partition", help="the partition of the probe job (default: the cluster's default partition)")
    p.add_argument(
        "--probe-timeout",
        type=_seconds,
        default=PROBE_TIMEOUT,
        help="seconds the probe job may take to start and end before it is cancelled (default: %(default)g)",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    from airflow_provider_slurmapi.client.errors import SlurmJobApiError
    from airflow_provider_slurmapi.hooks.slurm_job_api import SlurmJobApiHook

    # the findings say what went wrong: the client's own warnings (retries, Slurm's notes) would only repeat it
    provider_log = logging.getLogger("airflow_provider_slurmapi")
    level = provider_log.level
    provider_log.setLevel(logging.ERROR)
    try:
        report = SlurmJobApiHook(args.conn_id).check_cluster(
            probe_job=args.probe_job, partition=args.partition, probe_timeout=args.probe_timeout
        )
    except (SlurmJobApiError, ValueError) as error:
        print(f"slurm-job-api-check: {error}", file=sys.stderr)
        return 2
    finally:
        provider_log.setLevel(level)
    print(report.text())
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
