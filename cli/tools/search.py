"""search_files (seed §5.1.4): filenames by glob, contents by literal substring."""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Mapping
from typing import Any

from cli.paths import ResolvedPath
from cli.tools import fsops
from cli.tools.base import Result, Tool, ToolContext, ToolError, boolean, integer, params, string
from cli.tools.listing import normalize_extension
from cli.tools.walk import walk

MAX_LINE_TEXT = 300  # a minified line is one line of megabytes; show its start only
_GLOB_CHARS = frozenset("*?[")


def search_files(
    ctx: ToolContext, args: Mapping[str, Any], paths: Mapping[str, ResolvedPath]
) -> Result:
    root = paths["path"].real
    shown = ctx.show(root)
    if not os.path.isdir(root):
        raise ToolError(f"{shown} is not a directory; search_files searches below a directory")
    query: str = args["query"]
    if not query:
        raise ToolError("query is empty")
    search_type = args.get("search_type", "both")
    case = bool(args.get("case_sensitive", False))
    limits = ctx.limits
    max_results = args.get("max_results", limits.search_results)
    if max_results < 1:
        raise ToolError("max_results must be at least 1")
    max_results = min(max_results, limits.max_search_results)
    extensions = {e for e in map(normalize_extension, args.get("file_extensions") or []) if e}
    name_matches = _name_matcher(query, case)
    needle = re.compile(re.escape(query), 0 if case else re.IGNORECASE)

    results: list[dict[str, Any]] = []
    total_matches = scanned = 0
    full = truncated = False
    note = ""
    for entry in walk(root, max_depth=10_000, include_hidden=False, hides=ctx.hides):
        dirent = entry.dirent
        # Symlinks are never followed, files included: a link may point anywhere.
        if not dirent.is_file(follow_symlinks=False):
            continue
        if extensions and not dirent.name.lower().endswith(tuple(extensions)):
            continue
        if ctx.hides(dirent.path):
            continue  # secrets: not even their lines are shown
        if scanned == limits.max_search_files:
            truncated = True
            note = (
                f"stopped after scanning {scanned} files (policy.limits.max_search_files); "
                "search a subdirectory"
            )
            break
        scanned += 1
        by_name = search_type in ("filename", "both") and name_matches(dirent.name)
        room = max(0, max_results - total_matches - by_name)
        lines: list[dict[str, Any]] = []
        more = False
        if search_type in ("content", "both"):
            budget = min(limits.max_matches_per_file, room)
            lines, more = _content_matches(dirent, needle, budget, limits.max_search_file_bytes)
        if full and (by_name or lines or more):
            truncated = True  # a match beyond max_results exists: say so, and stop
            break
        if not by_name and not lines:
            continue
        kind = "filename+content" if by_name and lines else "filename" if by_name else "content"
        item: dict[str, Any] = {"path": ctx.show(dirent.path), "match": kind, "matches": lines}
        if more and len(lines) == limits.max_matches_per_file:
            item["more_matches"] = True  # this file has more than max_matches_per_file
        results.append(item)
        total_matches += len(lines) + by_name
        if total_matches >= max_results:
            full = True
            if more and len(lines) < limits.max_matches_per_file:
                truncated = True  # cut by max_results inside this very file
                break
    if truncated and not note:
        note = f"stopped at max_results={max_results} matches; there are more"
    result: Result = {
        "success": True,
        "query": query,
        "search_type": search_type,
        "results": results,
        "total_files": len(results),
        "total_matches": total_matches,
        "files_scanned": scanned,
        "truncated": truncated,
    }
    if note:
        result["note"] = note
    return result


def _name_matcher(query: str, case: bool) -> Any:
    """A glob (`*.py`) matches whole names; a plain word matches names containing it."""
    pattern = query if case else query.lower()
    if _GLOB_CHARS & set(query):
        return lambda name: fnmatch.fnmatchcase(name if case else name.lower(), pattern)
    return lambda name: pattern in (name if case else name.lower())


def _content_matches(
    dirent: os.DirEntry[str], needle: re.Pattern[str], budget: int, max_bytes: int
) -> tuple[list[dict[str, Any]], bool]:
    """Up to `budget` matching lines, and whether the file holds more than that."""
    try:
        if dirent.stat(follow_symlinks=False).st_size > max_bytes:
            return [], False
        data = fsops.read_regular(dirent.path, dirent.name, max_bytes).data
    except (OSError, ToolError):
        return [], False
    if fsops.is_binary(data):
        return [], False
    matches: list[dict[str, Any]] = []
    for number, line in enumerate(data.decode("utf-8", "replace").split("\n"), start=1):
        found = needle.search(line)
        if found is None:
            continue
        if len(matches) == budget:
            return matches, True
        text = line.strip()
        if len(text) > MAX_LINE_TEXT:
            text = text[:MAX_LINE_TEXT] + "…"
        matches.append({"line": number, "column": found.start() + 1, "text": text})
    return matches, False


SEARCH_FILES = Tool(
    "search_files",
    "Search below a directory. For filenames, query is a glob ('*.py') or a part of the name; "
    "for contents, query is literal text (not a regex). Returns matching files with line, "
    "column and text of each match. Skips hidden, binary and dependency directories.",
    params(
        ["path", "query"],
        path=string("The directory to search in."),
        query=string("A filename glob like '*.ts', or the text to find inside files."),
        search_type=string(
            "What to search: 'filename', 'content' or 'both'. Default: both.",
            enum=["filename", "content", "both"],
        ),
        case_sensitive=boolean("Match case exactly. Default: false."),
        max_results=integer("Stop after this many matches. Default: 50."),
        file_extensions={
            "type": "array",
            "items": {"type": "string"},
            "description": "Only search files with these extensions, e.g. ['.ts', '.js'].",
        },
    ),
    search_files,
)
