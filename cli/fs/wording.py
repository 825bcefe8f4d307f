"""How a failure of a file operation is put in words: for the model, the person and the log."""

from __future__ import annotations

import errno
import os
import stat

from cli.errors import ToolError
from cli.units import human_size


def describe_kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISLNK(mode):
        return "a symlink"
    return "not a regular file"


def os_error(exc: OSError, shown: str, path: str | None = None) -> ToolError:
    """The ToolError for an OSError on `shown` (`path`: the absolute path, to tell a symlink
    loop from a symlink swapped in)."""
    if exc.errno in (errno.ELOOP, errno.EXDEV):  # EXDEV: openat2 saw the path leave its root
        if path is not None and _loops(path):
            return ToolError(f"{shown} is, or goes through, a symlink loop; refusing")
        return ToolError(f"{shown} changed while being checked (a symlink appeared); refusing")
    if exc.errno == errno.ENOENT:
        return ToolError(f"{shown} does not exist")
    if exc.errno in (errno.EACCES, errno.EPERM):
        return ToolError(f"permission denied: {shown}")
    if exc.errno == errno.ENOTDIR:
        return ToolError(f"a parent of {shown} is not a directory")
    if exc.errno == errno.EISDIR:
        return ToolError(f"{shown} is a directory")
    if exc.errno == errno.ENAMETOOLONG:
        return ToolError(f"{shown}: name too long")
    return ToolError(f"{shown}: {exc.strerror or exc}")


def _loops(path: str) -> bool:
    try:
        os.stat(path)
    except OSError as exc:
        return exc.errno == errno.ELOOP
    return False


def too_large(shown: str, size: int, limit: int) -> ToolError:
    return ToolError(f"{shown} is too large ({human_size(size)}; the limit is {human_size(limit)})")
