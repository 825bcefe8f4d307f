"""Reading a command's arguments against a list of options known to be harmless (pure).

An allow prefix names a program; which of its options write a file they name or start
another program is the program's business. The readers here walk an argv the way the
program's own parser does (GNU getopt_long, git's parse-options, Go's flag package) and mark
every word they are not sure of. They only ever accept what a list names exactly:

- a long option only spelled in full (`--output` may be `--out`, `--outp` to getopt and git,
  so an abbreviation is never taken for the harmless option it might abbreviate);
- a short cluster (`-uo FILE`) only when every letter in it is listed;
- a value given as the next word only when it does not start with `-` (so a wrong idea of
  which options take a value never lets an option through unread);
- an option after the operands too (GNU permutes them), up to `--`.

`UNKNOWN` (a glob, `~`, what xargs appends) may become any words, options included, so it
is marked where an option may stand. Once a word is not understood, nothing after it can be
read with certainty, so the rest is marked too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from cli.safety.shell_line import UNKNOWN


def names(text: str) -> frozenset[str]:
    """Whitespace-separated names: the tables below are long."""
    return frozenset(text.split())


class Reader:
    """One command's words and how many leading words an allow prefix must spell out for
    it to run unasked: 0 when nothing in it writes or runs, `len(words) + 1` when no
    prefix can allow it (what it runs is not on the line at all)."""

    def __init__(self, words: list[str]) -> None:
        self.words = words
        self.needed = 0

    def risky(self, i: int) -> None:
        """Word `i` writes, runs or is not understood: the prefix must name it."""
        self.needed = max(self.needed, i + 1)

    def risky_rest(self, i: int) -> None:
        """Word `i` is not understood, so neither is anything after it."""
        self.risky(max(i, len(self.words) - 1))

    def never(self) -> None:
        """No prefix allows this command (`python3` reading its program from stdin)."""
        self.needed = len(self.words) + 1

    def unknown(self, i: int) -> bool:
        return self.words[i] == UNKNOWN


def _always(_: str) -> bool:
    return True


@dataclass(frozen=True)
class Options:
    """The harmless options of one program (or subcommand), as its parser reads them.

    `flags`: short options without a value; `valued`: short options whose value is the rest
    of the word or the next word; `attached`: short options whose optional value can only
    be the rest of the word (`-M50%`). `long_flags`, `long_valued` (`--k=v` or `--k v`) and
    `long_attached` (`--k` or `--k=v`) likewise. `numeric`: `-<digits>` is an option
    (`git log -5`). `values`: a test the value of an option must pass, by its spelling
    (`-f`, `--file`). `dashdash`: `--` ends the options."""

    flags: str = ""
    valued: str = ""
    attached: str = ""
    long_flags: frozenset[str] = frozenset()
    long_valued: frozenset[str] = frozenset()
    long_attached: frozenset[str] = frozenset()
    numeric: bool = False
    values: Mapping[str, Callable[[str], bool]] = field(default_factory=dict)
    dashdash: bool = True

    def __or__(self, other: Options) -> Options:
        return Options(
            self.flags + other.flags,
            self.valued + other.valued,
            self.attached + other.attached,
            self.long_flags | other.long_flags,
            self.long_valued | other.long_valued,
            self.long_attached | other.long_attached,
            self.numeric or other.numeric,
            {**self.values, **other.values},
            self.dashdash and other.dashdash,
        )

    def value_ok(self, option: str, value: str) -> bool:
        return self.values.get(option, _always)(value)


# What an operand is to the program: called with the reader and the operand's index.
Operand = Callable[[Reader, int], None]


def plain_operand(r: Reader, i: int) -> None:
    """An operand the program only reads (a file, a revision, a pattern)."""


def read_options(r: Reader, start: int, spec: Options, operand: Operand = plain_operand) -> int:
    """Read `r.words[start:]` as getopt_long would, calling `operand` for each operand
    (an UNKNOWN one only after `--`: before, it might be an option). Returns the index of
    `--` if it ended the options, else len(words)."""
    words = r.words
    i, ended = start, -1
    while i < len(words):
        word = words[i]
        if ended < 0 and word == UNKNOWN:
            r.risky(i)
            i += 1
        elif ended >= 0 or word == "-" or not word.startswith("-"):
            operand(r, i)
            i += 1
        elif word == "--" and spec.dashdash:
            ended = i
            i += 1
        else:
            i = read_option(r, i, spec)
    return ended if ended >= 0 else len(words)


def read_option(r: Reader, i: int, spec: Options) -> int:
    """Read the option at `r.words[i]` (it starts with `-`); the index after it and its
    value. Anything not listed marks the rest of the line."""
    word = r.words[i]
    if word.startswith("--"):
        return _read_long(r, i, spec)
    if spec.numeric and word[1:].isdigit():
        return i + 1
    for j in range(1, len(word)):
        letter = word[j]
        if letter in spec.flags:
            continue
        if letter in spec.attached:
            return _checked(r, i, spec.value_ok("-" + letter, word[j + 1 :]), i + 1)
        if letter in spec.valued:
            if j + 1 < len(word):
                return _checked(r, i, spec.value_ok("-" + letter, word[j + 1 :]), i + 1)
            return _next_value(r, i, spec, "-" + letter)
        r.risky_rest(i)
        return len(r.words)
    return i + 1


def _read_long(r: Reader, i: int, spec: Options) -> int:
    name, eq, value = r.words[i][2:].partition("=")
    if name in spec.long_flags and not eq:
        return i + 1
    if name in spec.long_attached or (name in spec.long_valued and eq):
        return _checked(r, i, not eq or spec.value_ok("--" + name, value), i + 1)
    if name in spec.long_valued:
        return _next_value(r, i, spec, "--" + name)
    r.risky_rest(i)
    return len(r.words)


def _next_value(r: Reader, i: int, spec: Options, option: str) -> int:
    """The option at `i` takes the next word as its value."""
    if i + 1 >= len(r.words):
        return i + 1  # the program complains of a missing value and runs nothing
    value = r.words[i + 1]
    if value == UNKNOWN or (value.startswith("-") and value != "-"):
        r.risky_rest(i)
        return len(r.words)
    return _checked(r, i, spec.value_ok(option, value), i + 2)


def _checked(r: Reader, i: int, ok: bool, after: int) -> int:
    if not ok:
        r.risky(after - 1)
    return after


@dataclass(frozen=True)
class GoFlags:
    """Flags as Go's flag package reads them: `-name` or `--name`, `=value` or (for a flag
    that is not boolean) the next word; no clusters, no abbreviations."""

    bools: frozenset[str] = frozenset()
    valued: frozenset[str] = frozenset()
    values: Mapping[str, Callable[[str], bool]] = field(default_factory=dict)

    def __or__(self, other: GoFlags) -> GoFlags:
        return GoFlags(
            self.bools | other.bools, self.valued | other.valued, {**self.values, **other.values}
        )


def read_go_flag(r: Reader, i: int, spec: GoFlags) -> int:
    """Read the flag at `r.words[i]`; returns the index after it."""
    name, eq, value = r.words[i].lstrip("-").partition("=")
    if r.words[i].startswith("---") or not name:
        r.risky_rest(i)
        return len(r.words)
    check = spec.values.get(name, _always)
    if name in spec.bools:
        return _checked(r, i, not eq or value in ("true", "false", "1", "0"), i + 1)
    if name not in spec.valued:
        r.risky_rest(i)
        return len(r.words)
    if eq:
        return _checked(r, i, check(value), i + 1)
    if i + 1 >= len(r.words):
        return i + 1
    following = r.words[i + 1]
    if following == UNKNOWN or following.startswith("-"):
        r.risky_rest(i)
        return len(r.words)
    return _checked(r, i, check(following), i + 2)


def any_of(*tests: Callable[[str], bool]) -> Callable[[str], bool]:
    return lambda value: any(test(value) for test in tests)


def one_of(choices: Iterable[str]) -> Callable[[str], bool]:
    allowed = frozenset(choices)
    return lambda value: value in allowed
