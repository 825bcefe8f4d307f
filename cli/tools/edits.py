"""edit_file: replace exact text in a file the model has read, forgiving the ways small models
copy text wrong (pure matching; the write goes through write_file's own path).

Matching runs in stages and stops at the first stage that finds the text:

1. exact (a substring anywhere);
2. whole lines, ignoring trailing whitespace on each line;
3. whole lines, ignoring leading and trailing whitespace of each line — the replacement is
   re-indented to the indentation of the lines it replaces;
4. typographic quotes, dashes and non-breaking spaces folded to ASCII on both sides (each is
   one character for one, so positions stay put), exactly, then as whole trimmed lines.

A lenient stage (2–4) is used only when its match is unique: guessing between two places that
look alike is how a wrong line gets changed. Every failure says what to do next, in words a
small model can act on: the most similar lines with their numbers, or where the matches are.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass

# One character for one: a match found in the folded text has the same offsets in the file.
_FOLD = str.maketrans(
    {
        "\u2018": "'",
        "\u2019": "'",
        "\u201a": "'",
        "\u201b": "'",
        "\u2032": "'",
        "\u201c": '"',
        "\u201d": '"',
        "\u201e": '"',
        "\u201f": '"',
        "\u2033": '"',
        "\u00ab": '"',
        "\u00bb": '"',
        "\u2010": "-",
        "\u2011": "-",
        "\u2012": "-",
        "\u2013": "-",
        "\u2014": "-",
        "\u2015": "-",
        "\u2212": "-",
        "\u00a0": " ",
        "\u2007": " ",
        "\u202f": " ",
    }
)
MAX_LOCATIONS = 10  # line numbers listed for an ambiguous match
SIMILAR_LINES = 6  # lines quoted for a failed match
_SIMILAR_SCAN = 20_000  # lines compared for "most similar" (quick ratio first)


class EditFailed(Exception):
    """The edit cannot be made as asked; the message says why, `hint` what the model could
    do (for the model only, like ToolError's)."""

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.hint = hint


@dataclass(frozen=True)
class Edit:
    """An edit worked out: the new text and what it changed."""

    text: str
    replacements: int
    line_range: tuple[int, int]  # first and last line of the replaced text, in the new file
    added: int  # lines
    removed: int
    stage: str  # exact | trailing whitespace | indentation | typography


@dataclass(frozen=True)
class _Span:
    start: int  # character offsets in the (LF-normalised) text
    end: int
    new: str  # what goes there


def plan_edit(text: str, old: str, new: str, replace_all: bool = False) -> Edit:
    """The file's new text after replacing `old` with `new`; raises EditFailed."""
    if old == "":
        raise EditFailed(
            "old_string is empty", hint="give the exact text to replace (read_file shows it)"
        )
    if old == new:
        raise EditFailed("old_string and new_string are the same; nothing would change")
    crlf = "\r\n" in text and text.count("\r\n") == text.count("\n")
    if crlf:  # a Windows file: match and write with its own line ends
        text, old, new = (s.replace("\r\n", "\n") for s in (text, old, new))
    for stage, finder in _STAGES:
        spans = finder(text, old, new)
        if not spans:
            continue
        if len(spans) > 1 and not replace_all:
            raise EditFailed(*_ambiguous(text, spans, stage))
        edit = _apply(text, spans, stage)
        if crlf:
            edit = Edit(edit.text.replace("\n", "\r\n"), *_fields(edit))
        return edit
    raise EditFailed(*_no_match(text, old))


def _fields(edit: Edit) -> tuple[int, tuple[int, int], int, int, str]:
    return edit.replacements, edit.line_range, edit.added, edit.removed, edit.stage


# -- the stages -----------------------------------------------------------------------------------


def _exact(text: str, old: str, new: str) -> list[_Span]:
    spans, at = [], text.find(old)
    while at != -1:
        spans.append(_Span(at, at + len(old), new))
        at = text.find(old, at + len(old))
    return spans


def _trailing(text: str, old: str, new: str) -> list[_Span]:
    return _line_spans(text, old, new, str.rstrip, reindent=False)


def _trimmed(text: str, old: str, new: str) -> list[_Span]:
    return _line_spans(text, old, new, str.strip, reindent=True)


def _typography(text: str, old: str, new: str) -> list[_Span]:
    folded, old_folded = text.translate(_FOLD), old.translate(_FOLD)
    if folded == text and old_folded == old:
        return []  # nothing to fold: the earlier stages saw exactly this
    spans = _exact(folded, old_folded, new)
    return spans or _line_spans(folded, old_folded, new, str.strip, reindent=True)


_STAGES = (
    ("exact", _exact),
    ("trailing whitespace", _trailing),
    ("indentation", _trimmed),
    ("typography", _typography),
)


def _line_spans(
    text: str, old: str, new: str, norm: Callable[[str], str], *, reindent: bool
) -> list[_Span]:
    """Whole-line matches of `old` whose lines equal the file's under `norm`."""
    wanted = old.split("\n")
    if wanted and wanted[-1] == "":
        wanted.pop()  # old_string ended with a newline
    while wanted and not wanted[0].strip():
        wanted.pop(0)  # blank lines around a snippet are how models pad it
    while wanted and not wanted[-1].strip():
        wanted.pop()
    if not wanted:
        return []
    key = [norm(line) for line in wanted]
    lines = text.split("\n")
    starts = _line_starts(lines)
    spans = []
    first = key[0]
    for i in range(len(lines) - len(key) + 1):
        if norm(lines[i]) != first:
            continue
        if all(norm(lines[i + j]) == key[j] for j in range(1, len(key))):
            end_line = i + len(key) - 1
            start, end = starts[i], starts[end_line] + len(lines[end_line])
            replacement = _reindent(new, wanted, lines[i : end_line + 1]) if reindent else new
            replacement = replacement.removesuffix("\n")  # the file's own line end stays
            if not replacement and end < len(text):
                end += 1  # lines deleted: their line end goes too, not a blank line left
            spans.append(_Span(start, end, replacement))
    return _disjoint(spans)


def _line_starts(lines: list[str]) -> list[int]:
    starts, at = [], 0
    for line in lines:
        starts.append(at)
        at += len(line) + 1
    return starts


def _disjoint(spans: list[_Span]) -> list[_Span]:
    """Overlapping matches (a repeated line pattern) count once, the earlier first."""
    kept: list[_Span] = []
    for span in spans:
        if not kept or span.start >= kept[-1].end:
            kept.append(span)
    return kept


def _indent(line: str) -> str:
    return line[: len(line) - len(line.lstrip())]


def _common_indent(lines: list[str]) -> str:
    indents = [_indent(line) for line in lines if line.strip()]
    if not indents:
        return ""
    common = indents[0]
    for indent in indents[1:]:
        while not indent.startswith(common):
            common = common[:-1]
    return common


def _reindent(new: str, old_lines: list[str], matched: list[str]) -> str:
    """`new` moved from the indentation the model wrote to the one the file has: each line
    keeps its depth relative to the model's own snippet."""
    theirs, ours = _common_indent(old_lines), _common_indent(matched)
    if theirs == ours:
        return new
    out = []
    for line in new.split("\n"):
        if not line.strip():
            out.append(line)
        elif line.startswith(theirs):
            out.append(ours + line[len(theirs) :])
        else:
            out.append(ours + line.lstrip())
    return "\n".join(out)


# -- the result -----------------------------------------------------------------------------------


def _apply(text: str, spans: list[_Span], stage: str) -> Edit:
    parts, at, shift = [], 0, 0
    first_line = last_line = 0
    added = removed = 0
    for n, span in enumerate(spans):
        parts += [text[at : span.start], span.new]
        at = span.end
        replaced = text[span.start : span.end]
        start_line = text.count("\n", 0, span.start) + 1 + shift
        if n == 0:
            first_line = start_line
        last_line = start_line + max(_lines_in(span.new), 1) - 1
        shift += span.new.count("\n") - replaced.count("\n")
        added += _lines_in(span.new)
        removed += _lines_in(replaced)
    parts.append(text[at:])
    return Edit("".join(parts), len(spans), (first_line, last_line), added, removed, stage)


def _lines_in(region: str) -> int:
    if not region:
        return 0
    return region.count("\n") + (0 if region.endswith("\n") else 1)


def _line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def _ambiguous(text: str, spans: list[_Span], stage: str) -> tuple[str, str]:
    numbers = [str(_line_of(text, s.start)) for s in spans[:MAX_LOCATIONS]]
    more = f" and {len(spans) - MAX_LOCATIONS} more" if len(spans) > MAX_LOCATIONS else ""
    how = "" if stage == "exact" else f" (ignoring {stage})"
    return (
        f"old_string matches {len(spans)} places{how}, at lines {', '.join(numbers)}{more}",
        "add surrounding lines to old_string to pick one, or set replace_all to change them all",
    )


def _no_match(text: str, old: str) -> tuple[str, str]:
    """Why (for anyone) and, for the model, the most similar lines to copy from."""
    lines = text.split("\n")
    wanted = [line for line in old.split("\n") if line.strip()] or [old]
    at = _most_similar(lines, wanted[0].strip())
    if at is None:
        return "old_string was not found in the file", "read_file it again, copy the text exactly"
    count = min(max(len(wanted), 1), SIMILAR_LINES)
    quoted = "\n".join(f"{n + 1:>5}: {lines[n]}" for n in range(at, min(at + count, len(lines))))
    return (
        "old_string was not found in the file (whitespace, quotes and dashes were forgiven too)",
        f"the most similar lines are:\n{quoted}\n"
        "copy the text exactly from there (without the line numbers), or read_file it again",
    )


def _most_similar(lines: list[str], wanted: str) -> int | None:
    """The index of the line most like `wanted`, or None when nothing is alike."""
    if not wanted:
        return None
    matcher = difflib.SequenceMatcher(autojunk=False)
    matcher.set_seq2(wanted)
    scored = []
    for n, line in enumerate(lines[:_SIMILAR_SCAN]):
        stripped = line.strip()
        if not stripped:
            continue
        matcher.set_seq1(stripped)
        if matcher.real_quick_ratio() > 0.5 and matcher.quick_ratio() > 0.5:
            scored.append((matcher.quick_ratio(), n, stripped))
    best: tuple[float, int] | None = None
    for _, n, stripped in sorted(scored, reverse=True)[:50]:
        matcher.set_seq1(stripped)
        ratio = matcher.ratio()
        if ratio > 0.5 and (best is None or ratio > best[0]):
            best = (ratio, n)
    return best[1] if best else None
