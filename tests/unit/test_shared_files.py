"""Files of a file:// output folder opened only below its root, through no link, and only if regular."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from airflow_provider_slurmapi.hooks.shared_files import UnsafeOutputPath, open_within


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "out" / "a").mkdir(parents=True)
    (tmp_path / "out" / "a" / "1.out").write_text("mine\n")
    (tmp_path / "secret").write_text("not yours\n")
    return tmp_path / "out"


def test_a_regular_file_below_the_root_is_read(root: Path) -> None:
    with open_within(str(root), f"{root}/a/./1.out") as file:
        assert file.read() == b"mine\n"


def test_the_root_itself_may_be_a_link(root: Path, tmp_path: Path) -> None:
    (tmp_path / "mnt").symlink_to(root)  # the deployment's choice, e.g. /shared -> /mnt/nfs
    with open_within(f"{tmp_path}/mnt", f"{tmp_path}/mnt/a/1.out") as file:
        assert file.read() == b"mine\n"


def test_paths_leaving_the_root_are_refused(root: Path) -> None:
    for path, why in [
        (f"{root}/a/../../secret", f"leaves the output folder {root} through '..'"),
        (f"{root.parent}/secret", f"is not under the output folder {root}"),
        (f"{root}/", "is the output folder itself"),
    ]:
        with pytest.raises(UnsafeOutputPath, match="^" + re.escape(f"{path} {why}: not read") + "$"):
            open_within(str(root), path)


def test_a_link_as_the_file_or_a_folder_on_the_way_is_refused(root: Path, tmp_path: Path) -> None:
    (root / "a" / "2.out").symlink_to(tmp_path / "secret")
    with pytest.raises(UnsafeOutputPath, match=f"^{root}/a/2.out is a symbolic link: not read$"):
        open_within(str(root), f"{root}/a/2.out")
    (root / "b").symlink_to(root / "a")  # even a link that stays inside
    with pytest.raises(UnsafeOutputPath, match=f"^{root}/b/1.out: {root}/b is a symbolic link: not read$"):
        open_within(str(root), f"{root}/b/1.out")


def test_a_fifo_or_a_hard_link_is_refused_without_blocking(root: Path, tmp_path: Path) -> None:
    os.mkfifo(root / "a" / "fifo.out")
    with pytest.raises(UnsafeOutputPath, match="fifo.out is not a regular file: not read$"):
        open_within(str(root), f"{root}/a/fifo.out")
    os.link(tmp_path / "secret", root / "a" / "hard.out")
    with pytest.raises(UnsafeOutputPath, match="hard.out has 2 hard links: not read$"):
        open_within(str(root), f"{root}/a/hard.out")


def test_a_missing_file_or_folder_is_not_found(root: Path) -> None:
    with pytest.raises(FileNotFoundError):
        open_within(str(root), f"{root}/a/none.out")
    with pytest.raises(FileNotFoundError):
        open_within(str(root), f"{root}/none/1.out")
    with pytest.raises(FileNotFoundError):
        open_within(str(root), f"{root}/a/1.out/x")  # a file where a folder should be
