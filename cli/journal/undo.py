"""Taking a change back (`agent undo`, `/undo`, `agent redo`): which records one undo or redo
inverts (`choose`, walking the journal as an undo stack: cli/journal/timeline.py `Timeline`), what
inverting each would do (`plan_change`), and doing it (`apply`).

An undo is itself a change, recorded with what it replaced, so undoing it redoes. It works on
the path exactly as recorded (symlinks resolved when the change was made), reached from / with
no symlink followed on the way; and it never silently overwrites something that changed
since: that is a conflict the caller must confirm.

Every look at what is there now goes through directory fds at any depth (a 2,000-level tree a
`create_directory` made is checked and moved to the trash like a flat one), and every failure
is an UndoError: one line, never a traceback.

Before anything of an undo or redo is written, every backup it would restore is checked
against its record (`precheck`): there, as large as when it was kept (`Change.kept`), and an
overwrite's blob holding the same bytes (`Change.kept_sha256`). A backup that is not is never
restored: written over the file, it would lose what is there now for something that never was.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Literal

from cli.errors import AgentError, ToolError, Unrecorded
from cli.fs import delete, reach, reading, trashcan, trees, writing
from cli.fs.paths import FileId
from cli.journal.changes import Backup, ChangeStore, Commit
from cli.journal.records import INVERSE, Change, Check, identity, sha256
from cli.journal.timeline import Timeline, new_step

FILE_LIMIT = 1 << 30  # reading a file back to compare or keep it; undo never refuses below


class UndoError(AgentError):
    """Nothing to undo, or it cannot be undone (say why)."""


@dataclass(frozen=True)
class Plan:
    change: Change
    summary: str  # what undoing it does, one line
    conflict: str | None = None  # what changed since, when undoing would overwrite it


@dataclass(frozen=True)
class Step:
    """What one `agent undo` or `agent redo` inverts: records, in this order (each the tip
    of its chain), and the agent's changes they are about (`originals`, in step)."""

    kind: Literal["undo", "redo"]
    changes: tuple[Change, ...]
    originals: tuple[Change, ...]
    turn: bool = False  # a whole turn
    # Per record, whether inverting it brings its original back (it is an undo: odd steps
    # down its chain) rather than taking it back.
    redoes: tuple[bool, ...] = ()


def choose(
    store: ChangeStore,
    number: int | None = None,
    *,
    turn: bool = False,
    redo: bool = False,
    scope: str | None = None,
    shown: Callable[[str], str] = str,
) -> Step:
    """The next undo (the newest change not undone, within `scope`: a directory, None for
    anywhere), change `number`'s undo, the undo of its whole turn (`turn`), or the redo of
    the last undo (`redo`)."""
    changes = store.history()
    if not changes:
        raise UndoError(f"nothing to {'redo' if redo else 'undo'}: no change has been recorded yet")
    line = Timeline(changes)
    if redo:
        records = line.next_redo(scope)
        if not records:
            where = f" under {shown(scope)}" if scope else ""
            raise UndoError(
                f"nothing to redo{where}: no undo since the agent's last change there "
                "(a new change clears what could be redone)"
            )
        undone = tuple(line.original(r) for r in records)
        return Step("redo", tuple(records), undone, redoes=(True,) * len(records))
    if number is not None:
        first = _numbered(line, number)
    else:
        found = line.live(scope)
        if not found:
            raise UndoError(_nothing_left(line, scope, shown))
        first = found[0]
    if not line.is_original(first):  # an undo or redo, by its id: inverted as it is
        odd = line.depth[first.id] % 2 == 1
        return Step("undo", (first,), (line.original(first),), redoes=(odd,))
    originals = line.turn_of(first, None if number is not None else scope) if turn else [first]
    tips = tuple(line.tip(c) for c in originals)
    return Step("undo", tips, tuple(originals), turn, redoes=(False,) * len(tips))


def _numbered(line: Timeline, number: int) -> Change:
    change = line.get(number)
    if change is None:
        raise UndoError(f"no change #{number}; `agent history` lists them")
    if line.is_original(change) and line.is_undone(change):
        tip = line.tip(change).id
        raise UndoError(
            f"change #{number} is already undone (by #{tip}); `agent redo` brings back the "
            f"last undo, `agent undo {tip}` this one"
        )
    if not line.is_original(change) and change.id in line.undone_by:
        raise UndoError(f"change #{number} is already taken back (by #{line.undone_by[number]})")
    return change


def _nothing_left(line: Timeline, scope: str | None, shown: Callable[[str], str]) -> str:
    others = line.elsewhere(scope)
    if scope is not None and others:
        many = "change" if others == 1 else "changes"
        return (
            f"nothing to undo under {shown(scope)}: {others} {many} elsewhere; "
            "`agent undo --all` takes back the newest of them, `agent undo ID` one from "
            "`agent history`"
        )
    return "nothing left to undo: every change recorded is undone (`agent redo` redoes the last)"


def plan(store: ChangeStore, number: int | None, shown: Callable[[str], str] = str) -> Plan:
    """What undoing change `number` (the newest not undone, anywhere, when None) would do,
    its backup checked (`precheck`)."""
    return precheck(store, choose(store, number), shown)[0]


def precheck(store: ChangeStore, step: Step, shown: Callable[[str], str] = str) -> list[Plan]:
    """Before anything of `step` is done: every record it inverts can be (backups kept, names
    ours, each backup whole: `_damage`), and the conflicts of those that meet the files as they
    are now, the first of the step to touch each path (a later one meets what an earlier one
    put back, and is looked at when its turn comes). Every backup is checked before the
    first record is inverted: a turn with one damaged backup is not half undone."""
    touched: list[str] = []
    plans = []
    for change, original in zip(step.changes, step.originals, strict=True):
        paths = [p for p in (change.path, change.origin) if p]
        fresh = not any(_overlap(p, q) for p in paths for q in touched)
        plans.append(plan_change(store, change, shown, look=fresh))
        problem = _damage(store, change, shown)
        if problem is not None:
            raise UndoError(_refusal(step, change, original, problem))
        touched.extend(paths)
    return plans


def _damage(store: ChangeStore, change: Change, shown: Callable[[str], str] = str) -> str | None:
    """What is wrong with the backup inverting `change` restores, measured against its
    record; None when it is whole, or when it restores none. A record from before
    `kept_sha256` is checked by size alone, one from before `kept` only for being there:
    neither is an error (nothing was known to compare with)."""
    if change.backup is None or change.evicted:
        return None  # nothing is restored from it (plan_change refused those that need one)
    path = store.root / change.backup  # a name of ours: plan_change checked it
    its = f"its backup {shown(str(path))}"
    try:
        size = store.measure(change.backup)
        different = _unlike(change, size, lambda: _file_sha256(path))
    except FileNotFoundError:
        return f"{its} is missing"
    except (OSError, ValueError, trees.Refused) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        return f"{its} cannot be read ({why})"
    return f"{its} {different}: it was damaged" if different else None


def _unlike(change: Change, size: int, digest: Callable[[], str]) -> str | None:
    """How a backup of `size` bytes (and `digest`, hashed only if needed) differs from what
    `change` records was kept; None if it does not."""
    if change.kept is not None and size != change.kept:
        return f"is {size:,} bytes, the record says {change.kept:,}"
    if change.kept_sha256 is not None and digest() != change.kept_sha256:
        return "holds other bytes than were kept (the same size, another sha256)"
    return None


def _refusal(step: Step, change: Change, original: Change, problem: str) -> str:
    """The one line refusing `step` because of `change`'s backup: nothing of it was done."""
    if step.kind == "redo":  # as the user asked for it: the redo of the agent's change
        return f"change #{original.id} cannot be redone: {problem}; nothing was redone"
    if step.turn and len(step.changes) > 1:
        return (
            f"change #{change.id} cannot be undone: {problem}; nothing of the turn was undone "
            "(`agent undo ID`, or /undo ID, takes back its other changes one at a time)"
        )
    return f"change #{change.id} cannot be undone: {problem}; nothing was undone"


def _file_sha256(path: os.PathLike[str]) -> str:
    """The sha256 of a blob, read a piece at a time (a blob may be as large as the store)."""
    digest = hashlib.sha256()
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as blob:
        while piece := blob.read(1 << 20):
            digest.update(piece)
    return digest.hexdigest()


def _overlap(one: str, other: str) -> bool:
    return (
        one == other
        or one.startswith(other.rstrip("/") + "/")
        or other.startswith(one.rstrip("/") + "/")
    )


def plan_change(
    store: ChangeStore, change: Change, shown: Callable[[str], str] = str, *, look: bool = True
) -> Plan:
    """What inverting the record `change` would do now, and (`look`) what changed since."""
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
        reach.Target(change.path, "/", change.path)
    except ValueError:
        raise UndoError(
            f"change #{change.id} names a path or backup the agent never records (is the "
            "journal forged?); not undone"
        ) from None
    if not look:
        return Plan(change, summary(change, shown))
    try:
        conflict = _conflict(change, shown(change.path))
    except ToolError as exc:
        raise UndoError(f"change #{change.id} cannot be undone now: {exc}") from None
    except OSError as exc:
        why = exc.strerror or exc
        raise UndoError(f"change #{change.id} cannot be undone now: {why}") from None
    return Plan(change, summary(change, shown), conflict)


def summary(change: Change, shown: Callable[[str], str] = str) -> str:
    """What inverting the record `change` does, in one line."""
    path = shown(change.path)
    return {
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


def apply(
    store: ChangeStore, undo: Plan, *, overwrite: bool = False, step: str | None = None
) -> Change:
    """Do what `undo` says; a conflict needs `overwrite` (after a person said yes). What it
    records is step `step` (one undo or redo: several calls may share it; default: its own)."""
    if undo.conflict and not overwrite:
        raise UndoError(f"{undo.conflict}; not undone (nothing overwritten)")
    change = undo.change
    target = reach.Target(change.path, "/", change.path)
    try:
        with store.as_turn(step or new_step("undo")):
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
    target = reach.Target(path, "/", path)
    entry = reading.inspect(target)
    if entry is None:
        return None
    info = entry.info
    if stat.S_ISDIR(info.st_mode):
        return "dir:empty" if reading.first_non_directory(target) is None else "dir"
    if not stat.S_ISREG(info.st_mode):
        return "other"
    if info.st_size > FILE_LIMIT:
        return "large"
    # The file as it is (hard links included: this only hashes it).
    seen = FileId(info.st_dev, info.st_ino, info.st_nlink)
    return sha256(reading.read(reach.Target(path, "/", path, seen), FILE_LIMIT).data)


# -- the inverse of each action -----------------------------------------------------------------


def _uncreate(store: ChangeStore, change: Change, target: reach.Target) -> Change:
    """A created file (or a restored entry) goes to the trash; undoing that restores it."""
    slot = store.trash_slot()
    backup = store.relative(slot / os.path.basename(change.path))

    def undo(entry: os.stat_result | None, kept: int | None) -> tuple[Change, Check]:
        held = backup if kept is not None else None
        recorded = _undo_of(change, kind=_kind(entry), backup=held, kept=kept)
        return recorded, Check("remove", change.path, identity(entry))

    commit = Commit(store, undo)
    delete.remove(target, recursive=True, trash=str(slot), trash_limit=FILE_LIMIT, commit=commit)
    return _made(commit)


def _put_back(store: ChangeStore, change: Change, target: reach.Target) -> Change:
    """The content before the change comes back; what is there now is kept for a redo."""
    old = store.backup_bytes(change)
    # Checked again, the very bytes to be written (precheck looked before the step began).
    different = _unlike(change, len(old), lambda: sha256(old))
    if different:
        raise UndoError(
            f"change #{change.id} cannot be undone: its backup {store.backup_path(change)} "
            f"{different}: it was damaged"
        )
    backup = Backup(store)

    def undo(entry: os.stat_result | None, kept: int | None) -> tuple[Change, Check]:
        mode = stat.S_IMODE(entry.st_mode) & 0o777 if entry else None
        held = kept is not None
        recorded = _undo_of(
            change, size=len(old), mode=mode, backup=backup.name if held else None,
            after=sha256(old), kept=kept, kept_sha256=backup.sha256 if held else None,
        )  # fmt: skip
        return recorded, Check("replace", change.path, identity(entry))

    commit = Commit(store, undo)
    try:
        # Over FILE_LIMIT what is there now could not be kept: writing.write refuses, nothing lost.
        writing.write(
            target, old, backup=backup, backup_limit=FILE_LIMIT, pending=store.pending,
            commit=commit,
        )  # fmt: skip
    except (ToolError, OSError, Unrecorded):
        if backup.name:
            store.discard(backup.name)
        raise
    if change.mode is not None:
        os.chmod(change.path, change.mode, follow_symlinks=False)
    return _made(commit)


def _restore(store: ChangeStore, change: Change, target: reach.Target) -> Change:
    """A deleted entry comes back from the trash, where it was moved."""
    if _state(change.path) is not None:  # confirmed over a conflict: keep what is there
        _uncreate(store, Change("undo", "restore", change.path), target)
    source = store.backup_path(change)
    after = _state(str(source)) if change.kind == "file" else None  # what it will hold
    commit = _arriving(store, change, kind=change.kind, after=after)
    trashcan.move_back(target, str(source), change.kind, commit)
    return _made(commit)


def _rmdir(store: ChangeStore, change: Change, target: reach.Target) -> Change:
    """The directories a create_directory made go (to the trash: if a file appeared in them
    after the check, it is not lost)."""
    if _state(change.path) is None:
        raise UndoError(f"{change.path} no longer exists; nothing to undo")
    slot = store.trash_slot()
    backup = store.relative(slot / os.path.basename(change.path))

    def undo(entry: os.stat_result | None, kept: int | None) -> tuple[Change, Check]:
        held = backup if kept is not None else None
        recorded = _undo_of(change, kind="directory", backup=held, kept=kept)
        return recorded, Check("remove", change.path, identity(entry))

    commit = Commit(store, undo)
    delete.remove(target, recursive=True, trash=str(slot), trash_limit=FILE_LIMIT, commit=commit)
    return _made(commit)


def _mkdir(store: ChangeStore, change: Change, target: reach.Target) -> Change:
    commit = _arriving(store, change, kind="directory")
    if change.backup is not None:
        trashcan.move_back(target, str(store.backup_path(change)), "directory", commit)
    else:
        with commit(None, None):
            reach.make_dirs(target)
    return _made(commit)


def _unmove(store: ChangeStore, change: Change, target: reach.Target) -> Change:
    """The entry goes back where it came from, and what it replaced (if kept) comes back
    from the trash. Undoing that moves it again (over what came back: a conflict a person
    confirms, and what is there goes to the trash first)."""
    from cli.fs.renaming import rename  # the tools' own rename: never over an entry

    if change.origin is None:
        raise UndoError(f"change #{change.id} does not say where the entry came from")
    origin = reach.Target(change.origin, "/", change.origin)
    if _state(change.origin) is not None:
        # Confirmed over a conflict: what is there now is kept in the trash.
        _uncreate(store, Change("undo", "restore", change.origin), origin)
    entry = reading.inspect(target)
    if entry is None:
        raise UndoError(f"{change.path} no longer exists; nothing to move back")

    def undo(moved: os.stat_result | None, _kept: int | None) -> tuple[Change, Check]:
        recorded = _undo_of(change, kind=change.kind, origin=change.path)
        return recorded, Check("arrive", change.origin or "", identity(moved))

    commit = Commit(store, undo)
    with commit(entry.info, None):  # one step: the move back, and what it replaced back
        rename(target, origin)
        if change.backup and not change.evicted:
            kept = store.backup_path(change)
            kind = "symlink" if os.path.islink(kept) else "file"  # only these are replaced
            trashcan.move_back(target, str(kept), kind)
    return _made(commit)


_INVERT: dict[str, Callable[[ChangeStore, Change, reach.Target], Change]] = {
    "create": _uncreate,
    "restore": _uncreate,
    "overwrite": _put_back,
    "delete": _restore,
    "mkdir": _rmdir,
    "rmdir": _mkdir,
    "move": _unmove,
}


def _undo_of(change: Change, **fields: Any) -> Change:
    """The record of undoing `change` (to be recorded before it is done: write-ahead)."""
    path = change.origin if change.action == "move" and change.origin else change.path
    undo = Change("undo", INVERSE[change.action], path, undoes=change.id or None)
    return replace(undo, **fields)


def _arriving(store: ChangeStore, change: Change, **fields: Any) -> Commit:
    """The write-ahead of an undo that brings an entry back where nothing is (made when
    something is there)."""
    path = _undo_of(change).path
    return Commit(store, lambda _entry, _kept: (_undo_of(change, **fields), Check("make", path)))


def _made(commit: Commit) -> Change:
    assert commit.change is not None  # set before the step that made the change
    return commit.change


def _kind(entry: os.stat_result | None) -> str:
    if entry is not None and stat.S_ISDIR(entry.st_mode):
        return "directory"
    return "symlink" if entry is not None and stat.S_ISLNK(entry.st_mode) else "file"
