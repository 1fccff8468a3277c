"""Debian packages a deployment test needs (PostgreSQL, Redis), installed when missing."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path


def unavailable_reason(package: str, find: Callable[[], Path | None]) -> str | None:
    """Why ``package``'s server cannot run here, after installing it if it can; None if it can."""
    if find():
        return None if os.geteuid() == 0 else f"needs root to run {package}"
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        return f"{package} is not installed, and installing Debian's {package} needs root on Debian"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", package]):
        result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900, check=False)
        if result.returncode != 0:
            return f"{' '.join(command)} failed: {(result.stdout + result.stderr)[-2000:]}"
    return None if find() else f"installing Debian's {package} gave no server"
