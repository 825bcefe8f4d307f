"""What the agent changed, and how to take it back: a journal of changes with the previous
content of every overwritten file and a trash for every deleted one, in
`$XDG_STATE_HOME/metona-agent/changes/` (outside anything the model can write: the policy
blocks it). Bounded in size: the oldest backups go first, but never one taken by this store's
own session (this `agent run`, this `agent chat`): when the store cannot hold one more without
dropping one of those, it goes over its limit instead, and the agent asks a person before any
change that would need that (cli/tools/preflight.py).

    journal.jsonl      one JSON record per change, append-only; `{"void": ID}` says change
                       ID was recorded but never made (it failed, or its process died first)
    blobs/ID           the content a change replaced
    trash/ID/NAME      what a change deleted (a file, a link, or a whole tree)
    pending/MARKER     a write in flight: the temp file to remove if we die mid-way
    pending/M.change   a change in flight: how the next start tells whether it was made

Write-ahead (`committing`): a change is recorded, durably, before the step that makes it (a
rename), under the store's lock, which is held until that step is done: at every instant the
file is either unchanged, or changed and recorded. A change that fails is voided at once; one
whose process died mid-way is looked at by the next process to open the store (`_recover`),
which voids it if it was not made, and puts back what a half-done move displaced.

An undo is a change like any other, recorded with what it replaced: undoing it redoes. Read
together (`Timeline`), the journal is an editor's undo stack: each change of the agent's is
done or undone, repeated undos walk back through them, a redo re-applies the last undo, and a
new change by the agent clears what could be redone. Every change carries its `turn`: one
`Agent.run()` (one message in chat, one `agent run`), or one undo or redo, so that a turn is
taken back, and brought back, in one step.

Sizes are measured, and evicted backups removed, through directory fds at any depth, never
following a symlink and never entering another mount (cli/fs/trees.py): a bind mount that
ended up in the trash is someone's data, not ours to count or empty.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

from cli.backends.messages import JSONTooDeep, loads_json
from cli.errors import StateCorrupt, Unrecorded
from cli.fs import _platform, trees
from cli.fs.stored import (
    MAX_JOURNAL_BYTES,
    MAX_NOTE_BYTES,
    MAX_RECORD_BYTES,
    MAX_STORED_DEPTH,
    parse_json,
    read_capped,
    size_text,
)

Action = Literal["create", "overwrite", "delete", "mkdir", "restore", "rmdir", "move"]
# What undoing each action does, and so what the undo is recorded as.
INVERSE: dict[str, Action] = {
    "create": "delete",
    "overwrite": "overwrite",
    "delete": "restore",
    "restore": "delete",
    "mkdir": "rmdir",
    "rmdir": "mkdir",
    "move": "move",  # back where it came from
}


@dataclass(frozen=True)
class Change:
    tool: str  # write_file, edit_file, delete_file, create_directory, move_file, or "undo"
    action: Action
    path: str  # absolute, symlinks resolved (as the policy checked it)
    kind: str = "file"  # file, directory or symlink
    size: int = 0  # bytes of the new content
    mode: int | None = None  # permission bits of what the backup holds
    backup: str | None = None  # blobs/NAME or trash/SLOT/NAME, relative to the store
    after: str | None = None  # sha256 of the file right after the change (None: no file)
    undoes: int | None = None
    # A move: where the entry came from (`path` is where it went; `backup`, if any, is what
    # it replaced there, in the trash).
    origin: str | None = None
    id: int = 0  # given by ChangeStore.record
    time: str = ""
    session: str = ""
    # The name a person knows its session by (a chat's saved name, a run's `run-<time>`, as
    # `agent sessions` and the audit log name them): undo says where a change came from. ""
    # in records written before it existed.
    session_name: str = ""
    # The step that made it: the agent's turn, or the one undo or redo that recorded it.
    turn: str = ""
    kept: int | None = None  # bytes the backup holds, measured when recorded
    # The sha256 of a file backup's content, when known as it was kept (an overwrite's blob):
    # undo checks a backup against its size and this before it restores anything. None in
    # records written before it existed, and for trees and moved-away files (size only).
    kept_sha256: str | None = None
    evicted: bool = False  # the backup was dropped to stay under max_backup_bytes

    @property
    def undoable(self) -> bool:
        return not self.evicted and (self.backup is not None or self.action not in _NEEDS_BACKUP)


_NEEDS_BACKUP = frozenset({"overwrite", "delete"})


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


Identity = tuple[int, int]  # device and inode


def identity(info: os.stat_result | None) -> Identity | None:
    return None if info is None else (info.st_dev, info.st_ino)


@dataclass(frozen=True)
class Check:
    """How a later process tells whether a change in flight when its process died was made,
    from the entry at `path`:

    replace  made when an entry is there that is not `was` (an overwrite renames a new inode
             over the old; a create makes one where there was none)
    remove   made when `was` is no longer there (a delete moved it to the trash)
    arrive   made when `was` is there (a move: the source's inode at the destination)
    make     made when an entry is there (a mkdir)

    `back`: a rename (from, to) to undo when it was not made: a move over an existing entry
    moves that one to the trash first, and it comes back if the move itself never happened."""

    kind: Literal["replace", "remove", "arrive", "make"]
    path: str
    was: Identity | None = None
    back: tuple[str, str] | None = None

    def made(self) -> bool:
        try:
            now: Identity | None = identity(os.lstat(self.path))
        except OSError:
            now = None
        if self.kind == "replace":
            return now is not None and now != self.was
        if self.kind == "remove":
            return now != self.was
        if self.kind == "arrive":
            return now is not None and now == self.was
        return now is not None

    def as_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "path": self.path, "was": self.was, "back": self.back}

    @staticmethod
    def from_json(data: Any) -> Check:
        """A marker's check, read back as untrusted: ValueError/TypeError/KeyError if odd."""
        kind, path, was, back = data["kind"], data["path"], data["was"], data["back"]
        if kind not in ("replace", "remove", "arrive", "make") or not isinstance(path, str):
            raise ValueError("not a check")
        pair = (int(was[0]), int(was[1])) if was is not None else None
        moved = (str(back[0]), str(back[1])) if back is not None else None
        return Check(kind, path, pair, moved)


@dataclass
class ChangeStore:
    """The journal and its backups. Every method takes the store's lock, so two agents in
    the same home keep one consistent journal."""

    root: Path
    max_bytes: int = 256 * 1024 * 1024
    # Whose backups eviction must leave alone: the changes recorded with this session. Empty:
    # a new one, so each store (one per `agent run`, `agent chat`, `agent undo`) is its own.
    session: str = ""
    # The name people know this session by (a chat's saved name; it changes with /load and
    # /save), recorded with each change as its `session_name`.
    name: str = ""
    clock: Callable[[], float] = time.time
    # The agent's turn in progress (`new_turn`): recorded with each change that sets none.
    turn: str = ""
    _next: int = field(default=0, init=False)
    # What the journal said when last read: each read parses only what was appended since.
    _index: _Index | None = field(default=None, init=False, repr=False)
    # A session made here has no change before this process started: the journal's summary
    # (journal.index) then says all a write needs, without reading the journal.
    _fresh: bool = field(default=False, init=False, repr=False)
    _recovered: bool = field(default=False, init=False, repr=False)

    def __post_init__(self) -> None:
        if not self.session:
            self.session = f"{os.getpid()}-{os.urandom(4).hex()}"
            self._fresh = True

    @property
    def journal(self) -> Path:
        return self.root / "journal.jsonl"

    # -- recording ------------------------------------------------------------------------

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

    def record(self, change: Change) -> Change:
        """Append `change` with its id and time filled in, for a change already made (one
        that cannot fail half-way: see `committing` for the rest); drop old backups if over
        size (never this session's: see `_evict`)."""
        with self._locked():
            change = self._stamped(change)
            self._append(change)
            self._evict()
            self._save_summary()
            return change

    @contextlib.contextmanager
    def committing(self, change: Change, check: Check) -> Iterator[Change]:
        """Write-ahead: record `change` durably, then run the body (the step that makes it,
        and the last look before it), under the store's lock: two agents cannot interleave
        their last look and rename. If the body raises, the record is voided; if this process
        dies inside, a marker tells the next one (`_recover`). Raises Unrecorded, before
        anything is done, when the record cannot be written (a full disk)."""
        with self._locked():
            change = self._stamped(change)
            marker = self._mark(change, check)
            try:
                self._append(change)
            except BaseException:
                _unlink(marker)
                raise
            try:
                yield change
            except Exception:
                # The body raises before its rename (a conflict, a full disk): not made.
                if self._void(change):
                    _unlink(marker)  # else the next start tries again
                raise
            except BaseException:
                # A Ctrl-C may land just after the rename: the file says whether it was.
                if check.made() or self._void(change):
                    _unlink(marker)
                raise
            _unlink(marker)
            self._evict()
            self._save_summary()

    def _stamped(self, change: Change) -> Change:
        """`change` with its id (one more than the journal's last, as the index and the
        journal's own last lines say), time, session, turn and backup size. Under the lock."""
        number = max(self._indexed().last_id, self._last_id_written()) + 1
        stamp = datetime.fromtimestamp(self.clock(), timezone.utc).isoformat(timespec="seconds")
        change = replace(
            change,
            id=number,
            time=stamp,
            session=change.session or self.session,
            session_name=change.session_name or self.name,
            turn=change.turn or self.turn,
        )
        if change.backup is not None and change.kept is None:
            change = replace(change, kept=self._size(change.backup))
        return change

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

    def new_turn(self) -> str:
        """Start a turn (Agent.run does, for each message): the changes recorded until the
        next one carry its id."""
        self.turn = new_step("turn")
        return self.turn

    @contextlib.contextmanager
    def as_turn(self, turn: str) -> Iterator[None]:
        """Record the changes made inside as step `turn` (one undo or redo), then go back to
        the agent's turn."""
        agents, self.turn = self.turn, turn
        try:
            yield
        finally:
            self.turn = agents

    def room(self) -> int:
        """How many more bytes of backups the store holds without dropping one of this
        session's (negative once a person let it go over the limit): older sessions'
        backups do not count, eviction drops them first."""
        with self._locked():
            own = self._indexed().own
        return self.max_bytes - own

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

    # -- reading --------------------------------------------------------------------------

    def history(self) -> list[Change]:
        """Every change, oldest first."""
        with self._locked():
            return self._read()

    def get(self, number: int) -> Change | None:
        return next((c for c in self.history() if c.id == number), None)

    def changes_of_turn(self, turn: str) -> list[Change]:
        """What the agent changed in turn `turn` (oldest first; its undos are not among them):
        chat's list of turns shows these as the files each one changed."""
        return [c for c in self.history() if turn and c.turn == turn and c.tool != "undo"]

    def backup_bytes(self, change: Change) -> bytes:
        return self.backup_path(change).read_bytes()

    def backup_path(self, change: Change) -> Path:
        """Where the change's backup is; ValueError for a name that is not one of ours
        (`blobs/NAME`, `trash/SLOT/NAME`): a forged journal must not point undo, or
        eviction, anywhere else."""
        assert change.backup is not None
        return self.root.joinpath(*backup_parts(change.backup))

    # -- internals ------------------------------------------------------------------------

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(self.root / ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            _platform.lock_exclusive(fd)
            if not self._recovered:
                self._recovered = True
                self._recover()
            yield
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

    def _unrecorded(self, exc: OSError, what: str = "record the change") -> Unrecorded:
        why = exc.strerror or str(exc)
        return Unrecorded(
            f"the change store ({self.root}) could not {what} ({why}), so the change was "
            "not made: free some space there, or set policy.limits.max_backup_bytes lower"
        )

    def _evict(self) -> None:
        """Drop the oldest backups until the store fits in `max_bytes`, never one of this
        session's: a change this run or chat made stays undoable while it runs (the agent
        asks a person before a change that takes the store over, cli/tools/preflight.py).
        The journal's running total says whether anything must go: nothing is measured."""
        if self._indexed().total <= self.max_bytes:
            return
        index = self._indexed(complete=True)
        for change in list(index.changes.values()):
            if index.total <= self.max_bytes:
                break
            if not change.backup or change.evicted or self._protected(change):
                continue
            with contextlib.suppress(OSError, ValueError):
                self._drop(change.backup)
            self._append({"evict": change.id})
            index = self._indexed()  # reads the eviction back: the total goes down

    def _protected(self, change: Change) -> bool:
        return change.session == self.session and not change.evicted

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


class Backup:
    """writing.write's `backup` callback: stores the old content in `store` just before it is
    replaced, and remembers where (`name`; None if the write kept nothing)."""

    def __init__(self, store: ChangeStore) -> None:
        self.store = store
        self.name: str | None = None
        self.sha256: str | None = None  # of what was kept

    def __call__(self, old: bytes, _mode: int) -> None:
        self.name = self.store.keep(old)
        self.sha256 = sha256(old)


class Commit:
    """The file operations' `commit` hook (cli/fs/writing.py): records the change `make`
    builds from the entry it acts on (and the bytes its old content is kept in, None if not
    kept) before the step that makes it (ChangeStore.committing), and remembers what it
    recorded (`change`; None until then)."""

    def __init__(
        self,
        store: ChangeStore,
        make: Callable[[os.stat_result | None, int | None], tuple[Change, Check]],
    ) -> None:
        self.store = store
        self.make = make
        self.change: Change | None = None

    @contextlib.contextmanager
    def __call__(self, entry: os.stat_result | None, kept: int | None) -> Iterator[None]:
        change, check = self.make(entry, kept)
        with self.store.committing(change, check) as recorded:
            self.change = recorded
            yield


# -- the journal as an undo stack ---------------------------------------------------------------


class Timeline:
    """The journal read as an editor's undo stack; pure, nothing on disk is looked at.

    Undoing the agent's change C is recorded as U (`undoes` C), redoing it as R (`undoes` U),
    undoing it again as U' (`undoes` R)…: C's chain, whose newest record is its `tip`. An odd
    number of steps from C to its tip: C is undone now. One undo or redo is one step: all the
    records it made carry its `turn` (a whole turn's undo is one step, so one redo)."""

    def __init__(self, changes: Sequence[Change]) -> None:
        self.changes = sorted(changes, key=lambda c: c.id)
        self._by_id = {c.id: c for c in self.changes}
        self._root: dict[int, int] = {}
        self.depth: dict[int, int] = {}  # steps from the chain's start: odd takes back
        self.undone_by: dict[int, int] = {}  # a record → the newest record that undoes it
        self._tip: dict[int, Change] = {}
        for change in self.changes:
            # Only an earlier record: a forged `undoes` cannot make a loop.
            parent = self._by_id.get(change.undoes) if change.undoes is not None else None
            if parent is None or parent.id >= change.id:
                self._root[change.id], self.depth[change.id] = change.id, 0
            else:
                self._root[change.id] = self._root[parent.id]
                self.depth[change.id] = self.depth[parent.id] + 1
                self.undone_by[parent.id] = change.id
            self._tip[self._root[change.id]] = change

    def get(self, number: int) -> Change | None:
        return self._by_id.get(number)

    def original(self, change: Change) -> Change:
        """The agent's change that `change` (an undo, a redo) is about; itself for one."""
        return self._by_id[self._root[change.id]]

    def is_original(self, change: Change) -> bool:
        return change.tool != "undo" and self._root[change.id] == change.id

    def tip(self, change: Change) -> Change:
        """The newest record of the chain `change` is in: what undoing it now inverts."""
        return self._tip[self._root[change.id]]

    def is_undone(self, change: Change) -> bool:
        return self.depth[self.tip(change).id] % 2 == 1

    def live(self, scope: str | None) -> list[Change]:
        """The agent's changes not undone now, within `scope` (None: anywhere), newest first."""
        return [
            c
            for c in reversed(self.changes)
            if self.is_original(c) and not self.is_undone(c) and within(c, scope)
        ]

    def elsewhere(self, scope: str | None) -> int:
        """How many of the agent's changes not undone now are outside `scope`."""
        return len(self.live(None)) - len(self.live(scope))

    def turn_of(self, change: Change, scope: str | None) -> list[Change]:
        """The changes of `change`'s turn not undone now, within `scope`, newest first."""
        if not change.turn:
            return [change]
        return [c for c in self.live(scope) if c.turn == change.turn]

    def next_redo(self, scope: str | None) -> list[Change]:
        """The records of the newest undo not redone yet, newest first (a redo undoes them),
        within `scope`; none once the agent changed something within it since (a new change
        clears the redo stack, as in an editor)."""
        mine = [c.id for c in self.changes if self.is_original(c) and within(c, scope)]
        latest = max(mine, default=0)
        steps: dict[str, list[Change]] = {}
        for change in self.changes:
            if change.tool == "undo":
                steps.setdefault(change.turn or f"#{change.id}", []).append(change)
        for records in sorted(steps.values(), key=lambda rs: rs[-1].id, reverse=True):
            takes_back = [r for r in records if r.undoes is not None]
            if records[0].id < latest or not takes_back:
                continue
            if any(self.depth[r.id] % 2 == 0 for r in takes_back):
                continue  # a redo: undoing it is an undo
            if not all(within(r, scope) for r in records):
                continue
            left = [r for r in records if r.id not in self.undone_by]  # a redo cut short
            if left:
                return left[::-1]
        return []


def within(change: Change, directory: str | None) -> bool:
    """Is every path `change` touches (both ends of a move) in `directory` (None: anywhere)?"""
    if directory is None:
        return True
    inside = directory.rstrip("/") + "/"
    return all(p == directory or p.startswith(inside) for p in (change.path, change.origin) if p)


def new_step(kind: str) -> str:
    """A new id for a turn, or for one undo or redo."""
    return f"{kind}-{int(time.time())}-{os.urandom(4).hex()}"


_TEXT, _NUMBER, _NONE = (str,), (int,), (type(None),)
# What each field of a journal record may hold: a Change's fields as record() writes them
# (`evicted` is never written: an eviction is a record of its own).
_FIELD_TYPES: dict[str, tuple[type, ...]] = {
    "tool": _TEXT,
    "action": _TEXT,
    "path": _TEXT,
    "kind": _TEXT,
    "size": _NUMBER,
    "mode": _NUMBER + _NONE,
    "backup": _TEXT + _NONE,
    "after": _TEXT + _NONE,
    "undoes": _NUMBER + _NONE,
    "origin": _TEXT + _NONE,
    "id": _NUMBER,
    "time": _TEXT,
    "session": _TEXT,
    "session_name": _TEXT,
    "turn": _TEXT,
    "kept": _NUMBER + _NONE,
    "kept_sha256": _TEXT + _NONE,
}
_REQUIRED = ("id", "tool", "action", "path")
_JSON_KINDS = {
    bool: "true or false",
    int: "a number",
    float: "a number",
    str: "text",
    list: "a list",
    dict: "an object",
    type(None): "null",
}


class _BadLine(ValueError):
    """A journal line that is JSON but no record this store writes; `offset`: where it starts
    in the journal (set by the reader, which turns it into a line number)."""

    offset = 0


def _change(data: dict[str, Any]) -> Change:
    """A journal record as a Change, every field of the type record() writes: anything else
    raises _BadLine, so that nothing later (history, undo, eviction) meets a field it cannot
    use."""
    fields = {k: v for k, v in data.items() if k in _FIELD_TYPES}
    for key in _REQUIRED:
        if key not in fields:
            raise _BadLine(f"a record without {key}")
    for key, value in fields.items():
        if isinstance(value, bool) or not isinstance(value, _FIELD_TYPES[key]):
            raise _BadLine(f"its {key} is {_JSON_KINDS.get(type(value), 'odd')}")
        if isinstance(value, int) and not 0 <= value <= (0o7777 if key == "mode" else 2**62):
            raise _BadLine(f"its {key} is out of range")
    if fields["action"] not in INVERSE:
        raise _BadLine(f"its action {str(fields['action'])[:40]!r} is not one this store records")
    return Change(**fields)


TEMP_PREFIX = ".metona-tmp."  # as cli/fs/writing.py names temp files
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


def _named_id(line: bytes) -> int | None:
    """The id a journal line names (a record's, or a void's or an eviction's), if it is one
    of ours; None for anything else (a torn line, odd JSON)."""
    if not line.startswith(b"{") or len(line) > MAX_RECORD_BYTES:
        return None
    try:
        data = loads_json(line, MAX_STORED_DEPTH)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    number = next((data[k] for k in ("id", "void", "evict") if k in data), None)
    if isinstance(number, int) and not isinstance(number, bool) and 0 <= number <= 2**62:
        return number
    return None


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
