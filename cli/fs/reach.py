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
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from cli.errors import ToolError
from cli.fs import _platform
from cli.fs.paths import FileId, file_id, is_within
from cli.fs.wording import os_error

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


def _unchecked(path: str, shown: str) -> Target:
    absolute = os.path.abspath(path)
    parent, name = os.path.split(absolute)
    real = os.path.join(os.path.realpath(parent), name) if name else absolute
    return Target(real, "/", shown, file_id(real))
