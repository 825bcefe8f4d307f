"""The change journal's file, journal.jsonl: appending one record, whole and durable or not
at all, and reading it back as an index (`_Index`: the changes by id, and the bytes their live
backups hold), parsed only as far as it grew since the last read, with the summary a write
leaves (journal.index) standing for the journal up to its offset in the next process. Read as
untrusted: a line that is no record of ours stops the reading (StateCorrupt).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from cli.backends.messages import JSONTooDeep, loads_json
from cli.errors import StateCorrupt
from cli.fs import _platform
from cli.fs.stored import (
    MAX_JOURNAL_BYTES,
    MAX_NOTE_BYTES,
    MAX_RECORD_BYTES,
    MAX_STORED_DEPTH,
    parse_json,
    read_capped,
    size_text,
)
from cli.journal.backups import BackupFiles, _fsync_dir, _write_all
from cli.journal.records import Change, _BadLine, _change, _named_id


@dataclass
class _Index:
    """The journal as parsed so far: its changes by id (in id order), how many of its bytes
    were read, and the bytes the live backups hold (all, and this session's)."""

    key: tuple[int, int]  # device and inode of the journal read
    offset: int = 0
    changes: dict[int, Change] = field(default_factory=dict)
    total: int = 0
    own: int = 0
    last_id: int = 0
    # False: built on journal.index, `changes` holds only what came after its offset.
    complete: bool = True

    def forget(self, change: Change, kept: int, own: bool) -> None:
        self.total -= kept
        if own:
            self.own -= kept


def _tail_hash(fd: int, offset: int) -> str:
    """What the journal holds just before `offset`: the summary is for these very bytes."""
    start = max(0, offset - 512)
    return hashlib.sha256(os.pread(fd, offset - start, start)).hexdigest()


class JournalFile(BackupFiles):
    """The part of ChangeStore (cli/journal/changes.py) that appends to the journal and reads
    it back."""

    session: str
    _index: _Index | None
    _fresh: bool

    @property
    def journal(self) -> Path:
        return self.root / "journal.jsonl"

    def _last_id_written(self) -> int:
        """The highest id the journal's last lines name (records, voids, evictions): ids come
        from the journal itself, never only from journal.index, which may disagree."""
        try:
            fd = os.open(self.journal, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return 0
        try:
            size = os.fstat(fd).st_size
            for span in (64 * 1024, 2 * MAX_RECORD_BYTES + 2):
                start = max(0, size - span)
                tail = os.pread(fd, size - start, start)
                lines = tail.split(b"\n")[1 if start else 0 : -1]
                numbers = [_named_id(line) for line in lines]
                found = [n for n in numbers if n is not None]
                if found or start == 0:
                    return max(found, default=0)
            return 0
        finally:
            os.close(fd)

    def _read(self) -> list[Change]:
        """The journal's changes in id order. Called under the lock."""
        return list(self._indexed(complete=True).changes.values())

    def _indexed(self, *, complete: bool = False) -> _Index:
        """The journal as parsed, brought up to date: only the lines appended since the last
        call are parsed (the journal only grows, by whole lines, under the lock), so a write
        costs the same however long the history is. At a process's first call, the summary
        a write left (journal.index) stands for everything before its offset, unless
        `complete` (every change is wanted: history, undo, eviction). A journal replaced
        or cut (its inode or size says so) is read again from the start. Under the lock."""
        try:
            fd = os.open(self.journal, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            self._index = None
            return _Index((0, 0))
        try:
            info = os.fstat(fd)
            if info.st_size > MAX_JOURNAL_BYTES:
                raise StateCorrupt(
                    f"the change journal {self.journal} is larger than "
                    f"{size_text(MAX_JOURNAL_BYTES)}: move it away to start a new history "
                    "(the changes in it can then no longer be undone)"
                )
            key = (info.st_dev, info.st_ino)
            index = self._index
            if index is None or index.key != key or info.st_size < index.offset:
                index = (self._summary(fd, info) if not complete else None) or _Index(key)
            elif complete and not index.complete:
                index = _Index(key)
            try:
                appended = os.pread(fd, max(info.st_size - index.offset, 0), index.offset)
                if not self._parse_appended(index, appended):
                    # A line about a change before the summary's offset: read it all.
                    index = _Index(key)
                    self._parse_appended(index, os.pread(fd, info.st_size, 0))
            except _BadLine as bad:
                line = os.pread(fd, bad.offset, 0).count(b"\n") + 1
                raise StateCorrupt(
                    f"the change journal {self.journal}, line {line}: {bad}; it is not as this "
                    "agent writes it: remove that line, or move the file away to start a new "
                    "history"
                ) from None
        finally:
            os.close(fd)
        self._index = index
        return index

    def _parse_appended(self, index: _Index, appended: bytes) -> bool:
        end = appended.rfind(b"\n") + 1  # a torn last line (a crash mid-append) waits
        start = 0
        while start < end:
            stop = appended.index(b"\n", start)
            try:
                if not self._parse_into(index, appended[start:stop]):
                    return False
            except _BadLine as bad:
                bad.offset = index.offset + start
                raise
            start = stop + 1
        index.offset += end
        return True

    def _parse_into(self, index: _Index, line: bytes) -> bool:
        """Apply one journal line; False if it needs what a partial index does not have.
        The journal is ours, but it is read as untrusted (a sandbox that cannot hide it may
        let a command rewrite it): a line that is JSON but not a record this store writes
        raises _BadLine; one that is not JSON was torn by a crash and is passed over."""
        if len(line) > MAX_RECORD_BYTES:
            raise _BadLine(f"a line longer than {size_text(MAX_RECORD_BYTES)}")
        if not line.strip():
            return True
        try:
            data = loads_json(line, MAX_STORED_DEPTH)
        except JSONTooDeep:
            raise _BadLine(f"nested deeper than {MAX_STORED_DEPTH} levels") from None
        except ValueError:
            if not line.startswith(b"{"):  # a torn line is the start of one of ours
                raise _BadLine("not a record (not JSON)") from None
            return True  # a line torn by a crash and appended to since: it never completed
        if not isinstance(data, dict):
            raise _BadLine("not a record (a JSON object)")
        if data.get("void") is not None:
            number = data["void"]
            if not isinstance(number, int) or isinstance(number, bool):
                raise _BadLine("void is not a change's id")
            old = index.changes.get(number)
            if old is None:
                return index.complete or number > index.last_id
            if old.backup and not old.evicted:
                index.forget(old, self._kept(old), self._protected(old))
            del index.changes[number]
            return True
        if data.get("evict") is not None:
            number = data["evict"]
            if not isinstance(number, int) or isinstance(number, bool):
                raise _BadLine("evict is not a change's id")
            old = index.changes.get(number)
            if old is None:
                return index.complete
            if not old.evicted:
                index.forget(old, self._kept(old), self._protected(old))
                index.changes[old.id] = replace(old, evicted=True)
            return True
        change = _change(data)
        old = index.changes.get(change.id)
        if old is None and not index.complete and change.id <= index.last_id:
            return False
        if old is not None and old.backup and not old.evicted:
            index.forget(old, self._kept(old), self._protected(old))
        if index.changes and change.id < next(reversed(index.changes)) and old is None:
            index.changes[change.id] = change  # out of order (a hand-edited journal)
            index.changes = dict(sorted(index.changes.items()))
        else:
            index.changes[change.id] = change
        index.last_id = max(index.last_id, change.id)
        if change.backup and not change.evicted:
            kept = self._kept(change)
            index.total += kept
            if self._protected(change):
                index.own += kept
        return True

    # -- the summary: journal.index ------------------------------------------------------

    @property
    def _summary_path(self) -> Path:
        return self.root / "journal.index"

    def _summary(self, fd: int, info: os.stat_result) -> _Index | None:
        """The index journal.index describes, if it describes this journal as it is up to
        its offset (the same file, and the same bytes just before the offset); else None.
        Only for a fresh session: the summary counts none of its backups as its own."""
        if not self._fresh:
            return None
        try:
            data = parse_json(read_capped(self._summary_path, MAX_NOTE_BYTES))
            offset, last_id, total = int(data["offset"]), int(data["last_id"]), int(data["total"])
            key = (int(data["device"]), int(data["inode"]))
            tail = str(data["tail"])
        except (OSError, ValueError, TypeError, KeyError):
            return None
        if key != (info.st_dev, info.st_ino) or not 0 <= offset <= info.st_size:
            return None
        if _tail_hash(fd, offset) != tail or min(last_id, total) < 0:
            return None
        return _Index(key, offset, {}, total, 0, last_id, complete=False)

    def _save_summary(self) -> None:
        """Write journal.index for the next process (no fsync: a summary lost or stale after
        a crash is only noticed and not used; the journal is what counts)."""
        index = self._index
        if index is None:
            return
        try:
            fd = os.open(self.journal, os.O_RDONLY | os.O_CLOEXEC)
            try:
                tail = _tail_hash(fd, index.offset)
            finally:
                os.close(fd)
            summary = {
                "device": index.key[0],
                "inode": index.key[1],
                "offset": index.offset,
                "last_id": index.last_id,
                "total": index.total,
                "tail": tail,
            }
            temp = self.root / f".journal.index.{os.getpid()}-{os.urandom(4).hex()}"
            temp.write_text(json.dumps(summary))
            os.replace(temp, self._summary_path)
        except OSError:
            pass  # the next process reads the journal instead

    def _append(self, record: Change | dict[str, Any]) -> None:
        """One line, whole and durable, or none: a short or failed write (a full disk) is cut
        back off and raises Unrecorded, so the journal never holds half a line that the next
        append would glue a record onto."""
        data = asdict(record) if isinstance(record, Change) else record
        if isinstance(record, Change):
            data.pop("evicted")
        line = (json.dumps(data, ensure_ascii=True) + "\n").encode("utf-8")
        try:
            fd = os.open(self.journal, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise self._unrecorded(exc) from None
        try:
            end = os.fstat(fd).st_size
            if end and os.pread(fd, 1, end - 1) != b"\n":
                # A line torn by a crash stays torn (and passed over); this record starts a
                # line of its own instead of completing it into one that is not JSON.
                line = b"\n" + line
            try:
                _write_all(fd, line)
                _platform.full_fsync(fd)
            except OSError as exc:
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, end)
                    _platform.full_fsync(fd)
                raise self._unrecorded(exc) from None
            created = end == 0
        finally:
            os.close(fd)
        if created:  # the journal's first line: its entry in the directory made durable too
            _fsync_dir(self.journal.parent)

    def _protected(self, change: Change) -> bool:
        return change.session == self.session and not change.evicted
