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

Line ends are the file's, whatever old_string and new_string use: every stage matches on the
text with each line end made "\n", and the result gets the file's ends back (`_LineEnds`): a
line the edit did not touch keeps its bytes, even in a file whose lines end differently.

Time is about linear in the file's size whatever old_string is: the whole-line stages give
each distinct line of old_string a code and find the codes' string in the file's with
str.find (two-way: linear), not line by line at every position (which took minutes for 16 KB
of short repeated lines against 120 KB of them). The similar-lines hint works within a budget
and says "(search cut short)" when it stops early. The call's Deadline is checked between
stages and inside their loops.
"""

from __future__ import annotations

import bisect
import difflib
import itertools
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace

from cli.fs.deadline import NO_DEADLINE, Deadline

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
# Character comparisons difflib may make for the hint in all (its ratio is worse than
# quadratic in a line's length on some text): about a second of Python at worst, and far
# more than lines of code need.
_SIMILAR_BUDGET = 10_000_000
CHECK_EVERY = 1024  # items of a loop (lines, matches) between two looks at the clock
CUT_SHORT = "(search cut short)"


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


def plan_edit(
    text: str,
    old: str,
    new: str,
    replace_all: bool = False,
    *,
    deadline: Deadline = NO_DEADLINE,
    max_chars: int | None = None,
) -> Edit:
    """The file's new text after replacing `old` with `new`; raises EditFailed, or
    DeadlineExceeded when `deadline` passes first. `max_chars`: a new text longer than this
    is refused before it is built (the write limit: a character is at least a byte)."""
    if old == "":
        raise EditFailed(
            "old_string is empty", hint="give the exact text to replace (read_file shows it)"
        )
    if old == new:
        raise EditFailed("old_string and new_string are the same; nothing would change")
    # Every stage matches on the text with its line ends made "\n" (and so do old_string and
    # new_string); the new text gets the file's own ends back.
    ends = _LineEnds.of(text)
    text, old, new = ends.text, ends.normal(old), ends.normal(new)
    if old == new:
        raise EditFailed(
            "old_string and new_string differ only in line ends, and edit_file keeps each "
            "line's end as the file has it; nothing would change",
            hint="to change the file's line ends, write_file its whole content",
        )
    work = _Work(deadline, _Room(max_chars), replace_all)
    for stage, finder in _STAGES:
        deadline.check()
        spans = finder(text, old, new, work)
        if not spans:
            continue
        if len(spans) > 1 and not replace_all:
            raise EditFailed(*_ambiguous(text, spans, stage))
        edit = _apply(text, spans, stage, work)
        return replace(edit, text=ends.restore(edit.text, spans, work))
    raise EditFailed(*_no_match(text, old, deadline))


class _Room:
    """How many characters of replacement text may still be made (None: no limit)."""

    def __init__(self, max_chars: int | None) -> None:
        self.max_chars = max_chars

    def check(self, chars: int) -> None:
        """Refuse a new text that would hold more than max_chars characters."""
        if self.max_chars is not None and chars > self.max_chars:
            raise EditFailed(
                f"the edited file would hold more than {self.max_chars} characters, more than "
                "a file may be written with (policy.limits.max_write_bytes); nothing was changed",
                hint="replace fewer places at a time, or with a shorter new_string",
            )


@dataclass(frozen=True)
class _Work:
    """What bounds a stage: the call's deadline and the size of what it makes."""

    deadline: Deadline
    room: _Room
    replace_all: bool  # False: several matches are refused, and nothing need be made

    def tick(self, n: int) -> None:
        """The n-th item of a loop: look at the clock every CHECK_EVERY items."""
        if n % CHECK_EVERY == 0:
            self.deadline.check()


# -- the stages -----------------------------------------------------------------------------------


def _exact(text: str, old: str, new: str, work: _Work) -> list[_Span]:
    # str.find is linear (two-way for long needles), and each search starts past the last
    # match: linear in all.
    spans, at = [], text.find(old)
    while at != -1:
        spans.append(_Span(at, at + len(old), new))
        work.tick(len(spans))
        at = text.find(old, at + len(old))
    return spans


def _trailing(text: str, old: str, new: str, work: _Work) -> list[_Span]:
    return _line_spans(text, old, new, str.rstrip, work, reindent=False)


def _trimmed(text: str, old: str, new: str, work: _Work) -> list[_Span]:
    return _line_spans(text, old, new, str.strip, work, reindent=True)


def _typography(text: str, old: str, new: str, work: _Work) -> list[_Span]:
    folded, old_folded = text.translate(_FOLD), old.translate(_FOLD)
    if folded == text and old_folded == old:
        return []  # nothing to fold: the earlier stages saw exactly this
    spans = _exact(folded, old_folded, new, work)
    return spans or _line_spans(folded, old_folded, new, str.strip, work, reindent=True)


_STAGES = (
    ("exact", _exact),
    ("trailing whitespace", _trailing),
    ("indentation", _trimmed),
    ("typography", _typography),
)


def _line_spans(
    text: str, old: str, new: str, norm: Callable[[str], str], work: _Work, *, reindent: bool
) -> list[_Span]:
    """Whole-line matches of `old` whose lines equal the file's under `norm`. Overlapping
    matches (a repeated line pattern) count once, the earlier first."""
    wanted = _snippet(old)
    if not wanted:
        return []
    lines = text.split("\n")
    if len(wanted) > len(lines):
        return []
    key = [norm(line) for line in wanted]
    work.deadline.check()
    normed = list(map(norm, lines))
    work.deadline.check()
    found = _runs(normed, key, work)
    if not found:
        return []
    starts = _line_starts(lines)
    if len(found) > 1 and not work.replace_all:
        # Refused for being ambiguous (plan_edit says where): nothing to make.
        return [_Span(starts[i], starts[i], "") for i in found]
    plain = new.removesuffix("\n")  # the file's own line end stays
    theirs = _common_indent(wanted) if reindent else ""  # once: old_string may be long
    spans, made = [], 0
    for n, i in enumerate(found, start=1):
        end_line = i + len(key) - 1
        start, end = starts[i], starts[end_line] + len(lines[end_line])
        replacement = plain
        if reindent:
            replacement = _reindent(new, theirs, lines[i : end_line + 1], work.room)
            replacement = replacement.removesuffix("\n")
        # Re-indenting keeps blank lines as they are: `new` comes out empty for every match
        # or for none.
        if not plain and end < len(text):
            end += 1  # lines deleted: their line end goes too, not a blank line left
        spans.append(_Span(start, end, replacement))
        made += len(replacement)
        work.room.check(made)
        work.tick(n)
    return spans


def _snippet(old: str) -> list[str]:
    """old_string's lines without the blank lines around them (how models pad a snippet;
    the empty one after a final newline among them)."""
    wanted = old.split("\n")
    begin, end = 0, len(wanted)
    while end and not wanted[end - 1].strip():
        end -= 1
    while begin < end and not wanted[begin].strip():
        begin += 1
    return wanted[begin:end]


def _runs(lines: list[str], key: list[str], work: _Work) -> list[int]:
    """Where the lines `key` stand one after another in `lines`: the index of each run's
    first line, leftmost first, never overlapping. Linear in the lines' length whatever
    `key` is: each distinct key line gets a code of two characters, every other line one
    code no key line has, and str.find looks for the key's codes in the file's (first and
    second characters come from ranges apart, so a match starts only where a line's code
    does)."""
    codes: dict[str, str] = {}
    for line in key:
        if line not in codes:
            codes[line] = _code(len(codes))
    other = _code(len(codes))
    pattern = "".join([codes[line] for line in key])
    coded = "".join(map(codes.get, lines, itertools.repeat(other)))
    work.deadline.check()
    found, at = [], coded.find(pattern)
    while at != -1:
        found.append(at // 2)
        work.tick(len(found))
        at = coded.find(pattern, at + len(pattern))  # past the match: none overlap
    return found


def _code(n: int) -> str:
    return chr(0x8000 + (n >> 15)) + chr(n & 0x7FFF)


def _line_starts(lines: list[str]) -> list[int]:
    starts, at = [], 0
    for line in lines:
        starts.append(at)
        at += len(line) + 1
    return starts


def _indent(line: str) -> str:
    return line[: len(line) - len(line.lstrip())]


def _common_indent(lines: list[str]) -> str:
    indents = [_indent(line) for line in lines if line.strip()]
    if not indents:
        return ""
    # What all share is what the first and the last in sorted order share: one pass, where
    # cutting one character at a time was quadratic in a long indentation.
    low, high = min(indents), max(indents)
    for n, (a, b) in enumerate(zip(low, high, strict=False)):  # low may be shorter
        if a != b:
            return low[:n]
    return low


def _reindent(new: str, theirs: str, matched: list[str], room: _Room) -> str:
    """`new` moved from the indentation the model wrote (`theirs`, its snippet's common
    indentation) to the one the file has: each line keeps its depth relative to the
    model's own snippet."""
    ours = _common_indent(matched)
    if theirs == ours:
        return new
    lines = new.split("\n")
    # Each line that is not blank gets the file's indentation: refused before it is made
    # when that alone is more than a file may hold.
    room.check(len(ours) * sum(1 for line in lines if line.strip()))
    out = []
    for line in lines:
        if not line.strip():
            out.append(line)
        elif line.startswith(theirs):
            out.append(ours + line[len(theirs) :])
        else:
            out.append(ours + line.lstrip())
    return "\n".join(out)


# -- line ends ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _LineEnds:
    """How a file's lines end, so that matching works on text whose every line ends in "\n"
    and the edited text gets the file's own ends back: a line the edit did not touch keeps its
    bytes, a line it wrote takes the end of the line it replaces, a line added beyond those
    the file's most common end.

    A line ends at "\n", as read_file counts lines; a "\r" just before it belongs to the end
    (CRLF). Any other "\r" is part of the line (a progress bar's), except in a file with no
    "\n" at all, whose lines end in "\r" (classic Mac OS): there each "\r" is an end."""

    original: str
    text: str  # the file with every line end made "\n"
    one: str | None  # the end all its lines have; None when they differ (a mixed file)
    dominant: str  # the most common end (LF on a tie, and in a file of one line)

    @classmethod
    def of(cls, text: str) -> _LineEnds:
        lf = text.count("\n")
        if not lf:
            if "\r" in text:
                return cls(text, text.replace("\r", "\n"), "\r", "\r")
            return cls(text, text, "\n", "\n")
        crlf = text.count("\r\n")
        if not crlf:
            return cls(text, text, "\n", "\n")
        normal = text.replace("\r\n", "\n")
        if crlf == lf:
            return cls(text, normal, "\r\n", "\r\n")
        return cls(text, normal, None, "\r\n" if crlf > lf - crlf else "\n")

    def normal(self, snippet: str) -> str:
        """old_string or new_string with its line ends made "\n", as the text's are (a model
        copies read_file's CRLF, or writes LF into a CRLF file: either matches)."""
        snippet = snippet.replace("\r\n", "\n")
        return snippet.replace("\r", "\n") if self.one == "\r" else snippet

    def restore(self, edited: str, spans: list[_Span], work: _Work) -> str:
        """The file's text after the edit, with its ends: `edited` (the edit of `text`) with
        every "\n" made the file's one end; in a mixed file, the original text between the
        `spans`, byte for byte, and each span's new text with the ends `_ended` gives it."""
        if self.one is not None:
            done = edited if self.one == "\n" else edited.replace("\n", self.one)
        else:
            done = self._mixed(spans, work)
        work.room.check(len(done))
        return done

    def _mixed(self, spans: list[_Span], work: _Work) -> str:
        lines = self.original.split("\n")[:-1]  # those with an end (a CR of CRLF kept)
        each = ["\r\n" if line.endswith("\r") else "\n" for line in lines]
        # Where each line starts, in `text` and in the original: an offset in a line is as far
        # into it in both (a line's content is the same; only its end differs).
        starts = list(
            itertools.accumulate((len(p) + 1 - p.endswith("\r") for p in lines), initial=0)
        )
        raw_starts = list(itertools.accumulate((len(p) + 1 for p in lines), initial=0))
        work.deadline.check()

        def line_of(offset: int) -> int:
            return bisect.bisect_right(starts, offset) - 1

        def raw(offset: int, line: int) -> int:
            return raw_starts[line] + offset - starts[line]

        parts, at = [], 0
        for n, span in enumerate(spans, start=1):
            first, last = line_of(span.start), line_of(span.end)
            replaced = self.text[span.start : span.end]
            parts += [
                self.original[at : raw(span.start, first)],
                _ended(replaced, span.new, each[first:last], self.dominant),
            ]
            at = raw(span.end, last)
            work.tick(n)
        parts.append(self.original[at:])
        return "".join(parts)


def _ended(replaced: str, new: str, ends: list[str], dominant: str) -> str:
    """`new` (lines ending in "\n") with the ends of a mixed file, where it replaces the text
    `replaced` whose line ends were `ends`. The lines new keeps from replaced at its start and
    at its end (the context a model repeats around a change) keep their own ends; each other
    line takes the end of the line at its place in what it replaces, and a line beyond those
    the file's most common end."""
    new_lines = new.split("\n")
    if len(new_lines) == 1:
        return new
    old_lines = replaced.split("\n")
    k, m = len(ends), len(new_lines) - 1  # line ends in each
    same = 0
    while same < min(k, m) and new_lines[same] == old_lines[same]:
        same += 1
    tail = 0  # the last lines (the one after the last end included) alike in both
    while min(k, m) - tail >= same and new_lines[m - tail] == old_lines[k - tail]:
        tail += 1
    out = []
    for j in range(m):
        if j < same:
            end = ends[j]
        elif j > m - tail:
            end = ends[j - m + k]
        elif j < k and j <= k - tail:
            end = ends[j]
        else:
            end = dominant
        out += [new_lines[j], end]
    out.append(new_lines[m])
    return "".join(out)


# -- the result -----------------------------------------------------------------------------------


def _apply(text: str, spans: list[_Span], stage: str, work: _Work) -> Edit:
    parts, at, shift = [], 0, 0
    first_line = last_line = 0
    added = removed = 0
    size = len(text)
    line = 1  # the line `at` is on: counted on from the last span, not from the start
    for n, span in enumerate(spans):
        work.tick(n + 1)
        parts += [text[at : span.start], span.new]
        line += text.count("\n", at, span.start)
        at = span.end
        replaced = text[span.start : span.end]
        size += len(span.new) - len(replaced)
        start_line = line + shift
        line += replaced.count("\n")
        if n == 0:
            first_line = start_line
        last_line = start_line + max(_lines_in(span.new), 1) - 1
        shift += span.new.count("\n") - replaced.count("\n")
        added += _lines_in(span.new)
        removed += _lines_in(replaced)
    parts.append(text[at:])
    work.room.check(size)
    work.deadline.check()
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


def _no_match(text: str, old: str, deadline: Deadline = NO_DEADLINE) -> tuple[str, str]:
    """Why (for anyone) and, for the model, the most similar lines to copy from. The search
    for them stops at its budget or the call's deadline (the failure is worth more than the
    hint), and then says so."""
    lines = text.split("\n")
    wanted = [line for line in old.split("\n") if line.strip()] or [old]
    at, cut = _most_similar(lines, wanted[0].strip(), deadline)
    if at is None:
        hint = "read_file it again, copy the text exactly"
        return "old_string was not found in the file", f"{hint} {CUT_SHORT}" if cut else hint
    count = min(max(len(wanted), 1), SIMILAR_LINES)
    quoted = "\n".join(f"{n + 1:>5}: {lines[n]}" for n in range(at, min(at + count, len(lines))))
    return (
        "old_string was not found in the file (whitespace, quotes and dashes were forgiven too)",
        f"the most similar lines are{' ' + CUT_SHORT if cut else ''}:\n{quoted}\n"
        "copy the text exactly from there (without the line numbers), or read_file it again",
    )


def _most_similar(lines: list[str], wanted: str, deadline: Deadline) -> tuple[int | None, bool]:
    """The index of the line most like `wanted` (None when nothing is alike), and whether
    the search was cut short before it looked at every candidate."""
    if not wanted:
        return None, False
    matcher = _Matcher(deadline)
    matcher.set_seq2(wanted)
    scored = []
    for n, line in enumerate(lines[:_SIMILAR_SCAN]):
        if n % CHECK_EVERY == 0 and deadline.expired:
            return None, True
        stripped = line.strip()
        if not stripped:
            continue
        matcher.set_seq1(stripped)
        # quick_ratio reads the line once, and only a line of about the same length as
        # `wanted` gets to it (real_quick_ratio): linear in the file.
        if matcher.real_quick_ratio() > 0.5 and matcher.quick_ratio() > 0.5:
            scored.append((matcher.quick_ratio(), n, stripped))
    best: tuple[float, int] | None = None
    cut = False
    for _, n, stripped in sorted(scored, reverse=True)[:50]:
        matcher.set_seq1(stripped)
        try:
            ratio = matcher.ratio()
        except _OutOfBudget:
            cut = True  # a cheaper candidate may still fit what is left
            continue
        if ratio > 0.5 and (best is None or ratio > best[0]):
            best = (ratio, n)
    return (best[1] if best else None), cut


class _OutOfBudget(Exception):
    pass


class _Matcher(difflib.SequenceMatcher[str]):
    """difflib's matcher with its work counted: each search for the longest match costs
    what its loop may read (for each character of the line's range, its every position in
    `wanted`: no character is junk here), charged before it runs; past _SIMILAR_BUDGET in
    all, or past the deadline, it stops."""

    def __init__(self, deadline: Deadline) -> None:
        super().__init__(autojunk=False)
        self.deadline = deadline
        self.left = _SIMILAR_BUDGET
        self._line = ""
        self._counts: Counter[str] = Counter()

    def set_seq1(self, a: str) -> None:  # type: ignore[override]
        super().set_seq1(a)
        self._line = a

    def set_seq2(self, b: str) -> None:  # type: ignore[override]
        super().set_seq2(b)
        self._counts = Counter(b)

    def find_longest_match(
        self, alo: int = 0, ahi: int | None = None, blo: int = 0, bhi: int | None = None
    ) -> difflib.Match:
        ahi = len(self._line) if ahi is None else ahi
        counts = self._counts
        cost = ahi - alo + sum([counts[c] for c in self._line[alo:ahi]])
        if cost > self.left or self.deadline.expired:
            raise _OutOfBudget
        self.left -= cost
        return super().find_longest_match(alo, ahi, blo, bhi)
