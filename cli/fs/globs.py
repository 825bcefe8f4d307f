"""The globs of the policy's path lists (`policy.secrets`, `policy.execution_surfaces`,
`policy.plain_dotfiles`…): their syntax as regexes, and what makes one unusable, which the
config reports when it is loaded (cli/config/settings.py) and cli/safety/sensitive.py
matches paths with. Pure: no I/O.

`*` and `?` stay within one component, `**` spans any number, `[…]` is a class.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable


@functools.lru_cache(maxsize=4096)  # a policy's entries repeat in several matchers
def glob_regex(glob: str) -> str:
    """A glob as a regex body: `*` and `?` within a component, `**` across them."""
    out: list[str] = []
    i = 0
    while i < len(glob):
        c = glob[i]
        if glob.startswith("**/", i):
            out.append("(?:[^/]*/)*")
            i += 3
            continue
        if glob.startswith("**", i):
            out.append(".*")
            i += 2
            continue
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            end = glob.find("]", i + 1)
            if end < 0:
                out.append(re.escape(c))
            else:
                body = glob[i + 1 : end].replace("\\", "\\\\")
                if body.startswith("!"):
                    body = "^" + body[1:]
                out.append(f"(?!/)[{body}]")  # a class, like `?`, stays within a component
                i = end
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


def has_wildcards(glob: str) -> bool:
    return any(c in glob for c in "*?[")


def _check(glob: str) -> str | None:
    """Why `glob` cannot be an entry (None: it can)."""
    if not glob.strip() or glob != glob.strip():
        return "is empty or has surrounding spaces"
    if "\x00" in glob:
        return "holds a NUL byte"
    if glob.startswith("~") and not glob.startswith("~/"):
        return "must start with ~/ (another user's ~name is not supported)"
    if glob.strip("/*") == "":
        return "matches everything"
    return None


def invalid(globs: Iterable[str]) -> tuple[str, str] | None:
    """The first entry that is not a usable glob, with why: for the config's errors."""
    for glob in globs:
        why = _check(glob)
        if why:
            return glob, why
    return None


def invalid_name(glob: str) -> str | None:
    """Why `glob` cannot be a `policy.plain_dotfiles` entry (None: it can)."""
    if not glob.strip() or glob != glob.strip() or "\x00" in glob:
        return "is empty, has surrounding spaces or holds a NUL byte"
    if "/" in glob:
        return "must be one file name, without a /"
    if glob.strip("*?.") == "":
        return "would make every dotfile plain data; name the files"
    broad = re.compile(glob_regex(glob) + "$", re.IGNORECASE)
    if any(broad.match(probe) for probe in _CONFIG_PROBES):
        return "matches files that configure programs (.bashrc, .pdbrc…); name the files"
    return None


# Dotfiles that run code, and made-up names: a plain_dotfiles glob that matches one of these
# is too broad (`.[!.]*`, `[.]*` would make every dotfile plain data).
_CONFIG_PROBES = (".bashrc", ".pdbrc", ".lesskey", ".profile", ".npmrc", ".zq", ".a1-b2_c3")
