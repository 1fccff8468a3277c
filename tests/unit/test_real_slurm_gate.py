"""The real-Slurm tests: skipped with the reason outside CI, a failure with the reason in CI."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests import real_slurm


@pytest.fixture
def not_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(real_slurm.os, "geteuid", lambda: 1000)


def test_skipped_with_the_reason_outside_ci(not_root: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="real Slurm needs root"):
        real_slurm.require()


def test_mandatory_in_ci(not_root: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="mandatory in CI, but real Slurm needs root"):
        real_slurm.require()


def test_needs_debian(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(real_slurm.os, "geteuid", lambda: 0)
    monkeypatch.setattr(real_slurm, "DEBIAN_VERSION_FILE", tmp_path / "missing")
    assert real_slurm.unavailable_reason() == "real Slurm needs a Debian host (scripts/slurm-up.sh uses debootstrap)"


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root to switch to nobody")
def test_slurm_up_refuses_non_root_clearly() -> None:
    # run a copy the nobody user can read: the checkout may sit where only root may enter (/root)
    readable = Path(tempfile.mkdtemp())
    readable.chmod(0o755)
    script = shutil.copy(real_slurm.SLURM_UP, readable / "slurm-up.sh")
    Path(script).chmod(0o755)
    result = subprocess.run(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "bash", str(script)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    shutil.rmtree(readable)
    assert result.returncode == 1
    assert "must run as root" in result.stderr
