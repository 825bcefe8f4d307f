"""Turning a model-supplied path string into the real locations it names (pure, no I/O but
`realpath`'s own lookups and one `lstat` of the result).

Containment is always by whole path components (`/ws_evil` is not inside `/ws`), never by
string prefix: that prefix bug is CVE-2025-53110 in the MCP filesystem server.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass

from cli.fs.folding import on_disk

MAX_PATH_CHARS = 4096  # PATH_MAX on Linux; longer strings are confusion, not paths


class PathError(ValueError):
    """The string cannot be used as a path; the message tells the model what to send."""


@dataclass(frozen=True)
class FileId:
    """Which regular file a path named when it was checked, and how many names it had."""

    device: int
    inode: int
    links: int


@dataclass(frozen=True)
class ResolvedPath:
    """Every form of one path that a check must look at.

    given     what the model sent
    absolute  `~` expanded, joined to the working dir, `..` collapsed as text
    real      every symlink resolved (realpath); a part that does not exist yet is kept as is,
              so a new file is the real path of its nearest existing parent plus its name;
              each existing part spelled as the disk holds it (a case-insensitive disk
              finds `.SSH` for `.ssh`: `real` says `.ssh`)
    entry     the real path of the parent plus the last name, the last symlink not followed:
              where the directory entry itself lives (what delete removes)
    file      the regular file at `real` when it was checked (None: missing or not a regular
              file). A hard link keeps `real` inside while the data lives on elsewhere:
              `links > 1` is the only tell, and the tools compare it at use.
    """

    given: str
    absolute: str
    real: str
    entry: str
    file: FileId | None = None

    @property
    def forms(self) -> tuple[str, ...]:
        """The distinct absolute forms, for checks that must hold for all of them."""
        return tuple(dict.fromkeys((self.absolute, self.real, self.entry)))


def expand_user(path: str, home: str) -> str:
    """`~` and `~/x` against `home` (injected, so tests need not touch $HOME)."""
    if path == "~":
        return home
    if path.startswith("~/"):
        return os.path.join(home, path[2:])
    return os.path.expanduser(path) if path.startswith("~") else path


def resolve_path(raw: str, cwd: str, home: str) -> ResolvedPath:
    """Resolve `raw` against `cwd`; raise PathError for strings that are not usable paths."""
    if not isinstance(raw, str) or raw == "":
        raise PathError("path is empty; pass a file or directory path")
    if "\x00" in raw:
        raise PathError("path contains a NUL byte; pass a plain path")
    if len(raw) > MAX_PATH_CHARS:
        raise PathError(f"path is longer than {MAX_PATH_CHARS} characters")
    if raw != raw.strip() or (len(raw) > 1 and raw[0] == raw[-1] and raw[0] in "\"'`"):
        # Models often wrap paths in quotes or leave a trailing newline; using the string as
        # is would name a different file than the one they mean.
        raise PathError(f"path {raw!r} has surrounding spaces or quotes; pass the bare path")
    joined = os.path.join(cwd, expand_user(raw, home))
    absolute = os.path.normpath(joined)
    if absolute.startswith("//"):  # POSIX keeps a leading '//' as implementation-defined
        absolute = "/" + absolute.lstrip("/")
    # realpath resolves `..` after a symlink the way the kernel does (from the link target),
    # which the textual `absolute` does not; both are checked.
    # On a disk that ignores case or normalisation, `real` and `entry` name each existing
    # component as the disk holds it (cli/fs/folding.py), so that lists and allowed dirs
    # are compared with the entry itself, however the model spelled it.
    real = on_disk(os.path.realpath(joined))
    parent, leaf = os.path.split(absolute)
    entry = absolute if not leaf else on_disk(os.path.join(os.path.realpath(parent), leaf))
    return ResolvedPath(raw, absolute, real, entry, file_id(real))


def file_id(path: str) -> FileId | None:
    """The regular file at `path` (not following a last symlink), or None."""
    try:
        info = os.lstat(path)
    except (OSError, ValueError):
        return None
    if not stat.S_ISREG(info.st_mode):
        return None
    return FileId(info.st_dev, info.st_ino, info.st_nlink)


def is_within(path: str, root: str) -> bool:
    """True if `path` is `root` or below it, comparing whole components."""
    if root == "/":
        return path.startswith("/")
    return path == root or path.startswith(root.rstrip("/") + "/")


def root_of(path: str, roots: tuple[str, ...]) -> str | None:
    """The innermost of `roots` that holds `path`, or None: the directory a file operation
    is anchored to, so that it cannot leave it."""
    holding = [r for r in roots if is_within(path, r)]
    return max(holding, key=len) if holding else None


def display_path(path: str, cwd: str) -> str:
    """`path` relative to `cwd` when it is below it, else absolute: what people and models
    read most easily."""
    if path == cwd:
        return "."
    if is_within(path, cwd):
        relative = path[len(cwd.rstrip("/")) + 1 :]
        if "//" in relative or "/." in "/" + relative:
            return os.path.relpath(path, cwd)  # dots (or doubled slashes) to normalise
        return relative  # what relpath gives, without its cost (a search shows thousands)
    return path
