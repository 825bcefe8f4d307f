"""A call known to fail is not put to a person. An edit_file on a file the model never read,
one changed since, or whose old_string the file does not hold (or holds in two places) fails
whatever the answer: the card could only say "the edit will fail" and ask anyway. Such a
call is decided as it would run — allowed, as a call that writes nothing — and the model
gets the tool's own error at once (the same check the tool makes, in its order, so the
error is the one it would have met).

Looking at the file is a read, so it happens only where cli/tools/unchanged.py looks: inside
the allowed dirs, never a hidden path (a secret, a blocked dir), never a file only a person
may decide on. And the call is allowed unasked only for failing: when it runs, it writes
nothing whatever is there by then (`only`) — if the file changed meanwhile so that the edit
would now succeed, it is refused, not made.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from cli.errors import ToolError
from cli.fs.deadline import DeadlineExceeded
from cli.fs.paths import ResolvedPath
from cli.safety.policy import Decision, Policy
from cli.tools.base import Result, ToolContext, failure

TOOLS = frozenset({"edit_file"})
RULE = "fails"


def decide(
    decision: Decision, tool: str, arguments: Mapping[str, Any], policy: Policy, ctx: ToolContext
) -> Decision:
    """`decision` as an allow that runs nothing when the call would ask and cannot succeed;
    else unchanged."""
    checked = decision.paths.get("path")
    if (
        tool not in TOOLS
        or checked is None
        or decision.action != "ask"
        or decision.outside_allowed
        or decision.needs_human
        or not policy.is_allowed(checked)
        or any(policy.hides(form) for form in checked.forms)
    ):
        return decision
    error = _error(ctx, arguments, checked, counted=False)
    if error is None:
        return decision
    return replace(
        decision,
        action="allow",
        reason=f"it cannot succeed ({str(error).splitlines()[0]}): nobody is asked",
        rule=RULE,
    )


def only(
    ctx: ToolContext, tool: str, arguments: Mapping[str, Any], paths: Mapping[str, ResolvedPath]
) -> Result:
    """Run a call allowed unasked for failing: its error as the tool gives it, or a refusal
    if the file changed since the check so that it would now write (no one was asked)."""
    checked = paths.get("path")
    error = _error(ctx, arguments, checked, counted=True) if checked is not None else None
    if error is not None:
        return failure(str(error), error.hint)
    shown = ctx.show(checked.real) if checked is not None else "the file"
    return failure(f"{shown} changed since it was checked; not written", hint=f"call {tool} again")


def _error(
    ctx: ToolContext, arguments: Mapping[str, Any], checked: ResolvedPath, *, counted: bool
) -> ToolError | None:
    """The error edit_file would end with on the file as it is now; None when it would
    succeed, or when that cannot be told."""
    from cli.tools.files import planned_edit  # the tool's code: loaded when a call needs it

    try:
        planned_edit(ctx, arguments, checked, counted=counted)
    except DeadlineExceeded as exc:
        # Deciding: not told in time, nothing is known of the edit, so it is asked. Running:
        # the call's time is up, which is its error.
        return exc if counted else None
    except ToolError as exc:
        return exc
    except (OSError, ValueError, KeyError):
        return None
    return None
