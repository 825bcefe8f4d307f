"""The file-system operations tools are built on, race-free against the usual traps.

The policy checks a path with every symlink resolved; the operation then uses exactly that
path. It opens the allowed directory holding it (the *root*) once and reaches the path beneath
it without following any symlink, then works through directory fds (`*at` calls). A symlink met
on the way was not there at the check: someone swapped it in between check and use, as in the
MCP filesystem server's advisories after CVE-2025-53109 (there, a parent directory swapped for
a link between check and write). We refuse; we never follow.

Two ways to reach a path, with the same meaning:
- `openat2` (Linux >= 5.6) with RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS:
  the kernel refuses `..` above the root, absolute paths and every symlink, in one call.
  NO_SYMLINKS, not only BENEATH: a link swapped in that stays beneath the root could still
  lead to a file the policy never saw (a secret, `.git/config`).
- a walk, one component at a time, each opened with O_NOFOLLOW and checked to be a directory:
  where openat2 is missing (ENOSYS), refused by a seccomp profile, or on other systems.
Tests run both: `use_openat2 = False` forces the walk.

Special files: only regular files are read or written. Their type is checked with lstat before
opening (opening a device can act: /dev/watchdog arms a reboot), opened O_NONBLOCK (a FIFO
would block) and checked again with fstat. Caps apply to what is read: /proc files say size 0.
"""

from __future__ import annotations

import errno
import functools
import os
import stat
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass

from cli.fs import _platform
from cli.fs.paths import FileId, file_id, is_within
from cli.tools import trees
from cli.tools.base import NO_DEADLINE, Deadline, ToolContext, ToolError
from cli.tools.memory import Fingerprint

BINARY_SNIFF_BYTES = 8192
# Temp files of atomic writes start with this; crash clean-up removes only such names.
TEMP_PREFIX = ".metona-tmp."

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
# O_PATH (Linux) opens a directory for lookups only: no read permission needed, nothing run.
_O_PATH = _platform.O_PATH
_DIR_FLAGS = (_O_PATH or os.O_RDONLY) | os.O_DIRECTORY | _CLOEXEC
# One walk step. Not O_DIRECTORY: with O_PATH|O_NOFOLLOW a symlink would then fail as ENOTDIR,
# hiding what it is; fstat tells instead.
_STEP_FLAGS = (_O_PATH or os.O_RDONLY | os.O_NONBLOCK) | os.O_NOFOLLOW | _CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | _CLOEXEC
_LIST_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NONBLOCK | os.O_NOFOLLOW | _CLOEXEC
_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | _CLOEXEC

# openat2(2)'s resolve flags (the call itself: cli.fs._platform.openat2).
RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_NO_SYMLINKS = 0x04
RESOLVE_BENEATH = 0x08
_RESOLVE = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS

# False forces the component walk even where openat2 works (tests run both ways).
use_openat2 = True


def _no_hook(path: str) -> None:
    """The default `before_use`: nothing happens between check and use."""


# Called with the checked path after the policy's check, just before the file system is
# touched: the race window. Tests swap a symlink in here to prove it is refused.
before_use: Callable[[str], None] = _no_hook


class NotEmpty(ToolError):
    """A directory that is not empty was to be removed without `recursive`."""


class HardLinked(ToolError):
    """A regular file has hard links it did not have when the policy checked it."""


class Binary(ToolError):
    """read_at(text_only=True): the file's first bytes say it is binary (is_binary)."""


@dataclass(frozen=True)
class FileData:
    data: bytes
    size: int  # what fstat said; /proc files say 0 and still have data
    mode: int
    fingerprint: Fingerprint | None = None


@dataclass(frozen=True)
class Written:
    created: bool
    fingerprint: Fingerprint  # the new file, for the next conflict check
    old_mode: int | None = None  # the replaced file's permission bits
    backed_up: bool = False  # the replaced content went to `backup` before the rename


class Conflict(ToolError):
    """The file changed on disk since the model last read or wrote it."""


# The read gate's hook (cli/tools/gate.py): called with the fstat of a file just opened,
# before a byte of it is read; it raises to refuse the read.
Gate = Callable[[os.stat_result], None]

# (old content, old mode) → kept somewhere safe before the old content is replaced.
KeepOld = Callable[[bytes, int], None]
# (directory, temp name) → held while a temp file may exist, so a crash can be cleaned up.
Pending = Callable[[str, str], AbstractContextManager[None]]
# The change store's write-ahead (cli/journal/changes.py `Commit`), given the entry the change acts
# on as it was (None: nothing there) and the bytes its old content is kept in for undo (None:
# not kept): held around the last look and the rename that make the change, which it
# records first.
Commit = Callable[[os.stat_result | None, int | None], AbstractContextManager[object]]
# A save in the same tick of a file system's clock can leave size and mtime as they were:
# a file changed this recently is compared by content before it is replaced (2 s: FAT's).
_SAME_TICK = 2.0


@dataclass(frozen=True)
class Removed:
    kind: str  # "file", "symlink" or "directory"
    counts: dict[str, int] | None = None  # a recursive delete: files and directories removed
    trashed: bool = False  # it went to the trash (False with a trash: deleted for good, as a
    # person agreed, being too large to copy there across file systems)


@dataclass(frozen=True)
class Entry:
    """What is at a checked path now, for a look before deciding (see `inspect`)."""

    info: os.stat_result  # lstat: the entry itself, never what a symlink points to
    parent_mount: trees.MountKey  # the mount of the directory holding it
    tree: trees.Tally | None = None  # a directory's content, when asked for


@dataclass(frozen=True)
class Target:
    """A checked path and the directory it must stay beneath.

    path     absolute, every symlink resolved by the policy (ResolvedPath.real, or .entry for
             what delete removes)
    root     the allowed dir holding it; "/" for a read outside them that a person approved
    shown    how messages name it
    checked  the regular file the policy saw there (ResolvedPath.file), for the hard-link check
    """

    path: str
    root: str
    shown: str
    checked: FileId | None = None

    def __post_init__(self) -> None:
        if not os.path.isabs(self.path) or not is_within(self.path, self.root):
            raise ValueError(f"{self.path} is not below {self.root}")
        if any(part in ("", ".", "..") for part in self.parts):
            raise ValueError(f"{self.path} is not a normalized path")

    @property
    def parts(self) -> tuple[str, ...]:
        """The names from the root down to the path; () for the root itself."""
        below = self.path[len(self.root) :] if self.root != "/" else self.path
        return tuple(below.strip("/").split("/")) if below.strip("/") else ()


def target(ctx: ToolContext, path: str, checked: FileId | None = None) -> Target:
    """The Target for a path the policy checked, anchored to the allowed dir holding it."""
    return Target(path, ctx.root_of(path) or "/", ctx.show(path), checked)


# -- reaching a path -------------------------------------------------------------------------


def _openat2() -> Callable[[int, str, int], int] | None:
    """The openat2 system call, or None where this machine (or the platform layer forced to
    its portable fallbacks) cannot make it."""
    return _platform.openat2(_RESOLVE)


@functools.cache
def openat2_available() -> bool:
    """Whether this kernel answers openat2 (probed once): ENOSYS before 5.6, EPERM or ENOSYS
    where a seccomp profile (older container runtimes) refuses syscalls it does not know."""
    call = _openat2()
    if call is None:
        return False
    top = os.open("/", _DIR_FLAGS)
    try:
        os.close(call(top, ".", _DIR_FLAGS))
    except OSError:
        return False
    finally:
        os.close(top)
    return True


def _kernel_resolves() -> Callable[[int, str, int], int] | None:
    return _openat2() if use_openat2 and openat2_available() else None


def _step(dir_fd: int, name: str) -> int:
    """The directory `name` in dir_fd, opened without following a symlink."""
    call = _kernel_resolves()
    if call is not None:
        return call(dir_fd, name, _DIR_FLAGS)
    fd = os.open(name, _STEP_FLAGS, dir_fd=dir_fd)
    try:
        mode = os.fstat(fd).st_mode
    except BaseException:
        os.close(fd)
        raise
    if stat.S_ISDIR(mode):
        return fd
    os.close(fd)
    code = errno.ELOOP if stat.S_ISLNK(mode) else errno.ENOTDIR
    raise OSError(code, os.strerror(code), name)


def _reach(dir_fd: int, parts: Sequence[str]) -> int:
    """A new fd for the directory `parts` below dir_fd, reached without following any symlink
    and without leaving dir_fd."""
    if not parts:
        return os.open(".", _DIR_FLAGS, dir_fd=dir_fd)
    call = _kernel_resolves()
    if call is not None:
        return call(dir_fd, "/".join(parts), _DIR_FLAGS)
    current = os.open(".", _DIR_FLAGS, dir_fd=dir_fd)
    try:
        for name in parts:
            following = _step(current, name)
            os.close(current)
            current = following
    except BaseException:
        os.close(current)
        raise
    return current


def _open_root(root: str) -> int:
    """The root, reached from / the same way: the allowed dirs were resolved at start, so a
    symlink on the way to one appeared since."""
    top = os.open("/", _DIR_FLAGS)
    if root == "/":
        return top
    try:
        return _reach(top, root.strip("/").split("/"))
    finally:
        os.close(top)


def _make_path(dir_fd: int, parts: Sequence[str], shown: str) -> tuple[int, int | None]:
    """mkdir -p of `parts` below dir_fd, one component at a time, each created with mkdirat
    and then opened like any other (so one swapped for a symlink is refused); the fd of the
    last, and the index of the first part it created (None: all existed)."""
    current = os.open(".", _DIR_FLAGS, dir_fd=dir_fd)
    first: int | None = None
    try:
        for index, name in enumerate(parts):
            last = index == len(parts) - 1
            try:
                following, created = _step_or_create(current, name)
                if created and first is None:
                    first = index
            except NotADirectoryError:
                raise ToolError(
                    f"{shown} exists and is not a directory"
                    if last
                    else f"a part of {shown} ({name}) is a file, not a directory"
                ) from None
            os.close(current)
            current = following
    except BaseException:
        os.close(current)
        raise
    return current, first


def _step_or_create(dir_fd: int, name: str) -> tuple[int, bool]:
    try:
        return _step(dir_fd, name), False
    except FileNotFoundError:
        pass
    try:
        os.mkdir(name, 0o777, dir_fd=dir_fd)
    except FileExistsError:
        return _step(dir_fd, name), False  # made meanwhile: _step checks what it is
    return _step(dir_fd, name), True


@contextmanager
def _located(target: Target, *, make_parents: bool = False) -> Iterator[tuple[int, str]]:
    root_fd = _open_root(target.root)
    try:
        if not target.parts:
            yield root_fd, "."
            return
        *parents, name = target.parts
        if make_parents:
            parent = _make_path(root_fd, parents, target.shown)[0]
        else:
            parent = _reach(root_fd, parents)
        try:
            yield parent, name
        finally:
            os.close(parent)
    finally:
        os.close(root_fd)


@contextmanager
def _errors(target: Target) -> Iterator[None]:
    try:
        yield
    except OSError as exc:
        raise os_error(exc, target.shown, target.path) from None


@contextmanager
def parent_dir(target: Target, *, make_parents: bool = False) -> Iterator[tuple[int, str]]:
    """The directory holding target's last name, as an fd reached beneath target.root without
    following any symlink, and that name ("." for the root itself). Every operation here is
    built on it; build new ones (a trash move, a backup copy) on it too, using only `*at`
    calls with the fd and the name. OSErrors inside become ToolErrors naming the target."""
    before_use(target.path)
    with _errors(target), _located(target, make_parents=make_parents) as where:
        yield where


# -- operations on a checked path -----------------------------------------------------------


def read(target: Target, max_bytes: int, gate: Gate | None = None) -> FileData:
    """The regular file at target, at most max_bytes of it (see read_at)."""
    with parent_dir(target) as (dir_fd, name):
        return read_at(dir_fd, name, target.shown, max_bytes, target.checked, gate=gate)


def identify(target: Target) -> os.stat_result | None:
    """What is at target now, for the read gate to decide on content someone else read (git):
    a regular file is opened as read_at opens it (never through a symlink, never blocking,
    a device never opened) and fstat'ed; anything else is lstat'ed; None when nothing is
    there (or a parent is not a directory). Raises ToolError when it cannot be told."""
    try:
        with _located(target) as (dir_fd, name):
            info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            if not stat.S_ISREG(info.st_mode):
                return info
            fd = os.open(name, _READ_FLAGS, dir_fd=dir_fd)
            try:
                return os.fstat(fd)
            finally:
                os.close(fd)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        raise os_error(exc, target.shown, target.path) from None


def holds(target: Target, data: bytes) -> Fingerprint | None:
    """The fingerprint of the regular file at target if it holds exactly `data`, else None;
    read as read_at reads, a megabyte at a time, and no further than the first difference
    (a rewrite of a big file is not read whole to learn it differs)."""
    with parent_dir(target) as (dir_fd, name):
        fd, info = _open_regular(dir_fd, name, target.shown, target.checked)
        try:
            if info.st_size != len(data):
                return None
            view, at = memoryview(data), 0
            while True:
                chunk = os.read(fd, 1 << 20)
                if not chunk:
                    return Fingerprint.of(info) if at == len(data) else None
                if view[at : at + len(chunk)] != chunk:
                    return None
                at += len(chunk)
        finally:
            os.close(fd)


def write(
    target: Target,
    data: bytes,
    *,
    expect: Fingerprint | None = None,
    backup: KeepOld | None = None,
    backup_limit: int = 0,
    pending: Pending | None = None,
    lose: Fingerprint | None = None,
    commit: Commit | None = None,
) -> Written:
    """Replace target with `data` atomically, creating missing parent directories.

    expect        what the model last saw there: a file that differs now is a Conflict
    backup        gets the old content before it is replaced (files up to backup_limit bytes;
                  a larger one is not replaced, unless it is `lose`)
    pending       held around the temp file's life, for crash clean-up
    lose          the old file a person agreed to lose (too large to keep): only that very
                  file, unchanged since, is replaced without a backup
    commit        records the change before the rename (write-ahead), which happens only if
                  the file is still what was backed up (`_still`): else a Conflict
    """
    if not target.parts:
        raise ToolError(f"{target.shown} is a directory; give a file path")
    directory = os.path.dirname(target.path)
    with parent_dir(target, make_parents=True) as (dir_fd, name):
        return _write_at(
            dir_fd, name, data, target.shown, target.checked,
            expect=expect, backup=backup, backup_limit=backup_limit,
            pending=(lambda temp: pending(directory, temp)) if pending else None, lose=lose,
            commit=commit,
        )  # fmt: skip


def make_dirs(target: Target) -> str | None:
    """mkdir -p beneath target.root, never through a symlink. The first directory it
    created (all below it were created too, target included), or None if target existed."""
    before_use(target.path)
    with _errors(target):
        root_fd = _open_root(target.root)
        try:
            fd, first = _make_path(root_fd, target.parts, target.shown)
            os.close(fd)
        finally:
            os.close(root_fd)
    if first is None:
        return None
    return "/" + "/".join((*_root_parts(target.root), *target.parts[: first + 1]))


def _root_parts(root: str) -> tuple[str, ...]:
    return tuple(p for p in root.split("/") if p)


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


def inspect(
    target: Target,
    *,
    tree: bool = False,
    stop_above: int | None = None,
    deadline: Deadline = NO_DEADLINE,
) -> Entry | None:
    """What is at target now (None: nothing), reached like every operation but without the
    `before_use` hook: a look before deciding, not a use. With `tree`, a directory's content
    is measured too (`trees.measure`, ending once past `stop_above` bytes, or at
    `deadline`)."""
    try:
        with _located(target) as (dir_fd, name):
            info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            tally = None
            if tree and stat.S_ISDIR(info.st_mode) and target.parts:
                tally = trees.measure(dir_fd, name, stop_above=stop_above, deadline=deadline)
            return Entry(info, trees.mount_key(dir_fd), tally)
    except FileNotFoundError:
        return None
    except (OSError, trees.Refused) as exc:
        raise ToolError(f"{target.shown} cannot be looked at: {exc}") from None


def first_non_directory(target: Target) -> str | None:
    """Below the directory target, the first entry that is not a plain directory (a file, a
    symlink, a mount point), relative to target; None when there is none. Any depth."""
    with _errors(target), _located(target) as (dir_fd, name):
        try:
            found = trees.first_non_directory(dir_fd, name)
        except trees.Refused as exc:
            raise ToolError(f"{target.shown} changed while it was being looked at: {exc}") from None
    if found is None:
        return None
    return found.split("/", 1)[1] if "/" in found else "."


@contextmanager
def open_dir(target: Target, hint: str = "") -> Iterator[int]:
    """target as a readable directory fd (for os.scandir and walk), reached like the rest."""
    with parent_dir(target) as (dir_fd, name):
        mode = os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode
        if stat.S_ISLNK(mode):
            raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), name)
        if not stat.S_ISDIR(mode):
            raise ToolError(f"{target.shown} is not a directory", hint)
        fd = os.open(name, _LIST_FLAGS, dir_fd=dir_fd)
    try:
        yield fd
    finally:
        os.close(fd)


def open_subdir(dir_fd: int, name: str) -> int | None:
    """The directory `name` in dir_fd for a walk to enter, or None: never a symlink (O_NOFOLLOW),
    and nothing that is not a directory gets opened (O_DIRECTORY is checked first)."""
    try:
        return os.open(name, _LIST_FLAGS, dir_fd=dir_fd)
    except OSError:
        return None


def read_at(
    dir_fd: int,
    name: str,
    shown: str,
    max_bytes: int,
    checked: FileId | None = None,
    *,
    seen_regular: bool = False,
    text_only: bool = False,
    gate: Gate | None = None,
) -> FileData:
    """Read the regular file `name` in dir_fd: never a symlink, FIFO, socket or device, never
    more than max_bytes (one byte more tells it is over), and not one that has gained hard
    links since `checked` (HardLinked). It is looked at before it is opened (a device is
    never opened), unless the caller has just seen it is a regular file (`seen_regular`: a
    walk's scandir said so); after opening, fstat decides either way. `text_only`: a file
    whose first bytes say it is binary raises Binary before the rest is read. `gate`: the
    read gate's hook, called with the fstat of the opened file before anything is read."""
    fd, info = _open_regular(dir_fd, name, shown, checked, seen_regular=seen_regular, gate=gate)
    try:
        if info.st_size > max_bytes:
            raise too_large(shown, info.st_size, max_bytes)
        data = _read_capped(fd, shown, max_bytes, info.st_size, text_only)
        return FileData(data, info.st_size, info.st_mode, Fingerprint.of(info))
    finally:
        os.close(fd)


def read_below(
    dir_fd: int, relative: str, shown: str, max_bytes: int, gate: Gate | None = None
) -> FileData:
    """read_at for `relative` (a/b/c) below dir_fd, reached without following any symlink and
    without leaving dir_fd (as _reach): for a file a walk saw, read after the walk moved on."""
    *dirs, name = relative.split("/")
    parent = _reach(dir_fd, dirs)
    try:
        return read_at(parent, name, shown, max_bytes, gate=gate)
    finally:
        os.close(parent)


def _open_regular(
    dir_fd: int,
    name: str,
    shown: str,
    checked: FileId | None,
    *,
    seen_regular: bool = False,
    gate: Gate | None = None,
) -> tuple[int, os.stat_result]:
    """The regular file `name` in dir_fd, open for reading (the caller closes the fd), and
    its fstat: looked at before it is opened unless `seen_regular` (read_at says why), never
    through a symlink, never blocking, passed by `gate` if given, and refused if it gained
    hard links since `checked`. A plain function, not a context manager: a search calls it
    for every file."""
    if not seen_regular:
        _require_regular(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode, shown)
    fd = os.open(name, _READ_FLAGS, dir_fd=dir_fd)
    try:
        info = os.fstat(fd)
        _require_regular(info.st_mode, shown)
        if gate is not None:
            gate(info)
        check_links(info, checked, shown)
    except BaseException:
        os.close(fd)
        raise
    return fd, info


def check_links(info: os.stat_result, checked: FileId | None, shown: str) -> None:
    """Refuse a regular file with hard links the policy did not see (and so did not ask
    about): a hard link keeps the path inside while the data is some file elsewhere."""
    if info.st_nlink <= 1 or not stat.S_ISREG(info.st_mode):
        return
    if checked is not None and checked.links > 1 and _same_file(checked, info):
        return  # the very file the person was asked about
    raise HardLinked(
        f"{shown} has {info.st_nlink - 1} other name(s) (hard links) it did not have when it "
        "was checked; they may be outside the allowed directories, so it is not used"
    )


def _same_file(checked: FileId, info: os.stat_result) -> bool:
    return (checked.device, checked.inode) == (info.st_dev, info.st_ino)


# -- the pieces ----------------------------------------------------------------------------


def _require_regular(mode: int, shown: str) -> None:
    if stat.S_ISREG(mode):
        return
    if stat.S_ISLNK(mode):  # the checked path had none here: it changed
        raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), shown)
    hint = "use list_directory" if stat.S_ISDIR(mode) else ""
    raise ToolError(f"{shown} is {describe_kind(mode)}, not a regular file", hint)


def _read_capped(
    fd: int, shown: str, max_bytes: int, expected: int = 0, text_only: bool = False
) -> bytes:
    """Up to max_bytes of fd (more is an error). Having read the `expected` size fstat gave,
    it stops without the read that would only say end-of-file: what was there when it was
    looked at (a file that grew is read on, and then refused past max_bytes). `text_only`:
    the first BINARY_SNIFF_BYTES are read alone, and a binary file goes no further."""
    chunks: list[bytes] = []
    total = 0
    # Asking for the expected size and one byte more (which says the file grew) allocates
    # what the file needs: not a megabyte per small file, nor pieces of a big one to join.
    want = expected + 1 if 0 < expected <= max_bytes else 1 << 20
    if text_only and want > BINARY_SNIFF_BYTES:
        first = os.read(fd, min(BINARY_SNIFF_BYTES, max_bytes + 1))
        if is_binary(first):
            raise Binary(f"{shown} is binary")
        chunks.append(first)
        total = len(first)
        if total > max_bytes:
            raise too_large(shown, total, max_bytes)
        if total == expected or not first:
            return first
    while True:
        chunk = os.read(fd, min(want, max_bytes + 1 - total))
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        total += len(chunk)
        if total > max_bytes:  # the size grew, or fstat lied (procfs says 0)
            raise too_large(shown, total, max_bytes)
        if total == expected:
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _write_at(
    dir_fd: int,
    name: str,
    data: bytes,
    shown: str,
    checked: FileId | None,
    *,
    expect: Fingerprint | None = None,
    backup: KeepOld | None = None,
    backup_limit: int = 0,
    pending: Callable[[str], AbstractContextManager[None]] | None = None,
    lose: Fingerprint | None = None,
    commit: Commit | None = None,
    new_mode: int | None = None,
) -> Written:
    try:
        old: os.stat_result | None = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        old = None
    if old is not None:
        if stat.S_ISDIR(old.st_mode):
            raise ToolError(f"{shown} is a directory; give a file path")
        if stat.S_ISLNK(old.st_mode):
            raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), name)
        if not stat.S_ISREG(old.st_mode):
            raise ToolError(
                f"{shown} is {describe_kind(old.st_mode)}; only regular files are written"
            )
        check_links(old, checked, shown)
    if expect is not None and (old is None or Fingerprint.of(old) != expect):
        what = "was deleted" if old is None else "changed on disk"
        raise Conflict(
            f"{shown} {what} since it was last read (someone else edited it)",
            hint="read it again and base your change on what it holds now",
        )
    # The old permissions without set-id bits: the kernel drops those on any write, too.
    mode = (
        stat.S_IMODE(old.st_mode) & 0o777
        if old
        else (0o666 & ~_umask() if new_mode is None else new_mode)
    )
    backed_up = False
    kept: bytes | None = None
    if old is not None and backup is not None:
        if old.st_size <= backup_limit:
            # read_at refuses a file that grows past the limit while it is read: not replaced.
            kept = read_at(dir_fd, name, shown, backup_limit, checked).data
            backup(kept, mode)  # before the rename: a crash after it loses nothing
            backed_up = True
        elif lose is None or Fingerprint.of(old) != lose:
            # The backstop: what was checked before asking fitted (or was another file); a
            # file that grew since is not replaced without its old content kept.
            raise ToolError(
                f"{shown} holds {human_size(old.st_size)} now, more than a backup keeps "
                f"({human_size(backup_limit)}, policy.limits.max_backup_bytes); not "
                "overwritten, since its old content could not be kept for undo"
            )

    def last_step() -> AbstractContextManager[object]:
        """The write-ahead record (if any) and, inside it, the last look before the rename."""
        step = commit(old, len(kept) if kept is not None else None) if commit else nullcontext()
        return _checked_by(step, lambda: _still(dir_fd, name, old, kept, shown))

    fingerprint = _replace(dir_fd, name, data, mode, pending, last_step, old)
    return Written(old is None, fingerprint, mode if old else None, backed_up)


@contextmanager
def _checked_by(outer: AbstractContextManager[object], look: Callable[[], None]) -> Iterator[None]:
    with outer:
        look()
        yield


def _still(
    dir_fd: int, name: str, old: os.stat_result | None, kept: bytes | None, shown: str
) -> None:
    """The last look before a rename replaces `name`: it is still the file that was looked
    at (and backed up) — same inode, size, change and modification times, and, if it was
    changed within the last tick of a file system's clock, the same content — or nothing
    if nothing was there. A save by someone else in between (another agent, an editor) is a
    Conflict: replacing it would lose it, since no backup holds it."""
    try:
        now: os.stat_result | None = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        now = None
    hint = "read it again and redo the change on what it holds now"
    if old is None:
        if now is not None:
            raise Conflict(f"{shown} was created by someone else while it was being written", hint)
        return
    if now is None:
        raise Conflict(f"{shown} was deleted while it was being written", hint)
    if _stat_key(now) != _stat_key(old) or (
        kept is not None
        and time.time() - now.st_mtime < _SAME_TICK
        and read_at(dir_fd, name, shown, len(kept)).data != kept
    ):
        raise Conflict(
            f"{shown} changed on disk while it was being written (someone saved it meanwhile); "
            "nothing was written",
            hint,
        )


def _stat_key(info: os.stat_result) -> tuple[int, ...]:
    return (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)


def _replace(
    dir_fd: int,
    name: str,
    data: bytes,
    mode: int,
    pending: Callable[[str], AbstractContextManager[None]] | None = None,
    last_step: Callable[[], AbstractContextManager[object]] | None = None,
    old: os.stat_result | None = None,
) -> Fingerprint:
    """Write a temp file beside `name`, fsync, rename over, fsync the directory: the file is
    wholly old or wholly new whatever happens. The rename replaces whatever entry is at `name`
    (a symlink planted there is replaced, not followed). `pending` is held while the temp
    file exists, so that a kill -9 leaves a note of what to clean up; `last_step` around the
    rename and the directory's fsync (the write-ahead record and the last look). `old`: the
    file being replaced (its lstat), whose owner and extended attributes the new one gets
    (keep_attributes)."""
    temp = f"{TEMP_PREFIX}{name[:40]}.{os.getpid()}-{os.urandom(4).hex()}"
    with pending(temp) if pending else nullcontext():
        # One handler around everything up to the rename: a Ctrl-C lands between any two
        # instructions (even between os.open returning and `fd` being bound), and the temp
        # name is ours alone, so unlinking it when it is not there is harmless.
        fd = -1
        try:
            # O_EXCL|O_NOFOLLOW: a link planted at the temp name is refused; 0o600 until the
            # content is complete, so nobody reads a half-written secret.
            fd = os.open(temp, _CREATE_FLAGS, 0o600, dir_fd=dir_fd)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            if old is not None:
                keep_attributes(fd, old, functools.partial(xattrs_at, dir_fd, name, old))
            os.fchmod(fd, mode)
            _platform.full_fsync(fd)
            written = os.fstat(fd)
            fd, closing = -1, fd
            os.close(closing)
            with last_step() if last_step else nullcontext():
                os.replace(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
                _fsync_dir(dir_fd)  # durable before the change is no longer in flight
        except BaseException:
            if fd >= 0:
                os.close(fd)
            _unlink_quietly(dir_fd, temp)
            raise
    return Fingerprint.of(written)


# -- what a file keeps besides its content ----------------------------------------------------

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


def fsync_dir(dir_fd: int) -> None:
    """Make a directory's new entries durable (see _fsync_dir)."""
    _fsync_dir(dir_fd)


def _fsync_dir(dir_fd: int) -> None:
    """Make a rename or unlink in the directory durable (an O_PATH fd cannot be fsynced)."""
    try:
        fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | _CLOEXEC, dir_fd=dir_fd)
    except OSError:
        return
    try:
        _platform.full_fsync(fd)
    except OSError:
        pass  # some file systems refuse fsync on directories; the rename itself happened
    finally:
        os.close(fd)


def _unlink_quietly(dir_fd: int, name: str) -> None:
    try:
        os.unlink(name, dir_fd=dir_fd)
    except OSError:
        pass


def _umask() -> int:
    return _platform.umask()


# -- paths no policy checked (the approval card's diff, session files) ----------------------


def read_regular(path: str, shown: str, max_bytes: int) -> FileData:
    """read() for a path no policy checked: its parent resolved now, its last name never
    followed, the file it names now being the one read. Raises ToolError."""
    unchecked = _unchecked(path, shown)
    with _errors(unchecked), _located(unchecked) as (dir_fd, name):
        return read_at(dir_fd, name, shown, max_bytes, unchecked.checked)


def atomic_write(path: str, data: bytes, *, new_mode: int | None = None) -> bool:
    """write() for a path no policy checked, its parent existing (session files). Keeps the
    mode of an existing file; a new one gets `new_mode` (default: 0o666 less the umask) from
    the start. True when it did not exist. OSErrors propagate as they are."""
    unchecked = _unchecked(path, path)
    with _located(unchecked) as (dir_fd, name):
        written = _write_at(dir_fd, name, data, path, unchecked.checked, new_mode=new_mode)
        return written.created


def _unchecked(path: str, shown: str) -> Target:
    absolute = os.path.abspath(path)
    parent, name = os.path.split(absolute)
    real = os.path.join(os.path.realpath(parent), name) if name else absolute
    return Target(real, "/", shown, file_id(real))


# -- messages -------------------------------------------------------------------------------


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


def is_binary(data: bytes) -> bool:
    return b"\x00" in data[:BINARY_SNIFF_BYTES]


def human_size(size: int) -> str:
    value = float(size)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1024 or unit == "GB":
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")
