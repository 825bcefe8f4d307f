"""Judging a task's end state and answer (pure but for reading the project's files).

Paths are as a task file writes them (cli/evals/tasks.py): relative to the project, `../name`
beside it, `~/name` in the task's home dir. A file check reads the file's bytes as UTF-8 (a
file that is not UTF-8 fails every text check); `unchanged` compares what the path is and
holds with what it was when the model started (a path that held nothing must still hold
nothing; a directory or symlink made or removed there is a change).
Answer checks ignore case: `answer_contains` and `answer_excludes` compare the answer and
the text case-folded, `answer_matches` searches with re.IGNORECASE.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from cli.errors import ToolError
from cli.evals.tasks import Check
from cli.fs import reach, reading

MAX_CHECKED_BYTES = 16 * 1024 * 1024  # a file checked is read up to this; past it, it fails


@dataclass(frozen=True)
class Place:
    """Where a task runs: its project, the dir beside it (`../`) and its home dir (`~/`),
    all below one scratch dir (`root`). The model may have made symlinks there: what the
    checks read and what the runner writes is reached beneath `root` without following any
    (cli/fs/reach.py), so nothing outside the scratch dir is read, shown or written."""

    project: Path
    home: Path

    @property
    def root(self) -> Path:
        return self.project.parent

    def resolve(self, path: str) -> Path:
        if path.startswith("~/"):
            return self.home / path[2:]
        if path.startswith("../"):
            return self.project.parent / path[3:]
        return self.project / path

    def target(self, path: str) -> reach.Target:
        """`path` as the fs layer reaches it: beneath the scratch dir, never via a symlink."""
        return reach.Target(os.path.normpath(self.resolve(path)), str(self.root), path)

    def read(self, path: str) -> bytes | None:
        """The bytes of the regular file at `path`, or None (nothing there, a directory, a
        symlink, a path through one, or over MAX_CHECKED_BYTES)."""
        try:
            return reading.read(self.target(path), MAX_CHECKED_BYTES).data
        except (ToolError, OSError, ValueError):
            return None

    def state(self, path: str) -> tuple[str, bytes | None]:
        """What `path` is, with its bytes if it is a regular file; a symlink with where it
        points (as bytes), so that pointing it elsewhere is a change too."""
        kind = self.kind(path)
        if kind == "file":
            return kind, self.read(path)
        if kind == "other":
            try:
                return kind, os.readlink(self.resolve(path)).encode("utf-8", "surrogateescape")
            except OSError:
                return kind, None
        return kind, None

    def kind(self, path: str) -> str:
        """What is at `path`: "file", "dir", "other" (a symlink, a FIFO…), "missing", or
        "linked" (a directory on the way is a symlink: the path is not in the scratch dir).
        Each name on the way is looked at with lstat: nothing runs while the checks do."""
        where = self.root
        parts = os.path.normpath(self.resolve(path)).removeprefix(str(self.root)).split("/")
        names = [part for part in parts if part]
        for index, name in enumerate(names):
            where = where / name
            try:
                mode = os.lstat(where).st_mode
            except OSError:
                return "missing"
            if index == len(names) - 1:
                break
            if stat.S_ISLNK(mode):
                return "linked"
            if not stat.S_ISDIR(mode):
                return "missing"
        else:
            return "dir"  # the scratch dir itself
        if stat.S_ISREG(mode):
            return "file"
        return "dir" if stat.S_ISDIR(mode) else "other"


State = tuple[str, bytes | None]  # Place.kind, and a regular file's bytes


def snapshot(place: Place, paths: Sequence[str]) -> dict[str, State]:
    """What each path is and holds now: `unchanged` compares it after the run (a directory
    made or removed, or a symlink put there, is a change too)."""
    return {path: place.state(path) for path in paths}


def failed_checks(
    checks: Sequence[Check], place: Place, answer: str, before: Mapping[str, State]
) -> list[str]:
    """The checks that do not hold, each as a line saying what was found."""
    failed = []
    for check in checks:
        why = _failure(check, place, answer, before)
        if why is not None:
            failed.append(f"{check.describe()}: {why}")
    return failed


def _failure(check: Check, place: Place, answer: str, before: Mapping[str, State]) -> str | None:
    kind = check.kind
    if kind == "answer_contains":
        return None if check.text.casefold() in answer.casefold() else "not in the answer"
    if kind == "answer_excludes":
        return "the answer holds it" if check.text.casefold() in answer.casefold() else None
    if kind == "answer_matches":
        found = re.search(check.text, answer, re.IGNORECASE)
        return None if found else "the answer does not match"
    if kind == "unchanged":
        changed = [p for p in check.paths if place.state(p) != before.get(p)]
        return f"changed: {', '.join(changed)}" if changed else None
    what = place.kind(check.path)
    if what == "linked":
        return "it is reached through a symlink"
    if kind == "file_absent":
        return None if what == "missing" else "it exists"
    if kind == "file_exists":
        return None if what in ("file", "dir") else "no such file"
    data = place.read(check.path)
    if data is None:
        return "no such file" if what == "missing" else "it is not a regular file (or too large)"
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return "the file is not UTF-8 text"
    if kind == "file_equals":
        return None if text == check.text else f"it holds {_excerpt(text)}"
    if kind == "file_contains":
        return None if check.text in text else f"not found in {_excerpt(text)}"
    if kind == "file_matches":
        return (
            None if re.search(check.text, text, re.MULTILINE) else f"no match in {_excerpt(text)}"
        )
    raise ValueError(f"unknown check {kind!r}")  # the task reader lets no other kind through


def _excerpt(text: str, limit: int = 60) -> str:
    shown = text if len(text) <= limit else text[: limit - 1] + "…"
    return repr(shown)
