"""Reading a shell command line for the commands.allow prefixes, strictly (pure).

A line may skip confirmation only if dash (`/bin/sh -c`) and bash (`bash -c`) are sure to
parse it alike and as we do, so this reads a small whitelist of shell and nothing else:

- printable ASCII only (tabs, CR, NUL, non-ASCII ask), blanks are spaces;
- words of unquoted `A-Za-z0-9_./:=@%+,-`, `'single-quoted'` text (literal) and
  `"double-quoted"` text holding none of `$ ` \\ " !`; a word with an unquoted glob
  character (`* ? [ ]`) or a leading `~` is UNKNOWN (the shell decides what it becomes);
- operators `&&`, `||`, `;` (also ending the line), `|` and newlines (blank lines too), each
  between two commands;
- redirections only as the whole words `2>&1`, `>/dev/null`, `1>/dev/null`, `2>/dev/null`,
  `</dev/null`: they touch no file.

Anything else asks: `$` and backticks anywhere but single quotes, backslashes, `& ( ) { } #
! ^ < >` and `~` inside a word, here-docs, other redirections, `[[ ]]`, reserved words or
assignments (`FOO=1 ls`) in command position, and shell builtins (they run inside the shell:
`eval`, `alias` in dash, `hash -p` or `read PATH` can change what later words mean, `trap`
runs code) except `echo`, `printf` (no options: bash's `-v`), `pwd`, `true`, `false` and
`test` (no `-v`/`-R`, which evaluate array subscripts in bash), with no UNKNOWN word. `cd` asks
too: a relative entry in PATH would make later names mean other programs.

Wrappers are unwrapped to the command they run: `env CMD` (no options or assignments),
`nohup CMD`, `time CMD` (no options), `command CMD` (no options), `nice [-n N] CMD`,
`timeout [-s SIG] [-k DUR] [--foreground] [--preserve-status] DURATION CMD`, `xargs` with
`-0 -r -t -n N -L N -P N` (the arguments it appends are an UNKNOWN word; `-I` asks), and
`sh`/`bash`/`dash -c 'LINE'`, LINE read by these same rules. `sudo`, `su`, `doas` and other
shells ask. A substring deny list is no security boundary (see docs/safety.md); this is
only about what may skip a question.

A prefix then allows a command only up to the options that write a file or start another
program: for git, find, sed, awk, sort, tar, rsync, make, npm, npx, cargo, go, python and
pytest the prefix must spell those out (cli/safety/command_options.py), unwrapped commands
included (`timeout 5 git diff --output=x`, `xargs git diff` whose appended words may be
options).
"""

from __future__ import annotations

import re
import shlex
import string
from collections.abc import Callable

# Stands in for text only known when the shell runs (a glob, `~`, what xargs appends): a
# word holding it never equals a literal word of an allow prefix.
UNKNOWN = "\x00"

_SAFE = frozenset(string.ascii_letters + string.digits + "_./:=@%+,-")
_GLOB = frozenset("*?[]")
_NOT_IN_DOUBLE_QUOTES = frozenset('$`\\"!')
_WORD_END = frozenset(" \n;|&")
_CHAINS = ("&&", "||", "|")  # operators that need a command after them
_REDIRECTIONS = ("2>&1", ">/dev/null", "1>/dev/null", "2>/dev/null", "</dev/null")
_DURATION = r"\d+(\.\d+)?[smhd]?"


def _names(text: str) -> frozenset[str]:
    return frozenset(text.split())


_RESERVED = _names(
    "! case coproc do done elif else esac fi for function if in select then until while { } [[ ]]"
)
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
# Every builtin of bash 5 and dash; they run inside the shell, and most change what the
# rest of the line means. `command` and `time` are read as wrappers before this applies.
_BUILTINS = _names(
    ". : [ alias bg bind break builtin caller cd chdir command compgen complete compopt "
    "continue declare dirs disown echo enable eval exec exit export false fc fg getopts hash "
    "help history jobs kill let local logout mapfile popd printf pushd pwd read readarray "
    "readonly return set shift shopt source suspend test times trap true type typeset ulimit "
    "umask unalias unset wait"
)
_PLAIN_BUILTINS = frozenset({"echo", "printf", "pwd", "true", "false", "test"})
_SHELLS = frozenset({"sh", "bash", "dash"})
_OTHER_SHELLS = frozenset({"zsh", "ksh", "mksh", "ash", "fish", "csh", "tcsh", "busybox"})
_ELEVATORS = frozenset({"sudo", "doas", "su", "pkexec", "run0"})
_MAX_DEPTH = 4  # sh -c 'sh -c "…"': quoting alone bounds this; the cap is a backstop


class _Refused(Exception):
    """Something in the line we do not read with certainty."""


def _operator_at(line: str, i: int) -> str:
    """The operator starting at `line[i]`, or "" if none. A lone `&` (background, `&>`,
    `;&`, `|&`) is refused: the shells disagree on some of these and we read none."""
    for op in ("&&", "||"):
        if line.startswith(op, i):
            return op
    if line[i] == "&":
        raise _Refused("background or &> redirection")
    return line[i] if line[i] in ";|\n" else ""


def _redirection_at(line: str, i: int) -> str:
    """One of the harmless redirections as a whole word at `line[i]`, or ""."""
    for word in _REDIRECTIONS:
        end = i + len(word)
        if line.startswith(word, i) and (end == len(line) or line[end] in _WORD_END):
            return word
    return ""


def _quoted(line: str, i: int) -> tuple[str, int]:
    """The text of the quoted string opening at `line[i]`, and the index after it."""
    quote = line[i]
    end = line.find(quote, i + 1)
    if end < 0:
        raise _Refused("unbalanced quote")
    text = line[i + 1 : end]
    if quote == '"' and _NOT_IN_DOUBLE_QUOTES.intersection(text):
        raise _Refused("expansion or escape inside double quotes")
    return text, end + 1


def _word(line: str, start: int) -> tuple[str, int]:
    """The word starting at `line[start]` (UNKNOWN if the shell expands it), and its end."""
    out: list[str] = []
    unknown = line[start] == "~"
    i = start + 1 if unknown else start
    while i < len(line) and line[i] not in _WORD_END:
        c = line[i]
        if c in "'\"":
            text, i = _quoted(line, i)
            out.append(text)
            continue
        if c not in _SAFE and c not in _GLOB:
            raise _Refused(f"{c!r} outside quotes")
        unknown = unknown or c in _GLOB
        out.append(c)
        i += 1
    if line[start:i] in ("[[", "]]"):
        raise _Refused("[[ … ]] has its own grammar in bash")
    return (UNKNOWN if unknown else "".join(out)), i


def _tokens(line: str) -> list[tuple[str, str]]:
    """The line as ("op", operator), ("redirect", word) and ("word", text) tokens."""
    tokens: list[tuple[str, str]] = []
    i = 0
    while i < len(line):
        if line[i] == " ":
            i += 1
        elif op := _operator_at(line, i):
            tokens.append(("op", op))
            i += len(op)
        elif redirect := _redirection_at(line, i):
            tokens.append(("redirect", redirect))
            i += len(redirect)
        else:
            text, i = _word(line, i)
            tokens.append(("word", text))
    return tokens


def _grammar(tokens: list[tuple[str, str]]) -> list[list[str]]:
    """Group tokens into simple commands; an operator must follow a command (a newline may
    also stand alone: a blank line) and `&& || |` must be followed by one."""
    commands: list[list[str]] = []
    words: list[str] = []
    redirected, open_chain = False, False
    for kind, text in tokens:
        if kind == "word":
            words.append(text)
        elif kind == "redirect":
            redirected = True
        elif words:
            commands.append(words)
            words, redirected, open_chain = [], False, text in _CHAINS
        elif redirected or open_chain or text != "\n":
            raise _Refused("an operator or redirection without a command")
    if words:
        commands.append(words)
    elif redirected or open_chain:
        raise _Refused("the line ends inside a command")
    return commands


def _grammar_head(words: list[str]) -> bool:
    """The first word is one the shell's grammar reads specially: a reserved word (`if`,
    `!`, `{`) or an assignment (`FOO=1 cmd`; `LD_PRELOAD`, `PATH`)."""
    return words[0] in _RESERVED or bool(_ASSIGNMENT.match(words[0]))


def parse(command: str) -> list[list[str]] | None:
    """The simple commands of a shell line, each as its words (UNKNOWN marks a word only the
    shell knows). None when the line holds anything outside the rules above."""
    if not all(" " <= c <= "~" or c == "\n" for c in command):
        return None
    try:
        commands = _grammar(_tokens(command))
    except _Refused:
        return None
    if not commands or any(_grammar_head(words) for words in commands):
        return None
    return commands


def simple_commands(command: str) -> list[list[str]] | None:
    """Every simple command the line runs, wrappers unwrapped; None if unreadable."""
    return _simple_commands(command, depth=0)


def _simple_commands(command: str, depth: int) -> list[list[str]] | None:
    commands = parse(command) if depth <= _MAX_DEPTH else None
    if commands is None:
        return None
    out: list[list[str]] = []
    for words in commands:
        inner = _unwrap(words, appended=False, depth=depth)
        if inner is None:
            return None
        out += inner
    return out


def unwrap(words: list[str]) -> list[list[str]] | None:
    """The command(s) a wrapper runs (`env CMD`, `timeout 5 CMD`, `sh -c 'LINE'`, …), or
    `[words]` for a plain command; None for what must ask (see the module docstring)."""
    return _unwrap(words, appended=False, depth=0)


# A wrapper reads its own words and gives what it runs: (rest, appended, depth) -> commands.
_Wrapper = Callable[[list[str], bool, int], list[list[str]] | None]


def _unwrap(words: list[str], appended: bool, depth: int) -> list[list[str]] | None:
    """`appended`: xargs will add UNKNOWN words at the end of this command."""
    if not words:
        return None
    wrapper = _WRAPPERS.get(words[0])
    if wrapper is not None:
        return wrapper(words[1:], appended, depth)
    if _refused_head(words):
        return None
    return [[*words, UNKNOWN]] if appended else [words]


def _refused_head(words: list[str]) -> bool:
    head = words[0]
    if _grammar_head(words) or head in _ELEVATORS or head in _OTHER_SHELLS:
        return True
    if head not in _BUILTINS:
        return False
    return head not in _PLAIN_BUILTINS or not _plain_builtin_ok(words)


def _plain_builtin_ok(words: list[str]) -> bool:
    """bash evaluates `a[$(cmd)]` in `printf -v NAME` and `test -v NAME`: no options there,
    and no UNKNOWN word (a glob could expand to `-v`)."""
    if UNKNOWN in words:
        return False
    if words[0] == "printf":
        return len(words) > 1 and not words[1].startswith("-")
    return words[0] != "test" or not {"-v", "-R"} & set(words)


def _plain_wrapper(rest: list[str], appended: bool, depth: int) -> list[list[str]] | None:
    """`nohup CMD`, `time CMD`, `command CMD`: no options (`time -p` is bash's keyword)."""
    if not rest or rest[0].startswith("-"):
        return None
    return _unwrap(rest, appended, depth)


def _env(rest: list[str], appended: bool, depth: int) -> list[list[str]] | None:
    """`env CMD`; bare `env` prints the environment; options (`-S`, `-i`) and assignments
    (think LD_PRELOAD) ask."""
    if not rest:
        return None if appended else [["env"]]
    if rest[0].startswith("-") or "=" in rest[0]:
        return None
    return _unwrap(rest, appended, depth)


def _options(words: list[str], flags: str, with_value: dict[str, str]) -> list[str] | None:
    """Skip options at the front of `words`: `flags` is a regex of value-less ones,
    `with_value` maps an option to the regex its value must match. Returns what follows
    (None if an option is unknown or its value is missing or wrong)."""
    i = 0
    while i < len(words) and words[i].startswith("-"):
        if words[i] in with_value:
            if i + 1 >= len(words) or not re.fullmatch(with_value[words[i]], words[i + 1]):
                return None
            i += 2
        elif re.fullmatch(flags, words[i]):
            i += 1
        else:
            return None
    return words[i:]


def _nice(rest: list[str], appended: bool, depth: int) -> list[list[str]] | None:
    after = _options(rest, r"(?!)", {"-n": r"-?\d+"})  # (?!) matches nothing: -n N only
    return _unwrap(after, appended, depth) if after else None


def _timeout(rest: list[str], appended: bool, depth: int) -> list[list[str]] | None:
    flags = r"--foreground|--preserve-status"
    after = _options(rest, flags, {"-s": r"[A-Z0-9]+", "-k": _DURATION})
    if after is None or len(after) < 2 or not re.fullmatch(_DURATION, after[0]):
        return None
    return _unwrap(after[1:], appended, depth)


def _xargs(rest: list[str], appended: bool, depth: int) -> list[list[str]] | None:
    """The command xargs runs gets the words it reads appended; with none it runs echo (but
    under another xargs, the appended words would be the command: `xargs xargs`)."""
    after = _options(
        rest,
        r"-[0rt]+|--null|--no-run-if-empty|--verbose",
        {"-n": r"\d+", "-L": r"\d+", "-P": r"\d+"},
    )
    if after is None or (appended and not after):
        return None
    return _unwrap(after or ["echo"], True, depth)


def _shell(rest: list[str], appended: bool, depth: int) -> list[list[str]] | None:
    """`sh -c 'LINE' [NAME ARGS…]`: LINE by the same rules; NAME and ARGS (xargs' words too)
    become `$0 $1 …`, which LINE cannot mention. Any other use (a script, stdin) asks."""
    if len(rest) < 2 or rest[0] != "-c" or UNKNOWN in rest[1] or rest[1][:1] in ("-", "+"):
        return None
    return _simple_commands(rest[1], depth + 1)


_WRAPPERS: dict[str, _Wrapper] = {
    "env": _env,
    "nohup": _plain_wrapper,
    "time": _plain_wrapper,
    "command": _plain_wrapper,
    "nice": _nice,
    "timeout": _timeout,
    "xargs": _xargs,
    **dict.fromkeys(_SHELLS, _shell),
}


def _prefix_words(prefix: str) -> list[str]:
    try:
        words = shlex.split(prefix)
    except ValueError:  # an unbalanced quote in the config: this prefix allows nothing
        return []
    return [] if any(UNKNOWN in w for w in words) else words


def matches_allow(command: str, prefixes: list[str]) -> bool:
    """True when every simple command starts with one of `prefixes`, word by word
    (`git status` allows `git status -s`, not `git statusx` nor `git push`), and the prefix
    spells out every word that makes it write a file or start a program (cli/
    command_options.py: `git diff` does not allow `git diff --output=FILE`)."""
    allowed = [words for words in map(_prefix_words, prefixes) if words]
    commands = simple_commands(command) if allowed else None
    if not commands:
        return False
    return all(_allowed(words, allowed) for words in commands)


def allowing_prefixes(command: str, prefixes: list[str]) -> list[str]:
    """Which of `prefixes` allow the simple commands of `command`, one per command in order
    (the first that allows it), for a line `matches_allow` accepts; [] for any other line.
    The same test as `matches_allow`, prefix by prefix: it says which entry decided."""
    if not matches_allow(command, prefixes):
        return []
    found: list[str] = []
    for words in simple_commands(command) or []:
        for prefix in prefixes:
            allowed = _prefix_words(prefix)
            if allowed and _allowed(words, [allowed]):
                found.append(prefix)
                break
    return list(dict.fromkeys(found))


def _allowed(words: list[str], allowed: list[list[str]]) -> bool:
    # Imported at first use, like the policy's other matchers: a run that never calls
    # run_command does not pay for the option tables at start.
    from cli.safety.command_options import needed_prefix

    needed = needed_prefix(words)
    return any(len(a) >= needed and words[: len(a)] == a for a in allowed)
