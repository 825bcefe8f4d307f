"""Writing a checked path: atomically (a temp file renamed over), never over a file someone
changed since it was looked at (Conflict), the old content kept for undo first (`backup`), and
the change recorded before the rename that makes it (`commit`)."""

from __future__ import annotations

import errno
import functools
import os
import stat
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass

from cli.errors import ToolError
from cli.fs import _platform
from cli.fs.attributes import keep_attributes, xattrs_at
from cli.fs.fingerprint import Fingerprint
from cli.fs.paths import FileId
from cli.fs.reach import _CLOEXEC, _CREATE_FLAGS, Target, _located, _unchecked, parent_dir
from cli.fs.reading import check_links, read_at
from cli.fs.wording import describe_kind
from cli.units import human_size

# Temp files of atomic writes start with this; crash clean-up removes only such names.
TEMP_PREFIX = ".metona-tmp."


@dataclass(frozen=True)
class Written:
    created: bool
    fingerprint: Fingerprint  # the new file, for the next conflict check
    old_mode: int | None = None  # the replaced file's permission bits
    backed_up: bool = False  # the replaced content went to `backup` before the rename


class Conflict(ToolError):
    """The file changed on disk since the model last read or wrote it."""


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
        else (0o666 & ~_platform.umask() if new_mode is None else new_mode)
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


def atomic_write(path: str, data: bytes, *, new_mode: int | None = None) -> bool:
    """write() for a path no policy checked, its parent existing (session files). Keeps the
    mode of an existing file; a new one gets `new_mode` (default: 0o666 less the umask) from
    the start. True when it did not exist. OSErrors propagate as they are."""
    unchecked = _unchecked(path, path)
    with _located(unchecked) as (dir_fd, name):
        written = _write_at(dir_fd, name, data, path, unchecked.checked, new_mode=new_mode)
        return written.created
