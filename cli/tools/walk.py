"""Walking a directory tree the safe way, shared by list_directory and search_files: never
through a directory symlink (no escapes, no loops), never into what the policy hides."""

from __future__ import annotations

import os
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass

from cli.tools import fsops

# Directories that hold tooling, not the user's work; descending into them drowns results.
NOISE_DIRS = frozenset(
    {
        ".git",
        ".hg",
        ".svn",
        "node_modules",
        "__pycache__",
        ".venv",
        "venv",
        ".tox",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
        ".idea",
        ".cache",
    }
)


@dataclass(frozen=True)
class Entry:
    path: str  # absolute
    relative: str  # to the walk's root
    depth: int  # 1 for the root's own children
    dirent: os.DirEntry[str]  # from scandir on a dir fd: `.path` is the bare name
    # The directory holding it, for `*at` calls (fsops.read_at, readlink). Open only until the
    # walk moves on.
    dir_fd: int


@dataclass
class _Level:
    entries: Iterator[os.DirEntry[str]]
    path: str
    relative: str
    depth: int
    fd: int | None  # None for the top, which the caller owns


def walk(
    top_fd: int,
    top: str,
    *,
    max_depth: int,
    include_hidden: bool,
    hides: Callable[[str], bool],
) -> Generator[Entry, None, None]:
    """Yield entries below the open directory `top_fd` (whose path is `top`) in tree order,
    each directory just before its contents, names sorted. Directory symlinks are yielded but
    never entered; hidden names are skipped unless asked; noise dirs and dirs the policy hides
    are yielded but not entered. Each directory is opened relative to its parent's fd with
    O_NOFOLLOW, so one swapped for a symlink mid-walk is not entered either. Close the
    generator (contextlib.closing) when stopping early, so its fds close at once."""
    stack = [_Level(_sorted_entries(top_fd), top, "", 1, None)]
    try:
        while stack:
            level = stack[-1]
            dirent = next(level.entries, None)
            if dirent is None:
                _close(stack.pop())
                continue
            if not include_hidden and dirent.name.startswith("."):
                continue
            path = os.path.join(level.path, dirent.name)
            relative = f"{level.relative}{dirent.name}"
            dir_fd = top_fd if level.fd is None else level.fd
            yield Entry(path, relative, level.depth, dirent, dir_fd)
            if (
                level.depth < max_depth
                and dirent.is_dir(follow_symlinks=False)
                and dirent.name not in NOISE_DIRS
                and not hides(path)
            ):
                sub = fsops.open_subdir(dir_fd, dirent.name)
                if sub is not None:  # unreadable below the root: skip it, a walk is best-effort
                    stack.append(
                        _Level(_sorted_entries(sub), path, relative + "/", level.depth + 1, sub)
                    )
    finally:
        for level in stack:
            _close(level)


def _close(level: _Level) -> None:
    if level.fd is not None:
        os.close(level.fd)


def _sorted_entries(dir_fd: int) -> Iterator[os.DirEntry[str]]:
    try:
        with os.scandir(dir_fd) as it:
            return iter(sorted(it, key=lambda e: e.name))
    except OSError:
        return iter(())
