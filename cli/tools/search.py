"""search_files: filenames by glob, contents by literal substring."""

from __future__ import annotations

import fnmatch
import functools
import re
from collections.abc import Callable, Mapping
from contextlib import closing
from dataclasses import dataclass, field
from typing import Any

from cli.config.settings import LimitsConfig
from cli.errors import ToolError
from cli.fs import reach, reading
from cli.fs.paths import ResolvedPath
from cli.fs.walk import MAX_WALK_DEPTH, Entry, Walk
from cli.tools import gate, ripgrep
from cli.tools.base import Result, ToolContext
from cli.tools.listing import normalize_extension

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
        query=query,
        case_sensitive=case,
        search_type=search_type,
        name_matches=_name_matcher(query, case),
        needle=re.compile(re.escape(query), 0 if case else re.IGNORECASE),
        holds=_whole_file_check(query, case),
        extensions=tuple(
            e for e in map(normalize_extension, args.get("file_extensions") or []) if e
        ),
        max_results=min(max_results, limits.max_search_results),
        limits=limits,
    )
    hint = "; search_files searches below a directory"
    rg = _proposer(ctx, query, case, search_type)
    hides = ctx.walk_hides(root)
    # Every file read passes the read gate, its names by the walk's own check.
    scan = _Scan(gate.Reads(ctx, limits.max_search_file_bytes, under=root, hides=hides))
    with reach.open_dir(ctx.target(root), hint) as top:
        # Every entry the walk reads counts, directories and files the filters skip included:
        # a filter that matches nothing must not make the search walk the whole tree.
        walked = Walk(
            top,
            root,
            max_visits=limits.max_search_files,
            include_hidden=False,
            hides=hides,
            deadline=ctx.deadline,
        )
        if rg is None:
            _search_walking(walked, wanted, scan, ctx)
        else:
            _search_proposed(walked, top, rg, wanted, scan, ctx)
    return _result(query, search_type, scan, wanted.max_results)


def _search_walking(walked: Walk, wanted: _Query, scan: _Scan, ctx: ToolContext) -> None:
    """Each file is searched as the walk reaches it, read through its directory's fd."""
    with closing(walked):
        for entry in walked:
            if _searchable(entry, wanted, walked.hides):
                read = functools.partial(_read_in_dir, entry)
                if not _visit(entry.path, entry.dirent.name, read, wanted, scan, ctx):
                    break
    scan.visited = walked.visited
    if walked.truncated and not scan.truncated:
        scan.truncated = True
        scan.note = _walk_note(walked)


def _search_proposed(
    walked: Walk, top: int, rg: str, wanted: _Query, scan: _Scan, ctx: ToolContext
) -> None:
    """The walk first, handing rg the files it finds; then each file is visited in walk order
    as _search_walking would, its content read (again, below the top's fd, never through a
    symlink) only if rg proposed it. What is reported is the same as _search_walking's, the
    count of entries visited being the walk's at the file where the search stops."""
    seen: list[tuple[str, str, str, int, Reader | None]] = []
    proposer = ripgrep.Proposer(
        rg,
        top,
        wanted.query,
        wanted.case_sensitive,
        wanted.limits.max_search_file_bytes,
        deadline=ctx.deadline,
    )
    try:
        with closing(walked):
            for entry in walked:
                if _searchable(entry, wanted, walked.hides):
                    read = _before_reading(entry, scan)
                    if read is None:
                        proposer.add(entry.relative)
                    seen.append(
                        (entry.path, entry.relative, entry.dirent.name, walked.visited, read)
                    )
        proposed = proposer.finish()
    finally:
        proposer.close()
    by_name = wanted.search_type != "content"
    for path, relative, name, visited, known in seen:
        if known is not None:
            read = known
        elif proposed is None or relative in proposed:
            read = functools.partial(_read_below, top, relative, path)
        elif by_name:
            read = _nothing
        else:
            scan.scanned += 1  # what _visit does for a file with no match in it
            continue
        if not _visit(path, name, read, wanted, scan, ctx):
            scan.visited = visited  # what the walk had read when _search_walking stops
            return
    scan.visited = walked.visited
    if walked.truncated and not scan.truncated:
        scan.truncated = True
        scan.note = _walk_note(walked)


def _before_reading(entry: Entry, scan: _Scan) -> Reader | None:
    """What reading the file would come to, where that does not depend on its content, as
    the read gate decides it when the file is read: None for "read it"."""
    try:
        info = entry.dirent.stat(follow_symlinks=False)
    except OSError:
        return _nothing
    refusal = scan.reads.check(entry.path, info)
    if refusal is None:
        return None
    return _hard_linked if refusal.rule == gate.HARD_LINK else _nothing


def _hard_linked(_max_bytes: int, scan: _Scan) -> None:
    scan.hard_links += 1
    return None


def _nothing(_max_bytes: int, _scan: _Scan) -> None:
    return None  # rg read the file: the text is not in it


def _proposer(ctx: ToolContext, query: str, case: bool, search_type: str) -> str | None:
    """The rg that proposes files for this search, or None: Python reads every file."""
    try:
        choice = ripgrep.engine(ctx.environ)
    except ripgrep.EngineError as exc:
        raise ToolError(str(exc)) from None
    if choice == "python" or search_type == "filename":
        return None
    rg = ripgrep.find(ctx.environ)
    if choice == "rg" and rg is None:
        raise ToolError(
            f"{ripgrep.ENGINE_VARIABLE}=rg, but no rg was found (install metona-agent[fast] "
            "or ripgrep, or unset it)"
        )
    if rg is None or not ripgrep.usable_for(query, case):
        return None
    return rg


@dataclass(frozen=True)
class _Query:
    query: str
    case_sensitive: bool
    search_type: str
    name_matches: Callable[[str], bool]
    needle: re.Pattern[str]  # per line, for line, column and text
    holds: Callable[[bytes], bool]  # may the file hold a match at all? (one pass, in C)
    extensions: tuple[str, ...]
    max_results: int
    limits: LimitsConfig


@dataclass
class _Scan:
    """What a search found so far, and why it stopped."""

    reads: gate.Reads  # what every file read passes

    results: list[dict[str, Any]] = field(default_factory=list)
    total_matches: int = 0
    scanned: int = 0  # files whose name or content was searched
    visited: int = 0  # entries the walk read: files, directories, skipped ones
    full: bool = False
    truncated: bool = False
    note: str = ""
    hard_links: int = 0  # files whose content was not searched: they have other names


# A file's content to search, given max_bytes and the scan (which counts hard links); None:
# nothing to search.
Reader = Callable[[int, "_Scan"], "bytes | None"]


def _searchable(entry: Entry, wanted: _Query, hides: Callable[[str], bool]) -> bool:
    dirent = entry.dirent
    # Symlinks are never followed, files included: a link may point anywhere.
    if not dirent.is_file(follow_symlinks=False):
        return False
    if wanted.extensions and not dirent.name.lower().endswith(wanted.extensions):
        return False
    return not hides(entry.path)  # secrets: not even their lines are shown


def _visit(
    path: str,
    name: str,
    read: Reader,
    wanted: _Query,
    scan: _Scan,
    ctx: ToolContext,
) -> bool:
    """Search one file; False when the search must stop."""
    ctx.deadline.check()
    limits = wanted.limits
    scan.scanned += 1
    by_name = wanted.search_type in ("filename", "both") and wanted.name_matches(name)
    room = max(0, wanted.max_results - scan.total_matches - by_name)
    lines: list[dict[str, Any]] = []
    more = False
    if wanted.search_type in ("content", "both"):
        budget = min(limits.max_matches_per_file, room)
        lines, more = _content_matches(read, wanted, budget, scan)
    if scan.full and (by_name or lines or more):
        scan.truncated = True  # a match beyond max_results exists: say so, and stop
        return False
    if not by_name and not lines:
        return True
    kind = "filename+content" if by_name and lines else "filename" if by_name else "content"
    item: dict[str, Any] = {"path": ctx.show(path), "match": kind, "matches": lines}
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
        match = re.compile(fnmatch.translate(pattern)).match  # what fnmatchcase does, once
        if case:
            return lambda name: match(name) is not None
        return lambda name: match(name.lower()) is not None
    return lambda name: pattern in (name if case else name.lower())


def _read_in_dir(entry: Entry, max_bytes: int, scan: _Scan) -> bytes | None:
    """The file's content, opened relative to its directory's fd (never following a link,
    never blocking), or None: refused by the read gate (too large, hard-linked…),
    unreadable or gone."""
    return _read(_read_seen, entry.dir_fd, entry.dirent.name, entry.path, max_bytes, scan)


def _read_seen(
    dir_fd: int, name: str, shown: str, max_bytes: int, passes: reading.Gate
) -> reading.FileData:
    # _searchable saw the entry is a regular file (scandir's d_type, no link followed).
    return reading.read_at(
        dir_fd, name, shown, max_bytes, seen_regular=True, text_only=True, gate=passes
    )


def _read_below(top: int, relative: str, path: str, max_bytes: int, scan: _Scan) -> bytes | None:
    return _read(reading.read_below, top, relative, path, max_bytes, scan)


def _read(
    how: Callable[[int, str, str, int, reading.Gate], reading.FileData],
    dir_fd: int,
    name: str,
    path: str,
    max_bytes: int,
    scan: _Scan,
) -> bytes | None:
    try:
        return how(dir_fd, name, name, max_bytes, scan.reads.hook(path)).data
    except gate.Refused as refused:
        # Only what a person could let through is counted and said; secrets and files too
        # large are skipped without a word, as the walk skips secrets by name.
        if refused.refusal.rule == gate.HARD_LINK:
            scan.hard_links += 1
    except reading.HardLinked:  # the gate's backstop in cli/fs: the same refusal
        scan.hard_links += 1
    except (OSError, ToolError):  # unreadable, gone, binary
        pass
    return None


def _whole_file_check(query: str, case: bool) -> Callable[[bytes], bool]:
    """A test of a file's whole content that is True whenever a line of it matches, done in
    one pass or two at C speed (most files do not match; only those that may are split in
    lines). An ASCII query's bytes can only meet ASCII bytes in UTF-8, and ASCII lowering is
    re.IGNORECASE's rule there; the exceptions are i, k and s, which re.IGNORECASE also
    matches with İ, ı, the Kelvin sign and the long s: a file with non-ASCII bytes is then
    decoded, as the line search decodes it."""
    text_search = re.compile(re.escape(query), 0 if case else re.IGNORECASE).search

    def decoded(data: bytes) -> bool:
        return text_search(data.decode("utf-8", "replace")) is not None

    if not query.isascii() or "\x00" in query:
        return decoded
    raw = query.encode("ascii")
    if case:
        # UTF-8 is self-synchronising: a valid query's bytes occur where its text does.
        return lambda data: raw in data
    lowered = raw.lower()
    if lowered == raw.upper():  # no letters: case changes nothing
        return lambda data: raw in data
    if not set(query.lower()) & set("iks"):
        check = _lowered_in(lowered)
    else:
        within = _lowered_in(lowered)

        def check(data: bytes) -> bool:
            return within(data) if data.isascii() else decoded(data)

    # The query's longest run of digits and punctuation (which have no case, and which
    # re.IGNORECASE matches only as themselves) must be there as it is: one find, no copy.
    anchor = max(re.findall(rb"[^A-Za-z]+", raw), key=len, default=b"")
    if len(anchor) < 3:
        return check
    return lambda data: anchor in data and check(data)


def _lowered_in(lowered: bytes) -> Callable[[bytes], bool]:
    return lambda data: lowered in data.lower()


def _content_matches(
    read: Reader, wanted: _Query, budget: int, scan: _Scan
) -> tuple[list[dict[str, Any]], bool]:
    """Up to `budget` matching lines, and whether the file holds more than that."""
    data = read(wanted.limits.max_search_file_bytes, scan)
    if data is None or reading.is_binary(data) or not wanted.holds(data):
        return [], False
    needle = wanted.needle
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
