"""ripgrep as a proposer for search_files: given the files our own walk chose (never a secret,
a blocked dir, a symlink or anything the walk would not open), it says which of them may
contain the text. Nothing it says is shown: search_files reads every proposed file again
through cli/fs and matches it with its own code, so what is reported is the same with and
without rg (tests/tools/test_search_engines.py runs both on an adversarial tree).

rg is used only where its matching is known to be a superset of ours: a case-sensitive
query (bytes of UTF-8 against text decoded from UTF-8, the same thing), or an ASCII query
without case. For those, Python's re.IGNORECASE and rg's Unicode case folding agree on
what an ASCII letter matches (the Kelvin sign for k, the long s for s) except for i, which
Python also matches with İ and ı: rg gets a class of the four for it. Anything else — a NUL
or a line break in the query, a U+FFFD, a non-ASCII query without case, rg missing,
failing or killed — is searched in Python alone.

The rg is METONA_RG if set (a path), else the one in the scripts dir of this Python (the
optional extra `metona-agent[fast]`: the PyPI `ripgrep` wheel, the version this is tested
with), else the first on PATH. METONA_SEARCH_ENGINE=python turns it off, =rg requires it.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sysconfig
import time
from collections.abc import Mapping

from cli.fs import _platform
from cli.fs.deadline import NO_DEADLINE, Deadline, DeadlineExceeded

# The characters Rust's regex::escape escapes; any other is itself in rg's syntax, and some
# escaped would not be (`\<` and `\>` are word boundaries).
_META = frozenset("\\.+*?()|[]{}^$#&-~")
# rg gets this long in all (then it is killed, and Python searches every file: a FIFO or
# a device swapped in for a file the walk saw would block it or feed it without end), or
# less when the call's deadline comes first (then the search fails with it), and this much
# memory.
DEADLINE = 30.0
_MEMORY = 1 << 30

ENGINE_VARIABLE = "METONA_SEARCH_ENGINE"
RG_VARIABLE = "METONA_RG"
ENGINES = ("auto", "python", "rg")
# Bytes of paths per rg run: well under Linux's 2 MB argv limit, whatever the environment;
# and files per run, so that the first runs start while the walk is still going.
_ARGV_BUDGET = 256 * 1024
BATCH_FILES = 2048
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
    try:
        query.encode("utf-8")
    except UnicodeEncodeError:
        return False  # a lone surrogate (JSON allows one): no argv can carry it
    return case_sensitive or query.isascii()


def pattern_args(query: str, case_sensitive: bool) -> list[str]:
    """rg's options for matching `query` as search_files does (a superset, never less)."""
    if case_sensitive:
        return ["--fixed-strings", "--case-sensitive", "--regexp", query]
    parts = []
    for char in query:  # ASCII (usable_for)
        if char in "iI":
            parts.append("[iI\u0130\u0131]")
        elif char in _META:
            parts.append("\\" + char)  # what Rust's regex::escape escapes
        else:
            parts.append(char)  # not `\<`: that is a word boundary in rg
    return ["--ignore-case", "--regexp", "".join(parts)]


def find(environ: Mapping[str, str]) -> str | None:
    """The rg to run: METONA_RG, ours (the `fast` extra) or the first on PATH."""
    chosen = environ.get(RG_VARIABLE)
    if chosen:
        return chosen if os.path.isabs(chosen) and os.access(chosen, os.X_OK) else None
    # Absolute entries only: a relative one (`bin`, `node_modules/.bin`) would be looked up
    # in the directory rg runs in, which the model chose.
    path_var = os.pathsep.join(
        p for p in environ.get("PATH", os.defpath).split(os.pathsep) if os.path.isabs(p)
    )
    return _find(path_var)


@functools.lru_cache(maxsize=8)
def _find(path_var: str) -> str | None:
    scripts = sysconfig.get_path("scripts")
    own = os.path.join(scripts, "rg") if scripts else ""
    if own and os.access(own, os.X_OK) and os.path.isfile(own):
        return own
    return shutil.which("rg", path=path_var)


class Proposer:
    """rg over the files a walk finds, in batches started while the walk goes on (rg works on
    the other core meanwhile): `add` each file, then `finish` gives which of them may hold the
    text, or None when rg could not say for all (it failed or was killed, or there were too
    few files to bother): then every file is searched in Python. `close` stops what runs."""

    def __init__(
        self,
        rg: str,
        top_fd: int,
        query: str,
        case_sensitive: bool,
        max_bytes: int,
        *,
        deadline: Deadline = NO_DEADLINE,
    ) -> None:
        self._command = [
            rg,
            "--no-config",  # not the user's RIPGREP_CONFIG_PATH
            "--files-with-matches",
            "--null",  # names may hold line breaks
            "--text",  # ours decides what is binary
            "--encoding=none",  # bytes as they are: no BOM sniffing, as ours reads them
            "--no-mmap",
            "--no-messages",
            f"--max-filesize={max_bytes}",  # larger files are not searched by us either
            *pattern_args(query, case_sensitive),
            "--",
        ]
        self._top_fd = top_fd
        self._batch: list[str] = []
        self._size = 0
        self._added = 0
        self._running: list[subprocess.Popen[bytes]] = []
        self._failed = False
        self._started = time.monotonic()
        self._deadline = deadline

    def add(self, relative: str) -> None:
        # "./": rg reads the name as it is, relative to the walk's top (its cwd), and no name
        # can pass for an option.
        name = "./" + relative
        self._batch.append(name)
        self._size += len(os.fsencode(name)) + 1
        self._added += 1
        if self._size >= _ARGV_BUDGET or len(self._batch) >= BATCH_FILES:
            self._launch()

    def finish(self) -> set[str] | None:
        if self._added < MIN_FILES and not self._running:
            return None
        if self._batch:
            self._launch()
        found: set[str] = set()
        deadline = self._started + DEADLINE
        for proc in self._running:
            left = min(deadline - time.monotonic(), self._deadline.left())
            try:
                out, _ = proc.communicate(timeout=max(0.0, left))
            except subprocess.TimeoutExpired:
                if self._deadline.expired:  # the caller's `close` stops what still runs
                    raise DeadlineExceeded(self._deadline) from None
                self._failed = True
                break
            # 1: nothing found. 2: an error (a file vanished or is unreadable): what it did
            # list is still a list, but whether the others were searched is not known.
            if proc.returncode not in (0, 1):
                self._failed = True
            for name in out.split(b"\0"):
                if name:
                    found.add(os.fsdecode(name[2:] if name.startswith(b"./") else name))
        self.close()
        return None if self._failed else found

    def close(self) -> None:
        for proc in self._running:
            proc.kill()
            proc.communicate()
        self._running.clear()

    def _launch(self) -> None:
        batch, self._batch, self._size = self._batch, [], 0
        if self._failed:
            return
        try:
            # The directory the walk holds open, not its path (which may have been swapped
            # since): entered by the child before rg runs (how: cli/fs/_platform.py).
            argv, cwd = _platform.child_cwd(self._top_fd, [*self._command, *batch])
            proc = subprocess.Popen(
                argv,
                cwd=cwd,
                pass_fds=(self._top_fd,),
                env={"PATH": os.defpath},
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
            )
        except (OSError, ValueError, subprocess.SubprocessError):
            self._failed = True
            return
        self._running.append(proc)
        _limit_memory(proc.pid)


def _limit_memory(pid: int) -> None:
    """rg's allocations past _MEMORY fail (it exits, and Python searches instead) rather
    than the machine swapping; set from outside (prlimit), since a hook run in the child
    before exec is unsafe in a process with threads."""
    _platform.limit_memory(pid, _MEMORY)
