"""Whether a sed script or an awk program given on the command line can write or run (pure).

Both languages can: sed's `w`/`W` commands and `s///w` write files, `e` and `s///e` run
commands, `r`/`R` read any file; awk's `print > "f"`, `print | "cmd"`, `"cmd" | getline`,
`system()`, gawk's `|&`, `@load` and indirect calls (`@f()`). Each reader here accepts only
a strict subset it parses the way GNU sed and BSD sed (or gawk, mawk and BWK awk) all do,
and says no to anything else — an unusual but harmless script asks rather than risk a
reading that differs from the program's.
"""

from __future__ import annotations

import re

# -- sed --------------------------------------------------------------------------------------

# Commands with neither an argument nor a side effect beyond standard output.
_SED_PLAIN = frozenset("=dDgGhHnNpPxzF")
_SED_NUMBER_ARG = frozenset("lqQ")  # `q5`, `l 40`: an optional number
_SED_LABEL = re.compile(r"[A-Za-z0-9_.-]*")
_SED_S_FLAGS = frozenset("gpiImM0123456789")
_SED_ADDRESS_FLAGS = frozenset("IM")


class _No(Exception):
    """The script holds something the reader does not accept."""


def sed_script_ok(script: str) -> bool:
    """True when `script` is sure to neither write a file nor run a command: only the
    commands above, `s` and `y` (no `w` or `e` flag), labels and branches, one-line
    `a`/`i`/`c` text. r/R/w/W/e and anything unparsed ask."""
    try:
        _SedReader(script).read()
    except _No:
        return False
    return True


class _SedReader:
    def __init__(self, text: str) -> None:
        self.text = text
        self.at = 0
        self.depth = 0

    def peek(self) -> str:
        return self.text[self.at] if self.at < len(self.text) else ""

    def take(self) -> str:
        c = self.peek()
        if not c:
            raise _No("unexpected end")
        self.at += 1
        return c

    def blanks(self) -> None:
        while self.peek() in (" ", "\t") and self.peek():
            self.at += 1

    def read(self) -> None:
        while True:
            while self.peek() and self.peek() in " \t\n;":
                self.at += 1
            if not self.peek():
                break
            self.command()
        if self.depth:
            raise _No("unbalanced {")

    def command(self) -> None:
        if self.peek() == "#":
            self.to_line_end()
            return
        if self.address():
            self.blanks()
            if self.peek() == ",":
                self.at += 1
                self.blanks()
                if self.peek() in ("+", "~"):
                    self.at += 1
                    self.number()
                elif not self.address():
                    raise _No("missing second address")
        self.blanks()
        while self.peek() == "!":
            self.at += 1
            self.blanks()
        self.verb(self.take())

    def verb(self, c: str) -> None:
        if c == "{":
            self.depth += 1
            return
        if c == "}":
            self.depth -= 1
            if self.depth < 0:
                raise _No("unexpected }")
        elif c in _SED_NUMBER_ARG:
            self.blanks()
            self.number(optional=True)
        elif c in ":btT":
            self.blanks()
            self.label()
        elif c == "s":
            self.substitute()
        elif c == "y":
            delimiter = self.delimiter()
            self.plain_part(delimiter)
            self.plain_part(delimiter)
        elif c in "aic":
            self.one_line_text()
            return
        elif c not in _SED_PLAIN:
            raise _No(f"command {c!r}")  # r R w W e v and anything unknown
        self.end_of_command()

    def end_of_command(self) -> None:
        self.blanks()
        if self.peek() in ("", ";", "\n", "#"):
            return
        if self.peek() == "}":  # GNU takes `{p}`; the loop reads the brace
            return
        raise _No("text after a command")

    def address(self) -> bool:
        c = self.peek()
        if c.isdigit():
            self.number()
            if self.peek() == "~":
                self.at += 1
                self.number()
            return True
        if c == "$":
            self.at += 1
            return True
        if c in ("/", "\\"):
            self.at += 1
            delimiter = "/" if c == "/" else self.delimiter()
            self.regex_part(delimiter)
            while self.peek() and self.peek() in _SED_ADDRESS_FLAGS:
                self.at += 1
            return True
        return False

    def number(self, optional: bool = False) -> None:
        start = self.at
        while self.peek().isdigit():
            self.at += 1
        if self.at == start and not optional:
            raise _No("number expected")

    def label(self) -> None:
        """A label of plain characters. GNU ends it at `;` or a newline, BSD only at a
        newline: what follows a `;` is then read as commands, the stricter reading."""
        match = _SED_LABEL.match(self.text, self.at)
        assert match is not None  # the pattern matches the empty string
        self.at = match.end()
        if self.peek() not in ("", "\n", ";"):
            raise _No("label")

    def delimiter(self) -> str:
        c = self.take()
        if c in ("\n", "\\"):
            raise _No("bad delimiter")
        return c

    def substitute(self) -> None:
        delimiter = self.delimiter()
        self.regex_part(delimiter)
        self.plain_part(delimiter)
        while self.peek() and self.peek() in _SED_S_FLAGS:
            self.at += 1

    def regex_part(self, delimiter: str) -> None:
        """A regex up to `delimiter`: GNU and BSD skip bracket expressions (`[/]`), older
        readers do not; accept it only where both readings end at the same place."""
        plain = _plain_end(self.text, self.at, delimiter)
        if _bracket_end(self.text, self.at, delimiter) != plain:
            raise _No("delimiter inside a bracket expression")
        self.at = plain + 1

    def plain_part(self, delimiter: str) -> None:
        self.at = _plain_end(self.text, self.at, delimiter) + 1

    def one_line_text(self) -> None:
        """GNU's one-line `a text`: the text runs to the end of the line. A backslash (the
        multi-line form, where the readers differ) asks."""
        end = self.text.find("\n", self.at)
        end = len(self.text) if end < 0 else end
        if "\\" in self.text[self.at : end]:
            raise _No("a/i/c with a backslash")
        self.at = end

    def to_line_end(self) -> None:
        end = self.text.find("\n", self.at)
        self.at = len(self.text) if end < 0 else end


def _plain_end(text: str, at: int, delimiter: str) -> int:
    """Index of the delimiter ending a part that starts at `at` (a backslash escapes the
    next character); no newline inside."""
    return _part_end(text, at, delimiter, brackets=False)


def _bracket_end(text: str, at: int, delimiter: str) -> int:
    """As `_plain_end`, skipping POSIX bracket expressions (`[]/]`, `[[:alpha:]/]`)."""
    return _part_end(text, at, delimiter, brackets=True)


def _part_end(text: str, at: int, delimiter: str, brackets: bool) -> int:
    while at < len(text):
        c = text[at]
        if c == "\n":
            raise _No("newline inside s, y or a regex")
        if c == "\\":
            at += 2
        elif c == delimiter:
            return at
        else:
            at = _skip_bracket(text, at) if brackets and c == "[" else at + 1
    raise _No("unterminated")


def _skip_bracket(text: str, at: int) -> int:
    """The index after the bracket expression opening at `text[at]`."""
    at += 1
    if at < len(text) and text[at] == "^":
        at += 1
    if at < len(text) and text[at] == "]":
        at += 1
    while at < len(text) and text[at] != "]":
        if text[at] == "\n":
            raise _No("newline inside a bracket expression")
        if text[at] == "[" and at + 1 < len(text) and text[at + 1] in ":.=":
            close = text.find(text[at + 1] + "]", at + 2)
            if close < 0:
                raise _No("unterminated class")
            at = close + 2
        else:
            at += 1
    if at >= len(text):
        raise _No("unterminated bracket expression")
    return at + 1


# -- awk --------------------------------------------------------------------------------------

_AWK_RISKY_NAMES = frozenset({"system", "getline"})
# After these, `/` starts a regex; after an operand it divides. After `++`, `--` or a
# builtin usable without parentheses (`length`) the readers may differ: a `/` there asks.
_AWK_REGEX_AFTER_WORDS = frozenset(
    {"print", "printf", "return", "in", "case", "do", "else", "delete", "exit"}
)
_AWK_AMBIGUOUS = frozenset({"++", "--", "length", "$"})
_AWK_CONDITIONS = frozenset({("name", "if"), ("name", "while"), ("name", "for")})
_AWK_OPERATORS = (
    "&&", "||", "==", "!=", "<=", ">=", "!~", "+=", "-=", "*=", "/=", "%=", "^=", "**=", "**",
    "++", "--", "{", "}", "(", ")", "[", "]", ";", ",", "+", "-", "*", "%", "^", "!", "~",
    "?", ":", "=", "<", ">", "$",
)  # fmt: skip
_AWK_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_AWK_NUMBER = re.compile(r"(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")
# A statement in which `>` redirects output ends at one of these. Not at a newline: after
# `,`, `&&`, `do`… a print statement goes on on the next line.
_AWK_STATEMENT_END = frozenset({";", "{", "}"})


def awk_program_ok(program: str) -> bool:
    """True when the awk program is sure to neither write a file nor run a command: no
    `system`, no `getline`, no `|` (only `||`), no `>` inside a print or printf statement,
    no `>>`, no `@` (gawk's `@load`, `@include`, indirect calls)."""
    try:
        tokens = _awk_tokens(program)
    except _No:
        return False
    in_print = False
    for kind, text in tokens:
        if kind == "name" and text in _AWK_RISKY_NAMES:
            return False
        if kind == "name" and text in ("print", "printf"):
            in_print = True
        elif kind == "op" and text in _AWK_STATEMENT_END:
            in_print = False
        elif kind == "op" and text.startswith(">") and in_print:
            return False
    return True


def _awk_tokens(text: str) -> list[tuple[str, str]]:
    """The program as (kind, text) tokens: name, number, string, regex, op (a newline is
    the op "\\n"); raises _No for anything outside the accepted subset."""
    tokens: list[tuple[str, str]] = []
    conditions: list[bool] = []  # for each open `(`: does it hold an if/while/for condition?
    at = 0
    while at < len(text):
        c = text[at]
        if c == "(":
            conditions.append(bool(tokens) and tokens[-1] in _AWK_CONDITIONS)
            tokens.append(("op", "("))
            at += 1
        elif c == ")":
            # After `if (…)` a statement starts, and `/` is a regex: `if (x) /"/; print > "f"`
            tokens.append(("condition" if conditions and conditions.pop() else "op", ")"))
            at += 1
        elif c in " \t":
            at += 1
        elif c == "\\" and text.startswith("\\\n", at):
            at += 2
        elif c == "#":
            end = text.find("\n", at)
            at = len(text) if end < 0 else end
        elif c == "\n":
            tokens.append(("op", "\n"))
            at += 1
        elif c == '"':
            end = _awk_string_end(text, at)
            tokens.append(("string", text[at:end]))
            at = end
        elif c == "/" and _regex_may_start(tokens):
            end = _plain_end(text, at + 1, "/")
            if _bracket_end(text, at + 1, "/") != end:
                raise _No("slash inside a bracket expression")
            tokens.append(("regex", text[at : end + 1]))
            at = end + 1
        elif c == "/":
            tokens.append(("op", "/"))
            at += 1
        else:
            at = _awk_word(text, at, tokens)
    return tokens


def _awk_word(text: str, at: int, tokens: list[tuple[str, str]]) -> int:
    """A name, number or operator at `text[at]`; `|`, `>>`, `@` and anything else unknown
    raise _No."""
    if name := _AWK_NAME.match(text, at):
        tokens.append(("name", name.group()))
        return name.end()
    if number := _AWK_NUMBER.match(text, at):
        tokens.append(("number", number.group()))
        return number.end()
    if text.startswith(">>", at):
        raise _No(">> appends to a file")
    for op in _AWK_OPERATORS:
        if text.startswith(op, at):
            tokens.append(("op", op))
            return at + len(op)
    raise _No(f"{text[at]!r}")  # `|`, `|&`, `@`, backticks, quotes, non-ASCII…


def _awk_string_end(text: str, at: int) -> int:
    """The index after the string literal opening at `text[at]`."""
    return _plain_end(text, at + 1, '"') + 1


def _regex_may_start(tokens: list[tuple[str, str]]) -> bool:
    """Whether a `/` here starts a regex (the program expects an operand) rather than
    divides; raises _No where the awks may disagree."""
    if not tokens:
        return True
    kind, text = tokens[-1]
    if text in _AWK_AMBIGUOUS:
        raise _No(f"/ after {text}")
    if kind == "name":
        return text in _AWK_REGEX_AFTER_WORDS
    if kind == "condition":
        return True
    if kind in ("number", "string", "regex"):
        return False
    return text not in (")", "]")
