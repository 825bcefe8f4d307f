"""What the agent changed, and how to take it back: a journal of changes with the previous
content of every overwritten file and a trash for every deleted one, in
`$XDG_STATE_HOME/metona-agent/changes/` (outside anything the model can write: the policy
blocks it). Bounded in size: the oldest backups go first, but never one taken by this store's
own session (this `agent run`, this `agent chat`): when the store cannot hold one more without
dropping one of those, it goes over its limit instead, and the agent asks a person before any
change that would need that (cli/tools/preflight.py).

    journal.jsonl      one JSON record per change, append-only; `{"void": ID}` says change
                       ID was recorded but never made (it failed, or its process died first)
    blobs/ID           the content a change replaced
    trash/ID/NAME      what a change deleted (a file, a link, or a whole tree)
    pending/MARKER     a write in flight: the temp file to remove if we die mid-way
    pending/M.change   a change in flight: how the next start tells whether it was made

Write-ahead (`committing`): a change is recorded, durably, before the step that makes it (a
rename), under the store's lock, which is held until that step is done: at every instant the
file is either unchanged, or changed and recorded. A change that fails is voided at once; one
whose process died mid-way is looked at by the next process to open the store (`_recover`),
which voids it if it was not made, and puts back what a half-done move displaced.

An undo is a change like any other, recorded with what it replaced: undoing it redoes. Read
together (`Timeline`), the journal is an editor's undo stack: each change of the agent's is
done or undone, repeated undos walk back through them, a redo re-applies the last undo, and a
new change by the agent clears what could be redone. Every change carries its `turn`: one
`Agent.run()` (one message in chat, one `agent run`), or one undo or redo, so that a turn is
taken back, and brought back, in one step.

Sizes are measured, and evicted backups removed, through directory fds at any depth, never
following a symlink and never entering another mount (cli/fs/trees.py): a bind mount that
ended up in the trash is someone's data, not ours to count or empty.

Here: the store (`ChangeStore`: recording, the lock, eviction) and the hooks the file
operations call (`Backup`, `Commit`). Its parts, each a base of ChangeStore or data it keeps:
cli/journal/records.py (a record, and a journal line read back as one), backups.py (blobs and
trash slots), index.py (appending to the journal and reading it back), recovery.py (changes and
writes in flight, and what a dead process left) and timeline.py (the journal as an undo stack).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path

from cli.fs import _platform
from cli.journal.backups import _unlink
from cli.journal.index import _Index
from cli.journal.records import Change, Check, sha256
from cli.journal.recovery import InFlight
from cli.journal.timeline import new_step


@dataclass
class ChangeStore(InFlight):
    """The journal and its backups. Every method takes the store's lock, so two agents in
    the same home keep one consistent journal."""

    root: Path
    max_bytes: int = 256 * 1024 * 1024
    # Whose backups eviction must leave alone: the changes recorded with this session. Empty:
    # a new one, so each store (one per `agent run`, `agent chat`, `agent undo`) is its own.
    session: str = ""
    # The name people know this session by (a chat's saved name; it changes with /load and
    # /save), recorded with each change as its `session_name`.
    name: str = ""
    clock: Callable[[], float] = time.time
    # The agent's turn in progress (`new_turn`): recorded with each change that sets none.
    turn: str = ""
    _next: int = field(default=0, init=False)
    # What the journal said when last read: each read parses only what was appended since.
    _index: _Index | None = field(default=None, init=False, repr=False)
    # A session made here has no change before this process started: the journal's summary
    # (journal.index) then says all a write needs, without reading the journal.
    _fresh: bool = field(default=False, init=False, repr=False)
    _recovered: bool = field(default=False, init=False, repr=False)

    def __post_init__(self) -> None:
        if not self.session:
            self.session = f"{os.getpid()}-{os.urandom(4).hex()}"
            self._fresh = True

    # -- recording ------------------------------------------------------------------------

    def record(self, change: Change) -> Change:
        """Append `change` with its id and time filled in, for a change already made (one
        that cannot fail half-way: see `committing` for the rest); drop old backups if over
        size (never this session's: see `_evict`)."""
        with self._locked():
            change = self._stamped(change)
            self._append(change)
            self._evict()
            self._save_summary()
            return change

    @contextlib.contextmanager
    def committing(self, change: Change, check: Check) -> Iterator[Change]:
        """Write-ahead: record `change` durably, then run the body (the step that makes it,
        and the last look before it), under the store's lock: two agents cannot interleave
        their last look and rename. If the body raises, the record is voided; if this process
        dies inside, a marker tells the next one (`_recover`). Raises Unrecorded, before
        anything is done, when the record cannot be written (a full disk)."""
        with self._locked():
            change = self._stamped(change)
            marker = self._mark(change, check)
            try:
                self._append(change)
            except BaseException:
                _unlink(marker)
                raise
            try:
                yield change
            except Exception:
                # The body raises before its rename (a conflict, a full disk): not made.
                if self._void(change):
                    _unlink(marker)  # else the next start tries again
                raise
            except BaseException:
                # A Ctrl-C may land just after the rename: the file says whether it was.
                if check.made() or self._void(change):
                    _unlink(marker)
                raise
            _unlink(marker)
            self._evict()
            self._save_summary()

    def _stamped(self, change: Change) -> Change:
        """`change` with its id (one more than the journal's last, as the index and the
        journal's own last lines say), time, session, turn and backup size. Under the lock."""
        number = max(self._indexed().last_id, self._last_id_written()) + 1
        stamp = datetime.fromtimestamp(self.clock(), timezone.utc).isoformat(timespec="seconds")
        change = replace(
            change,
            id=number,
            time=stamp,
            session=change.session or self.session,
            session_name=change.session_name or self.name,
            turn=change.turn or self.turn,
        )
        if change.backup is not None and change.kept is None:
            change = replace(change, kept=self._size(change.backup))
        return change

    def new_turn(self) -> str:
        """Start a turn (Agent.run does, for each message): the changes recorded until the
        next one carry its id."""
        self.turn = new_step("turn")
        return self.turn

    @contextlib.contextmanager
    def as_turn(self, turn: str) -> Iterator[None]:
        """Record the changes made inside as step `turn` (one undo or redo), then go back to
        the agent's turn."""
        agents, self.turn = self.turn, turn
        try:
            yield
        finally:
            self.turn = agents

    def room(self) -> int:
        """How many more bytes of backups the store holds without dropping one of this
        session's (negative once a person let it go over the limit): older sessions'
        backups do not count, eviction drops them first."""
        with self._locked():
            own = self._indexed().own
        return self.max_bytes - own

    # -- reading --------------------------------------------------------------------------

    def history(self) -> list[Change]:
        """Every change, oldest first."""
        with self._locked():
            return self._read()

    def get(self, number: int) -> Change | None:
        return next((c for c in self.history() if c.id == number), None)

    def changes_of_turn(self, turn: str) -> list[Change]:
        """What the agent changed in turn `turn` (oldest first; its undos are not among them):
        chat's list of turns shows these as the files each one changed."""
        return [c for c in self.history() if turn and c.turn == turn and c.tool != "undo"]

    # -- internals ------------------------------------------------------------------------

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(self.root / ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            _platform.lock_exclusive(fd)
            if not self._recovered:
                self._recovered = True
                self._recover()
            yield
        finally:
            os.close(fd)

    def _evict(self) -> None:
        """Drop the oldest backups until the store fits in `max_bytes`, never one of this
        session's: a change this run or chat made stays undoable while it runs (the agent
        asks a person before a change that takes the store over, cli/tools/preflight.py).
        The journal's running total says whether anything must go: nothing is measured."""
        if self._indexed().total <= self.max_bytes:
            return
        index = self._indexed(complete=True)
        for change in list(index.changes.values()):
            if index.total <= self.max_bytes:
                break
            if not change.backup or change.evicted or self._protected(change):
                continue
            with contextlib.suppress(OSError, ValueError):
                self._drop(change.backup)
            self._append({"evict": change.id})
            index = self._indexed()  # reads the eviction back: the total goes down


class Backup:
    """writing.write's `backup` callback: stores the old content in `store` just before it is
    replaced, and remembers where (`name`; None if the write kept nothing)."""

    def __init__(self, store: ChangeStore) -> None:
        self.store = store
        self.name: str | None = None
        self.sha256: str | None = None  # of what was kept

    def __call__(self, old: bytes, _mode: int) -> None:
        self.name = self.store.keep(old)
        self.sha256 = sha256(old)


class Commit:
    """The file operations' `commit` hook (cli/fs/writing.py): records the change `make`
    builds from the entry it acts on (and the bytes its old content is kept in, None if not
    kept) before the step that makes it (ChangeStore.committing), and remembers what it
    recorded (`change`; None until then)."""

    def __init__(
        self,
        store: ChangeStore,
        make: Callable[[os.stat_result | None, int | None], tuple[Change, Check]],
    ) -> None:
        self.store = store
        self.make = make
        self.change: Change | None = None

    @contextlib.contextmanager
    def __call__(self, entry: os.stat_result | None, kept: int | None) -> Iterator[None]:
        change, check = self.make(entry, kept)
        with self.store.committing(change, check) as recorded:
            self.change = recorded
            yield
