"""The y/n question `agent run` asks on the terminal when the policy says "ask"."""

from __future__ import annotations

from typing import TextIO

from rich.console import Console

from cli.loop.approval import Approval, ApprovalRequest
from cli.ui.approval_card import Consequences, card
from cli.ui.approve import ring
from cli.ui.keys import read_fresh_line
from cli.ui.layout import Hanging


class LineApprover:
    """Shows the same card as `agent chat` (a diff for an overwrite, the tree of a recursive
    delete, the command and its cwd) on stderr, then reads one line from stdin, typed after
    the question is shown (what was typed before is discarded): `y` or `yes` approves;
    anything else, Enter and end-of-file included, declines."""

    def __init__(
        self,
        console: Console,
        stdin: TextIO,
        *,
        cwd: str,
        consequences: Consequences | None = None,
        bell: bool = False,
    ) -> None:
        self.console = console
        self.stdin = stdin
        self.cwd = cwd
        self.consequences = consequences or Consequences(undo="agent undo")
        self.bell = bell  # agent.bell

    def __call__(self, request: ApprovalRequest) -> Approval:
        shown = card(request, self.cwd, self.console.encoding, self.consequences)
        self.console.print(Hanging(shown))  # a long line goes on indented, inside the card
        self.console.print("Allow? [y/N] ", end="", markup=False)
        self.console.file.flush()
        ring(self.console, self.bell)
        answer = read_fresh_line(self.stdin).strip().lower()
        if answer in ("y", "yes"):
            return Approval(True, by="user")
        return Approval(False, by="user", reason="the user declined")
