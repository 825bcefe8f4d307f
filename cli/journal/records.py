"""The change journal's records, and reading them back: a `Change` (one line of
journal.jsonl), the `Check` a change in flight is recorded with (how a later process tells
whether it was made), and a journal line checked field by field before it is taken for a
record (the journal is read as untrusted: cli/journal/index.py).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from typing import Any, Literal

from cli.backends.messages import loads_json
from cli.fs.stored import MAX_RECORD_BYTES, MAX_STORED_DEPTH

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
