"""Walking a directory tree the safe way, shared by list_directory and search_files: never
through a directory symlink (no escapes, no loops), never into what the policy hides."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass

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
    dirent: os.DirEntry[str]


def walk(
    root: str,
    *,
    max_depth: int,
    include_hidden: bool,
    hides: Callable[[str], bool],
) -> Iterator[Entry]:
    """Yield entries in tree order (each directory just before its contents, names sorted).
    Directory symlinks are yielded but never entered; hidden names are skipped unless asked;
    noise dirs and dirs the policy hides are yielded but not entered."""
    stack = [(_sorted_entries(root), "", 1)]
    while stack:
        entries, rel, depth = stack[-1]
        dirent = next(entries, None)
        if dirent is None:
            stack.pop()
            continue
        if not include_hidden and dirent.name.startswith("."):
            continue
        relative = f"{rel}{dirent.name}"
        yield Entry(dirent.path, relative, depth, dirent)
        if (
            depth < max_depth
            and dirent.is_dir(follow_symlinks=False)
            and dirent.name not in NOISE_DIRS
            and not hides(dirent.path)
        ):
            stack.append((_sorted_entries(dirent.path), relative + "/", depth + 1))


def _sorted_entries(directory: str) -> Iterator[os.DirEntry[str]]:
    try:
        with os.scandir(directory) as it:
            return iter(sorted(it, key=lambda e: e.name))
    except OSError:
        return iter(())  # unreadable below the root: skip it, a walk is best-effort there
