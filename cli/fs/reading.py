"""Reading what is at a checked path: a regular file's bytes (never a symlink, FIFO, socket or
device, never more than a cap, never one that gained hard links since the check), and a look
at an entry before deciding (inspect). Reached as cli/fs/reach.py reaches every path."""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass

from cli.errors import ToolError
from cli.fs import trees
from cli.fs.deadline import NO_DEADLINE, Deadline
from cli.fs.fingerprint import Fingerprint
from cli.fs.paths import FileId
from cli.fs.reach import (
    _READ_FLAGS,
    Target,
    _errors,
    _located,
    _reach,
    _unchecked,
    parent_dir,
)
from cli.fs.wording import describe_kind, os_error, too_large

BINARY_SNIFF_BYTES = 8192


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


# The read gate's hook (cli/tools/gate.py): called with the fstat of a file just opened,
# before a byte of it is read; it raises to refuse the read.
Gate = Callable[[os.stat_result], None]


@dataclass(frozen=True)
class Entry:
    """What is at a checked path now, for a look before deciding (see `inspect`)."""

    info: os.stat_result  # lstat: the entry itself, never what a symlink points to
    parent_mount: trees.MountKey  # the mount of the directory holding it
    tree: trees.Tally | None = None  # a directory's content, when asked for


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


def read_regular(path: str, shown: str, max_bytes: int) -> FileData:
    """read() for a path no policy checked: its parent resolved now, its last name never
    followed, the file it names now being the one read. Raises ToolError."""
    unchecked = _unchecked(path, shown)
    with _errors(unchecked), _located(unchecked) as (dir_fd, name):
        return read_at(dir_fd, name, shown, max_bytes, unchecked.checked)


def is_binary(data: bytes) -> bool:
    return b"\x00" in data[:BINARY_SNIFF_BYTES]
