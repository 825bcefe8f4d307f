"""Renaming an entry between two checked paths without ever replacing one (the platform
layer's no-replace rename: renameat2 with RENAME_NOREPLACE on Linux) between directory fds
reached as cli/fs/reach.py reaches them (move_file, and `agent undo` of a move)."""

from __future__ import annotations

import errno

from cli.errors import ToolError
from cli.fs import _platform
from cli.fs.reach import Target, parent_dir
from cli.fs.wording import os_error
from cli.fs.writing import fsync_dir


def rename(src: Target, dst: Target) -> None:
    """Rename src's entry to dst, creating dst's missing parents; never over an existing
    entry, never through a symlink on either side."""
    with (
        parent_dir(src) as (src_fd, src_name),
        parent_dir(dst, make_parents=True) as (dst_fd, dst_name),
    ):
        try:
            # Atomic on Linux and macOS; where neither call works, link+unlink or
            # mkdir-then-rename (cli/fs/_platform.py says what each can miss).
            _platform.rename_noreplace(src_fd, src_name, dst_fd, dst_name)
        except OSError as exc:
            raise _rename_error(exc, src, dst) from None
        fsync_dir(dst_fd)
        fsync_dir(src_fd)


def _rename_error(exc: OSError, src: Target, dst: Target) -> ToolError:
    if exc.errno == errno.EXDEV:
        return ToolError(
            f"{src.shown} and {dst.shown} are on different file systems, and move_file only "
            "renames",
            hint="copy it with read_file/write_file and delete the original instead",
        )
    if exc.errno == errno.EEXIST:
        return ToolError(f"{dst.shown} appeared meanwhile; not overwritten")
    if exc.errno == errno.EINVAL:
        return ToolError(f"{dst.shown} is inside {src.shown}; cannot move there")
    return os_error(exc, src.shown, src.path)
