"""The change journal read as an editor's undo stack (`Timeline`): which of the agent's
changes are done or undone now, what an undo takes back and a redo brings back, turn by turn;
pure, nothing on disk is looked at. And the ids of those steps (`new_step`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence

from cli.journal.records import Change


class Timeline:
    """The journal read as an editor's undo stack; pure, nothing on disk is looked at.

    Undoing the agent's change C is recorded as U (`undoes` C), redoing it as R (`undoes` U),
    undoing it again as U' (`undoes` R)…: C's chain, whose newest record is its `tip`. An odd
    number of steps from C to its tip: C is undone now. One undo or redo is one step: all the
    records it made carry its `turn` (a whole turn's undo is one step, so one redo)."""

    def __init__(self, changes: Sequence[Change]) -> None:
        self.changes = sorted(changes, key=lambda c: c.id)
        self._by_id = {c.id: c for c in self.changes}
        self._root: dict[int, int] = {}
        self.depth: dict[int, int] = {}  # steps from the chain's start: odd takes back
        self.undone_by: dict[int, int] = {}  # a record → the newest record that undoes it
        self._tip: dict[int, Change] = {}
        for change in self.changes:
            # Only an earlier record: a forged `undoes` cannot make a loop.
            parent = self._by_id.get(change.undoes) if change.undoes is not None else None
            if parent is None or parent.id >= change.id:
                self._root[change.id], self.depth[change.id] = change.id, 0
            else:
                self._root[change.id] = self._root[parent.id]
                self.depth[change.id] = self.depth[parent.id] + 1
                self.undone_by[parent.id] = change.id
            self._tip[self._root[change.id]] = change

    def get(self, number: int) -> Change | None:
        return self._by_id.get(number)

    def original(self, change: Change) -> Change:
        """The agent's change that `change` (an undo, a redo) is about; itself for one."""
        return self._by_id[self._root[change.id]]

    def is_original(self, change: Change) -> bool:
        return change.tool != "undo" and self._root[change.id] == change.id

    def tip(self, change: Change) -> Change:
        """The newest record of the chain `change` is in: what undoing it now inverts."""
        return self._tip[self._root[change.id]]

    def is_undone(self, change: Change) -> bool:
        return self.depth[self.tip(change).id] % 2 == 1

    def live(self, scope: str | None) -> list[Change]:
        """The agent's changes not undone now, within `scope` (None: anywhere), newest first."""
        return [
            c
            for c in reversed(self.changes)
            if self.is_original(c) and not self.is_undone(c) and within(c, scope)
        ]

    def elsewhere(self, scope: str | None) -> int:
        """How many of the agent's changes not undone now are outside `scope`."""
        return len(self.live(None)) - len(self.live(scope))

    def turn_of(self, change: Change, scope: str | None) -> list[Change]:
        """The changes of `change`'s turn not undone now, within `scope`, newest first."""
        if not change.turn:
            return [change]
        return [c for c in self.live(scope) if c.turn == change.turn]

    def next_redo(self, scope: str | None) -> list[Change]:
        """The records of the newest undo not redone yet, newest first (a redo undoes them),
        within `scope`; none once the agent changed something within it since (a new change
        clears the redo stack, as in an editor)."""
        mine = [c.id for c in self.changes if self.is_original(c) and within(c, scope)]
        latest = max(mine, default=0)
        steps: dict[str, list[Change]] = {}
        for change in self.changes:
            if change.tool == "undo":
                steps.setdefault(change.turn or f"#{change.id}", []).append(change)
        for records in sorted(steps.values(), key=lambda rs: rs[-1].id, reverse=True):
            takes_back = [r for r in records if r.undoes is not None]
            if records[0].id < latest or not takes_back:
                continue
            if any(self.depth[r.id] % 2 == 0 for r in takes_back):
                continue  # a redo: undoing it is an undo
            if not all(within(r, scope) for r in records):
                continue
            left = [r for r in records if r.id not in self.undone_by]  # a redo cut short
            if left:
                return left[::-1]
        return []


def within(change: Change, directory: str | None) -> bool:
    """Is every path `change` touches (both ends of a move) in `directory` (None: anywhere)?"""
    if directory is None:
        return True
    inside = directory.rstrip("/") + "/"
    return all(p == directory or p.startswith(inside) for p in (change.path, change.origin) if p)


def new_step(kind: str) -> str:
    """A new id for a turn, or for one undo or redo."""
    return f"{kind}-{int(time.time())}-{os.urandom(4).hex()}"
