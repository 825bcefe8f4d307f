"""Reading a shell command line well enough to match it against allow prefixes (pure).

Only a command whose every part is understood can skip confirmation; anything we cannot
split with confidence returns None, and the caller asks the user.
"""

from __future__ import annotations

import re
import shlex

_OPERATORS = {"&&", "||", ";", "|", "&", ";;", "|&"}
# Anything that runs code we cannot see statically, or touches files outside the words of
# the command: command substitution, process substitution, redirections, subshells, here-docs.
_OPAQUE = re.compile(r"\$\(|`|<\(|>\(|\$\{|[<>]|\(|\)|\{|\}")


def simple_commands(command: str) -> list[list[str]] | None:
    """Split on `&& || ; | &` and newlines into the words of each simple command, or None
    when the line holds something we do not read (substitutions, redirections, subshells,
    unbalanced quotes)."""
    if not command.strip():
        return None
    lexer = shlex.shlex(command.replace("\n", " ; "), posix=True, punctuation_chars=";&|")
    lexer.whitespace_split = True
    lexer.commenters = ""
    try:
        tokens = list(lexer)
    except ValueError:  # unbalanced quotes
        return None
    if _OPAQUE.search(_unquoted(command)):
        return None
    parts: list[list[str]] = [[]]
    for token in tokens:
        if token in _OPERATORS:
            parts.append([])
        elif set(token) <= set(";&|"):
            return None  # an operator shlex glued together that the shell would reject
        else:
            parts[-1].append(token)
    return [p for p in parts if p]


def matches_allow(command: str, prefixes: list[str]) -> bool:
    """True when every simple command starts with one of `prefixes`, word by word
    (`git status` allows `git status -s`, not `git statusx` nor `git push`)."""
    parts = simple_commands(command)
    if not parts or not prefixes:
        return False
    allowed = [shlex.split(p) for p in prefixes if p.strip()]
    return all(any(words[: len(a)] == a for a in allowed if a) for words in parts)


def _unquoted(command: str) -> str:
    """The command with single-quoted text removed (nothing expands inside single quotes);
    double-quoted text stays, since `$(...)` and backticks still run there."""
    out, quote = [], ""
    for char in command:
        if quote == "'":
            if char == "'":
                quote = ""
            continue
        if char == "'" and not quote:
            quote = "'"
            continue
        out.append(char)
    return "".join(out)
