"""Changes and writes in flight, and what is left of them when their process dies: the
markers in `pending/` (a change's, with the Check that tells whether it was made; a write's,
naming its temp file), voiding a change that was not made, and the next process's recovery
(`_recover`, under the store's lock; `clean_stale`, for the temp files).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path

from cli.errors import Unrecorded
from cli.fs.stored import MAX_NOTE_BYTES, parse_json, read_capped
from cli.journal.backups import _unlink, _write_private
from cli.journal.index import JournalFile
from cli.journal.records import Change, Check, identity

TEMP_PREFIX = ".metona-tmp."  # as cli/fs/writing.py names temp files


def _put_back(check: Check, trash: Path) -> None:
    """Undo the rename `check.back` names (a displaced entry back from our `trash`), if it
    is still there and its place is free; never over anything, never from elsewhere (the
    marker is read as untrusted)."""
    if check.back is None:
        return
    source, place = check.back
    inside = os.path.realpath(os.path.dirname(source)).startswith(str(trash) + os.sep)
    if not inside or not os.path.lexists(source) or os.path.lexists(place):
        return
    with contextlib.suppress(OSError):
        os.rename(source, place)


def _finish_linked_move(check: Check, change: Change) -> None:
    """A move made by link, then unlink (the platform layer's portable fallback, where no
    no-replace rename exists) whose process died between the two: the entry has arrived and
    its old name is still there, the same inode under both. The old name goes, as the move
    would have removed it; only a name of that very inode, which lives on at the
    destination, so nothing can be lost (the marker is read as untrusted)."""
    if change.origin is None or check.path != change.path or check.was is None:
        return
    parent, name = os.path.split(change.origin)
    try:
        dir_fd = os.open(parent or ".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        if identity(info) == check.was and identity(os.lstat(check.path)) == check.was:
            os.unlink(name, dir_fd=dir_fd)
    except OSError:
        pass
    finally:
        os.close(dir_fd)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process
    return True


class InFlight(JournalFile):
    """The part of ChangeStore (cli/journal/changes.py) that marks changes and writes in
    flight, voids a change not made, and recovers from a process that died mid-way."""

    def _mark(self, change: Change, check: Check) -> Path:
        """The marker of a change in flight (not fsynced: a kill leaves it in the page
        cache; after a power loss the record may stand for a change not made)."""
        marker = self.root / "pending" / f"{os.getpid()}-{os.urandom(6).hex()}.change"
        note = {"change": change.id, "session": change.session, "check": check.as_json()}
        try:
            _write_private(marker, json.dumps(note).encode(), sync=False)
        except OSError as exc:
            _unlink(marker)
            raise self._unrecorded(exc, "note the change in flight") from None
        return marker

    def _void(self, change: Change) -> bool:
        """Record that `change` was never made, and drop the blob kept for it (a trash slot
        it was to fill stays, empty: its owner removes it). False if the journal could not
        take the line."""
        try:
            self._append({"void": change.id})
        except Unrecorded:
            return False
        if change.backup and change.backup.startswith("blobs/"):
            with contextlib.suppress(OSError, ValueError):
                self._drop(change.backup)
        return True

    def _recover(self) -> None:
        """The changes whose process died while they were in flight: each that was not made
        is voided (and what a half-done move displaced put back). Under the lock, once per
        store: the first operation of a process does it."""
        try:
            markers = [m for m in (self.root / "pending").iterdir() if m.suffix == ".change"]
        except OSError:
            return
        for marker in markers:
            pid = marker.name.split("-", 1)[0]
            if not pid.isdigit() or _alive(int(pid)):
                continue
            try:
                note = parse_json(read_capped(marker, MAX_NOTE_BYTES))
                number, session = int(note["change"]), str(note["session"])
                check = Check.from_json(note["check"])
            except (OSError, ValueError, TypeError, KeyError, IndexError):
                _unlink(marker)  # not one of ours to act on
                continue
            change = self._indexed(complete=True).changes.get(number)
            if change is not None and change.session == session and not check.made():
                _put_back(check, (self.root / "trash").resolve())
                if not self._void(change):
                    continue  # the marker stays for the next start
            elif change is not None and change.session == session and check.kind == "arrive":
                _finish_linked_move(check, change)
            _unlink(marker)

    # -- writes in flight -----------------------------------------------------------------

    @contextlib.contextmanager
    def pending(self, directory: str, temp: str) -> Iterator[None]:
        """Held while an atomic write's temp file may exist: a marker names it, so that
        `clean_stale` removes it if this process dies (kill -9, power loss) mid-write."""
        markers = self.root / "pending"
        markers.mkdir(parents=True, exist_ok=True, mode=0o700)
        marker = markers / f"{os.getpid()}-{os.urandom(6).hex()}"
        # Not fsynced: a kill -9 leaves it in the page cache; a power loss may lose it, and
        # then only a temp file (never mistaken for data) is left behind.
        note = json.dumps({"dir": directory, "temp": temp}).encode()
        try:
            _write_private(marker, note, sync=False)
        except OSError as exc:
            _unlink(marker)
            raise self._unrecorded(exc, "note the write in flight") from None
        try:
            yield
        finally:
            with contextlib.suppress(OSError):
                marker.unlink()

    def clean_stale(self) -> int:
        """Remove the temp files of writes whose process died; how many were removed."""
        removed = 0
        try:
            markers = list((self.root / "pending").iterdir())
        except FileNotFoundError:
            return 0
        for marker in markers:
            pid = marker.name.split("-", 1)[0]
            if marker.suffix == ".change" or not pid.isdigit() or _alive(int(pid)):
                continue  # a change in flight is _recover's (under the lock)
            with contextlib.suppress(OSError, ValueError, TypeError, LookupError):
                note = parse_json(read_capped(marker, MAX_NOTE_BYTES))
                temp = str(note["temp"])
                # Only our own temp names, and only as a plain name in that directory.
                if temp.startswith(TEMP_PREFIX) and "/" not in temp:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(os.path.join(str(note["dir"]), temp))
                        removed += 1
            with contextlib.suppress(OSError):
                marker.unlink()
        return removed
