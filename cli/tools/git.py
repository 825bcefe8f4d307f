"""git_status and git_diff: read-only views of a git work tree, safe in a hostile repository.

git runs as `git_run.py` runs it: hardened against what a hostile `.git` names, capped and
timed. Secrets and blocked paths the policy hides are left out of both results, and a diff's
section of a file is returned only when that file passes the read gate (cli/tools/gate.py), as
read_file would read it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

from cli.errors import ToolError
from cli.fs import reading
from cli.fs.paths import ResolvedPath
from cli.tools import gate
from cli.tools.base import Result, ToolContext
from cli.tools.definitions import DIFF_DEFAULT_BYTES, DIFF_MAX_BYTES
from cli.tools.git_run import _failure, _open, _Output, _Repo, _run, _text

STATUS_MAX_BYTES = 1_000_000

_DIFF_OPTIONS = (
    "--no-color",
    "--no-ext-diff",  # diff.external and diff.<driver>.command from .gitattributes
    "--no-textconv",  # diff.<driver>.textconv from .gitattributes
    "--ignore-submodules=all",
    "--submodule=short",
    "--no-relative",  # diff.relative would change the paths we attribute sections to
    "--src-prefix=a/",  # diff.noprefix and diff.mnemonicPrefix would too
    "--dst-prefix=b/",
)

_CHANGES = {
    "M": "modified",
    "T": "type changed",
    "A": "added",
    "D": "deleted",
    "R": "renamed",
    "C": "copied",
}
_CONFLICTS = {
    "DD": "both deleted",
    "AU": "added by us",
    "UD": "deleted by them",
    "UA": "added by them",
    "DU": "deleted by us",
    "AA": "both added",
    "UU": "both modified",
}

# -- status --------------------------------------------------------------------------------


@dataclass
class _Status:
    """What porcelain v2 said, before the policy's filter."""

    branch: dict[str, str] = field(default_factory=dict)
    entries: list[tuple[str, str, bytes, bytes | None]] = field(default_factory=list)


def _parse_status(data: bytes) -> _Status:
    """`git status --porcelain=v2 --branch -z`: NUL-ended records; a rename's record is
    followed by its original path. A record the cap cut short is dropped."""
    tokens = data.split(b"\0")
    tokens.pop()  # after the last NUL: empty, or a cut record
    status = _Status()
    it = iter(tokens)
    for token in it:
        kind, _, rest = token.partition(b" ")
        if kind == b"#":
            name, _, value = rest.partition(b" ")
            status.branch[name.decode("ascii", "replace")] = value.decode("utf-8", "replace")
        elif kind in (b"1", b"2", b"u"):
            fields = rest.split(b" ", {b"1": 7, b"2": 8, b"u": 9}[kind])
            orig = next(it, None) if kind == b"2" else None
            if kind == b"2" and orig is None:
                break  # its original path was cut off
            status.entries.append(
                (kind.decode(), fields[0].decode("ascii", "replace"), fields[-1], orig)
            )
        elif kind == b"?":
            status.entries.append(("?", "??", rest, None))
    return status


def git_status(
    ctx: ToolContext, args: Mapping[str, Any], paths: Mapping[str, ResolvedPath]
) -> Result:
    repo = _open(ctx, paths)
    command = [
        "status",
        "--porcelain=v2",
        "--branch",
        "-z",
        "--ahead-behind",
        "--find-renames",
        "--untracked-files=normal",  # an untracked dir is one entry, "dir/"
        "--ignored=no",
        "--ignore-submodules=all",
        "--",
        repo.spec,
    ]
    output = _run(repo.git, command, STATUS_MAX_BYTES)
    if output.code != 0 and not output.capped:
        raise _failure("status", output)
    parsed = _parse_status(output.out)
    result: Result = {
        "success": True,
        "root": _text(repo.root),
        "path": _text(ctx.show(repo.target)),
    }
    result.update(_branch(parsed.branch))
    result.update(_lists(ctx, repo.root, parsed.entries, output.capped))
    return result


def _branch(headers: Mapping[str, str]) -> Result:
    oid = headers.get("branch.oid", "(initial)")
    head = headers.get("branch.head", "")
    ahead = behind = None
    match = re.fullmatch(r"\+(\d+) -(\d+)", headers.get("branch.ab", ""))
    if match:
        ahead, behind = int(match[1]), int(match[2])
    return {
        "branch": None if head == "(detached)" else head or None,
        "detached": head == "(detached)",
        "head": None if oid == "(initial)" else oid[:12],  # None: no commit yet
        "upstream": headers.get("branch.upstream"),
        "ahead": ahead,
        "behind": behind,
    }


def _lists(
    ctx: ToolContext, root: str, entries: list[tuple[str, str, bytes, bytes | None]], capped: bool
) -> Result:
    """The entries the policy does not hide, sorted into lists, at most max_list_entries."""
    lists: dict[str, list[Any]] = {"staged": [], "unstaged": [], "untracked": [], "unmerged": []}
    cap = ctx.limits.max_list_entries
    hidden = shown = 0
    for kind, xy, raw, orig in entries:
        names = [os.path.join(root, os.fsdecode(p).rstrip("/")) for p in (raw, orig) if p]
        if any(ctx.hides(name) for name in names):
            hidden += 1
            continue
        shown += 1
        if shown <= cap:
            _sort_entry(
                lists,
                kind,
                xy,
                _text(ctx.show(names[0])) + ("/" if raw.endswith(b"/") else ""),
                _text(ctx.show(names[1])) if len(names) > 1 else None,
            )
    truncated = capped or shown > cap
    result: Result = {**lists, "clean": not entries and not capped, "truncated": truncated}
    note = _status_note(truncated, cap, hidden)
    if note:
        result["note"] = note
    return result


def _status_note(truncated: bool, cap: int, hidden: int) -> str:
    notes = []
    if truncated:
        notes.append(
            f"more changes than listed (at most {cap} entries, {STATUS_MAX_BYTES} bytes of git "
            "output); pass a subdirectory as path"
        )
    if hidden:
        notes.append(
            f"{hidden} changed path(s) not listed: secrets or blocked paths the policy hides"
        )
    return "; ".join(notes)


def _sort_entry(
    lists: dict[str, list[Any]], kind: str, xy: str, path: str, orig: str | None
) -> None:
    if kind == "?":
        lists["untracked"].append(path)
    elif kind == "u":
        lists["unmerged"].append({"path": path, "status": _CONFLICTS.get(xy, xy)})
    else:
        for side, code in (("staged", xy[0]), ("unstaged", xy[1])):
            if code == ".":
                continue
            item = {"path": path, "status": _CHANGES.get(code, code)}
            if orig is not None and code in "RC":
                item["from"] = orig
            lists[side].append(item)


# -- diff ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Section:
    """One file's part of a diff: its bytes and the repository paths it is about (None:
    they could not be told, so it is left out)."""

    data: bytes
    paths: tuple[bytes, ...] | None


def _sections(data: bytes) -> Iterator[_Section]:
    """Split before each top-level line: `diff --git`, `diff --cc` (a conflict) or
    `* Unmerged path`. Every line inside a file's part starts otherwise (` +-\\@`, `index`,
    `deleted file mode`, …), so file content cannot fake a split. Anything before the first
    split is not attributed to a file."""
    starts = [m.start() for m in re.finditer(rb"(?m)^(?:diff |\* )", data)]
    if data and (not starts or starts[0] != 0):
        starts.insert(0, 0)
    for begin, end in pairwise([*starts, len(data)]):
        chunk = data[begin:end]
        yield _Section(chunk, _section_paths(chunk))


def _section_paths(chunk: bytes) -> tuple[bytes, ...] | None:
    """The repository paths a section is about, from its whole lines only (the last one may
    be cut by the cap)."""
    lines = chunk.split(b"\n")[:-1]
    if not lines:
        return None
    for marker in (b"diff --cc ", b"diff --combined ", b"* Unmerged path "):
        if lines[0].startswith(marker):
            path = _unquote(lines[0][len(marker) :])
            return None if path is None else (path,)
    if not lines[0].startswith(b"diff --git ") or len(lines) < 2:
        return None  # cut before its second line: a rename cannot be told from a change
    if lines[1].startswith(b"similarity index "):
        named = [
            _unquote(line.split(b" ", 2)[2])
            for line in lines[2:4]
            if line.startswith((b"rename from ", b"rename to ", b"copy from ", b"copy to "))
        ]
        paths = tuple(p for p in named if p is not None)
        return paths if len(paths) == 2 else None
    return _same_paths(lines[0][len(b"diff --git ") :])


def _same_paths(header: bytes) -> tuple[bytes, ...] | None:
    """`a/X b/X` or `"a/X" "b/X"` (git quotes both or neither when the names are equal)."""
    if header.startswith(b'"'):
        first, rest = _quoted(header)
        second = _unquote(rest[1:]) if rest.startswith(b' "') else None
    else:
        half = (len(header) - 1) // 2
        first, second = header[:half], header[half + 1 :]
    if (
        first is None
        or second is None
        or not first.startswith(b"a/")
        or second != b"b/" + first[2:]
    ):
        return None
    return (first[2:],)


def _quoted(text: bytes) -> tuple[bytes | None, bytes]:
    """The C-quoted string at the start of `text`, unquoted, and what follows it."""
    n = 1
    while n < len(text) and text[n : n + 1] != b'"':
        n += 2 if text[n : n + 1] == b"\\" else 1
    return _unquote(text[: n + 1]), text[n + 1 :]


_ESCAPES = {b"a": 7, b"b": 8, b"t": 9, b"n": 10, b"v": 11, b"f": 12, b"r": 13, b'"': 34, b"\\": 92}


def _unquote(text: bytes) -> bytes | None:
    """A path as git prints it: as is, or in double quotes with C escapes (octal for bytes
    outside printable ASCII, as core.quotePath=true makes it)."""
    if not text.startswith(b'"'):
        return text
    if len(text) < 2 or not text.endswith(b'"'):
        return None
    body, out, n = text[1:-1], bytearray(), 0
    while n < len(body):
        char = body[n : n + 1]
        if char != b"\\":
            out += char
            n += 1
        elif body[n + 1 : n + 2] in _ESCAPES:
            out.append(_ESCAPES[body[n + 1 : n + 2]])
            n += 2
        elif re.fullmatch(rb"[0-3][0-7]{2}", body[n + 1 : n + 4]):
            out.append(int(body[n + 1 : n + 4], 8))
            n += 4
        else:
            return None
    return bytes(out)


def git_diff(
    ctx: ToolContext, args: Mapping[str, Any], paths: Mapping[str, ResolvedPath]
) -> Result:
    cap = args.get("max_bytes", DIFF_DEFAULT_BYTES)
    if cap < 1:
        raise ToolError(f"max_bytes must be at least 1 (default {DIFF_DEFAULT_BYTES})")
    cap = min(cap, DIFF_MAX_BYTES)
    staged = bool(args.get("staged", False))
    repo = _open(ctx, paths)
    command = ["diff", *(["--cached"] if staged else []), *_DIFF_OPTIONS, "--", repo.spec]
    output = _run(repo.git, command, cap)
    if output.code != 0 and not output.capped:
        raise _failure("diff", output)
    # What lies below the path argument was put to a person if it is outside the allowed
    # dirs; without one, git ran in the working dir, which nobody was asked about.
    decided = paths["path"].real if "path" in paths else None
    return _diff_result(ctx, repo, output, staged, cap, decided)


def _diff_result(
    ctx: ToolContext, repo: _Repo, output: _Output, staged: bool, cap: int, decided: str | None
) -> Result:
    kept, files, hidden, unknown = bytearray(), list[str](), 0, 0
    refused: dict[str, int] = {}
    for section in _sections(output.out):
        if section.paths is None:
            unknown += 1
            continue
        names = [os.path.join(repo.root, os.fsdecode(p)) for p in section.paths]
        if any(ctx.hides(name) for name in names):
            hidden += 1
            continue
        rule = _gate_rule(ctx, names, decided)
        if rule in (gate.HIDDEN, gate.SECRET):
            hidden += 1  # a secret under another name is a secret
            continue
        if rule is not None:
            refused[rule] = refused.get(rule, 0) + 1
            continue
        kept += section.data
        files.append(_text(ctx.show(names[-1])))
    if output.capped and b"\n" in kept:
        del kept[kept.rfind(b"\n") + 1 :]  # end on a whole line
    result: Result = {
        "success": True,
        "root": _text(repo.root),
        "path": _text(ctx.show(repo.target)),
        "staged": staged,
        "diff": kept.decode("utf-8", "replace"),
        "bytes": len(kept),
        "truncated": output.capped,
        "files": files,
    }
    notes = [
        _diff_note(output.capped, cap, hidden, unknown, staged, not output.out),
        *gate.left_out(refused),
        *_unchecked_note(refused.get(_UNCHECKED, 0)),
    ]
    note = "; ".join(n for n in notes if n)
    if note:
        result["note"] = note
    return result


_UNCHECKED = "unchecked"


def _gate_rule(ctx: ToolContext, names: list[str], decided: str | None) -> str | None:
    """Why a section must be left out (a read gate rule, or _UNCHECKED), or None. Git read
    the work-tree files itself, so each of them is looked at now, reached and opened as the
    file tools reach a file (never through a symlink) and its fstat put to the gate. Checked
    after git ran: a file swapped for a hard link while git read it and swapped back before
    this look is not caught.

    The staged side (the index, HEAD) is blob content no file holds now: a section is left
    out when the file at its path is refused today (a blob staged from a hard link to a key
    is caught while that link is there); a blob whose file is gone, or no longer linked,
    cannot be told from any other content and is shown (docs/safety.md: a secret tracked by
    git stays readable through git). A file that is not there (a deletion) or not a regular
    file (a symlink, whose section holds its target's name, not its content) has no content
    of its own to check."""
    reads = gate.Reads(ctx, ctx.limits.max_read_bytes, under=decided)
    for name in names:
        try:
            info = reading.identify(ctx.target(name))
        except (ToolError, ValueError):
            return _UNCHECKED  # git saw something here that cannot be told now
        if info is None:
            continue
        refusal = reads.check(name, info)
        if refusal is not None:
            return refusal.rule
    return None


def _unchecked_note(count: int) -> list[str]:
    if not count:
        return []
    return [f"{gate.files(count, 'section')} left out: its work-tree file could not be checked"]


def _diff_note(capped: bool, cap: int, hidden: int, unknown: int, staged: bool, empty: bool) -> str:
    notes = []
    if capped:
        notes.append(
            f"diff cut at {cap} bytes (max_bytes, at most {DIFF_MAX_BYTES}); pass one file as "
            "path, or use git_status to see what changed"
        )
    if hidden:
        notes.append(f"{hidden} file(s) left out: secrets or blocked paths the policy hides")
    if unknown:
        notes.append(f"{unknown} file section(s) left out: their paths could not be read")
    if empty and not staged:
        notes.append("no unstaged changes here; pass staged: true for staged ones")
    elif empty:
        notes.append("no staged changes here; pass staged: false for unstaged ones")
    return "; ".join(notes)
