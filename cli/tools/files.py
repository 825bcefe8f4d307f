"""read_file, write_file, edit_file, create_directory, delete_file."""

from __future__ import annotations

import base64
import os
import stat
from collections.abc import Mapping
from typing import Any

from cli.errors import ToolError, Unrecorded
from cli.fs import delete, reach, reading, removal, wording, writing
from cli.fs.fingerprint import Fingerprint
from cli.fs.paths import ResolvedPath
from cli.journal.changes import Backup, Commit
from cli.journal.records import Change, Check, identity, sha256
from cli.tools import gate
from cli.tools.base import Result, ToolContext
from cli.tools.edits import Edit, EditFailed, plan_edit
from cli.tools.unchanged import same, unchanged_result

# -- read_file -------------------------------------------------------------------------------


def read_file(
    ctx: ToolContext, args: Mapping[str, Any], paths: Mapping[str, ResolvedPath]
) -> Result:
    checked = paths["path"]
    path = checked.real
    shown = ctx.show(path)
    encoding = args.get("encoding", "utf-8")
    start, end = args.get("start_line"), args.get("end_line")
    if start is not None and start < 1:
        raise ToolError("start_line counts from 1")
    if end is not None and end < 1:
        raise ToolError("end_line counts from 1")
    if start is not None and end is not None and end < start:
        raise ToolError(f"end_line ({end}) is before start_line ({start})")
    reads = gate.Reads(ctx, ctx.limits.max_read_bytes, under=path, asked=checked.file)
    file = reading.read(ctx.target(path, checked.file), reads.max_bytes, reads.hook(path))
    ctx.memory.remember(path, file.fingerprint)
    if encoding == "base64":
        return {
            "success": True,
            "path": path,
            "content": base64.b64encode(file.data).decode("ascii"),
            "encoding": "base64",
            "size": len(file.data),
            "lines": None,
            "truncated": False,
            "line_range": None,
        }
    if reading.is_binary(file.data):
        raise ToolError(
            f"{shown} is a binary file", hint="read it with encoding 'base64' if you must"
        )
    try:
        text = file.data.decode("utf-8" if encoding == "utf-8" else "latin-1")
    except UnicodeDecodeError as exc:
        raise ToolError(
            f"{shown} is not valid UTF-8 (bad byte at offset {exc.start})",
            hint="try encoding 'latin1'",
        ) from None
    return {
        "success": True,
        "path": path,
        **_line_window(text, start, end, ctx),
        "encoding": encoding,
        "size": len(file.data),
    }


def _line_window(text: str, start: int | None, end: int | None, ctx: ToolContext) -> Result:
    """The requested lines, never more than `max_read_lines` of them."""
    if start is None and end is None:
        # The whole file, if it fits: the text as it is, its lines counted in C (what the
        # split and join below would give back, without building a list of every line).
        total = text.count("\n") + (0 if not text or text.endswith("\n") else 1)
        if total <= ctx.limits.max_read_lines:
            return {
                "content": text,
                "lines": total,
                "truncated": False,
                "line_range": [1, total] if total else [0, 0],
            }
    lines = text.split("\n")
    ends_with_newline = text.endswith("\n")
    if ends_with_newline:
        lines.pop()
    total = len(lines) if text else 0
    cap = ctx.limits.max_read_lines
    first = start or 1
    if total and first > total:
        raise ToolError(f"start_line {first} is past the end of the file ({total} lines)")
    last = min(total, end or total, first + cap - 1)
    chosen = lines[first - 1 : last] if total else []
    content = "\n".join(chosen)
    if chosen and (last < total or ends_with_newline):
        content += "\n"
    result: Result = {
        "content": content,
        "lines": total,
        "truncated": last < total,
        "line_range": [first, last] if total else [0, 0],
    }
    if last < total and last < (end or total):
        result["note"] = f"showing lines {first}-{last} of {total} (at most {cap} per call)"
        result["hint"] = f"call again with start_line={last + 1} for more"
    return result


# -- write_file ------------------------------------------------------------------------------


def write_file(
    ctx: ToolContext, args: Mapping[str, Any], paths: Mapping[str, ResolvedPath]
) -> Result:
    try:
        data = args["content"].encode("utf-8")
    except UnicodeEncodeError:
        raise ToolError(
            "content holds invalid Unicode (a lone surrogate)", hint="send valid text"
        ) from None
    return _store(ctx, paths["path"], data, "write_file")


def _store(ctx: ToolContext, checked: ResolvedPath, data: bytes, tool: str) -> Result:
    """Write `data` over the checked path the durable way: the old content kept for undo,
    a conflict if the file changed since the model saw it, the change recorded. Content the
    file holds already is no change: nothing written or recorded (cli/tools/unchanged.py)."""
    path = checked.real  # a symlink inside the allowed dirs is written through, not replaced
    if len(data) > ctx.limits.max_write_bytes:
        raise wording.too_large("content", len(data), ctx.limits.max_write_bytes)
    try:
        seen = same(ctx, checked, data)
    except (ToolError, OSError):
        seen = None  # cannot tell: the write goes on, and fails the same way if it must
    if seen is not None:
        ctx.memory.remember(path, seen)
        return unchanged_result(path, len(data))
    ctx.deadline.check()  # the last safe point: from here on the write is done whole
    store = ctx.changes
    backup = Backup(store) if store else None

    def change_of(old: os.stat_result | None, kept: int | None) -> tuple[Change, Check]:
        """What the write is, recorded before it is made (write-ahead)."""
        assert backup is not None
        held = kept is not None
        change = Change(
            tool, "create" if old is None else "overwrite",
            path=path, size=len(data), mode=stat.S_IMODE(old.st_mode) & 0o777 if old else None,
            backup=backup.name if held else None, after=sha256(data), kept=kept,
            kept_sha256=backup.sha256 if held else None,
        )  # fmt: skip
        return change, Check("replace", path, identity(old))

    commit = Commit(store, change_of) if store else None
    try:
        written = writing.write(
            ctx.target(path, checked.file),
            data,
            expect=ctx.memory.expected(path),
            backup=backup,
            backup_limit=ctx.limits.max_backup_bytes,
            pending=store.pending if store else None,
            # Only what a person agreed to lose (cli/tools/preflight.py) goes unkept.
            lose=ctx.consent.take(path),
            commit=commit,
        )
    except (ToolError, OSError, Unrecorded):
        if store and backup and backup.name:
            store.discard(backup.name)  # kept for a write that did not happen
        raise
    ctx.memory.remember(path, written.fingerprint)
    result: Result = {
        "success": True,
        "path": path,
        "bytesWritten": len(data),
        "created": written.created,
    }
    if commit and commit.change:
        result["change"] = commit.change.id
        if not written.created and not written.backed_up:
            result["note"] = (
                "the old content was too large to keep (the user agreed): this cannot be undone"
            )
    return result


# -- edit_file -------------------------------------------------------------------------------


def edit_file(
    ctx: ToolContext, args: Mapping[str, Any], paths: Mapping[str, ResolvedPath]
) -> Result:
    checked = paths["path"]
    edit, data = planned_edit(ctx, args, checked)
    result = _store(ctx, checked, data, "edit_file")
    result.update(
        replacements=edit.replacements,
        line_range=list(edit.line_range),
        diff_stat={"added": edit.added, "removed": edit.removed},
    )
    if edit.stage != "exact":
        result["matched"] = f"ignoring {edit.stage}"
    return result


def planned_edit(
    ctx: ToolContext, args: Mapping[str, Any], checked: ResolvedPath, *, counted: bool = True
) -> tuple[Edit, bytes]:
    """The edit edit_file would make on the file as it is now, and the bytes it would write;
    ToolError for each way it fails, in the order the tool meets them. Writes nothing: the
    same check decides, before anyone is asked, that a call cannot succeed
    (cli/tools/foreseen.py). `counted`: a failure counts towards the hint on repeated
    failures (not when it is only looked at)."""
    path = checked.real
    shown = ctx.show(path)
    seen = ctx.memory.expected(path)
    if seen is None:
        raise ToolError(
            f"{shown} was not read in this conversation, and edit_file changes only a file "
            "that was",
            hint=f"read {shown} with read_file first",
        )
    try:
        edit = plan_edit(
            _current_text(ctx, checked, seen),
            str(args["old_string"]),
            str(args["new_string"]),
            bool(args.get("replace_all", False)),
            deadline=ctx.deadline,
            max_chars=ctx.limits.max_write_bytes,
        )
    except EditFailed as exc:
        failures = ctx.edits.fail(path) if counted else 0
        hint = exc.hint
        if failures >= 2:
            hint += (
                f" (edit_file failed {failures} times on {shown} in this turn: if the change is "
                "large or scattered, write_file the whole new content instead)"
            )
        raise ToolError(str(exc), hint.strip()) from None
    try:
        return edit, edit.text.encode("utf-8")
    except UnicodeEncodeError:
        raise ToolError(
            "new_string holds invalid Unicode (a lone surrogate)", hint="send valid text"
        ) from None


def _current_text(ctx: ToolContext, checked: ResolvedPath, seen: Fingerprint) -> str:
    """The file as it is now, as text; a conflict when it is not what the model read."""
    path = checked.real
    shown = ctx.show(path)
    # Its lines may be quoted back (the most similar ones, when old_string is not found).
    reads = gate.Reads(ctx, ctx.limits.max_write_bytes, under=path, asked=checked.file)
    file = reading.read(ctx.target(path, checked.file), reads.max_bytes, reads.hook(path))
    if file.fingerprint != seen:
        raise writing.Conflict(
            f"{shown} changed on disk since it was last read (someone else edited it)",
            hint="read_file it again and base your edit on what it holds now",
        )
    if reading.is_binary(file.data):
        raise ToolError(f"{shown} is a binary file; edit_file changes only text")
    try:
        return file.data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ToolError(
            f"{shown} is not valid UTF-8 (bad byte at offset {exc.start}); edit_file changes "
            "only UTF-8 text"
        ) from None


# -- create_directory ------------------------------------------------------------------------


def create_directory(
    ctx: ToolContext, args: Mapping[str, Any], paths: Mapping[str, ResolvedPath]
) -> Result:
    path = paths["path"].real
    target = ctx.target(path)
    store, first = ctx.changes, _first_missing(path)
    if store is None or first is None:  # nothing to record, or nothing to make
        made = reach.make_dirs(target)
        return {"success": True, "path": path, "created": made is not None}
    mkdir = Change("create_directory", "mkdir", path=first, kind="directory")
    commit = Commit(store, lambda _entry, _kept: (mkdir, Check("make", first)))
    with commit(None, None):  # recorded first: the outermost new dir, made when it is there
        made = reach.make_dirs(target)
        if made != first:  # someone else made part of the way meanwhile: voided
            raise ToolError(f"{ctx.show(path)} was being made by someone else at the same time")
    result: Result = {"success": True, "path": path, "created": True}
    if commit.change:
        result["change"] = commit.change.id
    return result


def _first_missing(path: str) -> str | None:
    """The outermost dir on the way to `path` that does not exist yet (what `mkdir -p` makes
    first), or None when `path` exists."""
    if os.path.lexists(path):
        return None
    first, parent = path, os.path.dirname(path)
    while parent != first and not os.path.lexists(parent):
        first, parent = parent, os.path.dirname(parent)
    return first


# -- delete_file -----------------------------------------------------------------------------


def delete_file(
    ctx: ToolContext, args: Mapping[str, Any], paths: Mapping[str, ResolvedPath]
) -> Result:
    # The entry itself, its last component not followed: deleting a symlink removes the link,
    # never what it points to.
    path = paths["path"].entry
    store = ctx.changes if ctx.trash else None
    slot = store.trash_slot() if store else None
    name = os.path.basename(path)

    def change_of(entry: os.stat_result | None, kept: int | None) -> tuple[Change, Check]:
        """What the delete is, recorded before it is made (write-ahead)."""
        assert store is not None and slot is not None
        backup = store.relative(slot / name) if kept is not None else None
        change = Change("delete_file", "delete", path, kind=_kind(entry), backup=backup, kept=kept)
        return change, Check("remove", path, identity(entry))

    commit = Commit(store, change_of) if store else None
    try:
        removed = delete.remove(
            ctx.target(path),
            recursive=bool(args.get("recursive")),
            trash=str(slot) if slot else None,
            trash_limit=ctx.limits.max_backup_bytes,
            # Too large for the trash across file systems: gone for good only if a person
            # agreed to exactly this entry (cli/tools/preflight.py); otherwise refused.
            lose=ctx.consent.take(path),
            deadline=ctx.deadline,
            commit=commit,
        )
    except removal.NotEmpty as exc:
        raise ToolError(
            str(exc), hint="pass recursive: true to delete it with everything in it"
        ) from None
    finally:
        if slot and not any(slot.iterdir()):
            slot.rmdir()  # nothing was moved there
    ctx.memory.remember(path, None)
    result: Result = {"success": True, "path": path, "deleted": True, "type": removed.kind}
    if removed.counts is not None:
        result["removed"] = removed.counts
    if commit and commit.change:
        result["trashed"] = removed.trashed
        result["change"] = commit.change.id
        if not removed.trashed:
            result["note"] = (
                "too large to copy into the trash across file systems (the user agreed): "
                "deleted for good, this cannot be undone"
            )
    return result


def _kind(entry: os.stat_result | None) -> str:
    """What a change record calls the entry: file, directory or symlink."""
    if entry is not None and stat.S_ISDIR(entry.st_mode):
        return "directory"
    return "symlink" if entry is not None and stat.S_ISLNK(entry.st_mode) else "file"
