"""Reading a shell command line well enough to match it against allow prefixes (pure).

Only a command whose every part is understood can skip confirmation. The line is split into
simple commands on `&& || ; | &`, newlines and subshells; the commands inside `$(…)`,
backticks and `<(…)` are parts too; `env`, `timeout`, `nice`, `nohup`, `time`, `xargs` and
`sh -c '…'` are unwrapped to the command they run. Anything we cannot read with confidence
(comments, here-docs, `${…}`, arithmetic, redirections to files, unbalanced quotes) makes
`parse` return None, and the caller asks the user. A substring deny list is no security
boundary (see README "Safety"); this is only about what may skip a question.
"""

from __future__ import annotations

import re
import shlex

# Stands in for text only known when the shell runs ($VAR, $(…), `…`): a word holding it
# never equals a literal word of an allow prefix.
UNKNOWN = "\x00"
_SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh"})
_HARMLESS_TARGET = "/dev/null"


class _Opaque(Exception):
    """Something in the line we do not read statically."""


class _Scanner:
    """A small POSIX-shell tokenizer: words, operators, quotes, escapes, substitutions."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.i = 0
        self.commands: list[list[str]] = []

    @property
    def closed_group(self) -> bool:
        """The text just before (spaces aside) closed a subshell: `(ls) | wc`."""
        return self.text[: self.i].rstrip(" \t").endswith(")")

    def peek(self, offset: int = 0) -> str:
        j = self.i + offset
        return self.text[j] if j < len(self.text) else ""

    def parse(self, until: str = "") -> None:
        """Read commands up to `until` (a closing `)`), or the end of the text."""
        words: list[str] = []
        word: list[str] | None = None

        def end_word() -> None:
            nonlocal word
            if word is not None:
                words.append("".join(word))
                word = None

        def end_command() -> None:
            nonlocal words
            end_word()
            if words:
                self.commands.append(words)
            words = []

        while self.i < len(self.text):
            c = self.peek()
            if until and c == until:
                end_command()
                self.i += 1
                return
            if c in " \t":
                end_word()
            elif c in ";\n":
                end_command()
            elif c in "&|":
                if c == "&" and self.peek(1) == ">":
                    self.i += 1
                    end_word()
                    self._redirection(fd_given=True)
                    continue
                if c + self.peek(1) in ("&&", "||", "|&"):
                    self.i += 1
                end_word()
                if not words and not self.closed_group:
                    raise _Opaque("an operator with no command before it: a syntax error")
                end_command()
            elif c == "#" and word is None:
                raise _Opaque("comment")
            elif c == "\\":
                nxt = self.peek(1)
                self.i += 1
                if nxt != "\n":  # backslash-newline is a line continuation
                    word = (word or []) + [nxt]
            elif c == "'":
                end = self.text.find("'", self.i + 1)
                if end < 0:
                    raise _Opaque("unbalanced quote")
                word = (word or []) + [self.text[self.i + 1 : end]]
                self.i = end
            elif c == '"':
                word = (word or []) + [self._double_quoted()]
            elif c == "$":
                word = (word or []) + [self._dollar()]
                continue
            elif c == "`":
                word = (word or []) + [self._backticks()]
            elif c in "<>":
                fd_given = word is not None and "".join(word).isdigit()
                if fd_given:
                    word = None
                else:
                    end_word()
                self._redirection(fd_given)
                continue
            elif c == "(" and word is None:
                end_command()
                self.i += 1
                self.parse(until=")")
                continue
            elif c in "(){}":
                raise _Opaque("group or function")
            else:
                word = (word or []) + [c]
            self.i += 1
        if until:
            raise _Opaque("unclosed substitution")
        end_command()

    def _double_quoted(self) -> str:
        out: list[str] = []
        self.i += 1
        while self.i < len(self.text):
            c = self.peek()
            if c == '"':
                return "".join(out)
            if c == "\\" and self.peek(1) in ('"', "\\", "$", "`", "\n"):
                self.i += 1
                if self.peek() != "\n":
                    out.append(self.peek())
            elif c == "$":
                out.append(self._dollar())
                continue
            elif c == "`":
                out.append(self._backticks())
            else:
                out.append(c)
            self.i += 1
        raise _Opaque("unbalanced quote")

    def _dollar(self) -> str:
        """`$(…)` is parsed as commands of its own; `$NAME`, `$1`, `$?` are unknown text;
        `${…}` and `$((…))` are not read."""
        nxt = self.peek(1)
        if nxt == "(":
            if self.peek(2) == "(":
                raise _Opaque("arithmetic")
            self.i += 2
            self.parse(until=")")
            return UNKNOWN
        if nxt == "{":
            raise _Opaque("parameter expansion")
        match = re.match(r"[A-Za-z_][A-Za-z0-9_]*|[0-9@*#?$!-]", self.text[self.i + 1 :])
        if not match:
            self.i += 1
            return "$"
        self.i += 1 + match.end()
        return UNKNOWN

    def _backticks(self) -> str:
        inner: list[str] = []
        j = self.i + 1
        while j < len(self.text) and self.text[j] != "`":
            if self.text[j] == "\\" and j + 1 < len(self.text):
                j += 1
            inner.append(self.text[j])
            j += 1
        if j >= len(self.text):
            raise _Opaque("unbalanced backtick")
        self.commands += _parse("".join(inner))
        self.i = j
        return UNKNOWN

    def _redirection(self, fd_given: bool) -> None:
        """Only redirections that touch no file are read: `2>&1`, `>&2`, `>/dev/null`,
        `2>/dev/null`, `&>/dev/null`, `</dev/null`. Process substitution `<(…)` is parsed."""
        c = self.peek()
        if c in "<>" and self.peek(1) == "(":
            self.i += 2
            self.parse(until=")")
            return
        self.i += 1
        if self.peek() == c == ">":
            self.i += 1  # >> appends: still a file
        elif self.peek() == c == "<":
            raise _Opaque("here-document")
        if self.peek() == "&":
            self.i += 1
            match = re.match(r"[0-9]+|-", self.text[self.i :])
            if not match:
                raise _Opaque("redirection")
            self.i += match.end()
            return
        while self.peek() in (" ", "\t"):
            self.i += 1
        if self.text.startswith(_HARMLESS_TARGET, self.i):
            after = self.text[self.i + len(_HARMLESS_TARGET) : self.i + len(_HARMLESS_TARGET) + 1]
            if after in ("", " ", "\t", "\n", ";", "&", "|", ")"):
                self.i += len(_HARMLESS_TARGET)
                return
        raise _Opaque("redirection to a file")


def _parse(text: str) -> list[list[str]]:
    scanner = _Scanner(text)
    scanner.parse()
    return scanner.commands


def parse(command: str) -> list[list[str]] | None:
    """The simple commands of a shell line, each as its words (UNKNOWN marks text only the
    shell knows); commands inside substitutions and subshells are listed too. None when the
    line holds anything we do not read."""
    if not command.strip():
        return None
    try:
        commands = _parse(command)
    except (_Opaque, RecursionError):
        return None
    return commands or None


def simple_commands(command: str) -> list[list[str]] | None:
    """Every simple command the line runs, wrappers unwrapped; None if unreadable."""
    commands = parse(command)
    if commands is None:
        return None
    out: list[list[str]] = []
    for words in commands:
        inner = unwrap(words)
        if inner is None:
            return None
        out += inner
    return out


def unwrap(words: list[str]) -> list[list[str]] | None:
    """The command(s) a wrapper runs: `env CMD`, `timeout 5 CMD`, `nice -n 5 CMD`,
    `nohup CMD`, `time CMD`, `xargs CMD`, `sh -c 'LINE'`. `sudo` and variable assignments
    (`FOO=1 cmd`, `env FOO=1 cmd`: think LD_PRELOAD) are never unwrapped: they ask."""
    if not words:
        return []
    head, rest = words[0], words[1:]
    if re.match(r"[A-Za-z_][A-Za-z0-9_]*=", head) or head in ("sudo", "doas", "su"):
        return None
    if head in ("nohup", "time", "command") and rest:
        return unwrap(rest)
    if head == "env":
        if not rest:
            return [words]  # prints the environment
        return None if rest[0].startswith("-") else unwrap(rest)
    if head == "nice":
        return _after_options(rest, {"-n", "--adjustment"}, r"-\d+|--adjustment=.*")
    if head == "timeout":
        options = {"-s", "--signal", "-k", "--kill-after"}
        after = _skip_options(rest, options, r"--?\w[\w-]*=.*|--?[a-z-]+")
        if after is None or len(after) < 2:
            return None
        return unwrap(after[1:])  # after[0] is the duration
    if head == "xargs":
        return _after_options(
            rest, {"-n", "-P", "-L", "-I", "-s", "-d"}, r"-[0rt]+|--null|--no-run-if-empty"
        )
    if head in _SHELLS:
        if len(rest) >= 2 and rest[0] == "-c" and UNKNOWN not in rest[1]:
            return simple_commands(rest[1])
        return None if rest else [words]
    return [words]


def _skip_options(words: list[str], with_value: set[str], flag: str) -> list[str] | None:
    i = 0
    while i < len(words) and words[i].startswith("-"):
        if words[i] in with_value:
            i += 2
        elif re.fullmatch(flag, words[i]):
            i += 1
        else:
            return None
    return words[i:]


def _after_options(words: list[str], with_value: set[str], flag: str) -> list[list[str]] | None:
    rest = _skip_options(words, with_value, flag)
    if rest is None:
        return None
    return unwrap(rest) if rest else [[]]


def matches_allow(command: str, prefixes: list[str]) -> bool:
    """True when every simple command starts with one of `prefixes`, word by word
    (`git status` allows `git status -s`, not `git statusx` nor `git push`)."""
    allowed = [shlex.split(p) for p in prefixes if p.strip()]
    if not allowed:
        return False
    commands = simple_commands(command)
    if not commands:
        return False
    return all(words and any(words[: len(a)] == a for a in allowed if a) for words in commands)
