"""list_directory."""

from __future__ import annotations

import functools
import os
import stat
import time
from collections.abc import Iterable, Mapping
from contextlib import closing
from typing import Any

from cli.errors import ToolError
from cli.fs import reach
from cli.fs.deadline import Deadline
from cli.fs.paths import ResolvedPath
from cli.fs.walk import MAX_WALK_DEPTH, Entry, Walk
from cli.tools.base import Result, ToolContext


def list_directory(
    ctx: ToolContext, args: Mapping[str, Any], paths: Mapping[str, ResolvedPath]
) -> Result:
    path = paths["path"].real
    recursive = bool(args.get("recursive", False))
    depth = args.get("max_depth", ctx.limits.list_depth) if recursive else 1
    if depth < 1:
        raise ToolError("max_depth must be at least 1")
    extension = normalize_extension(args.get("filter_extension"))
    cap = ctx.limits.max_list_entries
    hidden = bool(args.get("include_hidden"))
    with reach.open_dir(ctx.target(path), "use read_file for files") as top:
        walked = Walk(
            top,
            path,
            max_visits=cap,
            max_depth=depth,
            include_hidden=hidden,
            hides=ctx.walk_hides(path),
            deadline=ctx.deadline,
        )
        with closing(walked):
            entries = _collect(walked, recursive, extension, ctx.deadline)
    result: Result = {
        "success": True,
        "path": path,
        "entries": entries,
        "total": len(entries),
        "entries_visited": walked.visited,
        "truncated": walked.truncated,
    }
    notes = []
    if walked.over_cap:
        notes.append(
            f"stopped after looking at {walked.visited} entries (policy.limits.max_list_entries; "
            "hidden and filtered-out ones count too)"
        )
        result["hint"] = "list a subdirectory or lower max_depth"
    if walked.too_deep:
        notes.append(f"directories deeper than {MAX_WALK_DEPTH} levels were not entered")
    if notes:
        result["note"] = "; ".join(notes)
    return result


def _collect(
    walked: Iterable[Entry], recursive: bool, extension: str | None, deadline: Deadline
) -> list[dict[str, Any]]:
    """The entries described, without files the extension filter leaves out. How many there
    are is bounded by the walk (max_list_entries visits); how long, by the deadline."""
    entries: list[dict[str, Any]] = []
    for entry in walked:
        deadline.check()
        item = describe(entry, entry.relative if recursive else entry.dirent.name)
        if (
            extension
            and item["type"] == "file"
            and not entry.dirent.name.lower().endswith(extension)
        ):
            continue
        entries.append(item)
    return entries


_KINDS = {stat.S_IFDIR: "directory", stat.S_IFREG: "file", stat.S_IFLNK: "symlink"}


def describe(entry: Entry, name: str) -> dict[str, Any]:
    dirent = entry.dirent
    try:
        info = dirent.stat(follow_symlinks=False)
    except OSError:
        return {"name": name, "type": "other", "size": None, "modified": None}
    kind = _KINDS.get(stat.S_IFMT(info.st_mode), "other")
    item: dict[str, Any] = {
        "name": name,
        "type": kind,
        "size": info.st_size if kind == "file" else None,
        "modified": _utc_seconds(info.st_mtime_ns // 1_000_000_000),
    }
    if kind == "symlink":
        try:
            item["target"] = os.readlink(dirent.name, dir_fd=entry.dir_fd)
        except OSError:
            pass
    return item


@functools.lru_cache(maxsize=4096)
def _utc_seconds(seconds: int) -> str | None:
    """2026-12-01T17:36:23Z: the whole second the time is in (a tree's files share many);
    None for a time no calendar date holds."""
    try:
        t = time.gmtime(seconds)
    except (OverflowError, OSError, ValueError):
        return None
    if not 1 <= t.tm_year <= 9999:
        return None
    return (
        f"{t.tm_year:04d}-{t.tm_mon:02d}-{t.tm_mday:02d}"
        f"T{t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d}Z"
    )


def normalize_extension(value: Any) -> str | None:
    """'.ts', 'ts' and '*.ts' all mean files ending in .ts (compared case-insensitively)."""
    if not value:
        return None
    text = str(value).strip().lstrip("*").lower()
    return text if text.startswith(".") else f".{text}"
