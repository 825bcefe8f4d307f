"""What a file keeps besides its content: its owner and group, and its user.* extended
attributes, carried over to the file that replaces it or a copy of it."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable

from cli.fs.reach import _READ_FLAGS

# The extended attributes a file being replaced has, as (name, value) pairs; read when called,
# as late as possible (see xattrs_at).
ReadXattrs = Callable[[], list[tuple[str, bytes]]]


# Only user.* attributes are carried over: they are the user's data (tags, a download's
# origin, a checksum a tool keeps). Not security.* (a file capability must never be granted to
# content a model wrote; an SELinux label is the policy's to give a new file), not system.*
# (ACLs) nor trusted.*.
_CARRIED_XATTRS = "user."
# Errors that say "not yours to set" or "not here": the new file then keeps what it has.
_NOT_SETTABLE = frozenset(
    {errno.EPERM, errno.EACCES, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP}
)


def keep_attributes(fd: int, old: os.stat_result, xattrs: ReadXattrs) -> None:
    """Give the new file `fd` (a temp file about to replace `old`, or a copy of it) what `old`
    has besides content and mode: its owner and group, and its user.* extended attributes.

    A rename puts a new inode in place, made by the agent: without this it would belong to
    whoever runs the agent (root, for a file of someone else's) and lose its attributes. The
    owner is set where the agent may set it: as root any; otherwise the same uid and a group
    the user is in. Where it may not (another user's file written through a shared group),
    the new file stays the agent's: that is no error. The mode is the caller's to set, after
    this (a change of owner clears set-id bits). Where the OS has no os.*xattr calls (macOS
    has its own API), no attribute is carried over."""
    new = os.fstat(fd)
    if (new.st_uid, new.st_gid) != (old.st_uid, old.st_gid):
        for uid in (old.st_uid, -1):  # owner and group; failing that, the group alone
            try:
                os.fchown(fd, uid, old.st_gid)
                break
            except OSError as exc:
                if exc.errno not in _NOT_SETTABLE:
                    raise
    for key, value in xattrs():
        try:
            os.setxattr(fd, key, value)
        except OSError as exc:
            if exc.errno not in _NOT_SETTABLE:
                raise  # out of space: the write fails whole, the old file stays


def xattrs_of(fd: int) -> list[tuple[str, bytes]]:
    """The user.* extended attributes of the open file `fd` (none where the OS or the file
    system has none)."""
    if not hasattr(os, "listxattr"):
        return []
    try:
        keys = os.listxattr(fd)
    except OSError as exc:
        if exc.errno in (errno.ENOTSUP, errno.EOPNOTSUPP):
            return []
        raise
    found = []
    for key in keys:
        if not key.startswith(_CARRIED_XATTRS):
            continue
        try:
            found.append((key, os.getxattr(fd, key)))
        except OSError as exc:
            if exc.errno != errno.ENODATA:  # removed since it was listed
                raise
    return found


def xattrs_at(dir_fd: int, name: str, old: os.stat_result) -> list[tuple[str, bytes]]:
    """xattrs_of the file `name` in dir_fd if it is still `old`: opened as read_at opens one
    (never through a symlink, never blocking) and compared by device and inode, so that the
    attributes of a file swapped in since are never carried over. Nothing from a file the
    agent may not read: nor may it read the file's user.* attributes."""
    if not hasattr(os, "listxattr"):
        return []
    try:
        fd = os.open(name, _READ_FLAGS, dir_fd=dir_fd)
    except OSError:
        return []
    try:
        info = os.fstat(fd)
        if (info.st_dev, info.st_ino) != (old.st_dev, old.st_ino):
            return []
        return xattrs_of(fd)
    finally:
        os.close(fd)
