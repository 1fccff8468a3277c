"""``Emulator``: run the server in a background thread with its own event loop."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import shutil
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from aiohttp import web

from airflow_provider_slurmapi.emulator import auth
from airflow_provider_slurmapi.emulator.backend_api import ControlError, SlurmBackend
from airflow_provider_slurmapi.emulator.builtin import BuiltinBackend
from airflow_provider_slurmapi.emulator.exposure import exposure_warning
from airflow_provider_slurmapi.emulator.faults import FaultInjector, FaultPlan, ScriptedFault
from airflow_provider_slurmapi.emulator.output_mount import MountingBackend, OutputMount
from airflow_provider_slurmapi.emulator.request_log import RequestLog
from airflow_provider_slurmapi.emulator.scheduler import KILL_WAIT, MIN_JOB_AGE, REQUEUE_DELAY, SECONDS_PER_MINUTE
from airflow_provider_slurmapi.emulator.server import ClusterKey, ServerState, make_app
from airflow_provider_slurmapi.emulator.slurm_conf import DEFAULT_PARTITION, SlurmConf
from airflow_provider_slurmapi.emulator.slurmrestd import SlurmrestdBackend

log = logging.getLogger(__name__)

BACKENDS = ("builtin", "slurmrestd")
_SHUTDOWN_TIMEOUT = 30.0  # seconds stop() waits for the server, then for its thread


@dataclass(frozen=True)
class EmulatorConfig:
    """How an :class:`Emulator` runs: where it listens, its clusters (their partitions and accounting),
    job timing, backend and faults."""

    host: str = "127.0.0.1"
    port: int = 0  # 0 = pick a free port
    clusters: tuple[ClusterKey, ...] = (("test-project", "us-central1", "test-cluster"),)
    min_job_age: float = MIN_JOB_AGE  # seconds a finished job stays in the live /slurm queue
    seconds_per_minute: float = SECONDS_PER_MINUTE  # how long one minute of time_limit lasts
    token_lifetime: float = 3600  # seconds an issued access token is valid
    reply_shape: str = "structured"  # or "body" (reply as a JSON string)
    denied_principals: tuple[str, ...] = ()  # get PERMISSION_DENIED
    query_strings: bool = True  # False: refuse paths with "?..." (the API's docs do not say either way)
    # created if missing (0600), reused if present; None: a private temporary folder, removed at stop
    key_file: str | Path | None = None
    state_dir: str | Path | None = None  # job scripts and step records (temp dir if None)
    kill_wait: float = KILL_WAIT  # seconds between SIGTERM and SIGKILL on cancel/timeout (Slurm KillWait)
    sched_delay: float = 1.0  # a new job stays PENDING this long, like Slurm's next scheduler pass
    # a requeued job pends this long (reason BeginTime) before it runs again: real Slurm ~121 s
    requeue_delay: float = REQUEUE_DELAY
    virtual_jobs: bool = False  # run no processes: a job lasts $EMULATOR_RUNTIME s (for scale tests)
    # False: accounting keeps no job comments, as slurmdbd without AccountingStoreFlags=job_comment
    # (the live queue still shows them)
    job_comments: bool = True
    # the built-in cluster's slurm.conf (slurm_conf.py): each partition "NAME" or "NAME:GRES" (Slurm's
    # node Gres, e.g. "a3:gpu:h100:8"), the first the default one, each with a node of its own
    partitions: tuple[str, ...] = (DEFAULT_PARTITION,)
    private_data: bool = False  # PrivateData=jobs: a caller sees only its own jobs, live and in accounting
    gpu_accounting: bool = True  # False: AccountingStorageTRES without gres/gpu
    accounting: bool = True  # False: no slurmdbd, so slurmrestd serves no /slurmdb path
    backend: str = "builtin"  # or "slurmrestd": forward every call to a real slurmrestd
    slurmrestd_url: str | None = None  # e.g. http://slurm-head:6820 (slurmrestd backend only)
    slurm_user: str | None = None  # X-SLURM-USER-NAME (slurmrestd backend only)
    slurm_token: str | None = field(default=None, repr=False)  # X-SLURM-USER-TOKEN, a Slurm JWT
    faults: FaultPlan | None = None  # random faults for the whole run (Emulator.faults changes them later)
    fault_script: tuple[ScriptedFault, ...] = ()  # faults for chosen calls, in order
    # "/cluster/dir=gs://bucket/prefix": finished jobs' output under the directory goes to the bucket
    # of the Cloud Storage stand-in at storage_host, as Cloud Storage FUSE would (output_mount.py)
    output_mount: str | None = None
    storage_host: str | None = None
    cluster_root: str = "/"  # where the cluster's / is on this machine (a real Slurm's chroot)

    def __post_init__(self) -> None:
        if self.reply_shape not in ("structured", "body"):
            raise ValueError("reply_shape must be 'structured' or 'body'")
        if not self.clusters:
            raise ValueError("at least one cluster is needed")
        if self.requeue_delay < 0:
            raise ValueError(f"requeue_delay must be 0 or more seconds, not {self.requeue_delay!r}")
        if self.backend not in BACKENDS:
            allowed = " or ".join(repr(name) for name in BACKENDS)
            raise ValueError(f"backend must be {allowed}, not {self.backend!r}")
        if self.backend == "slurmrestd":
            missing = [name for name in ("slurmrestd_url", "slurm_user", "slurm_token") if not getattr(self, name)]
            if missing:
                raise ValueError(f"backend 'slurmrestd' needs {', '.join(missing)}")
            if not str(self.slurmrestd_url).startswith(("http://", "https://")):
                raise ValueError(f"slurmrestd_url must be an http(s) URL, not {self.slurmrestd_url!r}")
        self._check_faults()
        if isinstance(self.partitions, str):  # one spec, not its characters
            object.__setattr__(self, "partitions", (self.partitions,))
        object.__setattr__(self, "partitions", tuple(self.partitions))
        self.slurm_conf()  # refuses a bad --partition now
        if self.output_mount:
            self.mount()  # refuses a bad mount or storage URL now

    def slurm_conf(self) -> SlurmConf:
        """The built-in cluster's partitions and accounting settings."""
        return SlurmConf.from_specs(
            self.partitions,
            private_data=self.private_data,
            gpu_accounting=self.gpu_accounting,
            accounting=self.accounting,
        )

    def mount(self) -> OutputMount | None:
        if not self.output_mount:
            return None
        return OutputMount.parse(self.output_mount, self.storage_host or "", self.cluster_root)

    def _check_faults(self) -> None:
        if self.faults is not None and not isinstance(self.faults, FaultPlan):
            raise ValueError(f"faults: {self.faults!r} is not a FaultPlan; allowed: a FaultPlan or None")
        object.__setattr__(self, "fault_script", tuple(self.fault_script))  # a list would make the config unhashable
        for entry in self.fault_script:
            if not isinstance(entry, ScriptedFault):
                raise ValueError(f"fault_script: {entry!r} is not a ScriptedFault; allowed: ScriptedFault entries")


def make_backend(config: EmulatorConfig, key: ClusterKey, state_dir: Path) -> SlurmBackend:
    """The backend that answers for cluster ``key``, as ``config.backend`` chooses."""
    backend = _make_slurm(config, key, state_dir)
    mount = config.mount()
    return MountingBackend(backend, mount) if mount else backend


def _make_slurm(config: EmulatorConfig, key: ClusterKey, state_dir: Path) -> SlurmBackend:
    if config.backend == "slurmrestd":
        # every cluster forwards to the same slurmrestd; __post_init__ made sure these are set
        assert config.slurmrestd_url and config.slurm_user and config.slurm_token
        return SlurmrestdBackend(config.slurmrestd_url, config.slurm_user, config.slurm_token)
    project, region, cluster = key
    return BuiltinBackend(
        cluster,
        state_dir / project / region / cluster,
        min_job_age=config.min_job_age,
        seconds_per_minute=config.seconds_per_minute,
        kill_wait=config.kill_wait,
        sched_delay=config.sched_delay,
        virtual_jobs=config.virtual_jobs,
        requeue_delay=config.requeue_delay,
        job_comments=config.job_comments,
        slurm_conf=config.slurm_conf(),
    )


class Emulator:
    """A local Slurm Job API. ``start()`` returns once it listens; ``stop()`` kills every job."""

    def __init__(self, config: EmulatorConfig | None = None) -> None:
        self.config = config or EmulatorConfig()
        self._temp_dirs: list[Path] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self._port: int | None = None
        self.tokens = auth.TokenStore(self.config.token_lifetime)
        self.backends: dict[ClusterKey, SlurmBackend] = {}
        self.key_file: Path | None = None
        self.service_account_info: dict[str, Any] = {}
        # change it at any time, from any thread: set_plan(), script(), clear(); read injected/log/calls
        self.faults = FaultInjector(self.config.faults, self.config.fault_script)
        # every call the backend answered, e.g. emulator.requests.calls("DELETE") in a test
        self.requests = RequestLog()

    @property
    def url(self) -> str:
        if self._port is None:
            raise RuntimeError("the emulator is not started")
        host = self.config.host
        return f"http://[{host}]:{self._port}" if ":" in host else f"http://{host}:{self._port}"

    @property
    def token_uri(self) -> str:
        return self.url + "/token"

    def start(self) -> Emulator:
        if self._thread is not None:
            raise RuntimeError("already started")
        state_dir = self._dir(self.config.state_dir, "slurm-emulator-state-")
        for key in self.config.clusters:
            self.backends[key] = make_backend(self.config, key, state_dir)
        ready = threading.Event()
        failure: list[BaseException] = []
        self._thread = threading.Thread(
            target=self._serve, args=(ready, failure), name="slurm-job-api-emulator", daemon=True
        )
        self._thread.start()
        ready.wait()
        if failure:
            self._thread.join()
            self._thread = None
            self._cleanup_dirs()
            raise failure[0]
        if self.exposure_warning:
            log.warning("%s", self.exposure_warning)
        return self

    @property
    def exposure_warning(self) -> str | None:
        """What listening on ``config.host`` exposes, when it is not this machine's loopback."""
        return exposure_warning(self.config.host)

    def stop(self) -> None:
        if self._thread is None or self._loop is None:
            self._cleanup_dirs()
            return
        if self._runner is not None:
            future = asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop)
            try:
                future.result(timeout=_SHUTDOWN_TIMEOUT)
            except concurrent.futures.TimeoutError:  # stop anyway: a stuck handler must not outlive us
                pending = [task.get_coro() for task in asyncio.all_tasks(self._loop)]
                log.warning(
                    "the emulator's shutdown did not finish in %g s; still running: %s", _SHUTDOWN_TIMEOUT, pending
                )
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=_SHUTDOWN_TIMEOUT)
        self._thread = None
        self._cleanup_dirs()

    def control(self, job_id: int | str, action: str, *, cluster: str | None = None) -> dict[str, Any]:
        """Do ``action`` to a job, as an admin's scontrol or the cluster would (built-in backend only).

        ``action``: ``requeue``, ``requeuehold``, ``hold``, ``release``, ``preempt`` or ``node_fail``;
        ``job_id``: ``12`` or an array task ``"12_3"``; ``cluster``: a cluster's name (or
        ``project/region/cluster``), default the first configured. Answers ``{"job_id", "action",
        "state", "restart_cnt"}``; raises ``ControlError`` (``.status`` 400, 404, 409 or 501) if refused.
        """
        if self._loop is None or self._thread is None:
            raise RuntimeError("the emulator is not started")
        backend = self.backends[self._cluster_key(cluster)]

        async def act() -> dict[str, Any]:  # in the server's loop, like the HTTP control
            return backend.control(str(job_id), action)

        return asyncio.run_coroutine_threadsafe(act(), self._loop).result(timeout=30)

    def _cluster_key(self, cluster: str | None) -> ClusterKey:
        if cluster is None:
            return self.config.clusters[0]
        for key in self.config.clusters:
            if cluster in (key[2], "/".join(key)):
                return key
        names = ", ".join("/".join(key) for key in self.config.clusters)
        raise ControlError(404, f"no cluster {cluster!r} in this emulator; it has {names}")

    def issue_token(self, principal: str | None = None, lifetime: float | None = None) -> str:
        """A valid bearer token (default principal: the emulator's service account)."""
        return self.tokens.issue(principal or self.service_account_info["client_email"], lifetime)

    def __enter__(self) -> Emulator:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def _dir(self, configured: str | Path | None, prefix: str) -> Path:
        if configured is not None:
            path = Path(configured)
            path.mkdir(parents=True, exist_ok=True)
            return path
        path = Path(tempfile.mkdtemp(prefix=prefix))
        self._temp_dirs.append(path)
        return path

    def _cleanup_dirs(self) -> None:
        for path in self._temp_dirs:
            shutil.rmtree(path, ignore_errors=True)
        self._temp_dirs.clear()

    def _serve(self, ready: threading.Event, failure: list[BaseException]) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self._listen())
        except BaseException as exc:  # reported to start()'s caller
            failure.append(exc)
            ready.set()
            loop.close()
            return
        ready.set()
        try:
            loop.run_forever()
        finally:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    async def _listen(self) -> None:
        project = self.config.clusters[0][0]
        # the port (and so token_uri) is known only after binding: bind first, then write the key
        state = ServerState(
            backends=self.backends,
            tokens=self.tokens,
            key_info={},
            public_pem=b"",
            token_uri=lambda: self.token_uri,
            reply_shape=self.config.reply_shape,
            denied_principals=frozenset(self.config.denied_principals),
            query_strings=self.config.query_strings,
            faults=self.faults,
            requests=self.requests,
        )
        self._runner = web.AppRunner(make_app(state), access_log=None, shutdown_timeout=5.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.config.host, self.config.port)
        await site.start()
        server = site._server
        assert server is not None and server.sockets  # type: ignore[attr-defined]
        self._port = server.sockets[0].getsockname()[1]  # type: ignore[attr-defined]
        key_path = (
            Path(self.config.key_file)
            if self.config.key_file is not None
            else self._dir(None, "slurm-emulator-key-") / "emulator-key.json"
        )
        info = await asyncio.to_thread(auth.load_or_create_key, key_path, project, self.token_uri)
        state.key_info = info
        state.public_pem = auth.public_key_pem(info)
        self.key_file = key_path
        self.service_account_info = info
