"""Secrets by identity: the regular files below the secrets that have a place of their own
(`~/.ssh`, `~/.aws/credentials`, `~/.docker/config.json`, … — cli/safety/sensitive.py's anchored
entries and its plain names taken at the home dir), known by device and inode, so that a hard
link to one under any other name (`notes.txt` in a project) is known as the secret it is.

Only a file with hard links can be one of these under another name, so the policy and the
read gate ask only about such files, and the index is built at the first such question, not
at start. It is kept while every directory it walked is unchanged (a new key in `~/.ssh`
changes `~/.ssh`), looked at again at most once a second. A secret it does not know — found
only by a wildcard or a regex (`*.pem`, a project's `.env`), beyond `MAX_ENTRIES`, or made
since the last look — is still a file with hard links, which nothing returns without a
person's yes (docs/safety.md): the index turns that question into a refusal where it can.
"""

from __future__ import annotations

import os
import stat
import time
from collections import deque
from collections.abc import Callable, Sequence

MAX_ENTRIES = 20_000  # entries looked at in all; a larger store is indexed in part
PER_ROOT = 5_000  # … and in one of them
MAX_DEPTH = 32
RECHECK_SECONDS = 1.0

# A directory as it was when walked: what changes when an entry is added, removed or renamed.
_Stamp = tuple[int, int, int]


class SecretFiles:
    """(device, inode) → the secret's path, for the regular files below `roots`."""

    def __init__(self, roots: Sequence[str], clock: Callable[[], float] = time.monotonic) -> None:
        self._roots = tuple(dict.fromkeys(roots))
        self._clock = clock
        self._files: dict[tuple[int, int], str] | None = None
        self._stamps: dict[str, _Stamp | None] = {}
        self._looked = 0.0

    def find(self, device: int, inode: int) -> str | None:
        """The secret this file is (one of its names), or None."""
        now = self._clock()
        if self._files is None or now - self._looked >= RECHECK_SECONDS:
            self._looked = now
            if self._files is None or self._stale():
                self._build()
        assert self._files is not None
        return self._files.get((device, inode))

    def _stale(self) -> bool:
        return any(_stamp(path) != stamp for path, stamp in self._stamps.items())

    def _build(self) -> None:
        """Every root (symlinks to it resolved, none followed below it): the files first, then
        each directory breadth first (a profile's keys and cookies lie near its top, its
        caches deep), at most PER_ROOT entries of one (a browser profile does not crowd out
        the rest) and MAX_ENTRIES in all, MAX_DEPTH levels deep. No recursion."""
        files: dict[tuple[int, int], str] = {}
        stamps: dict[str, _Stamp | None] = {}
        directories = []
        for root in self._roots:
            stamps[root] = _stamp(root)  # a root that appears, or goes, counts as a change
            real = os.path.realpath(root)
            try:
                info = os.lstat(real)
            except OSError:
                continue
            if stat.S_ISREG(info.st_mode):
                files.setdefault((info.st_dev, info.st_ino), root)
            elif stat.S_ISDIR(info.st_mode):
                directories.append(real)
        budget = MAX_ENTRIES
        for top in directories:
            budget -= self._walk(top, min(PER_ROOT, budget), files, stamps)
        self._files, self._stamps = files, stamps

    @staticmethod
    def _walk(
        top: str, budget: int, files: dict[tuple[int, int], str], stamps: dict[str, _Stamp | None]
    ) -> int:
        """Index the tree at `top`, looking at no more than `budget` entries; how many it
        looked at."""
        seen = 0
        pending = deque([(top, 0)])
        while pending and seen < budget:
            directory, depth = pending.popleft()
            stamps[directory] = _stamp(directory)
            try:
                with os.scandir(directory) as entries:
                    for entry in entries:
                        seen += 1
                        if seen >= budget:
                            break
                        if entry.is_dir(follow_symlinks=False):
                            if depth + 1 < MAX_DEPTH:
                                pending.append((entry.path, depth + 1))
                        elif entry.is_file(follow_symlinks=False):
                            _add(files, entry)
            except OSError:
                continue  # unreadable to us: then unreadable to the tools too
        return seen


def _add(files: dict[tuple[int, int], str], entry: os.DirEntry[str]) -> None:
    try:
        found = entry.stat(follow_symlinks=False)
    except OSError:
        return  # gone since the listing
    files.setdefault((found.st_dev, found.st_ino), entry.path)


def _stamp(path: str) -> _Stamp | None:
    try:
        info = os.lstat(path)
    except OSError:
        return None
    return (info.st_dev, info.st_ino, info.st_mtime_ns)
