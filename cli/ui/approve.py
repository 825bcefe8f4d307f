"""The confirmation `agent chat` asks when the policy says "ask": the card that shows exactly
what the call will do (`approval_card.py`), then one key — y yes, n no (with an optional
reason), a yes for the rest of the session, q stop this turn. The yeses for the rest of the
session are remembered here, per tool and per directory.
"""

from __future__ import annotations

import os
import time

from rich.cells import cell_len
from rich.console import Console
from rich.text import Text

from cli.fs.paths import display_path
from cli.loop.approval import Approval, ApprovalRequest
from cli.loop.guards import StepLimitAnswer
from cli.ui.approval_card import Consequences, card
from cli.ui.keys import KeyReader
from cli.ui.layout import Hanging, pack
from cli.ui.text import sanitize

# Each delete and each command is looked at on its own: never "yes to all" for these.
NEVER_ALWAYS = frozenset({"delete_file", "run_command"})
# What "d" (every change under a directory) covers: the changes a card shows as a diff or a
# path, never a delete or a command.
CHANGE_TOOLS = frozenset({"write_file", "edit_file", "create_directory", "move_file"})


class ChatApprover:
    """Asks on the chat terminal; remembers "a" answers per tool, and "d" answers per
    directory (every change under it, whichever tool makes it), until `forget`."""

    def __init__(
        self,
        console: Console,
        keys: KeyReader,
        *,
        cwd: str,
        consequences: Consequences | None = None,
        bell: bool = False,
    ) -> None:
        self.console = console
        self.keys = keys
        self.cwd = os.path.realpath(cwd)  # the policy's paths are real paths too
        self.consequences = consequences or Consequences()
        self.bell = bell  # agent.bell: ring when a question waits (a slow model, a person away)
        self.waited = 0.0  # seconds spent waiting for the person's answers, in all
        self.always: set[str] = set()
        self.dirs: list[str] = []  # real paths: every change under them is a yes

    def forget(self) -> None:
        self.always.clear()
        self.dirs.clear()

    def covers(self, request: ApprovalRequest) -> bool:
        """A change whose every path lies under a directory answered "d" for."""
        paths = [t.real for t in request.decision.paths.values()]
        return bool(paths) and all(any(_under(p, d) for d in self.dirs) for p in paths)

    def __call__(self, request: ApprovalRequest) -> Approval:
        # An MCP tool by the name its server listed it by: a yes for it never passes to
        # another tool the server later lists under a name that becomes ours for this one.
        name = request.decision.mcp_name or request.call.name
        # An "a" covers the tool's ordinary asks only: deletes and commands are never
        # covered, nor what no standing yes may cover (a read outside, a protected file).
        session_ok = name not in NEVER_ALWAYS and request.decision.standing_yes_ok
        if session_ok and name in self.always:
            return Approval(True, by="session")
        scope = change_scope(request) if session_ok and name in CHANGE_TOOLS else None
        if scope is not None and self.covers(request):
            return Approval(True, by="session")
        shown = card(request, self.cwd, self.console.encoding, self.consequences)
        self.console.print(Hanging(shown))  # a long line goes on indented, inside the card
        choices = "yn" + ("a" if session_ok else "") + ("d" if scope else "") + "q"
        where = _scope_name(scope, self.cwd) if scope else ""
        asked = question(request.call.name, choices, self.console.width, where=where)
        key = self._read_key(asked, choices)
        return self._answer(name, key if key in choices else "n", scope)

    def _read_key(self, prompt: str, choices: str) -> str:
        """The person's key, after the bell (agent.bell); the time it took is counted."""
        ring(self.console, self.bell)
        started = time.monotonic()
        try:
            return self.keys.read_key(prompt, choices)
        finally:
            self.waited += time.monotonic() - started

    def step_limit(self, steps: int, more: int) -> StepLimitAnswer:
        """The model is still calling tools at the step limit: go on, sum up, or stop."""
        self.console.print(
            Text(
                f"step limit: the model is still calling tools after {steps} model calls",
                "yellow",
            )
        )
        key = self._read_key(f"[c] continue {more} more steps  [w] wrap up  [s] stop  ", "cws")
        if key == "c":
            return StepLimitAnswer("continue", more)
        if key == "w":
            return StepLimitAnswer("wrap")
        return StepLimitAnswer("stop")  # s, Ctrl-C or Ctrl-D

    def _answer(self, name: str, key: str, scope: str | None = None) -> Approval:
        if key == "y":
            self.console.print(Text("✔ approved", "green"))
            return Approval(True, by="user")
        if key == "d" and scope:
            self.dirs.append(scope)
            note = (
                f"✔ approved; every change under {_scope_name(scope, self.cwd)} is made without "
                "asking for the rest of this session (deletes and commands still ask)"
            )
            self.console.print(Text(note, "green"))
            return Approval(True, by="user")
        if key == "a":
            self.always.add(name)
            note = f"✔ approved; {name} runs without asking for the rest of this session"
            self.console.print(Text(note, "green"))
            return Approval(True, by="user")
        if key == "q":
            self.console.print(Text("⏹ stopped this turn", "grey50"))
            return Approval(False, by="user", reason="the user stopped this turn", stop_turn=True)
        started = time.monotonic()
        reason = self.keys.read_line("reason (optional): ").strip()
        self.waited += time.monotonic() - started
        self.console.print(Text("✖ declined" + (f": {sanitize(reason)}" if reason else ""), "red"))
        return Approval(
            False,
            by="user",
            reason=f"the user declined: {reason}" if reason else "the user declined",
        )


def ring(console: Console, bell: bool) -> None:
    """The terminal bell, written as it is (rich would keep a BEL out of what it prints)."""
    if bell and console.is_terminal:
        console.file.write("\a")
        console.file.flush()


def change_scope(request: ApprovalRequest) -> str | None:
    """The directory a "d" answer covers for this change: the one its path is in (for a
    move, the nearest directory holding both ends); None when it has no path."""
    parents = [os.path.dirname(t.real) for t in request.decision.paths.values()]
    if not parents:
        return None
    try:
        return os.path.commonpath(parents)
    except ValueError:
        return None


def _under(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory.rstrip(os.sep) + os.sep)


def _scope_name(scope: str, cwd: str) -> str:
    """How the question and the notes name a "d" scope."""
    if scope == cwd:
        return "this directory"
    return sanitize(display_path(scope, cwd)).rstrip("/") + "/"


def question(tool: str, choices: str, width: int | None = None, *, where: str = "") -> str:
    """The question under the card, listing only the keys that are offered: one line, or
    where `width` cells do not hold it, the short keys first and the rest on lines indented
    under them (shorter labels only where a full one would not fit). Every offered key is
    always shown: a key cut off at the edge would be a choice nobody sees. `where` names
    the directory the "d" key covers."""
    tool = sanitize(tool)
    where = where or "this directory"
    labels = {
        "y": ["[y] yes"],
        "n": ["[n] no"],
        "a": [f"[a] yes to every {tool} this session", f"[a] every {tool}", "[a] always"],
        "d": [
            f"[d] yes to every change under {where} this session",
            f"[d] every change under {where}",
            f"[d] all under {where}",
            "[d] this dir",
        ],
        "q": ["[q] stop this turn", "[q] stop"],
    }
    lead = "allow?  "
    line = lead + "  ".join(labels[c][0] for c in choices) + "  "
    if width is None or cell_len(line) < width:
        return line
    room = width - 3  # the two spaces after the last key, and the cursor's cell
    fit = room - len(lead)
    order = [c for c in choices if c not in "ad"] + [c for c in choices if c in "ad"]
    items = [next((t for t in labels[c] if cell_len(t) <= fit), labels[c][-1]) for c in order]
    return "\n".join(pack(items, room, lead=lead, indent=" " * len(lead))) + "  "
