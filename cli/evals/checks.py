"""Judging a task's end state and answer (pure but for reading the project's files).

Paths are as a task file writes them (cli/evals/tasks.py): relative to the project, `../name`
beside it, `~/name` in the task's home dir. A file check reads the file's bytes as UTF-8 (a
file that is not UTF-8 fails every text check); `unchanged` compares bytes with what the
path held when the model started (a path that held nothing must still hold nothing).
Answer checks ignore case: `answer_contains` and `answer_excludes` compare the answer and
the text case-folded, `answer_matches` searches with re.IGNORECASE.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from cli.evals.tasks import Check

MAX_CHECKED_BYTES = 16 * 1024 * 1024  # a file checked is read up to this; past it, it fails


@dataclass(frozen=True)
class Place:
    """Where a task runs: its project, the dir beside it (`../`) and its home dir (`~/`)."""

    project: Path
    home: Path

    def resolve(self, path: str) -> Path:
        if path.startswith("~/"):
            return self.home / path[2:]
        if path.startswith("../"):
            return self.project.parent / path[3:]
        return self.project / path


def snapshot(place: Place, paths: Sequence[str]) -> dict[str, bytes | None]:
    """What each path holds now (None: nothing, or not a regular file)."""
    return {path: _bytes(place.resolve(path)) for path in paths}


def failed_checks(
    checks: Sequence[Check], place: Place, answer: str, before: Mapping[str, bytes | None]
) -> list[str]:
    """The checks that do not hold, each as a line saying what was found."""
    failed = []
    for check in checks:
        why = _failure(check, place, answer, before)
        if why is not None:
            failed.append(f"{check.describe()}: {why}")
    return failed


def _failure(
    check: Check, place: Place, answer: str, before: Mapping[str, bytes | None]
) -> str | None:
    kind = check.kind
    if kind == "answer_contains":
        return None if check.text.casefold() in answer.casefold() else "not in the answer"
    if kind == "answer_excludes":
        return "the answer holds it" if check.text.casefold() in answer.casefold() else None
    if kind == "answer_matches":
        found = re.search(check.text, answer, re.IGNORECASE)
        return None if found else "the answer does not match"
    if kind == "unchanged":
        changed = [p for p in check.paths if _bytes(place.resolve(p)) != before.get(p)]
        return f"changed: {', '.join(changed)}" if changed else None
    target = place.resolve(check.path)
    if kind == "file_absent":
        return "it exists" if os.path.lexists(target) else None
    data = _bytes(target)
    if kind == "file_exists":
        return None if data is not None or target.is_dir() else "no such file"
    if data is None:
        return "no such file"
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


def _bytes(path: Path) -> bytes | None:
    """The bytes of a regular file (a symlink is not followed), or None."""
    try:
        if not path.is_file() or path.is_symlink():
            return None
        with path.open("rb") as handle:
            data = handle.read(MAX_CHECKED_BYTES + 1)
    except OSError:
        return None
    return data if len(data) <= MAX_CHECKED_BYTES else None


def _excerpt(text: str, limit: int = 60) -> str:
    shown = text if len(text) <= limit else text[: limit - 1] + "…"
    return repr(shown)
