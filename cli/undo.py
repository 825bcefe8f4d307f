"""Taking a change back (`agent undo`, `/undo`): what undoing it would do, and doing it.

An undo is itself a change, recorded with what it replaced, so undoing it redoes. It works on
the path exactly as recorded (symlinks resolved when the change was made), reached from / with
no symlink followed on the way; and it never silently overwrites something that changed
since: that is a conflict the caller must confirm.

Every look at what is there now goes through directory fds at any depth (a 2,000-level tree a
`create_directory` made is checked and moved to the trash like a flat one), and every failure
is an UndoError: one line, never a traceback.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from cli.changes import INVERSE, Backup, Change, ChangeStore, sha256
from cli.errors import AgentError
from cli.paths import FileId
from cli.tools import fsops
from cli.tools.base import ToolError

FILE_LIMIT = 1 << 30  # reading a file back to compare or keep it; undo never refuses below


class UndoError(AgentError):
    """Nothing to undo, or it cannot be undone (say why)."""


@dataclass(frozen=True)
class Plan:
    change: Change
    summary: str  # what undoing it does, one line
    conflict: str | None = None  # what changed since, when undoing would overwrite it


def plan(store: ChangeStore, number: int | None, shown: Callable[[str], str] = str) -> Plan:
    """What undoing change `number` (the last change when None) would do."""
    changes = store.history()
    if not changes:
        raise UndoError("nothing to undo: no change has been recorded yet")
    change = changes[-1] if number is None else next((c for c in changes if c.id == number), None)
    if change is None:
        raise UndoError(f"no change #{number}; `agent history` lists them")
    if change.evicted and change.action != "move":  # a move goes back; see _unmove
        raise UndoError(
            f"change #{change.id} can no longer be undone: its backup was dropped to keep the "
            "store under policy.limits.max_backup_bytes (by a later session; a session never "
            "drops its own)"
        )
    if change.action in ("overwrite", "delete") and change.backup is None:
        raise UndoError(
            f"change #{change.id} kept no backup (too large to keep, as a person agreed): it "
            "cannot be undone"
        )
    try:
        if change.backup is not None:
            store.backup_path(change)  # one of the store's own names, or refused
        fsops.Target(change.path, "/", change.path)
    except ValueError:
        raise UndoError(
            f"change #{change.id} names a path or backup the agent never records (is the "
            "journal forged?); not undone"
        ) from None
    path = shown(change.path)
    summary = {
        "create": f"delete {path}, which change #{change.id} created (into the trash)",
        "overwrite": f"put back the content {path} had before change #{change.id}",
        "delete": f"bring {path} back from the trash",
        "restore": f"move {path} back to the trash",
        "mkdir": f"remove the directory {path}, which change #{change.id} created",
        "rmdir": f"create the directory {path} again",
        "move": f"move {path} back to {shown(change.origin or '')}"
        + (
            ", and bring back from the trash what it replaced"
            if change.backup and not change.evicted
            else ""
        ),
    }[change.action]
    try:
        conflict = _conflict(change, path)
    except ToolError as exc:
        raise UndoError(f"change #{change.id} cannot be undone now: {exc}") from None
    except OSError as exc:
        why = exc.strerror or exc
        raise UndoError(f"change #{change.id} cannot be undone now: {why}") from None
    return Plan(change, summary, conflict)


def apply(store: ChangeStore, undo: Plan, *, overwrite: bool = False) -> Change:
    """Do what `undo` says; a conflict needs `overwrite` (after a person said yes)."""
    if undo.conflict and not overwrite:
        raise UndoError(f"{undo.conflict}; not undone (nothing overwritten)")
    change = undo.change
    target = fsops.Target(change.path, "/", change.path)
    try:
        return _INVERT[change.action](store, change, target)
    except ToolError as exc:
        raise UndoError(f"change #{change.id} was not undone: {exc}") from None
    except OSError as exc:
        raise UndoError(f"change #{change.id} was not undone: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise UndoError(f"change #{change.id} was not undone: {exc}") from None


# -- what changed since ------------------------------------------------------------------------


def _conflict(change: Change, path: str) -> str | None:
    state = _state(change.path)
    if change.action in ("create", "overwrite", "restore"):
        if state is None:
            return f"{path} was deleted since change #{change.id}"
        if change.after is not None and state != change.after:
            return f"{path} changed since change #{change.id}"
    if change.action in ("delete", "rmdir") and state is not None:
        return f"{path} exists again since change #{change.id}"
    if change.action == "move":
        if state is None:
            return f"{path} was moved or deleted since change #{change.id}; nothing to move back"
        if change.origin is not None and _state(change.origin) is not None:
            return f"{change.origin} exists again since change #{change.id}"
    if change.action == "mkdir":
        if state is None:
            return None  # nothing left to remove: applying it will say so
        if state != "dir:empty":
            raise UndoError(f"{path} holds files now; not removed (move them out first)")
    return None


def _state(path: str) -> str | None:
    """None when nothing is there; the sha256 of a regular file; a word for anything else:
    "dir:empty" for a directory holding nothing but directories (what a `mkdir -p` left,
    untouched since), "dir" for one that holds a file, a link or a mount point. Looked at
    through dir fds, at any depth, never following a link."""
    target = fsops.Target(path, "/", path)
    entry = fsops.inspect(target)
    if entry is None:
        return None
    info = entry.info
    if stat.S_ISDIR(info.st_mode):
        return "dir:empty" if fsops.first_non_directory(target) is None else "dir"
    if not stat.S_ISREG(info.st_mode):
        return "other"
    if info.st_size > FILE_LIMIT:
        return "large"
    # The file as it is (hard links included: this only hashes it).
    seen = FileId(info.st_dev, info.st_ino, info.st_nlink)
    return sha256(fsops.read(fsops.Target(path, "/", path, seen), FILE_LIMIT).data)


# -- the inverse of each action -----------------------------------------------------------------


def _uncreate(store: ChangeStore, change: Change, target: fsops.Target) -> Change:
    """A created file (or a restored entry) goes to the trash; undoing that restores it."""
    slot = store.trash_slot()
    removed = fsops.remove(target, recursive=True, trash=str(slot), trash_limit=FILE_LIMIT)
    backup = store.relative(slot / os.path.basename(change.path))
    return _record(store, change, kind=removed.kind, backup=backup)


def _put_back(store: ChangeStore, change: Change, target: fsops.Target) -> Change:
    """The content before the change comes back; what is there now is kept for a redo."""
    old = store.backup_bytes(change)
    backup = Backup(store)
    try:
        # Over FILE_LIMIT what is there now could not be kept: fsops refuses, nothing lost.
        written = fsops.write(
            target, old, backup=backup, backup_limit=FILE_LIMIT, pending=store.pending
        )
    except (ToolError, OSError):
        if backup.name:
            store.discard(backup.name)
        raise
    if change.mode is not None:
        os.chmod(change.path, change.mode, follow_symlinks=False)
    return _record(
        store, change, size=len(old), mode=written.old_mode, backup=backup.name,
        after=sha256(old),
    )  # fmt: skip


def _restore(store: ChangeStore, change: Change, target: fsops.Target) -> Change:
    """A deleted entry comes back from the trash, where it was moved."""
    if _state(change.path) is not None:  # confirmed over a conflict: keep what is there
        _uncreate(store, Change("undo", "restore", change.path), target)
    source = store.backup_path(change)
    fsops.move_back(target, str(source), change.kind)
    after = _state(change.path)
    return _record(store, change, kind=change.kind, after=after if change.kind == "file" else None)


def _rmdir(store: ChangeStore, change: Change, target: fsops.Target) -> Change:
    """The directories a create_directory made go (to the trash: if a file appeared in them
    after the check, it is not lost)."""
    if _state(change.path) is None:
        raise UndoError(f"{change.path} no longer exists; nothing to undo")
    slot = store.trash_slot()
    fsops.remove(target, recursive=True, trash=str(slot), trash_limit=FILE_LIMIT)
    backup = store.relative(slot / os.path.basename(change.path))
    return _record(store, change, kind="directory", backup=backup)


def _mkdir(store: ChangeStore, change: Change, target: fsops.Target) -> Change:
    if change.backup is not None:
        fsops.move_back(target, str(store.backup_path(change)), "directory")
    else:
        fsops.make_dirs(target)
    return _record(store, change, kind="directory")


def _unmove(store: ChangeStore, change: Change, target: fsops.Target) -> Change:
    """The entry goes back where it came from, and what it replaced (if kept) comes back
    from the trash. Undoing that moves it again (over what came back: a conflict a person
    confirms, and what is there goes to the trash first)."""
    from cli.tools.moves import rename  # the tools' own rename: never over an entry

    if change.origin is None:
        raise UndoError(f"change #{change.id} does not say where the entry came from")
    origin = fsops.Target(change.origin, "/", change.origin)
    if _state(change.origin) is not None:
        # Confirmed over a conflict: what is there now is kept in the trash.
        _uncreate(store, Change("undo", "restore", change.origin), origin)
    if _state(change.path) is None:
        raise UndoError(f"{change.path} no longer exists; nothing to move back")
    rename(target, origin)
    if change.backup and not change.evicted:
        kept = store.backup_path(change)
        kind = "symlink" if os.path.islink(kept) else "file"  # only these are replaced
        fsops.move_back(target, str(kept), kind)
    return _record(store, change, kind=change.kind, origin=change.path)


_INVERT: dict[str, Callable[[ChangeStore, Change, fsops.Target], Change]] = {
    "create": _uncreate,
    "restore": _uncreate,
    "overwrite": _put_back,
    "delete": _restore,
    "mkdir": _rmdir,
    "rmdir": _mkdir,
    "move": _unmove,
}


def _record(store: ChangeStore, change: Change, **fields: Any) -> Change:
    path = change.origin if change.action == "move" and change.origin else change.path
    undo = Change("undo", INVERSE[change.action], path, undoes=change.id or None)
    return store.record(replace(undo, **fields))
