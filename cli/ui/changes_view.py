"""`agent history`, `agent undo`, `agent redo`, `/undo` and `/redo`: the change journal as
lines, and the one undo conversation both front ends have (show what happens, ask only on a
conflict, once; say what each file is now, and as of when)."""

from __future__ import annotations

import difflib
import os
import stat
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from cli.errors import ToolError
from cli.fs import reading
from cli.fs.paths import display_path, resolve_path
from cli.journal.changes import ChangeStore
from cli.journal.records import Change
from cli.journal.timeline import Timeline, new_step
from cli.journal.undo import Step, UndoError, apply, choose, plan_change, precheck
from cli.safety.policy import Policy
from cli.ui.text import sanitize
from cli.units import human_size


def history_rows(changes: Sequence[Change], cwd: str) -> list[str]:
    """One line a change, oldest first: id, time (UTC), tool, action, path, size, notes."""
    line = Timeline(changes)
    rows = []
    for change in changes:
        notes = []
        # Undos and redos are named by the agent's change they take back or bring back: an
        # undo of an undo is a redo, and called one.
        inverts = not line.is_original(change) and line.depth[change.id] > 0
        redo = inverts and line.depth[change.id] % 2 == 0
        tool = "redo" if redo else change.tool
        if inverts:
            notes.append(f"{'redoes' if redo else 'undoes'} #{line.original(change).id}")
        elif change.undoes:
            notes.append(f"undoes #{change.undoes}")
        if line.is_original(change) and line.tip(change) is not change:
            tip = line.tip(change)
            notes.append(f"{'undone' if line.is_undone(change) else 'redone'} by #{tip.id}")
        elif not line.is_original(change) and change.id in line.undone_by:
            by = line.undone_by[change.id]
            notes.append(f"{'redone' if line.depth[by] % 2 == 0 else 'undone'} by #{by}")
        if change.evicted:
            notes.append("cannot be undone: its backup was dropped for space by a later session")
        elif not change.undoable:
            notes.append("cannot be undone: no backup kept")
        size = human_size(change.size) if change.action in ("create", "overwrite") else ""
        path = sanitize(display_path(change.path, cwd))
        rows.append(
            f"#{change.id:<4} {change.time[:19].replace('T', ' ')}  {tool:<16} "
            f"{change.action:<9} {path}  {size}" + (f"  ({'; '.join(notes)})" if notes else "")
        )
    return rows


def turn_files(store: ChangeStore, turn: str, cwd: str) -> list[str]:
    """The files and directories turn `turn` changed, as chat's list of turns shows them
    (each once, in the order first changed; "a → b" for a move)."""
    shown = [
        _shown(c.origin, cwd) + " → " + _shown(c.path, cwd) if c.origin else _shown(c.path, cwd)
        for c in store.changes_of_turn(turn)
    ]
    return list(dict.fromkeys(shown))


def undo_flow(
    store: ChangeStore,
    number: int | None,
    *,
    cwd: str,
    say: Callable[[str], None],
    ask: Callable[[str], bool] | None,
    policy: Policy | None = None,
    turn: bool = False,
    everywhere: bool = False,
    redo: bool = False,
    chat: bool = False,
) -> list[Change]:
    """Undo the newest change not undone under `cwd` (anywhere with `everywhere`), change
    `number`, the whole turn of either (`turn`), or redo the last undo (`redo`); tell the
    user what happens, and what each record done is. A conflict (a file changed since) is
    put to `ask`, once, before anything is done; with no one to ask (`--yes`, no terminal)
    it is refused: restoring never silently overwrites someone's edit.

    The journal is ours, but a sandbox that cannot hide it (Landlock, with the home dir
    allowed) could let a command rewrite it; so every path an undo writes (both ends of a
    move) is held to today's policy too: never a blocked or secret path, and a protected
    one only after a person says yes."""

    def shown(path: str) -> str:
        return _shown(path, cwd)

    scope = None if everywhere or number is not None else os.path.realpath(cwd)
    step = choose(store, number, turn=turn, redo=redo, scope=scope, shown=sanitize)
    plans = precheck(store, step, shown)
    if policy is not None:
        for change in step.changes:
            for path in (change.path, change.origin):
                if path:
                    _check_path(policy, path, ask)
            if change.action == "move" and change.origin:
                _check_tree(policy, change.path, change.origin, ask)
    conflicts = [p for p in plans if p.conflict]
    overwrite = False
    if conflicts:
        what = "; ".join(str(p.conflict) for p in conflicts)
        if ask is None:
            again = _command(step, number, everywhere)
            raise UndoError(
                f"{what}; not {step.kind}ne. Run `{again}` in a terminal to confirm overwriting it"
            )
        verb = "Redo" if step.kind == "redo" else "Undo"
        overwrite = ask(f"{what}. {verb} anyway (what is there now is kept in the trash)?")
        if not overwrite:
            raise UndoError(f"not {step.kind}ne: you kept the current version")
    return _carry_out(store, step, {p.change.id for p in conflicts}, shown, say, chat)


def _carry_out(
    store: ChangeStore,
    step: Step,
    confirmed: set[int],
    shown: Callable[[str], str],
    say: Callable[[str], None],
    chat: bool = False,
) -> list[Change]:
    """Invert each record of `step` in order, as one step of the journal, looking again just
    before each; stop at the first that cannot be (what is done stays done, and recorded).
    One line a file: what it is now, and as of when; one record says how to take the step
    back on the same line, several on one line after theirs."""
    name = new_step(step.kind)
    done: list[Change] = []
    single = len(step.changes) == 1
    for change, original, redoes in zip(step.changes, step.originals, step.redoes, strict=True):
        try:
            plan = plan_change(store, change, shown)
            done.append(apply(store, plan, overwrite=change.id in confirmed, step=name))
        except UndoError as exc:
            if not done:
                raise
            raise UndoError(
                f"{exc}; stopped after {len(done)} of the {len(step.changes)} changes "
                "(`agent history` shows which)"
            ) from None
        outcome = _outcome(original, redoes, shown, _from(store, original, chat))
        if single:
            outcome += f" · #{done[0].id}: {_back(step.kind, chat, 'it')}"
        say(outcome)
    if not single:
        what = f"{len(done)} changes" + (" of a turn" if step.turn else "")
        verb = "redid" if step.kind == "redo" else "undid"
        say(f"{verb} {what} · #{done[0].id}-#{done[-1].id}: {_back(step.kind, chat, 'them')}")
    return done


def _back(kind: str, chat: bool, it: str) -> str:
    """How to take an undo (or a redo) back, in the words of the front end it ran in."""
    if kind == "redo":
        return f"{'/undo' if chat else '`agent undo`'} takes {it} back"
    return f"{'/redo' if chat else '`agent redo`'} brings {it} back"


def _from(store: ChangeStore, original: Change, chat: bool) -> str:
    """In chat, which session `original` came from when not this one: its name where it was
    recorded (a chat's saved name, a run's `run-<time>`), else "an earlier session" (one
    recorded before names were). "" for this chat's own changes, and for `agent undo`, whose
    changes are all another session's."""
    if not chat or original.session == store.session:
        return ""
    if original.session_name:
        return f"session {sanitize(original.session_name)}"
    return "an earlier session"


def _outcome(original: Change, redone: bool, shown: Callable[[str], str], session: str = "") -> str:
    """What an undo (or a redo) made of `original`'s path, and as of when (and in which
    session, if another)."""
    when = f"{original.tool}, {original.time[:16].replace('T', ' ')} UTC"
    if session:
        when += f", from {session}"
    before = f"change #{original.id} ({when})"
    path = shown(original.path)
    if redone:
        return f"redid {before}: {path} is as that change left it"
    if original.action == "create":
        return f"{path} did not exist before {before}: moved it to the trash"
    if original.action == "mkdir":
        return f"{path} did not exist before {before}: removed it"
    if original.action == "move":
        return f"moved {path} back to {shown(original.origin or '')}, as before {before}"
    return f"restored {path} as it was before {before}"


def _command(step: Step, number: int | None, everywhere: bool) -> str:
    """The command that does this step again, to confirm it on a terminal."""
    if step.kind == "redo":
        return "agent redo" + (" --all" if everywhere else "")
    words = ["agent undo"]
    if number is not None:
        words.append(str(number))
    if step.turn:
        words.append("--turn")
    if everywhere:
        words.append("--all")
    return " ".join(words)


def _shown(path: str, cwd: str) -> str:
    return sanitize(display_path(path, cwd))


def _check_tree(policy: Policy, here: str, back: str, ask: Callable[[str], bool] | None) -> None:
    """A directory moved back carries its tree along, as the move did: what is in it now is
    looked at as it is and as it would be named after, as move_file looks before a move."""
    from cli.tools.base import ToolContext
    from cli.tools.moves import boundary

    crossing = boundary(here, back, policy.hides, policy.configures, ToolContext(cwd=policy.cwd))
    if crossing.refusal:
        raise UndoError(f"not undone: {crossing.refusal}")
    if crossing.caution and (ask is None or not ask(f"{crossing.caution}. Undo anyway?")):
        raise UndoError(f"not undone: {crossing.caution}")


def _check_path(policy: Policy, path: str, ask: Callable[[str], bool] | None) -> None:
    """Blocked and secret paths are refused, protected ones asked, wherever they are (an
    undo is the user's own act, so the allowed dirs of today do not bound it)."""
    shown = sanitize(display_path(path, policy.cwd))
    if policy.hides(path):
        raise UndoError(f"not undone: {shown} is not a path the agent may change now")
    why = policy.protection(resolve_path(path, policy.cwd, policy.home), "write_file")
    if why and (ask is None or not ask(f"{shown} is {why}. Undo anyway?")):
        raise UndoError(f"not undone: {shown} needs your confirmation ({why})")


# -- /diff: what a session changed, as one unified diff -----------------------------------------

DIFF_BYTES = 1024 * 1024  # a file larger than this, before or now, is named, not diffed
_DIRECTORY = "directory"


@dataclass(frozen=True)
class _Unknown:
    why: str


# What a path held at some moment: nothing (None), a file's bytes, a directory, or unknown.
_Held = bytes | str | _Unknown | None


def session_diff(store: ChangeStore, session: str, cwd: str, only: str | None = None) -> list[str]:
    """The changes session `session` made, undos included, as one unified diff: for each
    path, the content before the session's first change to it against the content now (so
    what was changed and undone again shows nothing). `only`: that path, or what is under
    it. Lines without their newline; file headers `--- a/PATH` and `+++ b/PATH`."""
    changes = [c for c in store.history() if c.session == session]
    paths: list[str] = []
    for change in changes:
        for path in (change.origin, change.path):
            if path and path not in paths and (only is None or _under(path, only)):
                paths.append(path)
    lines: list[str] = []
    for path in paths:
        first = next(i for i, c in enumerate(changes) if _touches(c, path))
        before = _held_before(store, changes, first, path)
        lines += _file_diff(_shown(path, cwd), before, _now(path))
    return lines


def _under(path: str, only: str) -> bool:
    return path == only or path.startswith(only.rstrip("/") + "/")


def _held_before(store: ChangeStore, changes: Sequence[Change], i: int, path: str) -> _Held:
    """What `path` held just before changes[i], which touches it, was made."""
    change = changes[i]
    if change.action == "move" and change.origin == path and change.path != path:
        # What left `path` is what arrived at the destination, as the next change there
        # (or the destination now) has it.
        later = next(
            (j for j in range(i + 1, len(changes)) if _touches(changes[j], change.path)),
            None,
        )
        if later is None:
            return _now(change.path)
        return _held_before(store, changes, later, change.path)
    if change.action in ("create", "mkdir", "restore"):
        return None
    if change.action == "rmdir":
        return _DIRECTORY
    if change.action == "move":  # arriving: what it replaced went to the trash, if anything
        return _backup(store, change) if change.backup else None
    return _backup(store, change)  # overwrite, delete


def _touches(change: Change, path: str) -> bool:
    return path in (change.path, change.origin)


def _backup(store: ChangeStore, change: Change) -> _Held:
    if change.evicted or change.backup is None:
        return _Unknown("its backup was not kept")
    try:
        return _read(str(store.backup_path(change)))
    except ValueError:
        return _Unknown("its backup is not one of the store's")


def _now(path: str) -> _Held:
    return _read(path)


def _read(path: str) -> _Held:
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return _Unknown(exc.strerror or str(exc))
    if stat.S_ISDIR(info.st_mode):
        return _DIRECTORY
    if not stat.S_ISREG(info.st_mode):
        return _Unknown("it is not a regular file")
    if info.st_size > DIFF_BYTES:
        return _Unknown(f"it is {human_size(info.st_size)}, more than a diff shows")
    try:
        return reading.read_regular(path, path, DIFF_BYTES).data
    except (ToolError, OSError) as exc:
        return _Unknown(str(exc))


def _file_diff(shown: str, before: _Held, after: _Held) -> list[str]:
    if before == after:
        return []
    old, new = f"a/{shown}", f"b/{shown}"
    for held in (before, after):
        if isinstance(held, _Unknown):
            return [f"--- {old}", f"+++ {new}", f"# not shown: {held.why}"]
    if _DIRECTORY in (before, after):
        if before == _DIRECTORY and after == _DIRECTORY:
            return []
        if after == _DIRECTORY:  # a file (or nothing) before: its lines go, then the directory
            gone = _file_diff(shown, before, None) if before is not None else []
            return [*gone, f"# created the directory {shown}"]
        made = _file_diff(shown, None, after) if after is not None else []
        return [f"# removed the directory {shown}", *made]
    assert not isinstance(before, (str, _Unknown)) and not isinstance(after, (str, _Unknown))
    if reading.is_binary(before or b"") or reading.is_binary(after or b""):
        return [f"Binary files {old} and {new} differ"]
    try:
        old_text, new_text = (before or b"").decode(), (after or b"").decode()
    except UnicodeDecodeError:
        return [f"Binary files {old} and {new} differ (not UTF-8)"]
    diff = difflib.unified_diff(
        _lines(old_text),
        _lines(new_text),
        "/dev/null" if before is None else old,
        "/dev/null" if after is None else new,
    )
    lines = []
    for line in diff:
        lines.append(line.removesuffix("\n").removesuffix("\r"))
        if not line.endswith("\n"):
            lines.append("\\ No newline at end of file")
    return lines


def _lines(text: str) -> list[str]:
    """Lines with their "\n" kept; only "\n" splits (a form feed is no line break here)."""
    rows = [row + "\n" for row in text.split("\n")]
    rows[-1] = rows[-1].removesuffix("\n")
    return rows if rows[-1] else rows[:-1]
