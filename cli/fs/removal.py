"""Removing an entry for good: a file or link unlinked, a directory only when empty unless
recursive (then its tree, deepest first, never across a mount point: cli/fs/trees.py)."""

from __future__ import annotations

import errno
import os

from cli.errors import ToolError
from cli.fs import trees
from cli.fs.deadline import NO_DEADLINE, Deadline
from cli.fs.reach import _LIST_FLAGS


class NotEmpty(ToolError):
    """A directory that is not empty was to be removed without `recursive`."""


def _remove_entry(
    dir_fd: int,
    name: str,
    kind: str,
    recursive: bool,
    shown: str,
    deadline: Deadline = NO_DEADLINE,
) -> dict[str, int] | None:
    if kind == "directory":
        return _remove_dir(dir_fd, name, recursive, shown, deadline)
    os.unlink(name, dir_fd=dir_fd)
    return None


def _mount_inside(shown: str, where: str) -> ToolError:
    return ToolError(
        f"{shown} holds a mount point ({where}); what is mounted there is not the agent's to "
        "delete or move, so nothing was changed (unmount it first)"
    )


def _has_entries(dir_fd: int, name: str) -> bool:
    fd = os.open(name, _LIST_FLAGS, dir_fd=dir_fd)
    try:
        with os.scandir(fd) as listing:
            return next(listing, None) is not None
    finally:
        os.close(fd)


def _remove_dir(
    dir_fd: int, name: str, recursive: bool, shown: str, deadline: Deadline = NO_DEADLINE
) -> dict[str, int] | None:
    if not recursive:
        try:
            os.rmdir(name, dir_fd=dir_fd)
        except OSError as exc:
            if exc.errno in (errno.ENOTEMPTY, errno.EEXIST):
                raise NotEmpty(f"{shown} is a directory that is not empty") from None
            raise
        return None
    counts = _count_tree(dir_fd, name, shown, deadline)
    try:
        trees.remove(dir_fd, name)  # no deadline: a removal is never left half done
    except trees.Refused as exc:  # a mount appeared, or the tree was moved, since the count
        raise ToolError(f"{shown} was deleted only in part: {exc}") from None
    return counts


def _count_tree(
    dir_fd: int, name: str, shown: str, deadline: Deadline = NO_DEADLINE
) -> dict[str, int]:
    """Files and directories in the tree `name` (links counted as files, never followed)."""
    return _measure_tree(dir_fd, name, shown, deadline).counts


def _measure_tree(
    dir_fd: int, name: str, shown: str, deadline: Deadline = NO_DEADLINE
) -> trees.Tally:
    """The tree `name` counted and measured, walked by fds at any depth. A tree holding a
    mount point is refused here, before anything is deleted or moved."""
    try:
        tally = trees.measure(dir_fd, name, deadline=deadline)
    except trees.Refused as exc:
        raise ToolError(f"{shown} changed while it was being looked at: {exc}") from None
    if tally.mounts:
        raise _mount_inside(shown, tally.mounts[0])
    return tally
