"""move_file: rename or move a file or directory within the allowed dirs, never across a
policy boundary, and never over something without keeping it.

A rename changes no content, so what matters is where things end up. The policy checks both
paths (blocked, secret, protected, outside the allowed dirs: as for writes). A directory
carries its whole tree along, so before it moves every entry in it is looked at, as it is and
as it would be named after the move (`boundary`): a tree holding a secret or a blocked dir is
refused (`~/.config` moved to `~/cfg` would turn `~/.config/gh/hosts.yml` into a file the
policy no longer knows as a secret), and one holding an execution surface, or that would make
one, needs a person.

The rename itself is one no-replace rename (`renameat2(RENAME_NOREPLACE)` on Linux,
`renameatx_np(RENAME_EXCL)` on macOS, see cli/fs/_platform.py elsewhere) between two
directory fds reached without following a symlink (reach.parent_dir), so nothing that
appears at the destination between the check and the rename is overwritten. An existing
destination is replaced only with `overwrite`, and then it first goes to the trash (a change
`agent undo` reverses: the entry moves back and what it replaced comes back from the trash).
Across file systems a move would be a copy and a delete: refused, with what to do instead.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cli.errors import ToolError
from cli.fs import delete, reach, reading, trashcan, writing
from cli.fs.deadline import DeadlineExceeded
from cli.fs.paths import ResolvedPath
from cli.fs.renaming import rename
from cli.fs.walk import MAX_WALK_DEPTH
from cli.journal.changes import Commit
from cli.journal.records import Change, Check, identity
from cli.tools.base import Result, ToolContext

MAX_CHECKED_ENTRIES = 10_000  # a larger tree is not looked through: a person decides
CHECK_EVERY = 256  # entries looked at between two looks at the clock


@dataclass(frozen=True)
class Crossing:
    """What moving a directory's tree would do at the policy's edges."""

    refusal: str | None = None  # why it must not move at all
    caution: str | None = None  # why only a person may let it move
    # The caution is that the tree could not be looked through whole (too many entries,
    # too deep, unreadable), not something found in it.
    unseen: bool = False


def boundary(
    source: str,
    destination: str,
    hides: Callable[[str], bool],
    configures: Callable[[str], bool],
    ctx: ToolContext,
) -> Crossing:
    """Look through the tree at `source` (a directory) as it is and as it would be at
    `destination`. Not a directory, or nothing there: nothing to look at. Strict where the
    listing walk is best-effort: every directory is entered (noise dirs too, never through a
    symlink), and what cannot be looked through — an unreadable dir, an error, too many
    entries, too deep — is never taken for clean: a person decides."""
    try:
        target = ctx.target(source)
        entry = reading.inspect(target)
    except (ToolError, ValueError, OSError):
        return Crossing()  # the move fails the same way when it runs
    if entry is None or not stat.S_ISDIR(entry.info.st_mode):
        return Crossing()
    shown = ctx.show(source)
    try:
        with reach.open_dir(target) as top:
            return _look_through(top, source, destination, hides, configures, ctx)
    except DeadlineExceeded as exc:
        return Crossing(
            caution=f"{shown} could not be looked through within policy.limits.tool_seconds "
            f"({exc.deadline.seconds:g} s), so a person must confirm",
            unseen=True,
        )
    except (ToolError, OSError) as exc:
        return Crossing(
            caution=f"{shown} could not be looked through ({exc}), so a person must confirm",
            unseen=True,
        )


def _look_through(
    top: int,
    source: str,
    destination: str,
    hides: Callable[[str], bool],
    configures: Callable[[str], bool],
    ctx: ToolContext,
) -> Crossing:
    shown = ctx.show(source)
    caution: str | None = None  # something found in the tree
    unseen: str | None = None  # a part of it that could not be looked through
    seen = 0
    stack: list[tuple[int, str, int]] = [(os.dup(top), "", 1)]  # (fd, relative dir, depth)
    try:
        while stack:
            ctx.deadline.check()  # the fds on the stack are closed below
            fd, relative, depth = stack.pop()
            try:
                with os.scandir(fd) as it:
                    names = [(e.name, e.is_dir(follow_symlinks=False)) for e in it]
            except OSError as exc:
                unseen = unseen or _unseen(shown, relative, exc)
                os.close(fd)
                continue
            for name, is_dir in names:
                seen += 1
                if seen % CHECK_EVERY == 0 and ctx.deadline.expired:
                    os.close(fd)
                    raise DeadlineExceeded(ctx.deadline)
                if seen > MAX_CHECKED_ENTRIES:
                    os.close(fd)
                    unseen = unseen or (
                        f"{shown} holds more than {MAX_CHECKED_ENTRIES} entries to look "
                        "through, so a person must confirm"
                    )
                    return Crossing(caution=caution or unseen, unseen=caution is None)
                inner = f"{relative}{name}"
                here, there = os.path.join(source, inner), os.path.join(destination, inner)
                if hides(here) or hides(there):
                    os.close(fd)
                    return Crossing(
                        refusal=f"{shown} holds {ctx.show(here)}, which the policy hides (a "
                        "secret or a blocked dir); moving it would change how it is "
                        "protected, so it is not moved"
                    )
                if caution is None and (configures(here) or configures(there)):
                    caution = (
                        f"{shown} holds {ctx.show(here)}, an execution surface or a dot-entry "
                        "(its content makes code run later or configures a program), so a "
                        "person must confirm"
                    )
                if not is_dir:
                    continue
                if depth >= MAX_WALK_DEPTH:
                    unseen = unseen or (
                        f"{shown} nests deeper than {MAX_WALK_DEPTH} levels to look through, so "
                        "a person must confirm"
                    )
                    continue
                sub = reach.open_subdir(fd, name)
                if sub is None:
                    unseen = unseen or _unseen(shown, inner, None)
                    continue
                stack.append((sub, inner + "/", depth + 1))
            os.close(fd)
    finally:
        for fd, _, _ in stack:
            os.close(fd)
    return Crossing(caution=caution or unseen, unseen=caution is None and unseen is not None)


def _unseen(shown: str, relative: str, exc: OSError | None) -> str:
    why = f": {exc.strerror}" if exc is not None and exc.strerror else ""
    where = f"{shown}/{relative.rstrip('/')}" if relative else shown
    return f"{where} could not be looked into{why}, so a person must confirm"


# -- the tool -------------------------------------------------------------------------------------


def move_file(
    ctx: ToolContext, args: Mapping[str, Any], paths: Mapping[str, ResolvedPath]
) -> Result:
    # The entries themselves: a symlink moves as a link, never what it points to.
    source, destination = paths["source"].entry, paths["destination"].entry
    if source == destination:
        raise ToolError("source and destination are the same path; nothing to move")
    if destination.startswith(source + "/"):
        raise ToolError(f"{ctx.show(destination)} is inside {ctx.show(source)}; cannot move there")
    overwrite = bool(args.get("overwrite", False))
    store = ctx.changes
    slot = store.trash_slot() if store and overwrite and ctx.trash else None
    kept_as = str(slot / os.path.basename(destination)) if slot else ""

    def change_of(entry: os.stat_result | None, kept: int | None) -> tuple[Change, Check]:
        """What the move is, recorded before it is made (write-ahead): the source's entry
        arriving at the destination; what it replaces, in the trash, comes back if not."""
        assert store is not None
        backup = store.relative(Path(kept_as)) if kept is not None else None
        change = Change(
            "move_file", "move", destination, kind=_kind_of(entry), origin=source,
            backup=backup, kept=kept,
        )  # fmt: skip
        back = (kept_as, destination) if kept is not None else None
        return change, Check("arrive", destination, identity(entry), back)

    commit = Commit(store, change_of) if store else None
    try:
        moved = _move(ctx, source, destination, overwrite, str(slot) if slot else None, commit)
    finally:
        if slot and not any(slot.iterdir()):
            slot.rmdir()  # nothing was displaced
    ctx.memory.remember(source, None)
    ctx.memory.remember(destination, None)
    result: Result = {
        "success": True,
        "source": source,
        "destination": destination,
        "type": moved.kind,
        "replaced": moved.displaced is not None,
    }
    if commit and commit.change:
        result["change"] = commit.change.id
        if moved.displaced is not None and commit.change.backup is None:
            why = "policy.trash is off" if not ctx.trash else "too large to keep; the user agreed"
            result["note"] = (
                f"the {moved.displaced} it replaced was not kept ({why}): the move can be "
                "undone, the replacing cannot"
            )
    return result


@dataclass(frozen=True)
class Moved:
    kind: str  # what moved: file, directory or symlink
    displaced: str | None = None  # the kind of what it replaced, if anything
    trashed: bool = False  # … which went to the trash


def _move(
    ctx: ToolContext,
    source: str,
    destination: str,
    overwrite: bool,
    trash: str | None,
    commit: writing.Commit | None = None,
) -> Moved:
    src = ctx.target(source)
    dst = ctx.target(destination)
    if not src.parts:
        raise ToolError(f"{src.shown} is an allowed directory itself; it cannot be moved")
    entry = reading.inspect(src)
    if entry is None:
        raise ToolError(f"{src.shown} does not exist")
    kind = _kind_of(entry.info)
    replaced = reading.inspect(dst)
    there = _kind_of(replaced.info) if replaced else None
    displaced, trashed = None, False
    if there is not None:
        if not overwrite:
            raise ToolError(
                f"{dst.shown} exists",
                hint="set overwrite to replace it (it is kept for undo), or choose another "
                "destination",
            )
        if there == "directory":
            raise ToolError(
                f"{dst.shown} is a directory, which is never replaced",
                hint="to move into it, give the full new path "
                f"({dst.shown}/{os.path.basename(source)})",
            )
        if kind == "directory":
            raise ToolError(f"{dst.shown} is a {there}; a directory does not replace it")
    limit = ctx.limits.max_backup_bytes
    kept = replaced.info.st_size if replaced and _will_keep(replaced.info, trash, limit) else None
    # One step, recorded first: what the move replaces goes to the trash, then the rename.
    with commit(entry.info, kept) if commit else contextlib.nullcontext():
        if there is not None:
            removed = delete.remove(
                dst,
                recursive=False,
                trash=trash,
                trash_limit=ctx.limits.max_backup_bytes,
                lose=ctx.consent.take(destination),
                deadline=ctx.deadline,
            )
            displaced, trashed = removed.kind, removed.trashed
        try:
            rename(src, dst)
        except BaseException:
            if displaced is not None and trashed and trash:
                # The move did not happen: what it was to replace goes back where it was.
                kept_at = os.path.join(trash, os.path.basename(destination))
                trashcan.move_back(dst, kept_at, displaced)
            raise
    return Moved(kind, displaced, trashed)


def _will_keep(replaced: os.stat_result, trash: str | None, limit: int) -> bool:
    """Will what a move replaces go to the trash (so the record names it as the backup):
    by a rename on its own file system, or copied across when it is no larger than the
    trash keeps (a file or a link: a directory is never replaced)."""
    if trash is None:
        return False
    try:
        same_disk = os.stat(trash).st_dev == replaced.st_dev
    except OSError:
        return False
    return same_disk or replaced.st_size <= limit


def _kind_of(info: os.stat_result | None) -> str:
    mode = info.st_mode if info is not None else 0
    return "directory" if stat.S_ISDIR(mode) else "symlink" if stat.S_ISLNK(mode) else "file"
