"""Renaming an entry between two checked paths without ever replacing one: renameat2 with
RENAME_NOREPLACE between directory fds reached as cli/fs/reach.py reaches them (move_file,
and `agent undo` of a move)."""

from __future__ import annotations

import errno
import functools
import os
import sys
from collections.abc import Callable

from cli.errors import ToolError
from cli.fs.reach import Target, parent_dir
from cli.fs.wording import os_error
from cli.fs.writing import fsync_dir

RENAME_NOREPLACE = 1


def rename(src: Target, dst: Target) -> None:
    """Rename src's entry to dst, creating dst's missing parents; never over an existing
    entry, never through a symlink on either side."""
    with (
        parent_dir(src) as (src_fd, src_name),
        parent_dir(dst, make_parents=True) as (dst_fd, dst_name),
    ):
        try:
            _rename_noreplace(src_fd, src_name, dst_fd, dst_name)
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


def _rename_noreplace(src_fd: int, src: str, dst_fd: int, dst: str) -> None:
    call = _renameat2()
    if call is not None:
        try:
            call(src_fd, src, dst_fd, dst, RENAME_NOREPLACE)
            return
        except OSError as exc:
            # ENOSYS: an old kernel or a seccomp filter; EINVAL: a file system without the
            # flag (some FUSE and network ones). Fall back to look-then-rename, whose window
            # is the one call between the two.
            if exc.errno not in (errno.ENOSYS, errno.EINVAL, errno.EPERM):
                raise
    if _exists(dst_fd, dst):
        raise OSError(errno.EEXIST, os.strerror(errno.EEXIST), dst)
    os.rename(src, dst, src_dir_fd=src_fd, dst_dir_fd=dst_fd)


def _exists(dir_fd: int, name: str) -> bool:
    try:
        os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


@functools.cache
def _renameat2() -> Callable[[int, str, int, str, int], None] | None:
    """glibc's renameat2 through ctypes (Linux ≥ 3.15, glibc ≥ 2.28), or None."""
    if sys.platform != "linux":
        return None
    import ctypes

    try:
        function = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return None
    function.restype = ctypes.c_int
    function.argtypes = [
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_uint,
    ]

    def call(src_fd: int, src: str, dst_fd: int, dst: str, flags: int) -> None:
        if function(src_fd, os.fsencode(src), dst_fd, os.fsencode(dst), flags) != 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code), dst)

    return call
