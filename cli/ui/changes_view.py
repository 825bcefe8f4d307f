"""`agent history`, `agent undo` and `/undo`: the change journal as lines, and the one undo
conversation both front ends have (show what happens, ask only on a conflict)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from cli.changes import Change, ChangeStore
from cli.paths import display_path, resolve_path
from cli.policy import Policy
from cli.tools.fsops import human_size
from cli.ui.text import sanitize
from cli.undo import UndoError, apply, plan


def history_rows(changes: Sequence[Change], cwd: str) -> list[str]:
    """One line a change, oldest first: id, time (UTC), tool, action, path, size, notes."""
    undone = {c.undoes for c in changes if c.undoes}
    rows = []
    for change in changes:
        notes = []
        if change.undoes:
            notes.append(f"undoes #{change.undoes}")
        if change.id in undone:
            notes.append("undone")
        if change.evicted:
            notes.append("cannot be undone: its backup was dropped for space by a later session")
        elif not change.undoable:
            notes.append("cannot be undone: no backup kept")
        size = human_size(change.size) if change.action in ("create", "overwrite") else ""
        path = sanitize(display_path(change.path, cwd))
        rows.append(
            f"#{change.id:<4} {change.time[:19].replace('T', ' ')}  {change.tool:<16} "
            f"{change.action:<9} {path}  {size}" + (f"  ({'; '.join(notes)})" if notes else "")
        )
    return rows


def undo_flow(
    store: ChangeStore,
    number: int | None,
    *,
    cwd: str,
    say: Callable[[str], None],
    ask: Callable[[str], bool] | None,
    policy: Policy | None = None,
) -> Change:
    """Undo change `number` (the last one when None), telling the user what happens. A
    conflict (the file changed since) is put to `ask`; with no one to ask (`--yes`, no
    terminal) it is refused: restoring never silently overwrites someone's edit.

    The journal is ours, but a sandbox that cannot hide it (Landlock, with the home dir
    allowed) could let a command rewrite it; so the path is held to today's policy too:
    never a blocked or secret path, and a protected one only after a person says yes."""
    undo = plan(store, number, lambda path: sanitize(display_path(path, cwd)))
    say(f"undo #{undo.change.id}: {undo.summary}")
    if policy is not None:
        _check_path(policy, undo.change.path, ask)
    overwrite = False
    if undo.conflict:
        if ask is None:
            raise UndoError(
                f"{undo.conflict}; not undone. Run `agent undo {undo.change.id}` in a "
                "terminal to confirm overwriting it"
            )
        overwrite = ask(f"{undo.conflict}. Undo anyway (what is there now is kept in the trash)?")
        if not overwrite:
            raise UndoError("not undone: you kept the current version")
    done = apply(store, undo, overwrite=overwrite)
    say(f"done, recorded as #{done.id}: `agent undo` again (or /undo) redoes it")
    return done


def _check_path(policy: Policy, path: str, ask: Callable[[str], bool] | None) -> None:
    """Blocked and secret paths are refused, protected ones asked, wherever they are (an
    undo is the user's own act, so the allowed dirs of today do not bound it)."""
    shown = sanitize(display_path(path, policy.cwd))
    if policy.hides(path):
        raise UndoError(f"not undone: {shown} is not a path the agent may change now")
    why = policy.protection(resolve_path(path, policy.cwd, policy.home), "write_file")
    if why and (ask is None or not ask(f"{shown} is {why}. Undo anyway?")):
        raise UndoError(f"not undone: {shown} needs your confirmation ({why})")
