"""Opening a file of a ``file://`` output folder, which other users and their jobs can write.

A job (or anyone who can write the folder) could plant a symbolic link, to a file the worker can
read, where Airflow reads its output or a function's result. So the path is walked from the output
folder's root one directory at a time, each opened with ``O_NOFOLLOW`` relative to the last: no
component below the root may be a link, ``..`` is refused, and what is opened in the end is a
regular file with no other hard link. Nothing is checked first and opened later, so nothing can be
swapped in between; the file reached is under the root by construction (its real path is).
The root itself is the deployment's (``output_uri``): it may be a link.
"""

from __future__ import annotations

import os
import posixpath
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
    root = posixpath.normpath(root)
    if not path.startswith(root.rstrip("/") + "/"):
        raise UnsafeOutputPath(f"{path} is not under the output folder {root}: not read")
    names = [name for name in path[len(root.rstrip("/")) + 1 :].split("/") if name not in ("", ".")]
    if ".." in names:
        raise UnsafeOutputPath(f"{path} leaves the output folder {root} through '..': not read")
    if not names:
        raise UnsafeOutputPath(f"{path} is the output folder itself: not read")
    folder = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for depth, name in enumerate(names[:-1], start=1):
            opened = _open_below(folder, name, _DIRECTORY, path, posixpath.join(root, *names[:depth]))
            os.close(folder)
            folder = opened
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


def _open_below(folder: int, name: str, flags: int, path: str, component: str) -> int:
    try:
        return os.open(name, flags, dir_fd=folder)
    except OSError as error:
        if _is_link(folder, name):
            raise UnsafeOutputPath(
                f"{path} is a symbolic link: not read"
                if component == path
                else f"{path}: {component} is a symbolic link: not read"
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
