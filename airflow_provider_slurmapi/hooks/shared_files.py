"""Opening and writing a file of a ``file://`` output folder, which other users and their jobs can write.

A job (or anyone who can write the folder) could plant a symbolic link, to a file the worker can
read, where Airflow reads its output or a function's result. So the path is walked from the output
folder's root one directory at a time, each opened with ``O_NOFOLLOW`` relative to the last: no
component below the root may be a link, ``..`` is refused, and what is opened in the end is a
regular file with no other hard link. Nothing is checked first and opened later, so nothing can be
swapped in between; the file reached is under the root by construction (its real path is).
The root itself is the deployment's (``output_uri``): it may be a link. Writing walks the same
way (making missing folders) and renames a private new file over the name, which replaces a link
planted there rather than writing through it.
"""

from __future__ import annotations

import os
import posixpath
import secrets
import stat
from typing import BinaryIO

_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC  # a planted FIFO must not block the read


class UnsafeOutputPath(Exception):
    """A path under the output folder that is not read: it is or goes through a link, leaves the
    folder, or is not a regular file. The message names the path and why."""


def open_within(root: str, path: str) -> BinaryIO:
    """``path``, a file under the folder ``root``, opened for reading in binary.

    :raises UnsafeOutputPath: ``path`` is not under ``root``, or reaching it needs a link or ``..``,
        or it is not a regular file of one link.
    :raises FileNotFoundError: it (or a folder on the way) is not there (yet).
    """
    root, names = _names_below(root, path, "read")
    folder = _open_folder(root, names[:-1], path, make=False, verb="read")
    try:
        fd = _open_below(folder, names[-1], _FILE, path, path)
    finally:
        os.close(folder)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise UnsafeOutputPath(f"{path} is not a regular file: not read")
        if info.st_nlink != 1:  # a hard link planted to a file elsewhere is as bad as a symbolic one
            raise UnsafeOutputPath(f"{path} has {info.st_nlink} hard links: not read")
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def write_within(root: str, path: str, data: bytes, mode: int = 0o644) -> None:
    """Write ``data`` as ``path``, a file under the folder ``root``, making the folders on the way;
    the old file (or a link planted under its name) is replaced whole, never written through.

    :raises UnsafeOutputPath: ``path`` is not under ``root``, or a folder on the way is a link.
    """
    root, names = _names_below(root, path, "written")
    folder = _open_folder(root, names[:-1], path, make=True, verb="written")
    try:
        temporary = f".{names[-1]}.{secrets.token_hex(8)}.tmp"
        fd = os.open(
            temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=folder
        )
        try:
            with os.fdopen(fd, "wb") as file:
                file.write(data)
            os.replace(temporary, names[-1], src_dir_fd=folder, dst_dir_fd=folder)
        except BaseException:
            os.unlink(temporary, dir_fd=folder)
            raise
    finally:
        os.close(folder)


def _names_below(root: str, path: str, verb: str) -> tuple[str, list[str]]:
    root = posixpath.normpath(root)
    if not path.startswith(root.rstrip("/") + "/"):
        raise UnsafeOutputPath(f"{path} is not under the output folder {root}: not {verb}")
    names = [name for name in path[len(root.rstrip("/")) + 1 :].split("/") if name not in ("", ".")]
    if ".." in names:
        raise UnsafeOutputPath(f"{path} leaves the output folder {root} through '..': not {verb}")
    if not names:
        raise UnsafeOutputPath(f"{path} is the output folder itself: not {verb}")
    return root, names


def _open_folder(root: str, names: list[str], path: str, *, make: bool, verb: str) -> int:
    """The folder ``root/names...`` opened, each step without a link (made first if ``make``)."""
    folder = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for depth, name in enumerate(names, start=1):
            if make:
                try:
                    os.mkdir(name, 0o755, dir_fd=folder)
                except FileExistsError:
                    pass
            opened = _open_below(folder, name, _DIRECTORY, path, posixpath.join(root, *names[:depth]), verb)
            os.close(folder)
            folder = opened
    except BaseException:
        os.close(folder)
        raise
    return folder


def _open_below(folder: int, name: str, flags: int, path: str, component: str, verb: str = "read") -> int:
    try:
        return os.open(name, flags, dir_fd=folder)
    except OSError as error:
        if _is_link(folder, name):
            raise UnsafeOutputPath(
                f"{path} is a symbolic link: not {verb}"
                if component == path
                else f"{path}: {component} is a symbolic link: not {verb}"
            ) from None
        if isinstance(error, NotADirectoryError):
            raise FileNotFoundError(error.errno, f"{component} is not a folder", path) from None
        raise


def _is_link(folder: int, name: str) -> bool:
    """Only to word the error: the decision was the refused open."""
    try:
        return stat.S_ISLNK(os.lstat(name, dir_fd=folder).st_mode)
    except OSError:
        return False
