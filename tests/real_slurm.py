"""A real Slurm 24.11 for the tests, brought up by ``scripts/slurm-up.sh`` in a Debian chroot.

In CI (``CI=true``) a machine that cannot run it fails the run with the reason; elsewhere the
tests that need it are skipped with the reason. A Slurm that was already running is reused and
left running; one started here is stopped at the end of the session.
"""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_slurmapi.emulator import EmulatorConfig

ROOT = Path(__file__).resolve().parents[1]
SLURM_UP = ROOT / "scripts" / "slurm-up.sh"
SLURM_DOWN = ROOT / "scripts" / "slurm-down.sh"
CHROOT = Path(os.environ.get("SLURM_CHROOT", "/var/lib/slurm-chroot"))
DEBIAN_VERSION_FILE = Path("/etc/debian_version")
NODE = "node1"  # the cluster's one node


@dataclass(frozen=True)
class RealSlurm:
    url: str  # slurmrestd, JWT auth
    user: str
    token: str
    chroot: Path
    started_here: bool

    def host_path(self, path: str) -> Path:
        """Where a path seen by jobs (inside the chroot) is on this machine."""
        return self.chroot / path.lstrip("/")

    def admin(self, *command: str) -> str:
        """A Slurm command run as root inside the chroot (``scontrol``, ``sinfo``): what an administrator does."""
        result = subprocess.run(["chroot", str(self.chroot), *command], capture_output=True, text=True, timeout=60)
        if result.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} failed (rc {result.returncode}): {result.stderr.strip()}")
        return result.stdout

    def fail_node(self, node: str = NODE, timeout: float = 60) -> None:
        """The node goes DOWN under its jobs, and comes back: ReturnToService=2 returns it by
        itself within seconds; it is resumed by hand if not."""
        self.admin("scontrol", "update", f"nodename={node}", "state=down", "reason=test")
        deadline = time.monotonic() + timeout
        while "down" in self.admin("sinfo", "-h", "-n", node, "-o", "%T") and time.monotonic() < deadline:
            time.sleep(0.5)
        if "down" in self.admin("sinfo", "-h", "-n", node, "-o", "%T"):
            self.admin("scontrol", "update", f"nodename={node}", "state=resume")

    def emulator_config(self, **settings: Any) -> EmulatorConfig:
        """An emulator that forwards every call to this Slurm."""
        return EmulatorConfig(
            backend="slurmrestd", slurmrestd_url=self.url, slurm_user=self.user, slurm_token=self.token, **settings
        )


class RealSlurmUnavailable(Exception):
    pass


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def unavailable_reason() -> str | None:
    """Why this machine cannot run a real Slurm, or None if it can."""
    if os.geteuid() != 0:
        return "real Slurm needs root (scripts/slurm-up.sh builds a chroot and starts daemons)"
    if not DEBIAN_VERSION_FILE.exists():
        return "real Slurm needs a Debian host (scripts/slurm-up.sh uses debootstrap)"
    return None


def bring_up() -> RealSlurm:
    """Run slurm-up.sh (idempotent) and read the URL and token it wrote."""
    reason = unavailable_reason()
    if reason:
        raise RealSlurmUnavailable(reason)
    result = subprocess.run(["bash", str(SLURM_UP)], capture_output=True, text=True, timeout=1200)
    if result.returncode != 0:
        raise RealSlurmUnavailable(f"scripts/slurm-up.sh failed (rc {result.returncode}):\n{result.stderr[-3000:]}")
    env = dict(line.split("=", 1) for line in (CHROOT / ".harness" / "env").read_text().splitlines() if "=" in line)
    return RealSlurm(
        url=env["SLURMRESTD_URL"],
        user=env["SLURM_USER_NAME"],
        token=env["SLURM_JWT"],
        chroot=Path(env["SLURM_CHROOT"]),
        started_here="already running" not in result.stderr,
    )


def require() -> RealSlurm:
    """Slurm for a test: fails in CI and skips elsewhere when this machine cannot run it."""
    reason = unavailable_reason()
    if reason:
        if in_ci():
            pytest.fail(f"the real-Slurm tests are mandatory in CI, but {reason}", pytrace=False)
        pytest.skip(reason)
    try:
        return bring_up()
    except RealSlurmUnavailable as error:
        pytest.fail(f"could not bring up the real Slurm: {error}", pytrace=False)


def stop(slurm: RealSlurm) -> None:
    if slurm.started_here:
        subprocess.run(["bash", str(SLURM_DOWN)], capture_output=True, text=True, timeout=300, check=False)
