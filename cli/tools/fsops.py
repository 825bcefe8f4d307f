"""The few file-system operations tools are built on, each safe against the usual traps:
special files that block, symlinks swapped in at the last component, half-written files.
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass

from cli.tools.base import ToolError

_READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
BINARY_SNIFF_BYTES = 8192


@dataclass(frozen=True)
class FileData:
    data: bytes
    size: int  # what fstat said; /proc files say 0 and still have data
    mode: int


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


def _os_error(exc: OSError, shown: str) -> ToolError:
    if exc.errno == errno.ENOENT:
        return ToolError(f"{shown} does not exist")
    if exc.errno == errno.ELOOP:
        return ToolError(f"{shown} is a symlink that changed or loops; refusing to follow it")
    if exc.errno in (errno.EACCES, errno.EPERM):
        return ToolError(f"permission denied: {shown}")
    if exc.errno == errno.ENOTDIR:
        return ToolError(f"a parent of {shown} is not a directory")
    if exc.errno == errno.ENAMETOOLONG:
        return ToolError(f"{shown}: name too long")
    return ToolError(f"{shown}: {exc.strerror or exc}")


def read_regular(path: str, shown: str, max_bytes: int) -> FileData:
    """Read a regular file of at most `max_bytes` without ever reading more than that, and
    without blocking on FIFOs or devices (opened non-blocking, checked with fstat first)."""
    try:
        fd = os.open(path, _READ_FLAGS)
    except OSError as exc:
        raise _os_error(exc, shown) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            hint = "; use list_directory" if stat.S_ISDIR(info.st_mode) else ""
            raise ToolError(f"{shown} is {describe_kind(info.st_mode)}, not a regular file{hint}")
        if info.st_size > max_bytes:
            raise too_large(shown, info.st_size, max_bytes)
        chunks, total = [], 0
        while True:
            chunk = os.read(fd, min(1 << 20, max_bytes + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > max_bytes:  # the size grew, or fstat lied (procfs says 0)
                raise too_large(shown, total, max_bytes)
        return FileData(b"".join(chunks), info.st_size, info.st_mode)
    except OSError as exc:
        raise _os_error(exc, shown) from None
    finally:
        os.close(fd)


def too_large(shown: str, size: int, limit: int) -> ToolError:
    return ToolError(f"{shown} is too large ({human_size(size)}; the limit is {human_size(limit)})")


def is_binary(data: bytes) -> bool:
    return b"\x00" in data[:BINARY_SNIFF_BYTES]


def atomic_write(path: str, data: bytes) -> bool:
    """Replace `path` with `data` so that it is either wholly old or wholly new, whatever
    happens: write a temp file beside it, fsync, rename over, fsync the directory. Keeps the
    mode of an existing file. Returns True when the file did not exist before."""
    directory, name = os.path.split(path)
    try:
        old = os.lstat(path)
    except FileNotFoundError:
        old = None
    if old is not None and not stat.S_ISREG(old.st_mode):
        raise ToolError(f"{path} is {describe_kind(old.st_mode)}; only regular files are written")
    mode = stat.S_IMODE(old.st_mode) if old else 0o666 & ~_umask()
    temp = os.path.join(directory, f".{name}.metona-tmp-{os.getpid()}-{os.urandom(4).hex()}")
    # O_EXCL|O_NOFOLLOW: a symlink planted at the temp name is refused, never followed;
    # 0o600 until the content is complete, so nobody reads a half-written secret.
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(temp, flags, 0o600)
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        os.fchmod(fd, mode)
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        _unlink_quietly(temp)
        raise
    os.close(fd)
    try:
        os.replace(temp, path)
    except BaseException:
        _unlink_quietly(temp)
        raise
    fsync_dir(directory)
    return old is None


def fsync_dir(directory: str) -> None:
    """Make a rename or unlink in `directory` durable."""
    try:
        fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some file systems refuse fsync on directories; the rename itself happened
    finally:
        os.close(fd)


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _umask() -> int:
    # The only portable way to read the umask is to set it; this runs in the main thread only.
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def human_size(size: int) -> str:
    value = float(size)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1024 or unit == "GB":
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")
