"""Measuring, copying and removing whole trees that a model may have made: iteratively (any
depth, never a RecursionError), through directory fds (paths longer than PATH_MAX are fine),
never following a symlink and never crossing into another mount.

A mount point inside a tree is someone else's data: a bind mount of `~/photos` under a
workspace, or one that a delete moved into our trash along with its parent. It is never
entered: not counted, not copied, not emptied. It is recognised by its device number and,
since a bind mount of the same file system has the same one, by the kernel's mount id
(`/proc/self/fdinfo`), compared before descending.

One fd per walk is held open, whatever the depth: going down opens the child beneath the
current directory with O_NOFOLLOW | O_DIRECTORY; going up opens ".." and checks it is the very
directory we came from (device and inode). A tree moved while it is walked fails with
`Refused`, nothing outside it is reached.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable, Iterator
from contextlib import suppress
from dataclasses import dataclass, field

from cli.fs import _platform, attributes
from cli.fs.deadline import NO_DEADLINE, Deadline

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_LIST_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NONBLOCK | os.O_NOFOLLOW | _CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | _CLOEXEC
_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | _CLOEXEC
_CHUNK = 1 << 20

MountKey = tuple[int, int | None]  # (st_dev, mount id or None where /proc cannot tell)


class Refused(Exception):
    """The walk met what it must not go through (a mount point when copying or deleting, a
    special file it cannot copy) or the tree changed under it. The message names where,
    relative to the top of the tree."""


def mount_key(fd: int) -> MountKey:
    """Which mount the directory (or file) behind `fd` is on."""
    return os.fstat(fd).st_dev, _mount_id(fd)


def _mount_id(fd: int) -> int | None:
    return _platform.mount_id(fd)


def path_mount_key(path: str) -> MountKey | None:
    """The mount `path` is on, or would be on once created (that of its nearest existing
    ancestor); None if nothing on the way can be opened."""
    current = os.path.abspath(path)
    while True:
        try:
            fd = os.open(current, os.O_RDONLY | os.O_DIRECTORY | _CLOEXEC)
        except OSError:
            parent = os.path.dirname(current)
            if parent == current:
                return None
            current = parent
            continue
        try:
            return mount_key(fd)
        finally:
            os.close(fd)


# -- the walk ----------------------------------------------------------------------------------


class Where:
    """Where an entry is, relative to the top of the walk: spelled out only when a message
    needs it (at once: the walk moves on), so a deep walk does not pay O(depth) per entry."""

    __slots__ = ("_depth", "_name", "_names")

    def __init__(self, names: list[str], name: str | None = None) -> None:
        self._names, self._depth, self._name = names, len(names), name

    def __str__(self) -> str:
        parts = self._names[: self._depth]
        return "/".join(parts if self._name is None else [*parts, self._name]) or "."


class Visitor:
    """What a walk does at each entry. `dir_fd` is always the directory holding `name`."""

    def file(self, dir_fd: int, name: str, info: os.stat_result, where: Where) -> None:
        """A non-directory entry: a regular file, a symlink (never followed), anything else."""

    def enter(self, dir_fd: int, name: str, info: os.stat_result, where: Where) -> None:
        """A directory, before its entries."""

    def leave(self, dir_fd: int, name: str, info: os.stat_result, where: Where) -> None:
        """A directory, after its entries."""

    def mount(self, dir_fd: int, name: str, info: os.stat_result, where: Where) -> None:
        """A directory that is another mount: it is not entered."""


@dataclass
class _Level:
    name: str
    info: os.stat_result  # fstat of the directory: who ".." must be when we come back up
    entries: Iterator[str]


def walk(dir_fd: int, name: str, visitor: Visitor, deadline: Deadline = NO_DEADLINE) -> None:
    """Visit the entry `name` in dir_fd and, if it is a directory on the same mount as
    dir_fd, everything below it, depth first (each directory's `leave` after its entries).
    `deadline` is checked before each step; only walks that may stop anywhere get one (a
    look, a copy that is removed again when it fails), never a removal."""
    home = mount_key(dir_fd)
    names: list[str] = []  # the directories from the top down to the current one
    stack: list[_Level] = []
    current = dir_fd  # the directory holding the next entry; dir_fd itself is never closed
    pending: Iterator[str] | None = iter([name])
    try:
        while pending is not None:
            deadline.check()
            child = next(pending, None)
            if child is None:
                if not stack:
                    return
                level = stack.pop()
                names.pop()
                parent = _up(current, stack[-1].info, Where(names)) if stack else dir_fd
                os.close(current)
                current = parent
                visitor.leave(current, level.name, level.info, Where(names, level.name))
                pending = stack[-1].entries if stack else iter(())
                continue
            where = Where(names, child)
            opened = _enter(current, child, where, home, visitor)
            if opened is None:
                continue
            try:
                info = os.fstat(opened)
                visitor.enter(current, child, info, where)
                entries = _entries(opened)
            except BaseException:
                os.close(opened)
                raise
            if current != dir_fd:
                os.close(current)
            current = opened
            names.append(child)
            stack.append(_Level(child, info, entries))
            pending = entries
    finally:
        if current != dir_fd:
            os.close(current)


def _enter(dir_fd: int, name: str, where: Where, home: MountKey, visitor: Visitor) -> int | None:
    """The directory `name` opened to go into, or None after visiting it as what it is (a
    file, a link, a mount point) or finding it gone. Only a source entry that vanished is
    skipped: an error inside the visitor (the far side of a copy) propagates."""
    try:
        info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None  # gone since it was listed
    opened = None
    if stat.S_ISDIR(info.st_mode):
        try:
            opened = os.open(name, _LIST_FLAGS, dir_fd=dir_fd)
        except FileNotFoundError:
            return None
        except OSError as exc:
            if exc.errno not in (errno.ENOTDIR, errno.ELOOP):
                raise
            # Swapped for something else since the stat: visit that instead, never follow it.
            try:
                info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            except FileNotFoundError:
                return None
    if opened is None:
        visitor.file(dir_fd, name, info, where)
        return None
    try:
        if mount_key(opened) != home:
            visitor.mount(dir_fd, name, info, where)
            os.close(opened)
            return None
    except BaseException:
        os.close(opened)
        raise
    return opened


def _entries(fd: int) -> Iterator[str]:
    with os.scandir(fd) as listing:
        return iter([entry.name for entry in listing])


def _up(fd: int, expected: os.stat_result, where: Where) -> int:
    """The parent of fd, which must be the directory we came down from."""
    parent = os.open("..", _LIST_FLAGS, dir_fd=fd)
    info = os.fstat(parent)
    if (info.st_dev, info.st_ino) != (expected.st_dev, expected.st_ino):
        os.close(parent)
        raise Refused(f"{where} was moved while it was being walked; stopped there")
    return parent


# -- measuring ---------------------------------------------------------------------------------


@dataclass
class Tally:
    files: int = 0  # non-directories: regular files, symlinks, FIFOs, …
    directories: int = 0
    bytes: int = 0  # st_size of every non-directory (a symlink: its target's length)
    mounts: list[str] = field(default_factory=list)  # mount points met, not entered
    stopped: bool = False  # passed `stop_above`: the totals are a lower bound

    @property
    def counts(self) -> dict[str, int]:
        return {"files": self.files, "directories": self.directories}


class _Stop(Exception):
    pass


class _Measure(Visitor):
    def __init__(self, stop_above: int | None) -> None:
        self.tally = Tally()
        self.stop_above = stop_above

    def file(self, dir_fd: int, name: str, info: os.stat_result, where: Where) -> None:
        self.tally.files += 1
        self.tally.bytes += info.st_size
        if self.stop_above is not None and self.tally.bytes > self.stop_above:
            self.tally.stopped = True
            raise _Stop

    def enter(self, dir_fd: int, name: str, info: os.stat_result, where: Where) -> None:
        self.tally.directories += 1

    def mount(self, dir_fd: int, name: str, info: os.stat_result, where: Where) -> None:
        self.tally.mounts.append(str(where))


def measure(
    dir_fd: int, name: str, *, stop_above: int | None = None, deadline: Deadline = NO_DEADLINE
) -> Tally:
    """Files, directories and bytes in the entry `name` (mount points listed, not entered);
    with `stop_above`, the walk ends as soon as the bytes pass it."""
    visitor = _Measure(stop_above)
    with suppress(_Stop):
        walk(dir_fd, name, visitor, deadline)
    return visitor.tally


# -- removing ----------------------------------------------------------------------------------


class _Remove(Visitor):
    def __init__(self, skip_mounts: bool) -> None:
        self.skip_mounts = skip_mounts
        self.kept: list[str] = []

    def file(self, dir_fd: int, name: str, info: os.stat_result, where: Where) -> None:
        with suppress(FileNotFoundError):
            os.unlink(name, dir_fd=dir_fd)

    def leave(self, dir_fd: int, name: str, info: os.stat_result, where: Where) -> None:
        try:
            os.rmdir(name, dir_fd=dir_fd)
        except FileNotFoundError:
            pass
        except OSError as exc:
            if not (self.kept and exc.errno in (errno.ENOTEMPTY, errno.EEXIST, errno.EBUSY)):
                raise

    def mount(self, dir_fd: int, name: str, info: os.stat_result, where: Where) -> None:
        if not self.skip_mounts:
            raise Refused(f"{where} is a mount point; nothing in it was deleted")
        self.kept.append(str(where))


def remove(dir_fd: int, name: str, *, skip_mounts: bool = False) -> list[str]:
    """Delete the entry `name` and everything below it, deepest first. A mount point met on
    the way is never entered: it raises Refused, or with `skip_mounts` it stays (with the
    directories holding it); the mount points left are returned."""
    visitor = _Remove(skip_mounts)
    walk(dir_fd, name, visitor)
    return visitor.kept


# -- copying -----------------------------------------------------------------------------------


class _Copy(Visitor):
    """Recreates each entry beneath `dst_fd`: directories (their mode and times set on the
    way back up), regular files (content, mode, times), symlinks as links, FIFOs."""

    def __init__(self, dst_fd: int, dst_name: str) -> None:
        self.top = dst_fd
        self.dst_name = dst_name
        self.current = -1  # the destination directory matching the walk's current one
        self.stack: list[os.stat_result] = []  # fstat of each destination directory open
        self.made_top = False  # dst_name is ours: on failure, only then is it removed

    def _target(self, name: str) -> tuple[int, str]:
        if self.current == -1:
            return self.top, self.dst_name
        return self.current, name

    def file(self, dir_fd: int, name: str, info: os.stat_result, where: Where) -> None:
        dst_fd, dst_name = self._target(name)
        if stat.S_ISLNK(info.st_mode):
            os.symlink(os.readlink(name, dir_fd=dir_fd), dst_name, dir_fd=dst_fd)
        elif stat.S_ISFIFO(info.st_mode):
            os.mkfifo(dst_name, stat.S_IMODE(info.st_mode), dir_fd=dst_fd)
            _copy_times(dst_fd, dst_name, info)
        elif stat.S_ISREG(info.st_mode):
            _copy_file(dir_fd, name, dst_fd, dst_name, where, self._made)
        else:
            raise Refused(f"{where} is a socket or a device, which cannot be copied")
        self._made()

    def _made(self) -> None:
        if self.current == -1:
            self.made_top = True

    def enter(self, dir_fd: int, name: str, info: os.stat_result, where: Where) -> None:
        dst_fd, dst_name = self._target(name)
        os.mkdir(dst_name, 0o700, dir_fd=dst_fd)
        self._made()
        opened = os.open(dst_name, _LIST_FLAGS, dir_fd=dst_fd)
        if self.current != -1:
            os.close(self.current)
        self.current = opened
        self.stack.append(os.fstat(opened))

    def leave(self, dir_fd: int, name: str, info: os.stat_result, where: Where) -> None:
        self.stack.pop()
        # Its owner and attributes once it is complete: a directory given to its user while
        # we still fill it would be theirs to meddle with meanwhile.
        _keep_dir_attributes(self.current, info, dir_fd, name)
        with suppress(OSError):
            _platform.full_fsync(self.current)  # its entries are durable before the source goes
        if self.stack:
            parent = _up(self.current, self.stack[-1], where)
            os.close(self.current)
            self.current = parent
            dst_fd, dst_name = self.current, name
        else:
            os.close(self.current)
            self.current = -1
            dst_fd, dst_name = self.top, self.dst_name
        os.chmod(dst_name, stat.S_IMODE(info.st_mode), dir_fd=dst_fd, follow_symlinks=False)
        _copy_times(dst_fd, dst_name, info)

    def mount(self, dir_fd: int, name: str, info: os.stat_result, where: Where) -> None:
        raise Refused(f"{where} is a mount point; it is not copied")

    def close(self) -> None:
        if self.current != -1:
            os.close(self.current)
            self.current = -1


def copy(
    src_fd: int, name: str, dst_fd: int, dst_name: str, deadline: Deadline = NO_DEADLINE
) -> None:
    """Copy the entry `name` in src_fd to `dst_name` in dst_fd (which must not exist). On
    failure, running out of time included, whatever was copied so far is removed again and
    the error raised."""
    visitor = _Copy(dst_fd, dst_name)
    try:
        walk(src_fd, name, visitor, deadline)
    except BaseException:
        visitor.close()
        if visitor.made_top:
            with suppress(OSError, Refused):
                remove(dst_fd, dst_name, skip_mounts=True)
        raise
    visitor.close()


def _copy_file(
    src_fd: int, name: str, dst_fd: int, dst_name: str, where: Where, made: Callable[[], None]
) -> None:
    source = os.open(name, _READ_FLAGS, dir_fd=src_fd)
    try:
        info = os.fstat(source)
        if not stat.S_ISREG(info.st_mode):
            raise Refused(f"{where} changed while being copied")
        target = os.open(dst_name, _CREATE_FLAGS, 0o600, dir_fd=dst_fd)
        made()
        try:
            while True:
                chunk = os.read(source, _CHUNK)
                if not chunk:
                    break
                view = memoryview(chunk)
                while view:
                    view = view[os.write(target, view) :]
            _keep_attributes(target, info, source)
            os.fchmod(target, stat.S_IMODE(info.st_mode))
            os.utime(target, ns=(info.st_atime_ns, info.st_mtime_ns))
            _platform.full_fsync(target)
        finally:
            os.close(target)
    finally:
        os.close(source)


def _keep_attributes(fd: int, info: os.stat_result, source: int) -> None:
    """The copy `fd` gets the owner and user.* attributes of the file `source` (attributes.
    keep_attributes: one rule for what a file keeps, whether rewritten or moved)."""
    attributes.keep_attributes(fd, info, lambda: attributes.xattrs_of(source))


def _keep_dir_attributes(fd: int, info: os.stat_result, dir_fd: int, name: str) -> None:
    """The copied directory `fd` gets the owner and user.* attributes of the directory
    `name` in dir_fd, if that is still the one copied (`info`)."""
    attributes.keep_attributes(fd, info, lambda: attributes.xattrs_at(dir_fd, name, info))


def _copy_times(dir_fd: int, name: str, info: os.stat_result) -> None:
    with suppress(OSError, NotImplementedError):
        os.utime(
            name, ns=(info.st_atime_ns, info.st_mtime_ns), dir_fd=dir_fd, follow_symlinks=False
        )


# -- questions about a tree --------------------------------------------------------------------


class _Found(Exception):
    pass


class _OnlyDirectories(Visitor):
    def __init__(self) -> None:
        self.found = ""

    def file(self, dir_fd: int, name: str, info: os.stat_result, where: Where) -> None:
        self.found = str(where)
        raise _Found

    def mount(self, dir_fd: int, name: str, info: os.stat_result, where: Where) -> None:
        self.found = str(where)
        raise _Found


def first_non_directory(dir_fd: int, name: str) -> str | None:
    """The first entry below `name` that is not a plain directory of the same mount (a file,
    a symlink, a mount point), as a relative path; None when there is none."""
    visitor = _OnlyDirectories()
    try:
        walk(dir_fd, name, visitor)
    except _Found:
        return visitor.found
    return None
