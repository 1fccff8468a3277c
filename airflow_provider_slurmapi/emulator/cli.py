"""``slurm-job-api-emulator``: run the emulator in the foreground until SIGINT/SIGTERM.

Every flag has an environment variable ``SLURM_JOB_API_EMULATOR_<FLAG>`` (e.g.
``SLURM_JOB_API_EMULATOR_PORT``); flags win over variables. Repeatable flags take a
comma-separated list in their variable, but ``--partition`` a space-separated one (a partition's
GRES may hold commas).

Faults (see ``faults.py``): ``--fault-rate 0.1 --fault-kinds unavailable:3,reset_after --fault-seed 1``
fails about one call in ten; ``--fault-script FILE`` fails chosen calls. Any call from this machine
can also force one with the request header ``X-Emulator-Fault: <kind>`` (see ``exposure.py``).

``slurm-job-api-emulator control ACTION JOB_ID [--url URL] [--cluster NAME]`` asks a running
emulator to requeue, requeuehold, hold, release, preempt or node_fail a job (built-in backend).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Sequence

from airflow_provider_slurmapi.emulator.backend_api import CONTROL_ACTIONS
from airflow_provider_slurmapi.emulator.faults import FAULT_HEADER, FAULT_KINDS, FaultPlan, load_script
from airflow_provider_slurmapi.emulator.service import BACKENDS, Emulator, EmulatorConfig

ENV_PREFIX = "SLURM_JOB_API_EMULATOR_"
DEFAULT_PORT = 8780  # EmulatorConfig's port 0 (any free port) suits tests, not a server to point Airflow at
# the command's other defaults are EmulatorConfig's
_DEFAULTS = EmulatorConfig()
DEFAULT_PROJECT, DEFAULT_REGION, DEFAULT_CLUSTER = _DEFAULTS.clusters[0]


def _env(name: str, default: str | None = None) -> str | None:
    return os.environ.get(ENV_PREFIX + name, default)


def _env_list(name: str) -> list[str] | None:
    value = _env(name)
    return [v.strip() for v in value.split(",") if v.strip()] if value else None


def _env_float(name: str, default: float) -> float:
    return float(_env(name) or default)


def _env_flag(name: str) -> bool:
    return _env(name, "") not in ("", "0", "false")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="slurm-job-api-emulator", description="Local stand-in for Google Cloud's Slurm Job API."
    )
    _add_service_arguments(p)
    _add_google_arguments(p)
    _add_cluster_arguments(p)
    _add_backend_arguments(p)
    _add_output_mount_arguments(p)
    _add_fault_arguments(p)
    return p


def _add_service_arguments(p: argparse.ArgumentParser) -> None:
    """Where the emulator listens, the clusters it serves, how it logs."""
    p.add_argument(
        "--host",
        default=_env("HOST", _DEFAULTS.host),
        help="default 127.0.0.1; any other address warns, and the job control and fault header still "
        "answer only callers on this machine",
    )
    p.add_argument("--port", type=int, default=int(_env("PORT") or DEFAULT_PORT))
    p.add_argument("--project", action="append", help=f"repeatable; default {DEFAULT_PROJECT}")
    p.add_argument("--region", action="append", help=f"repeatable; default {DEFAULT_REGION}")
    p.add_argument("--cluster", action="append", help=f"repeatable; default {DEFAULT_CLUSTER}")
    p.add_argument("--log-level", default=_env("LOG_LEVEL", "INFO"))


def _add_google_arguments(p: argparse.ArgumentParser) -> None:
    """Google's side: the service account, its tokens, and how the API answers."""
    p.add_argument(
        "--key-file",
        default=_env("KEY_FILE"),
        help="the service account's key, created 0600 if missing (default: in a private temporary folder, "
        "removed when the emulator stops; the banner names it)",
    )
    p.add_argument("--token-lifetime", type=float, default=_env_float("TOKEN_LIFETIME", _DEFAULTS.token_lifetime))
    p.add_argument("--deny-principal", action="append", help="repeatable: email that gets PERMISSION_DENIED")
    p.add_argument("--reply-shape", choices=("structured", "body"), default=_env("REPLY_SHAPE", _DEFAULTS.reply_shape))
    p.add_argument(
        "--no-query-strings",
        action="store_true",
        default=_env_flag("NO_QUERY_STRINGS"),
        help="refuse a query string in the Slurm path with INVALID_ARGUMENT (undocumented API behaviour)",
    )


def _add_cluster_arguments(p: argparse.ArgumentParser) -> None:
    """The built-in cluster: where jobs keep their files and how fast they move."""
    p.add_argument("--state-dir", default=_env("STATE_DIR"))
    p.add_argument("--min-job-age", type=float, default=_env_float("MIN_JOB_AGE", _DEFAULTS.min_job_age))
    p.add_argument(
        "--seconds-per-minute", type=float, default=_env_float("SECONDS_PER_MINUTE", _DEFAULTS.seconds_per_minute)
    )
    p.add_argument("--kill-wait", type=float, default=_env_float("KILL_WAIT", _DEFAULTS.kill_wait))
    p.add_argument(
        "--sched-delay",
        type=float,
        default=_env_float("SCHED_DELAY", _DEFAULTS.sched_delay),
        help="seconds a new job stays PENDING before it starts (real Slurm: 2-4 s)",
    )
    p.add_argument(
        "--requeue-delay",
        type=float,
        default=_env_float("REQUEUE_DELAY", _DEFAULTS.requeue_delay),
        help="seconds a requeued job pends (reason BeginTime) before it runs again (real Slurm: ~121 s)",
    )
    p.add_argument(
        "--no-job-comments",
        action="store_true",
        default=_env_flag("NO_JOB_COMMENTS"),
        help="accounting keeps no job comments, as Slurm without AccountingStoreFlags=job_comment",
    )
    _add_slurm_conf_arguments(p)
    p.add_argument(
        "--virtual-jobs",
        action="store_true",
        default=_env_flag("VIRTUAL_JOBS"),
        help="run no processes: a job lasts $EMULATOR_RUNTIME s and exits $EMULATOR_EXIT_CODE (scale tests)",
    )


def _add_slurm_conf_arguments(p: argparse.ArgumentParser) -> None:
    """The built-in cluster's partitions and accounting, as its slurm.conf would set them."""
    p.add_argument(
        "--partition",
        action="append",
        metavar="SPEC",
        help="repeatable: NAME, or NAME:GRES with Slurm's node Gres (a3:gpu:h100:8: a node with 8 h100 GPUs); "
        "the first is the default partition; default: debug",
    )
    p.add_argument(
        "--private-data",
        action="store_true",
        default=_env_flag("PRIVATE_DATA"),
        help="PrivateData=jobs: a caller sees only its own jobs, in the live queue and in accounting",
    )
    p.add_argument(
        "--no-gpu-accounting",
        action="store_true",
        default=_env_flag("NO_GPU_ACCOUNTING"),
        help="accounting does not track gres/gpu (AccountingStorageTRES without it)",
    )
    p.add_argument(
        "--no-accounting",
        action="store_true",
        default=_env_flag("NO_ACCOUNTING"),
        help="no slurmdbd: slurmrestd serves no /slurmdb path",
    )


def _add_backend_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--backend",
        choices=BACKENDS,
        default=_env("BACKEND", _DEFAULTS.backend),
        help="builtin: emulate Slurm with local processes; slurmrestd: forward to a real slurmrestd",
    )
    p.add_argument("--slurmrestd-url", default=_env("SLURMRESTD_URL"), help="e.g. http://slurm-head:6820")
    p.add_argument("--slurm-user", default=_env("SLURM_USER"), help="sent as X-SLURM-USER-NAME")
    # a token on the command line shows up in ps: prefer the environment variable
    p.add_argument("--slurm-token", default=_env("SLURM_TOKEN"), help="Slurm JWT sent as X-SLURM-USER-TOKEN")


def _add_output_mount_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--output-mount",
        default=_env("OUTPUT_MOUNT"),
        help="/cluster/dir=gs://bucket/prefix: a finished job's output under the directory is uploaded to "
        "the bucket of the Cloud Storage stand-in at --storage-host, as Cloud Storage FUSE would",
    )
    p.add_argument(
        "--storage-host",
        default=_env("STORAGE_HOST", os.environ.get("STORAGE_EMULATOR_HOST")),
        help="URL of a Cloud Storage stand-in (default $STORAGE_EMULATOR_HOST), e.g. http://127.0.0.1:9023",
    )
    p.add_argument(
        "--cluster-root", default=_env("CLUSTER_ROOT", _DEFAULTS.cluster_root), help="where the cluster's / is here"
    )


def _add_fault_arguments(p: argparse.ArgumentParser) -> None:
    # string defaults from the environment go through type= too, so bad values are parser errors
    faults = p.add_argument_group("faults", "inject failures like Google's front end and the network")
    faults.add_argument("--fault-rate", type=float, default=_env("FAULT_RATE"), help="0..1: share of calls that fail")
    faults.add_argument(
        "--fault-kinds",
        default=_env("FAULT_KINDS"),
        help=f"comma-separated, optionally kind:weight; default all of {','.join(FAULT_KINDS)}",
    )
    faults.add_argument("--fault-seed", type=int, default=_env("FAULT_SEED"), help="makes a run reproducible")
    faults.add_argument("--fault-latency", type=float, default=_env("FAULT_LATENCY"), help="seconds (default 2)")
    faults.add_argument("--fault-methods", default=_env("FAULT_METHODS"), help="only these Slurm methods, e.g. POST")
    faults.add_argument("--fault-paths", default=_env("FAULT_PATHS"), help="only Slurm paths matching this regex")
    faults.add_argument("--fault-script", default=_env("FAULT_SCRIPT"), help="JSON list of {kind, method, path, times}")


def parse_kinds(text: str) -> tuple[str, ...] | dict[str, float]:
    """``unavailable,reset_after`` (equal weights) or ``unavailable:3,reset_after:1``."""
    kinds: dict[str, float] = {}
    weighted = False
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        kind, sep, weight = item.partition(":")
        weighted = weighted or bool(sep)
        try:
            kinds[kind.strip()] = float(weight) if sep else 1.0
        except ValueError as exc:
            raise ValueError(
                f"--fault-kinds: {item!r} has a weight that is not a number; allowed: kind:weight"
            ) from exc
    return kinds if weighted else tuple(kinds)


def _fault_plan(args: argparse.Namespace) -> FaultPlan | None:
    """A plan as soon as any --fault-* setting but the script is given."""
    names = ("fault_rate", "fault_kinds", "fault_seed", "fault_latency", "fault_methods", "fault_paths")
    if all(getattr(args, name) is None for name in names):
        return None
    plan: dict[str, object] = {"rate": args.fault_rate or 0.0, "seed": args.fault_seed, "paths": args.fault_paths}
    if args.fault_kinds is not None:
        plan["kinds"] = parse_kinds(args.fault_kinds)
    if args.fault_latency is not None:
        plan["latency"] = args.fault_latency
    if args.fault_methods is not None:
        plan["methods"] = tuple(m.strip() for m in args.fault_methods.split(",") if m.strip())
    return FaultPlan(**plan)  # type: ignore[arg-type]


def _clusters(args: argparse.Namespace) -> tuple[tuple[str, str, str], ...]:
    """Pair up --project/--region/--cluster; a single value applies to every cluster."""
    projects = args.project or _env_list("PROJECT") or [DEFAULT_PROJECT]
    regions = args.region or _env_list("REGION") or [DEFAULT_REGION]
    clusters = args.cluster or _env_list("CLUSTER") or [DEFAULT_CLUSTER]
    count = max(len(projects), len(regions), len(clusters))
    for name, values in (("--project", projects), ("--region", regions), ("--cluster", clusters)):
        if len(values) not in (1, count):
            raise SystemExit(f"{name} must be given once or {count} times")

    def pick(values: list[str], i: int) -> str:
        return values[0] if len(values) == 1 else values[i]

    return tuple((pick(projects, i), pick(regions, i), pick(clusters, i)) for i in range(count))


def config_from_args(argv: Sequence[str] | None = None) -> EmulatorConfig:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.backend == "slurmrestd":
        missing = [
            f"--{dest.replace('_', '-')} (or {ENV_PREFIX}{dest.upper()})"
            for dest in ("slurmrestd_url", "slurm_user", "slurm_token")
            if not getattr(args, dest)
        ]
        if missing:
            parser.error("--backend slurmrestd needs " + ", ".join(missing))
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        return EmulatorConfig(
            host=args.host,
            port=args.port,
            clusters=_clusters(args),
            min_job_age=args.min_job_age,
            seconds_per_minute=args.seconds_per_minute,
            token_lifetime=args.token_lifetime,
            reply_shape=args.reply_shape,
            denied_principals=tuple(args.deny_principal or _env_list("DENY_PRINCIPAL") or ()),
            query_strings=not args.no_query_strings,
            virtual_jobs=args.virtual_jobs,
            job_comments=not args.no_job_comments,
            partitions=tuple(args.partition or (_env("PARTITION") or "").split() or _DEFAULTS.partitions),
            private_data=args.private_data,
            gpu_accounting=not args.no_gpu_accounting,
            accounting=not args.no_accounting,
            key_file=os.path.abspath(args.key_file) if args.key_file else None,
            state_dir=args.state_dir,
            kill_wait=args.kill_wait,
            sched_delay=args.sched_delay,
            requeue_delay=args.requeue_delay,
            backend=args.backend,
            slurmrestd_url=args.slurmrestd_url,
            slurm_user=args.slurm_user,
            slurm_token=args.slurm_token,
            faults=_fault_plan(args),
            fault_script=load_script(args.fault_script) if args.fault_script else (),
            output_mount=args.output_mount,
            storage_host=args.storage_host,
            cluster_root=args.cluster_root,
        )
    except ValueError as exc:  # e.g. a backend or URL given by environment variable, which argparse does not check
        parser.error(str(exc))


def describe(emu: Emulator) -> list[str]:
    """The start-up banner: one fact per line, then an example Airflow connection."""
    lines = [emu.exposure_warning] if emu.exposure_warning else []
    lines += [
        f"URL: {emu.url}",
        f"Key file: {emu.key_file}",
        f"Service account: {emu.service_account_info['client_email']}",
    ]
    if emu.config.backend == "slurmrestd":  # the token is a credential: never printed
        lines.append(f"Backend: slurmrestd at {emu.config.slurmrestd_url} as user {emu.config.slurm_user}")
    else:
        lines.append(f"Backend: {emu.config.backend}")
        lines += emu.config.slurm_conf().describe()
    for project, region, cluster in emu.config.clusters:
        lines.append(f"Cluster: project={project} region={region} cluster={cluster}")
    mount = emu.config.mount()
    if mount:
        lines.append(f"Output mount: {mount.cluster_dir} -> {mount.uri} at {mount.storage_host}")
    if emu.config.faults is not None:
        lines.append(f"Faults: {emu.config.faults.summary()}")
    if emu.config.fault_script:
        kinds = ", ".join(f"{entry.kind} x{entry.times}" for entry in emu.config.fault_script)
        lines.append(f"Fault script: {kinds}")
    if emu.config.faults is not None or emu.config.fault_script:
        lines.append(f"Faults per call: header {FAULT_HEADER}: <kind>")
    project, region, cluster = emu.config.clusters[0]
    extra = {
        "project_id": project,
        "region": region,
        "cluster_id": cluster,
        "endpoint": emu.url,
        "key_path": str(emu.key_file),
    }
    if mount:  # where a task reads what the mount publishes
        extra |= {"output_uri": mount.uri, "output_cluster_path": mount.cluster_dir}
    conn = {"conn_type": "slurm_job_api", "extra": extra}
    lines.append(f"AIRFLOW_CONN_SLURM_JOB_API_DEFAULT='{json.dumps(conn)}'")
    return lines


def build_control_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="slurm-job-api-emulator control",
        description="Do to a job of a running emulator what an admin or the cluster would (built-in backend).",
    )
    p.add_argument("action", choices=CONTROL_ACTIONS)
    p.add_argument("job_id", help="e.g. 12, or 12_3 for an array task")
    port = _env("PORT", str(DEFAULT_PORT))
    p.add_argument("--url", default=_env("URL", f"http://127.0.0.1:{port}"), help="the emulator's URL")
    p.add_argument("--project", default=(_env_list("PROJECT") or [DEFAULT_PROJECT])[0])
    p.add_argument("--region", default=(_env_list("REGION") or [DEFAULT_REGION])[0])
    p.add_argument("--cluster", default=(_env_list("CLUSTER") or [DEFAULT_CLUSTER])[0])
    return p


def control_main(argv: Sequence[str]) -> int:
    """POST the control call; print the job's new state (JSON), or the error and exit 1."""
    args = build_control_parser().parse_args(argv)
    url = (
        f"{args.url.rstrip('/')}/emulator/v1/{args.project}/{args.region}/{args.cluster}"
        f"/jobs/{args.job_id}:{args.action}"
    )
    request = urllib.request.Request(url, data=b"", method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            print(response.read().decode(), flush=True)
        return 0
    except urllib.error.HTTPError as exc:
        text = exc.read().decode(errors="replace")
        try:
            message = json.loads(text)["error"]["message"]
        except (ValueError, KeyError, TypeError):
            message = text or exc.reason
        print(f"error {exc.code}: {message}", file=sys.stderr)
    except urllib.error.URLError as exc:
        print(f"error: cannot reach the emulator at {args.url}: {exc.reason}", file=sys.stderr)
    return 1


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["control"]:
        return control_main(args[1:])
    config = config_from_args(args)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    emu = Emulator(config)
    emu.start()
    try:
        for line in describe(emu):
            print(line, flush=True)
        stop.wait()
    finally:
        print("Stopping: killing all jobs.", file=sys.stderr, flush=True)
        emu.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
