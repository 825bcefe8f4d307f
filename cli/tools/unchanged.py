"""A write that leaves the file exactly as it is: write_file with the content the file holds,
an edit_file whose replacement changes nothing. It is no change: not asked, not written, not
journaled (so `agent undo` never has to step over it), and the model reads `unchanged: true`.

Looking at the file to tell is itself a read, so it happens only where the policy would let
the agent write without a person's say: inside the allowed dirs, never a hidden path (a secret,
a blocked dir), never a file only a person may decide on (a protected file, one with hard links
whose data may live elsewhere). And the call is allowed unasked only for being a no-op: when it
runs, it writes nothing whatever is there by then (`only`).
"""

from __future__ import annotations

import stat
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from cli.errors import ToolError
from cli.fs import reading
from cli.fs.fingerprint import Fingerprint
from cli.fs.paths import ResolvedPath
from cli.safety.policy import Decision, Policy
from cli.tools.base import Result, ToolContext
from cli.tools.edits import EditFailed, plan_edit

TOOLS = frozenset({"write_file", "edit_file"})
RULE = "unchanged"


def decide(
    decision: Decision, tool: str, arguments: Mapping[str, Any], policy: Policy, ctx: ToolContext
) -> Decision:
    """`decision` as an allow when the call would leave its file as it is; else unchanged."""
    checked = decision.paths.get("path")
    if (
        tool not in TOOLS
        or checked is None
        or decision.action == "deny"
        or decision.outside_allowed
        or decision.needs_human
        or not policy.is_allowed(checked)
        or any(policy.hides(form) for form in checked.forms)
    ):
        return decision
    if result(ctx, tool, arguments, checked) is None:
        return decision
    return replace(
        decision,
        action="allow",
        reason="the file already holds exactly this content: nothing to write",
        rule=RULE,
    )


def only(
    ctx: ToolContext, tool: str, arguments: Mapping[str, Any], paths: Mapping[str, ResolvedPath]
) -> Result:
    """Run a call allowed unasked for being a no-op: the unchanged result, or a refusal if the
    file changed since the check (then it would write, and no one was asked)."""
    checked = paths.get("path")
    done = result(ctx, tool, arguments, checked) if checked is not None else None
    if done is not None:
        return done
    shown = ctx.show(checked.real) if checked is not None else "the file"
    return {
        "success": False,
        "error": f"{shown} changed since it was checked; not written",
        "hint": f"call {tool} again",
    }


def result(
    ctx: ToolContext, tool: str, arguments: Mapping[str, Any], checked: ResolvedPath
) -> Result | None:
    """The result of a call that would leave the file as it is (remembered as read, like a
    write); None when it would change it, or when that cannot be told."""
    try:
        if tool == "write_file":
            data = str(arguments["content"]).encode("utf-8")
        else:
            data = _edited(ctx, arguments, checked)
        seen = same(ctx, checked, data)
    except (ToolError, OSError, ValueError, KeyError, EditFailed):
        return None
    if seen is None:
        return None
    ctx.memory.remember(checked.real, seen)
    return unchanged_result(checked.real, len(data))


def same(ctx: ToolContext, checked: ResolvedPath, data: bytes) -> Fingerprint | None:
    """The fingerprint of the file at `checked` when it holds exactly `data` (a regular
    file, same size, same bytes); None otherwise. Reached like every tool's read."""
    target = ctx.target(checked.real, checked.file)
    entry = reading.inspect(target)
    if entry is None or not stat.S_ISREG(entry.info.st_mode) or entry.info.st_size != len(data):
        return None
    return reading.holds(target, data)


def unchanged_result(path: str, size: int) -> Result:
    return {
        "success": True,
        "path": path,
        "unchanged": True,
        "bytesWritten": 0,
        "size": size,
        "created": False,
        "note": "the file already holds exactly this content: nothing was written",
    }


def _edited(ctx: ToolContext, arguments: Mapping[str, Any], checked: ResolvedPath) -> bytes:
    """What edit_file would write: only over the file as the model read it (edit_file's own
    rule; anything else is its error to report, not a no-op)."""
    seen = ctx.memory.expected(checked.real)
    if seen is None:
        raise ToolError("not read")
    target = ctx.target(checked.real, checked.file)
    file = reading.read(target, ctx.limits.max_write_bytes)
    if file.fingerprint != seen:
        raise ToolError("changed since read")
    edit = plan_edit(
        file.data.decode("utf-8"),
        str(arguments["old_string"]),
        str(arguments["new_string"]),
        bool(arguments.get("replace_all", False)),
        deadline=ctx.deadline,
        max_chars=ctx.limits.max_write_bytes,
    )
    return edit.text.encode("utf-8")
