"""Deleting a checked path's entry: moved to the trash (policy.trash) or removed for good."""

from __future__ import annotations

import functools
import os
import stat
from dataclasses import dataclass

from cli.errors import ToolError
from cli.fs.deadline import NO_DEADLINE, Deadline
from cli.fs.fingerprint import Fingerprint
from cli.fs.reach import Target, parent_dir
from cli.fs.removal import _remove_entry
from cli.fs.trashcan import _to_trash
from cli.fs.writing import Commit, _fsync_dir


@dataclass(frozen=True)
class Removed:
    kind: str  # "file", "symlink" or "directory"
    counts: dict[str, int] | None = None  # a recursive delete: files and directories removed
    trashed: bool = False  # it went to the trash (False with a trash: deleted for good, as a
    # person agreed, being too large to copy there across file systems)


def remove(
    target: Target,
    *,
    recursive: bool,
    trash: str | None = None,
    trash_limit: int = 0,
    lose: Fingerprint | None = None,
    deadline: Deadline = NO_DEADLINE,
    commit: Commit | None = None,
) -> Removed:
    """Delete target's entry itself: a symlink is removed, never followed; a directory only
    when empty, unless `recursive` (then deepest first through dir fds, any depth, never
    through a symlink: `trees.remove`). A tree holding a mount point is refused before
    anything is deleted: what is mounted there is not ours to empty.

    With `trash` (a directory of ours), the entry is moved there instead, by rename; across
    file systems it is copied (at most trash_limit bytes) and then removed. A larger one is
    refused, unless `lose` is the entry as it is now (a person agreed it may be deleted for
    good): then it is deleted without a copy.

    `deadline` holds until the first thing is deleted or renamed: counting the tree, the
    copy into the trash (removed again if it is cut short); the removal itself is not cut.
    `commit` (with `trash`) records the delete before the rename into the trash, or before
    the removal that follows a copy across file systems (write-ahead)."""
    if not target.parts:
        raise ToolError(f"{target.shown} is an allowed directory itself; it cannot be deleted")
    with parent_dir(target) as (dir_fd, name):
        info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        kind = (
            "directory"
            if stat.S_ISDIR(info.st_mode)
            else "symlink"
            if stat.S_ISLNK(info.st_mode)
            else "file"
        )
        trashed = False
        if trash is None:
            counts = _remove_entry(dir_fd, name, kind, recursive, target.shown, deadline)
        else:
            may_lose = lose is not None and Fingerprint.of(info) == lose
            step = functools.partial(commit, info) if commit else None
            counts, trashed = _to_trash(
                dir_fd, name, kind, recursive, target.shown, trash, trash_limit, may_lose,
                deadline, step,
            )  # fmt: skip
        _fsync_dir(dir_fd)
    return Removed(kind, counts, trashed)
