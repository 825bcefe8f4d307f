"""Dot-entries, configuration until known otherwise: a name starting with a dot configures
some program far more often than not, so every dot-entry counts as configuration, under the
home dir whatever the allowed dirs and below an allowed dir under unattended approval, except
the plain-data dotfiles (`PLAIN_DOTFILES`, and `policy.plain_dotfiles`). Which dot-entry of a
home dir a path lies under, and which component below an allowed dir is a dot-entry.

Pure: the caller passes every path in.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from cli.fs.folding import nfc
from cli.fs.globs import glob_regex, has_wildcards

# A name starting with a dot configures a program far more often than not, and the programs
# are countless (`.pdbrc` runs Python in pdb, `~/.lesskey` sets LESSOPEN=|cmd for less, which
# is git's and man's pager, `.iex.exs`, `.ocamlinit`, `~/.erlang`…): no list of them is ever
# complete. So every dot-entry counts as configuration (docs/safety.md): under a dot-entry
# of the home dir whatever the allowed dirs, and below an allowed dir under unattended
# approval, except these names, each read by its programs as patterns or plain settings only
# (no include of code, no command, no plugin). `policy.plain_dotfiles` adds to them.
PLAIN_DOTFILES = (
    ".gitignore",
    ".gitkeep",
    ".keep",
    ".mailmap",
    ".editorconfig",
    ".nojekyll",
    ".dockerignore",
    ".npmignore",
    ".prettierignore",
    ".eslintignore",
    ".stylelintignore",
    ".gcloudignore",
    ".vercelignore",
    ".helmignore",
    ".hgignore",
    ".ignore",
    ".rgignore",
    ".fdignore",
)


class PlainNames:
    """The plain-data dotfiles: the built-in names and the user's globs, case ignored (on a
    case-insensitive disk `.GITIGNORE` is `.gitignore`)."""

    def __init__(self, extra: Sequence[str] = ()) -> None:
        self._exact = frozenset(
            n.lower() for n in (*PLAIN_DOTFILES, *extra) if not has_wildcards(n)
        )
        globs = [glob_regex(g) for g in extra if has_wildcards(g)]
        self._globs = re.compile("(?:" + "|".join(globs) + ")$", re.IGNORECASE) if globs else None

    def __call__(self, name: str) -> bool:
        if name.lower() in self._exact:
            return True
        return self._globs is not None and self._globs.match(name) is not None


def home_dot_entry(path: str, homes: Sequence[str]) -> str | None:
    """The dot-entry of a home dir that `path` (absolute) is or lies under (`~/.config` for
    `~/.config/jj/config.toml`), or None."""
    for home in homes:
        prefix = home.rstrip("/") + "/"
        if path.startswith(prefix):
            first = path[len(prefix) :].split("/", 1)[0]
            if nfc(first).startswith("."):
                return prefix + first
    return None


def dot_component(path: str, root: str, plain: Callable[[str], bool]) -> str | None:
    """The first component of `path` below `root` (an allowed dir holding it) that starts
    with a dot, unless it is the last one and `plain` data; None if there is none."""
    if path == root:
        return None
    parts = path[len(root.rstrip("/")) + 1 :].split("/")
    for index, part in enumerate(parts):
        # As the lists see it: HFS+ leaves ZWNJ and friends out, `<ZWNJ>.bashrc` is `.bashrc`.
        name = nfc(part)
        if name.startswith(".") and not (index == len(parts) - 1 and plain(name)):
            return part
    return None
