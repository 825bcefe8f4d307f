"""The classes of path, matched: how an entry of the lists (cli/safety/sensitive.py) matches a
path (`PathClass`: anchored entries, relative ones at any depth, `**` globs and regexes, case
and Unicode normalisation ignored, compiled once, when first used), and the three classes
for one user (`build` → `Classes`: secrets, execution surfaces and the agent's config), from
the built-in lists, the YAML's additions, the home dir, $PATH, the XDG variables and where the
agent's config and code live.

Pure: no I/O here but the $PATH entries the caller passes in and the home dir's spelling on
disk (cli/fs/folding.py).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from cli.fs.folding import fold, nfc, on_disk
from cli.fs.globs import glob_regex, has_wildcards
from cli.safety.sensitive import EXECUTION_SURFACES, SECRETS


def literal(path: str) -> str:
    """An absolute path as an entry that matches it literally: each glob character in a
    class of its own (`[*]`)."""
    return "".join(f"[{c}]" if c in "*?[" else c for c in path)


def anchored(glob: str, home: str) -> str | None:
    """The absolute path an anchored entry names (`~/x` against `home`), else None."""
    if glob.startswith("~/"):
        return os.path.join(home, glob[2:]).rstrip("/") or "/"
    if glob.startswith("/"):
        return glob.rstrip("/") or "/"
    return None


def entry_regex(glob: str, home: str) -> str:
    """The regex an entry matches on absolute paths: the path itself and all below it."""
    root = anchored(glob, home)
    if root is not None:
        return "^" + glob_regex(root) + "(?:/|$)"
    return "(?:^|/)" + glob_regex(glob.strip("/")) + "(?:/|$)"


@dataclass(frozen=True)
class PathClass:
    """One class of path: its entries (globs) and extra regexes, compiled into one matcher."""

    name: str
    globs: tuple[str, ...]
    regexes: tuple[str, ...]
    homes: tuple[str, ...]  # `~/` in an entry: each of these (the home as given, resolved)
    # Three matchers, so that a walk pays per entry, not per character of a deep path:
    # anchored entries are tried once at the start, plain relative ones at component starts,
    # and only regexes and `**` globs search the whole string.
    _anchored: re.Pattern[str] = field(init=False, repr=False, compare=False)
    _relative: re.Pattern[str] = field(init=False, repr=False, compare=False)
    _free: re.Pattern[str] = field(init=False, repr=False, compare=False)
    # For match_entry: relative entries of one component as a test of the last name, and
    # those of several (`.aws/credentials`) tried from the start of the _span-th last one.
    _name: _NameTest = field(init=False, repr=False, compare=False)
    _nested: re.Pattern[str] = field(init=False, repr=False, compare=False)
    # The names a nested glob's next-to-last component can have (lowered; None: it has
    # wildcards, no such test): an entry whose directory has another name matches none.
    _nested_parents: frozenset[str] | None = field(init=False, repr=False, compare=False)
    _free_search: Callable[[str], object] | None = field(init=False, repr=False, compare=False)
    _anchored_roots: frozenset[str] | None = field(init=False, repr=False, compare=False)
    _span: int = field(init=False, repr=False, compare=False)  # most components a nested glob has

    def __getattr__(self, name: str) -> Any:
        """The matchers are compiled when first used, not when the policy is built: a few
        dozen milliseconds of start-up (Python compiles regexes in Python) that a run which
        never looks at a path does not pay."""
        if name.startswith("_") and name in _COMPILED:
            self._compile()
            return object.__getattribute__(self, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def _compile(self) -> None:
        # Paths are matched in normal form C (`match` normalises them), so the entries are.
        regexes, homes = [nfc(r) for r in self.regexes], [nfc(h) for h in self.homes]
        # A path is also matched fully case folded (`match`): so is its home then.
        homes = list(dict.fromkeys([*homes, *(fold(h) for h in homes if not h.isascii())]))
        anchored_parts, relative_parts, free_parts = [], [], [f"(?:{r})" for r in regexes]
        single, nested, nested_globs = [], [], []
        span = 1
        globs = [nfc(g) for g in self.globs]
        for glob in globs:
            if anchored(glob, homes[0]) is not None:
                anchored_parts += [entry_regex(glob, h) for h in homes]
            elif "**" in glob:
                free_parts.append(entry_regex(glob, ""))
            else:
                body = glob.strip("/")
                relative_parts.append(glob_regex(body))
                if "/" in body:
                    nested.append(glob_regex(body))
                    nested_globs.append(body)
                    span = max(span, body.count("/") + 1)
                else:
                    single.append(body)

        def compiled(parts: list[str], suffix: str = "") -> re.Pattern[str]:
            alternatives = "|".join(dict.fromkeys(parts))
            return re.compile(f"(?:{alternatives}){suffix}" if parts else "(?!)", re.IGNORECASE)

        object.__setattr__(self, "_anchored", compiled(anchored_parts))  # frozen: set once
        # For match_entry: anchored entries without wildcards as a set of paths (lowered:
        # matching ignores case), when every anchored entry is one; else None.
        roots: set[str] | None = set()
        for glob in globs:
            for home in homes:
                root = anchored(glob, home)
                if root is not None and roots is not None:
                    plain = root.isascii() and not has_wildcards(root) and "\\" not in root
                    roots = roots | {os.path.normpath(root).lower()} if plain else None
        object.__setattr__(self, "_anchored_roots", None if roots is None else frozenset(roots))
        object.__setattr__(self, "_relative", compiled(relative_parts, "(?:/|$)"))
        object.__setattr__(self, "_free", compiled(free_parts))
        # Searching with a pattern that never matches still tries every position: skip it.
        object.__setattr__(
            self, "_free_search", compiled(free_parts).search if free_parts else None
        )
        object.__setattr__(self, "_name", _NameTest(single))
        parents = [glob.split("/")[-2] for glob in nested_globs]
        plain = all(p.isascii() and not has_wildcards(p) and "\\" not in p for p in parents)
        object.__setattr__(
            self, "_nested_parents", frozenset(p.lower() for p in parents) if plain else None
        )
        nested_pattern = compiled(nested, "(?:/|$)").pattern
        object.__setattr__(
            self, "_nested", re.compile(f"(?:[^/]*/)*?{nested_pattern}", re.IGNORECASE)
        )
        object.__setattr__(self, "_span", span)

    def match(self, path: str) -> bool:
        """True if `path` (absolute, or as the model wrote it) is in this class."""
        path = nfc(path)
        if self._match(path):
            return True
        # Full case folding, which a folding disk may use: `\ufb06` is `st`, `\u00df` `ss`
        # (re.IGNORECASE folds one letter to one letter only).
        folded = path if path.isascii() else fold(path)
        return folded != path and self._match(folded)

    def _match(self, path: str) -> bool:
        if self._anchored.match(path) or self._free.search(path):
            return True
        return any(self._relative.match(path, start) for start in _starts(path))

    def match_entry(self, path: str) -> bool:
        """`match` for a walk that has checked every ancestor of `path` already and found it
        not in the class: a match must then end at the last component, so only the last few
        component starts need trying, however deep the path (tests/safety/test_path_classes.py
        compares it with `match`)."""
        path = nfc(path)
        if self._match_entry(path):
            return True
        folded = path if path.isascii() else fold(path)
        return folded != path and self._match_entry(folded)

    def _match_entry(self, path: str) -> bool:
        roots = self._anchored_roots
        if roots is None or not path.isascii():
            if self._anchored.match(path):
                return True
        elif path.lower() in roots:
            return True  # below one, an ancestor would have matched: only the root itself
        if self._free_search and self._free_search(path):
            return True
        last = path.rfind("/") + 1
        if self._name.matches(path, last):
            return True
        if self._span == 1:
            return False
        if last < 2:
            return False  # no directory above the name: a glob of two components or more fails
        start = path.rfind("/", 0, last - 1)
        parents = self._nested_parents
        if parents is not None:
            parent = path[start + 1 : last - 1]
            if parent.isascii() and parent.lower() not in parents:
                return False
        for _ in range(self._span - 2):
            if start < 0:
                break
            start = path.rfind("/", 0, start)
        # From the start of the _span-th last component (or the path's start), where the
        # pattern tries each component start in turn.
        return self._nested.match(path, max(start, -1) + 1) is not None

    def anchored_paths(self) -> list[str]:
        """The concrete paths this class names outside any tree walk: anchored entries, and
        plain relative ones (no wildcards) taken at the home dir. The sandbox masks or locks
        these; entries with wildcards are only found by walking (the writable dirs)."""
        out: list[str] = []
        for glob in self.globs:
            for home in self.homes:
                root = anchored(glob, home)
                if root is None and not has_wildcards(glob):
                    root = os.path.join(home, glob.strip("/"))
                if root is not None and not has_wildcards(root):
                    out.append(os.path.normpath(root))
        return list(dict.fromkeys(out))


_COMPILED = frozenset(
    {"_anchored", "_relative", "_free", "_free_search", "_name", "_nested_parents", "_nested"}
    | {"_span", "_anchored_roots"}
)


class _NameTest:
    """Globs of one component as a test of a path's last name. The usual shapes — `NAME`,
    `PREFIX*`, `*SUFFIX`, `*PART*` of ASCII letters — are set and string tests on the name
    lowered, which for an ASCII name is what re.IGNORECASE does; other globs, and any name
    that is not ASCII, go through the regex."""

    def __init__(self, globs: Sequence[str]) -> None:
        exact, prefixes, suffixes, parts, other = set(), [], [], [], []
        for glob in globs:
            core = glob.strip("*")
            stars = (glob.startswith("*"), glob.endswith("*"))
            if not core or not core.isascii() or any(c in core for c in "*?[]\\"):
                other.append(glob)
            elif stars == (False, False):
                exact.add(core.lower())
            elif stars == (False, True):
                prefixes.append(core.lower())
            elif stars == (True, False):
                suffixes.append(core.lower())
            elif glob == f"*{core}*":
                parts.append(core.lower())
            else:
                other.append(glob)
        self._exact = frozenset(exact)
        self._prefixes, self._suffixes, self._parts = tuple(prefixes), tuple(suffixes), parts
        alternatives = "|".join(dict.fromkeys(glob_regex(g) for g in other)) or "(?!)"
        self._other = re.compile(f"(?:{alternatives})$", re.IGNORECASE)
        self._other_literals = _literals(other) if other else ()
        everything = "|".join(dict.fromkeys(glob_regex(g) for g in globs)) or "(?!)"
        self._all = re.compile(f"(?:{everything})$", re.IGNORECASE)

    def matches(self, path: str, start: int) -> bool:
        """Does the name at path[start:] (no slash in it) match one of the globs?"""
        name = path[start:]
        if not name.isascii():
            return self._all.match(path, start) is not None
        low = name.lower()
        if low in self._exact or low.startswith(self._prefixes) or low.endswith(self._suffixes):
            return True
        for part in self._parts:
            if part in low:
                return True
        literals = self._other_literals
        if literals is not None:
            for literal in literals:
                if literal in low:
                    break
            else:
                return False
        return self._other.match(path, start) is not None


def _literals(globs: Sequence[str]) -> tuple[str, ...] | None:
    """For each glob the longest run of plain ASCII characters (lowered) that every path it
    matches holds; None if some glob has none (then there is no such shortcut)."""
    out = []
    for glob in globs:
        runs = re.split(r"\[[^\]]*\]|[*?\[\]\\]", glob)
        best = max(runs, key=len)
        if not best or not best.isascii():
            return None
        out.append(best.lower())
    return tuple(dict.fromkeys(out))


def _starts(path: str) -> list[int]:
    """Where each component of `path` begins."""
    starts = [] if path.startswith("/") else [0]
    position = path.find("/")
    while position >= 0:
        starts.append(position + 1)
        position = path.find("/", position + 1)
    return starts


def path_dirs(path_var: str) -> list[str]:
    """The absolute dirs of a $PATH value, as written and with symlinks resolved: programs
    there run by name, so they are execution surfaces wherever they are — under the home,
    or in a project whose venv is active (`proj/.venv/bin`), where a command that planted a
    link there would otherwise choose what the sandbox shows. System dirs (/usr/bin …) are
    outside every allowed dir a sane policy has, and read-only to commands anyway."""
    dirs = []
    for part in path_var.split(os.pathsep):
        if os.path.isabs(part):
            dirs += [os.path.normpath(part), os.path.realpath(part)]  # ~/tl/bin -> tools/bin
    return list(dict.fromkeys(dirs))


# Where the XDG base-directory variables move what the lists name under ~/.config,
# ~/.local/share and ~/.local/state: git, systemd, autostart, fish, gh… follow them.
XDG_DIRS = (
    ("XDG_CONFIG_HOME", ".config/"),
    ("XDG_DATA_HOME", ".local/share/"),
    ("XDG_STATE_HOME", ".local/state/"),
)


def xdg_entries(globs: Sequence[str], env: Mapping[str, str]) -> list[str]:
    """The entries under ~/.config (…) again under $XDG_CONFIG_HOME (…) when it is set."""
    out = []
    for var, prefix in XDG_DIRS:
        base = env.get(var, "")
        if not base or not os.path.isabs(base):
            continue
        for glob in globs:
            rest = glob[2:] if glob.startswith("~/") else glob
            if rest.startswith(prefix):
                out.append(os.path.join(base, rest[len(prefix) :]))
    return out


@dataclass(frozen=True)
class Classes:
    """The three classes for one user: built once per run from the defaults, the YAML's
    additions, the home dir, $PATH and where the config lives."""

    secrets: PathClass
    surfaces: PathClass
    agent_config: PathClass
    agent_paths: tuple[str, ...] = ()  # what agent_config matches, as concrete paths


def build(
    home: str,
    extra_secrets: Sequence[str] = (),
    extra_surfaces: Sequence[str] = (),
    secret_regexes: Sequence[str] = (),
    surface_regexes: Sequence[str] = (),
    path_var: str = "",
    agent_paths: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    code_dirs: Sequence[str] = (),
) -> Classes:
    """`agent_paths`: the agent's config dirs and file, absolute (matched literally). `env`:
    the XDG variables that move ~/.config and friends. `code_dirs`: where the agent's own
    Python code is imported from (absolute): execution surfaces, as $PATH's dirs are."""
    real_home = os.path.realpath(home)
    homes = tuple(dict.fromkeys((os.path.normpath(home), real_home, on_disk(real_home))))
    dirs = path_dirs(path_var)
    dirs += [f for d in code_dirs for f in (os.path.normpath(d), os.path.realpath(d))]
    surfaces = (*EXECUTION_SURFACES, *dict.fromkeys(dirs), *extra_surfaces)
    secrets = (*SECRETS, *extra_secrets)
    surfaces = (*surfaces, *xdg_entries(surfaces, env or {}))
    secrets = (*secrets, *xdg_entries(secrets, env or {}))
    literal = tuple("^" + re.escape(p.rstrip("/")) + "(?:/|$)" for p in agent_paths)
    return Classes(
        PathClass("secret", secrets, tuple(secret_regexes), homes),
        PathClass("execution surface", surfaces, tuple(surface_regexes), homes),
        PathClass("agent config", (), tuple(dict.fromkeys(literal)), homes),
        tuple(dict.fromkeys(os.path.normpath(p) for p in agent_paths)),
    )
