"""Walking a directory tree the safe way, shared by list_directory and search_files: never
through a directory symlink (no escapes, no loops), never into what the policy hides, and
never past a cap on what it reads or how deep it goes, whatever a model built."""

from __future__ import annotations

import itertools
import operator
import os
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from typing import NamedTuple

from cli.fs import reach
from cli.fs.deadline import NO_DEADLINE, Deadline

# How deep a walk goes at most, whatever it is asked: each level holds an open fd until its
# last entry is seen, and a model can nest directories without end. Deeper trees are walked
# to here and reported truncated.
MAX_WALK_DEPTH = 256

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


class Entry(NamedTuple):
    """One entry of a walk (a NamedTuple: a walk makes one per entry, and this is the cheapest
    immutable record to make)."""

    path: str  # absolute
    relative: str  # to the walk's root
    depth: int  # 1 for the root's own children
    dirent: os.DirEntry[str]  # from scandir on a dir fd: `.path` is the bare name
    # The directory holding it, for `*at` calls (reading.read_at, readlink). Open only until the
    # walk moves on.
    dir_fd: int


@dataclass
class _Level:
    entries: Iterator[os.DirEntry[str]]
    prefix: str  # the directory's path and a slash: an entry's path is prefix + name
    relative: str  # the same, relative to the walk's root ("" for the root)
    depth: int
    fd: int | None  # None for the top, which the caller owns


class Walk:
    """Entries below the open directory `top_fd` (whose path is `top`) in tree order, each
    directory just before its contents, names sorted. Directory symlinks are yielded but never
    entered; hidden names are skipped unless asked; noise dirs and dirs the policy hides are
    yielded but not entered. Each directory is opened relative to its parent's fd with
    O_NOFOLLOW, so one swapped for a symlink mid-walk is not entered either.

    Bounded whatever the tree: at most `max_visits` directory entries are read in all — files,
    directories, links, hidden and filtered-out names alike — and no deeper than
    MAX_WALK_DEPTH levels (one fd is open per level). `truncated` says the walk stopped before
    seeing everything; `visited` counts what it read. Iterative: no recursion however deep the
    tree. Close it (contextlib.closing) when stopping early, so its fds close at once.
    `deadline` is checked as each directory is entered or returned to (the caller checks
    between the entries it works on): DeadlineExceeded ends the walk, its fds closed."""

    def __init__(
        self,
        top_fd: int,
        top: str,
        *,
        max_visits: int,
        max_depth: int | None = None,
        include_hidden: bool,
        hides: Callable[[str], bool],
        deadline: Deadline = NO_DEADLINE,
    ) -> None:
        self.visited = 0
        self.over_cap = False  # a directory held more than max_visits left room for
        self.too_deep = False  # a directory deeper than MAX_WALK_DEPTH was not entered
        self._max_visits = max_visits
        self._asked_depth = max_depth
        self._max_depth = min(max_depth or MAX_WALK_DEPTH, MAX_WALK_DEPTH)
        self.hides = hides
        self._deadline = deadline
        self._entries = self._walk(top_fd, top, include_hidden, hides)

    @property
    def truncated(self) -> bool:
        return self.over_cap or self.too_deep

    def __iter__(self) -> Iterator[Entry]:
        return self._entries

    def close(self) -> None:
        self._entries.close()

    def _walk(
        self, top_fd: int, top: str, include_hidden: bool, hides: Callable[[str], bool]
    ) -> Generator[Entry, None, None]:
        top_prefix = top if top.endswith("/") else top + "/"
        stack = [_Level(self._read(top_fd), top_prefix, "", 1, None)]
        noise = NOISE_DIRS
        try:
            while stack:
                self._deadline.check()  # every fd of the walk is on the stack
                level = stack[-1]
                # The level's own loop, so that the per-entry work is only the entry's.
                prefix, relative_prefix, depth = level.prefix, level.relative, level.depth
                dir_fd = top_fd if level.fd is None else level.fd
                descend: _Level | None = None
                for dirent in level.entries:
                    name = dirent.name
                    if not include_hidden and name[0] == ".":
                        continue
                    path = prefix + name
                    relative = relative_prefix + name
                    yield Entry(path, relative, depth, dirent, dir_fd)
                    if (
                        self.over_cap
                        or not dirent.is_dir(follow_symlinks=False)
                        or name in noise
                        or hides(path)
                        or not self._may_enter(depth)
                    ):
                        continue
                    sub = reach.open_subdir(dir_fd, name)
                    if sub is not None:  # unreadable below the root: skip it (best-effort)
                        descend = _Level(
                            self._read(sub), path + "/", relative + "/", depth + 1, sub
                        )
                        break
                if descend is None:
                    _close(stack.pop())
                else:
                    stack.append(descend)
        finally:
            for level in stack:
                _close(level)

    def _may_enter(self, depth: int) -> bool:
        """May a directory at `depth` be entered? Past the hard limit that is a truncation;
        past the depth the caller asked for, it is what was asked."""
        if depth < self._max_depth:
            return True
        if self._asked_depth is None or self._asked_depth > depth:
            self.too_deep = True
        return False

    def _read(self, dir_fd: int) -> Iterator[os.DirEntry[str]]:
        """The directory's entries, sorted, counted against max_visits: never more than fit
        (one more is read to know whether there are more)."""
        room = self._max_visits - self.visited
        try:
            with os.scandir(dir_fd) as it:
                batch = list(itertools.islice(it, room + 1))
        except OSError:
            return iter(())
        batch.sort(key=_name)
        if len(batch) > room:
            self.over_cap = True
            del batch[room:]
        self.visited += len(batch)
        return iter(batch)


_name = operator.attrgetter("name")


def _close(level: _Level) -> None:
    if level.fd is not None:
        os.close(level.fd)
