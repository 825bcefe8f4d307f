"""ripgrep as a proposer for search_files: given the files our own walk chose (never a secret,
a blocked dir, a symlink or anything the walk would not open), it says which of them may
contain the text. Nothing it says is shown: search_files reads every proposed file again
through fsops and matches it with its own code, so what is reported is the same with and
without rg (tests/test_search_engines.py runs both on an adversarial tree).

rg is used only where its matching is known to be a superset of ours: a case-sensitive
query (bytes of UTF-8 against text decoded from UTF-8, the same thing), or an ASCII query
without case. For those, Python's re.IGNORECASE and rg's Unicode case folding agree on
what an ASCII letter matches (the Kelvin sign for k, the long s for s) except for i, which
Python also matches with İ and ı: rg gets a class of the four for it. Anything else — a NUL
or a line break in the query, a U+FFFD, a non-ASCII query without case, rg missing,
failing or killed — is searched in Python alone.

Found in the scripts dir of this Python (the optional extra `metona-agent[fast]`, the PyPI
`ripgrep` wheel) first, then on PATH. METONA_SEARCH_ENGINE=python turns it off, =rg
requires it.
"""

from __future__ import annotations

import functools
import os
import shutil
import string
import subprocess
import sysconfig
from collections.abc import Mapping, Sequence

ENGINE_VARIABLE = "METONA_SEARCH_ENGINE"
ENGINES = ("auto", "python", "rg")
# Bytes of paths per rg run: well under Linux's 2 MB argv limit, whatever the environment.
_ARGV_BUDGET = 256 * 1024
# Fewer files than this are read faster by Python than rg can be started.
MIN_FILES = 32


class EngineError(Exception):
    """METONA_SEARCH_ENGINE asks for what cannot be had."""


def engine(environ: Mapping[str, str]) -> str:
    value = environ.get(ENGINE_VARIABLE, "auto").strip().lower() or "auto"
    if value not in ENGINES:
        raise EngineError(
            f"{ENGINE_VARIABLE}={value!r}: expected one of {', '.join(ENGINES)}; unset it "
            "to let search_files choose"
        )
    return value


def usable_for(query: str, case_sensitive: bool) -> bool:
    """Is rg's match a superset of ours for this query (see the module's docstring)?"""
    if not query or "\x00" in query or "\n" in query or "\r" in query or "\ufffd" in query:
        return False
    return case_sensitive or query.isascii()


def pattern_args(query: str, case_sensitive: bool) -> list[str]:
    """rg's options for matching `query` as search_files does (a superset, never less)."""
    if case_sensitive:
        return ["--fixed-strings", "--case-sensitive", "--regexp", query]
    parts = []
    for char in query:  # ASCII (usable_for)
        if char in "iI":
            parts.append("[iI\u0130\u0131]")
        elif char in string.punctuation:
            parts.append("\\" + char)  # rg's regex takes any ASCII punctuation escaped
        else:
            parts.append(char)
    return ["--ignore-case", "--regexp", "".join(parts)]


def find(environ: Mapping[str, str]) -> str | None:
    """The rg to run: ours (the `fast` extra) or the first on PATH."""
    return _find(environ.get("PATH", os.defpath))


@functools.lru_cache(maxsize=8)
def _find(path_var: str) -> str | None:
    scripts = sysconfig.get_path("scripts")
    own = os.path.join(scripts, "rg") if scripts else ""
    if own and os.access(own, os.X_OK) and os.path.isfile(own):
        return own
    return shutil.which("rg", path=path_var)


def candidates(
    rg: str, top: str, relatives: Sequence[str], query: str, case_sensitive: bool, max_bytes: int
) -> set[str] | None:
    """Which of `relatives` (files below the directory `top`) may contain `query`; None when
    rg could not say (it failed or was killed): then every file is searched in Python."""
    command = [
        rg,
        "--no-config",  # not the user's RIPGREP_CONFIG_PATH
        "--files-with-matches",
        "--null",  # names may hold line breaks
        "--text",  # ours decides what is binary
        "--no-messages",
        f"--max-filesize={max_bytes}",  # larger files are not searched by us either
        *pattern_args(query, case_sensitive),
        "--",
    ]
    found: set[str] = set()
    for batch in _batches(relatives, _ARGV_BUDGET):
        try:
            # cwd is the walk's top, so that rg reads the names we pass as they are (relative,
            # "./"-prefixed: no name can pass for an option), under the directory we walked.
            done = subprocess.run(
                [*command, *(f"./{name}" for name in batch)],
                cwd=top,
                env={"PATH": os.defpath},
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                check=False,
            )
        except OSError:
            return None
        if done.returncode not in (0, 1):
            # 2: an error (a file vanished or is unreadable): what it did list is still a
            # list, but whether the others were searched is not known. Python searches all.
            return None
        for name in done.stdout.split(b"\0"):
            if name:
                found.add(os.fsdecode(name[2:] if name.startswith(b"./") else name))
    return found


def _batches(names: Sequence[str], budget: int) -> list[Sequence[str]]:
    out: list[Sequence[str]] = []
    start, size = 0, 0
    for index, name in enumerate(names):
        cost = len(os.fsencode(name)) + 3
        if size + cost > budget and index > start:
            out.append(names[start:index])
            start, size = index, 0
        size += cost
    if start < len(names):
        out.append(names[start:])
    return out
