"""Before a change is approved: can what it replaces or removes be kept for `agent undo`?

Every overwrite keeps the old content and every delete goes to the trash, in the change store
(cli/journal/changes.py). At the store's edges that promise cannot be kept as things stand:

- the old content of a write is larger than policy.limits.max_backup_bytes: no backup;
- a delete must be copied into the trash across file systems and holds more than that
  limit: it would be deleted for good;
- the store is already full of this session's backups, which are never dropped while the
  session runs: keeping one more takes the store over its limit.

Such a call needs a person (`Agent.decide` turns its allow or ask into an ask that only a
person may answer: not `--yes`, not an earlier "always", not `tools: allow`), and the
confirmation says which edge it is. Without a person it is refused, and the model is told.

What a person's yes means, case by case: for the first two the old content is not kept (the
write replaces it, the delete deletes for good) and the change is recorded as one that cannot
be undone; the tools go ahead only for the very file or entry the person was asked about,
unchanged since (`Consent`; anything else is refused at execution, the backstop in cli/fs). For
the third the backup is kept and the store goes over its limit: nothing is lost, the disk holds
more until a later session's changes drop the oldest backups.

Not covered: `policy.trash: false` (deletes are permanent, as the user chose) and a context
without a change store (nothing was promised).
"""

from __future__ import annotations

import stat
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from cli import units
from cli.errors import ToolError
from cli.fs import reading, trees
from cli.fs.fingerprint import Fingerprint
from cli.fs.paths import ResolvedPath
from cli.journal.changes import ChangeStore
from cli.safety.policy import Decision
from cli.tools.base import ToolContext


@dataclass(frozen=True)
class Loss:
    """Why a call's old content cannot be kept as things stand."""

    warning: str  # shown in the confirmation; the model reads it when refused
    reason: str  # the decision's reason: why a person must confirm
    rule: str  # the decision's rule, for the audit trail
    path: str
    # Set when a person's yes means going on without a backup: exactly this must still be
    # there when the tool runs (Consent).
    fingerprint: Fingerprint | None = None


def unkept(
    tool: str, arguments: Mapping[str, Any], paths: Mapping[str, ResolvedPath], ctx: ToolContext
) -> Loss | None:
    """The Loss a call would cause, or None when whatever it replaces or removes is kept."""
    store = ctx.changes
    if store is None or not paths:
        return None
    try:
        if tool in ("write_file", "edit_file"):
            return _write(ctx, store, paths["path"])
        if tool == "delete_file" and ctx.trash:
            return _delete(ctx, store, paths["path"], bool(arguments.get("recursive")))
        if tool == "move_file" and arguments.get("overwrite") and ctx.trash:
            # What an overwriting move replaces goes to the trash, as a delete would.
            return _delete(ctx, store, paths["destination"], False)
    except (ToolError, OSError, ValueError):
        # Cannot look (or not within policy.limits.tool_seconds: a tree too large to
        # measure): the tool will fail the same way, or keep its backup as usual (and a
        # backup that cannot be written fails the change before anything is replaced; a
        # copy too large for the trash is refused when it runs).
        return None
    return None


def needs_person(decision: Decision, loss: Loss) -> Decision:
    """The decision as an ask only a person may answer, with the loss in its warnings."""
    already = decision.action == "ask" and decision.needs_human
    return replace(
        decision,
        action="ask",
        needs_human=True,
        warnings=(*decision.warnings, loss.warning),
        reason=decision.reason if already else loss.reason,
        rule=decision.rule if already else loss.rule,
    )


def agreed(ctx: ToolContext, loss: Loss) -> None:
    """A person said yes to `loss`: let the tool go on without keeping exactly that."""
    if loss.fingerprint is not None:
        ctx.consent.grant(loss.path, loss.fingerprint)


# -- the cases ---------------------------------------------------------------------------------

_CANNOT = "its old content cannot be kept for undo, so a person must confirm"
_OVER = "keeping its old content takes the backup store over its limit, so a person must confirm"


def _write(ctx: ToolContext, store: ChangeStore, resolved: ResolvedPath) -> Loss | None:
    path = resolved.real  # what write_file replaces
    entry = reading.inspect(ctx.target(path, resolved.file))
    if entry is None or not stat.S_ISREG(entry.info.st_mode):
        return None  # a new file: nothing to keep (anything else fails the write)
    size, limit = entry.info.st_size, ctx.limits.max_backup_bytes
    what = f"the old content of {ctx.show(path)}"
    if size > limit:
        return Loss(
            f"{what} ({_size(size)}) is larger than policy.limits.max_backup_bytes "
            f"({_size(limit)}): this change cannot be undone",
            _CANNOT,
            "no_backup",
            path,
            Fingerprint.of(entry.info),
        )
    return _room(store, what, size, path)


def _delete(
    ctx: ToolContext, store: ChangeStore, resolved: ResolvedPath, recursive: bool
) -> Loss | None:
    path = resolved.entry  # what delete_file removes: the entry, a link not followed
    target = ctx.target(path)
    limit = ctx.limits.max_backup_bytes
    room = store.room()
    trash = trees.path_mount_key(str(store.root / "trash"))
    # Measure only as far as it takes to tell: past both the copy limit and the room.
    entry = reading.inspect(
        target, tree=recursive, stop_above=max(limit, room, 0), deadline=ctx.deadline
    )
    if entry is None:
        return None
    shown = ctx.show(path)
    if stat.S_ISDIR(entry.info.st_mode):
        tally = entry.tree
        if tally is None or tally.mounts:
            return None  # not recursive (only an empty one goes), or refused when it runs
        size, size_text = tally.bytes, _size(tally.bytes)
        if tally.stopped:
            size_text = f"more than {_size(max(limit, room, 0))}"
    else:
        size, size_text = entry.info.st_size, _size(entry.info.st_size)
    if trash != entry.parent_mount and size > limit:
        return Loss(
            f"{shown} holds {size_text}, more than the trash copies across file systems "
            f"(policy.limits.max_backup_bytes, {_size(limit)}): it would be deleted for good; "
            "this change cannot be undone",
            _CANNOT,
            "no_backup",
            path,
            Fingerprint.of(entry.info),
        )
    return _room(store, f"{shown} in the trash", size, path, room)


def _room(
    store: ChangeStore, what: str, size: int, path: str, room: int | None = None
) -> Loss | None:
    room = store.room() if room is None else room
    if size == 0 or size <= room:
        return None
    # Decided: after a person's yes the backup is kept and the store goes over its limit
    # (nothing is lost; the next session's changes drop the oldest backups again). Dropping
    # one of this session's backups, or this one, would lose what a person may still undo.
    held = store.max_bytes - room
    return Loss(
        f"keeping {what} ({_size(size)}) takes the backup store over "
        f"policy.limits.max_backup_bytes ({_size(store.max_bytes)}): this session's own "
        f"backups already hold {_size(held)}, and none of them is dropped while it runs",
        _OVER,
        "backup_store_full",
        path,
    )


def _size(size: int) -> str:
    return units.human_size(size)
