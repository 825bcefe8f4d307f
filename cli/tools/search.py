"""search_files (seed §5.1.4): filenames by glob, contents by literal substring."""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Mapping
from contextlib import closing
from dataclasses import dataclass, field
from typing import Any

from cli.config import LimitsConfig
from cli.paths import ResolvedPath
from cli.tools import fsops
from cli.tools.base import Result, Tool, ToolContext, ToolError, boolean, integer, params, string
from cli.tools.listing import normalize_extension
from cli.tools.walk import MAX_WALK_DEPTH, Entry, Walk

MAX_LINE_TEXT = 300  # a minified line is one line of megabytes; show its start only
_GLOB_CHARS = frozenset("*?[")


def search_files(
    ctx: ToolContext, args: Mapping[str, Any], paths: Mapping[str, ResolvedPath]
) -> Result:
    root = paths["path"].real
    query: str = args["query"]
    if not query:
        raise ToolError("query is empty")
    search_type = args.get("search_type", "both")
    case = bool(args.get("case_sensitive", False))
    limits = ctx.limits
    max_results = args.get("max_results", limits.search_results)
    if max_results < 1:
        raise ToolError("max_results must be at least 1")
    wanted = _Query(
        search_type=search_type,
        name_matches=_name_matcher(query, case),
        needle=re.compile(re.escape(query), 0 if case else re.IGNORECASE),
        extensions=tuple(
            e for e in map(normalize_extension, args.get("file_extensions") or []) if e
        ),
        max_results=min(max_results, limits.max_search_results),
        limits=limits,
    )
    scan = _Scan()
    hint = "; search_files searches below a directory"
    with fsops.open_dir(fsops.target(ctx, root), hint) as top:
        # Every entry the walk reads counts, directories and files the filters skip included:
        # a filter that matches nothing must not make the search walk the whole tree.
        walked = Walk(
            top, root, max_visits=limits.max_search_files, include_hidden=False, hides=ctx.hides
        )
        with closing(walked):
            for entry in walked:
                if _searchable(entry, wanted, ctx) and not _visit(entry, wanted, scan, ctx):
                    break
    scan.visited = walked.visited
    if walked.truncated and not scan.truncated:
        scan.truncated = True
        scan.note = _walk_note(walked)
    return _result(query, search_type, scan, wanted.max_results)


@dataclass(frozen=True)
class _Query:
    search_type: str
    name_matches: Callable[[str], bool]
    needle: re.Pattern[str]
    extensions: tuple[str, ...]
    max_results: int
    limits: LimitsConfig


@dataclass
class _Scan:
    """What a search found so far, and why it stopped."""

    results: list[dict[str, Any]] = field(default_factory=list)
    total_matches: int = 0
    scanned: int = 0  # files whose name or content was searched
    visited: int = 0  # entries the walk read: files, directories, skipped ones
    full: bool = False
    truncated: bool = False
    note: str = ""
    hard_links: int = 0  # files whose content was not searched: they have other names


def _searchable(entry: Entry, wanted: _Query, ctx: ToolContext) -> bool:
    dirent = entry.dirent
    # Symlinks are never followed, files included: a link may point anywhere.
    if not dirent.is_file(follow_symlinks=False):
        return False
    if wanted.extensions and not dirent.name.lower().endswith(wanted.extensions):
        return False
    return not ctx.hides(entry.path)  # secrets: not even their lines are shown


def _visit(entry: Entry, wanted: _Query, scan: _Scan, ctx: ToolContext) -> bool:
    """Search one file; False when the search must stop."""
    limits = wanted.limits
    scan.scanned += 1
    name = entry.dirent.name
    by_name = wanted.search_type in ("filename", "both") and wanted.name_matches(name)
    room = max(0, wanted.max_results - scan.total_matches - by_name)
    lines: list[dict[str, Any]] = []
    more = False
    if wanted.search_type in ("content", "both"):
        budget = min(limits.max_matches_per_file, room)
        lines, more = _content_matches(entry, wanted.needle, budget, limits, scan)
    if scan.full and (by_name or lines or more):
        scan.truncated = True  # a match beyond max_results exists: say so, and stop
        return False
    if not by_name and not lines:
        return True
    kind = "filename+content" if by_name and lines else "filename" if by_name else "content"
    item: dict[str, Any] = {"path": ctx.show(entry.path), "match": kind, "matches": lines}
    if more and len(lines) == limits.max_matches_per_file:
        item["more_matches"] = True  # this file has more than max_matches_per_file
    scan.results.append(item)
    scan.total_matches += len(lines) + by_name
    if scan.total_matches >= wanted.max_results:
        scan.full = True
        if more and len(lines) < limits.max_matches_per_file:
            scan.truncated = True  # cut by max_results inside this very file
            return False
    return True


def _walk_note(walked: Walk) -> str:
    notes = []
    if walked.over_cap:
        notes.append(
            f"stopped after looking at {walked.visited} files and directories "
            "(policy.limits.max_search_files; those the filters skip count too); "
            "search a subdirectory"
        )
    if walked.too_deep:
        notes.append(f"directories deeper than {MAX_WALK_DEPTH} levels were not searched")
    return "; ".join(notes)


def _result(query: str, search_type: str, scan: _Scan, max_results: int) -> Result:
    result: Result = {
        "success": True,
        "query": query,
        "search_type": search_type,
        "results": scan.results,
        "total_files": len(scan.results),
        "total_matches": scan.total_matches,
        "files_scanned": scan.scanned,
        "entries_visited": scan.visited,
        "truncated": scan.truncated,
    }
    note = scan.note
    if scan.truncated and not note:
        note = f"stopped at max_results={max_results} matches; there are more"
    if scan.hard_links:
        result["hard_links_skipped"] = scan.hard_links
        note = " ".join(
            filter(
                None,
                [
                    note + ("." if note else ""),
                    f"{scan.hard_links} file(s) with hard links were not searched inside (their "
                    "other names may be outside the allowed directories); read_file asks "
                    "about them",
                ],
            )
        )
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
    entry: Entry, needle: re.Pattern[str], budget: int, limits: LimitsConfig, scan: _Scan
) -> tuple[list[dict[str, Any]], bool]:
    """Up to `budget` matching lines, and whether the file holds more than that."""
    dirent, max_bytes = entry.dirent, limits.max_search_file_bytes
    try:
        if dirent.stat(follow_symlinks=False).st_size > max_bytes:
            return [], False
        # Opened relative to its directory's fd, never following a link, never blocking.
        data = fsops.read_at(entry.dir_fd, dirent.name, dirent.name, max_bytes).data
    except fsops.HardLinked:
        scan.hard_links += 1
        return [], False
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
    "column and text of each match. Skips hidden, binary and dependency directories, and the "
    "content of files with hard links (read_file asks about those).",
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
