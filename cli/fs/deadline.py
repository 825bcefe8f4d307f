"""When one tool call must stop (Deadline), and the failure it raises then (DeadlineExceeded):
checked at safe points by the tools and by the walks and operations of cli/fs."""

from __future__ import annotations

import math
from collections.abc import Callable

from cli.errors import ToolError


class DeadlineExceeded(ToolError):
    """A call ran past its Deadline and was stopped at a safe point, before changing
    anything."""

    def __init__(self, deadline: Deadline) -> None:
        name = deadline.tool or "the tool call"
        super().__init__(
            f"{name} took longer than policy.limits.tool_seconds ({deadline.seconds:g} s) and "
            "was stopped; nothing was changed",
            hint=_DEADLINE_HINTS.get(deadline.tool, "ask for less at a time"),
        )
        self.deadline = deadline


# What the model is told to do when a call of this tool ran out of time.
_DEADLINE_HINTS = {
    "edit_file": "give a shorter old_string (a few lines that occur once), or write_file the "
    "whole new content",
    "list_directory": "list a subdirectory, or lower max_depth",
    "search_files": "search a subdirectory, or narrow it with file_extensions",
    "delete_file": "delete its subdirectories one at a time",
    "move_file": "move its subdirectories one at a time",
    "git_status": "pass a smaller path (a subdirectory or one file)",
    "git_diff": "pass a smaller path (a subdirectory or one file)",
}


class Deadline:
    """When one tool call must stop: policy.limits.tool_seconds after it started, on the
    context's clock (injectable: tests pass one that jumps, and nothing sleeps).

    It is checked cooperatively, at safe points only: before anything is written, between
    the entries of a walk or a search, inside the matching loops of edit_file. Never by
    stopping a thread mid-write: a call that runs out of time has changed nothing (a copy
    into the trash that is cut short is removed again, as any failed copy is). Once a call
    writes, it finishes: what comes after the last check is bounded by what was looked at
    before it (the entries a delete counted, the bytes a write holds).

    Calls with a timeout of their own are bounded by it instead: run_command by its
    `timeout` (policy.limits.command_timeout_ms, at most max_command_timeout_ms: a build or a
    test run may rightly take longer than tool_seconds), an MCP tool by its server's
    mcp.servers.<name>.timeout. git and rg keep their own limits (10 s for all of a call's git
    runs, 30 s for rg), within this deadline: whichever comes first stops them."""

    def __init__(self, clock: Callable[[], float], seconds: float, tool: str = "") -> None:
        self.clock = clock
        self.seconds = seconds
        self.tool = tool
        self.at = clock() + seconds

    def left(self) -> float:
        """Seconds left (negative once past)."""
        return self.at - self.clock()

    @property
    def expired(self) -> bool:
        return self.clock() >= self.at

    def check(self) -> None:
        """Raise DeadlineExceeded once the time is up."""
        if self.clock() >= self.at:
            raise DeadlineExceeded(self)


# No deadline: what a context has until a call starts (cli/tools/__init__.py's run_tool), and
# what code outside a tool call (undo, the confirmation's diff) works under.
NO_DEADLINE = Deadline(lambda: 0.0, math.inf)
