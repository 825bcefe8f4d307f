"""Moving an entry into our trash (what a delete keeps for `agent undo`) and back out of it:
by rename, or across file systems by a copy of at most a limit, then a removal."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext

from cli.errors import ToolError
from cli.fs import trees
from cli.fs.deadline import NO_DEADLINE, Deadline
from cli.fs.reach import _CLOEXEC, Target, parent_dir
from cli.fs.removal import NotEmpty, _has_entries, _measure_tree, _mount_inside, _remove_entry
from cli.fs.writing import Commit, _fsync_dir
from cli.units import human_size


def _to_trash(
    dir_fd: int,
    name: str,
    kind: str,
    recursive: bool,
    shown: str,
    trash: str,
    limit: int,
    may_lose: bool = False,
    deadline: Deadline = NO_DEADLINE,
    step: Callable[[int | None], AbstractContextManager[object]] | None = None,
) -> tuple[dict[str, int] | None, bool]:
    """Move the entry into `trash`; its counts, and whether it went there (not: deleted for
    good, too large to copy, as `may_lose` allowed). `step(kept)` is held around what makes
    the delete — the rename, or the removal after a copy — given the bytes the trash will
    keep (None: none)."""
    around = step or (lambda _kept: nullcontext())
    counts = None
    size = os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_size
    if kind == "directory" and recursive:
        tally = _measure_tree(dir_fd, name, shown, deadline)
        counts, size = tally.counts, tally.bytes
    elif kind == "directory" and _has_entries(dir_fd, name):
        raise NotEmpty(f"{shown} is a directory that is not empty")
    elif kind == "directory":
        size = 0  # an empty dir: as trees.measure counts it
    trash_fd = os.open(trash, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | _CLOEXEC)
    try:
        try:
            with around(size):  # across file systems this fails first, and is voided
                os.rename(name, name, src_dir_fd=dir_fd, dst_dir_fd=trash_fd)
                _fsync_dir(trash_fd)
                _fsync_dir(dir_fd)
            return counts, True
        except OSError as exc:
            if exc.errno != errno.EXDEV:
                raise
        try:
            _copy_across(dir_fd, name, kind, trash_fd, shown, limit, deadline=deadline)
        except TooLargeToCopy:
            if not may_lose:
                raise
            with around(None):
                _remove_entry(dir_fd, name, kind, True, shown, deadline)
            return counts, False
        except OSError as exc:
            if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
            # The copy is removed again (trees.copy): nothing was deleted.
            raise ToolError(
                f"{shown} was not deleted: the trash (in the agent's state dir) has no room to "
                f"keep it ({exc.strerror}); free some space there"
            ) from None
        _fsync_dir(trash_fd)
        # Copied whole: the original goes, however long that takes.
        with around(size):
            _remove_entry(dir_fd, name, kind, True, shown)
    finally:
        os.close(trash_fd)
    return counts, True


def move_back(target: Target, source: str, kind: str, commit: Commit | None = None) -> None:
    """Put `source` (an entry in our trash) back at target, which must not exist: restoring
    never overwrites. Parents are created as needed, never through a symlink. `commit`
    records the restore before the rename (or the copy across file systems) that makes it."""
    source_dir, source_name = os.path.split(source)
    src_fd = os.open(source_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | _CLOEXEC)
    try:
        entry = os.stat(source_name, dir_fd=src_fd, follow_symlinks=False)
        with parent_dir(target, make_parents=True) as (dir_fd, name):
            try:
                os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            except FileNotFoundError:
                pass
            else:
                raise ToolError(f"{target.shown} exists; it is not overwritten")
            with commit(entry, None) if commit else nullcontext():
                try:
                    os.rename(source_name, name, src_dir_fd=src_fd, dst_dir_fd=dir_fd)
                except OSError as exc:
                    if exc.errno != errno.EXDEV:
                        raise
                    _copy_across(src_fd, source_name, kind, dir_fd, target.shown, 1 << 62, name)
                    _remove_entry(src_fd, source_name, kind, True, source)
                _fsync_dir(dir_fd)
    finally:
        os.close(src_fd)


class TooLargeToCopy(ToolError):
    """A move into or out of the trash across file systems would copy more than its limit."""


def _copy_across(
    src_fd: int,
    name: str,
    kind: str,
    dst_fd: int,
    shown: str,
    limit: int,
    dst_name: str = "",
    *,
    deadline: Deadline = NO_DEADLINE,
) -> None:
    """The entry `name` copied into dst_fd (a move between file systems), links as links,
    through dir fds at any depth; refused before anything is copied when it holds more than
    `limit` bytes or a mount point (`trees.copy`)."""
    dst_name = dst_name or name
    try:
        tally = trees.measure(src_fd, name, stop_above=limit, deadline=deadline)
    except trees.Refused as exc:
        raise ToolError(f"{shown} changed while it was being looked at: {exc}") from None
    if tally.stopped:
        raise TooLargeToCopy(
            f"{shown} holds more than the trash keeps across file systems "
            f"({human_size(limit)}, policy.limits.max_backup_bytes); set policy.trash: false "
            "to delete permanently, or raise the limit"
        )
    if tally.mounts:
        raise _mount_inside(shown, tally.mounts[0])
    try:
        trees.copy(src_fd, name, dst_fd, dst_name, deadline)
    except trees.Refused as exc:
        raise ToolError(f"{shown} could not be copied: {exc}") from None
