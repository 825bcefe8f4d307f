"""The backups a change store keeps, on disk under its root: `blobs/ID` (the content a change
replaced) and `trash/SLOT/NAME` (what a change deleted). Keeping one, making a trash slot,
where a backup is (only a name this store makes: a forged journal points nowhere else), its
size, and dropping it, through directory fds that follow no link and enter no other mount
(cli/fs/trees.py); and the private, durable writes the whole store is made of.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path

from cli.errors import Unrecorded
from cli.fs import _platform, trees
from cli.journal.records import Change

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def backup_parts(backup: str) -> tuple[str, ...]:
    """The names in a backup's store-relative path, checked to be one this store makes."""
    parts = tuple(backup.split("/"))
    shape = {"blobs": 2, "trash": 3}.get(parts[0])
    if shape != len(parts) or any(p in ("", ".", "..") or "\x00" in p for p in parts):
        raise ValueError(f"{backup!r} is not a backup of this store")
    return parts


def _unlink(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.unlink()


def _write_private(path: Path, data: bytes, *, sync: bool = True) -> None:
    """With `sync`, durable: the data and, by an fsync of the directory, the new entry (a
    file fsynced whose directory was not can be gone after a power loss on some file
    systems, while the journal that names it survives)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        _write_all(fd, data)
        if sync:
            _platform.full_fsync(fd)
    finally:
        os.close(fd)
    if sync:
        _fsync_dir(path.parent)


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        _platform.full_fsync(fd)
    except OSError:
        pass  # some file systems refuse fsync on a directory; the file itself is synced
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


class BackupFiles:
    """The part of ChangeStore (cli/journal/changes.py) that keeps, finds, measures and drops
    its backups."""

    root: Path
    clock: Callable[[], float]

    def keep(self, content: bytes) -> str:
        """Store the content a change is about to replace; its name for `Change.backup`.
        Called before the change, so a crash in between loses nothing."""
        blob = self.root / "blobs" / f"{int(self.clock() * 1000)}-{os.urandom(4).hex()}"
        try:
            _write_private(blob, content)
        except OSError as exc:
            _unlink(blob)  # a short blob is no backup
            raise self._unrecorded(exc, "keep the old content") from None
        return self.relative(blob)

    def discard(self, backup: str) -> None:
        """Remove a backup no change was recorded for (the write it was kept for failed)."""
        with contextlib.suppress(OSError, ValueError):
            self._drop(backup)

    def trash_slot(self) -> Path:
        """A new, empty, private directory for one delete to move its entry into."""
        trash = self.root / "trash"
        slot = trash / f"{int(self.clock() * 1000)}-{os.urandom(4).hex()}"
        try:
            trash.mkdir(parents=True, exist_ok=True, mode=0o700)
            slot.mkdir(mode=0o700)
        except OSError as exc:
            raise self._unrecorded(exc, "make room in the trash") from None
        return slot

    def relative(self, path: Path) -> str:
        return str(path.relative_to(self.root))

    def backup_bytes(self, change: Change) -> bytes:
        return self.backup_path(change).read_bytes()

    def backup_path(self, change: Change) -> Path:
        """Where the change's backup is; ValueError for a name that is not one of ours
        (`blobs/NAME`, `trash/SLOT/NAME`): a forged journal must not point undo, or
        eviction, anywhere else."""
        assert change.backup is not None
        return self.root.joinpath(*backup_parts(change.backup))

    def _unrecorded(self, exc: OSError, what: str = "record the change") -> Unrecorded:
        why = exc.strerror or str(exc)
        return Unrecorded(
            f"the change store ({self.root}) could not {what} ({why}), so the change was "
            "not made: free some space there, or set policy.limits.max_backup_bytes lower"
        )

    def _kept(self, change: Change) -> int:
        if change.backup is None:
            return 0
        return change.kept if change.kept is not None else self._size(change.backup)

    def _size(self, backup: str) -> int:
        """`measure`, or 0 for a backup that cannot be measured."""
        try:
            return self.measure(backup)
        except (OSError, ValueError, trees.Refused):
            return 0

    def measure(self, backup: str) -> int:
        """Bytes the backup holds now, as `Change.kept` measured them when it was recorded:
        files, links' own size; never across a mount, any depth. FileNotFoundError when it is
        gone; ValueError for a name not ours; OSError or trees.Refused when it cannot be."""
        with self._at(backup_parts(backup)) as (dir_fd, name):
            os.stat(name, dir_fd=dir_fd, follow_symlinks=False)  # a walk passes over it gone
            return trees.measure(dir_fd, name).bytes

    def _drop(self, backup: str) -> None:
        """Remove a backup: a blob, or a delete's whole trash slot (deepest first, never
        through a link, and what a mount point in it holds stays untouched)."""
        slot = backup_parts(backup)[:2]  # blobs/NAME, or trash/SLOT: the slot goes with it
        with contextlib.suppress(FileNotFoundError, trees.Refused), self._at(slot) as (fd, name):
            trees.remove(fd, name, skip_mounts=True)

    @contextlib.contextmanager
    def _at(self, parts: tuple[str, ...]) -> Iterator[tuple[int, str]]:
        """The directory holding the last of `parts` (checked by backup_parts), as an fd
        reached from the store's root without following any link, and that name."""
        *parents, name = parts
        fd = os.open(self.root, _DIR_FLAGS)
        try:
            for part in parents:
                following = os.open(part, _DIR_FLAGS, dir_fd=fd)
                os.close(fd)
                fd = following
            yield fd, name
        finally:
            os.close(fd)
