"""One tool call, one decision: the stages every call passes, in order (pure but for looking).

    offered → repeats → arguments → policy → tree boundary → unchanged content
            → foreseen failure → what would be lost → (a person, when the decision is "ask")

Each stage is a small function of the call being decided. The first one that denies settles it;
the others may turn an "ask" into an allow that needs nobody (a write of what the file already
holds, a call that cannot succeed) or an "allow" into an ask only a person may answer (a tree
that holds an execution surface, old content that cannot be kept for undo). The loop calls
`decide` once per call and asks a person only for what comes out as "ask"; `agent run`, chat,
attachments and images all reach a file through here.

The stages that look at the disk (tree boundary, unchanged content, foreseen failure, what
would be lost) are the tools' own checks (cli/tools/moves.py, unchanged.py, foreseen.py,
preflight.py): they share the tools' code for what a call would do, so they cannot disagree
with it. What they look at is looked at under a deadline of its own, as the call will be
(`policy.limits.tool_seconds`): the time a person takes to answer is not in it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from cli import tools
from cli.backends.messages import ToolCall
from cli.loop.guards import RepeatGuard
from cli.safety.policy import Decision, Policy
from cli.tools import Tool, ToolContext, foreseen, unchanged
from cli.tools.preflight import Loss
from cli.tools.schema import SchemaError, validate_arguments


@dataclass
class Deciding:
    """A call on its way through the stages: what they read, and what they have found."""

    call: ToolCall
    policy: Policy
    toolbox: Mapping[str, Tool]
    context: ToolContext
    # The tools this request offered (None: the call did not come from the model, e.g. an
    # @file attachment read as read_file) and the turn's repeat guard (None: no guard).
    offered: Sequence[str] | None = None
    guard: RepeatGuard | None = None
    # Why no tool was offered at all, for the model to read ("does not support tools"...).
    none_offered: Callable[[], str] = lambda: "the policy enables none"
    plan: bool = False  # plan mode: what it does not offer is refused as such
    # False: a call that would fail is not judged as failing (agent policy explain, which
    # has no conversation: an edit there was never read, and so always fails).
    foresee: bool = True
    arguments: dict[str, Any] = field(default_factory=dict)
    decision: Decision | None = None
    looking: ToolContext | None = None  # the context the disk is looked at under
    loss: Loss | None = None  # what a yes would lose, set by the last stage


Stage = Callable[[Deciding], None]


def offered(d: Deciding) -> None:
    """A call to a tool this request did not offer is refused, whatever the policy says of it:
    a model without tool support, a tool set to deny, a name we do not know."""
    if d.offered is None or d.call.name in d.offered:
        return
    call = d.call
    hint = f"valid tools: {', '.join(d.offered)}"
    if call.arguments_error and not call.name:
        reason, rule = f"tool call: {call.arguments_error}", "schema"
    elif not d.offered:
        reason = f"tool '{call.name}' was not offered: no tools were offered ({d.none_offered()})"
        hint, rule = "answer in plain text", "not_offered"
    elif call.name not in d.toolbox:
        reason, rule = f"unknown tool '{call.name}'", "unknown_tool"
        if d.plan:
            reason += " (this is plan mode, which offers only tools that change nothing)"
    elif d.policy.setting(call.name) == "deny":
        reason = (
            f"tool '{call.name}' was not offered (it is not enabled in this agent's "
            "policy), so it cannot run"
        )
        rule = "disabled"
    elif d.plan:
        reason = (
            f"tool '{call.name}' is not offered in plan mode, which offers only tools that "
            "change nothing: answer with your plan; the changes are made after the user "
            "leaves plan mode"
        )
        rule = "plan_mode"
    else:  # offered to another model, or in another request: not this one
        reason = f"tool '{call.name}' was not offered, so it cannot run"
        rule = "not_offered"
    d.decision = Decision("deny", reason, rule, hint=hint)


def repeats(d: Deciding) -> None:
    """The same refused call again and again is refused before anything else is looked at."""
    if d.guard is None or d.guard.verdict(d.call) == "run":
        return
    reason, hint = d.guard.refusal(d.call)
    d.decision = Decision("deny", reason, "repeated", hint=hint)


def arguments(d: Deciding) -> None:
    """Arguments that are not JSON, a tool we do not have or that is disabled, arguments that
    do not fit the schema we sent: refused, with why."""
    call = d.call
    if call.arguments_error:
        what = f"invalid arguments for {call.name}" if call.name else "tool call"
        d.decision = Decision("deny", f"{what}: {call.arguments_error}", "schema")
    elif call.name not in d.toolbox or d.policy.setting(call.name) == "deny":
        d.decision = d.policy.decide(call.name, {})
    else:
        try:
            schema = d.toolbox[call.name].parameters
            strict = call.name in tools.ALL_TOOLS  # an MCP schema may take more
            d.arguments = validate_arguments(call.arguments, schema, strict=strict)
        except SchemaError as exc:
            d.decision = Decision("deny", f"invalid arguments for {call.name}: {exc}", "schema")
        except (TypeError, ValueError, RecursionError) as exc:  # an MCP server's odd schema
            why = f"its schema could not be applied ({type(exc).__name__})"
            d.decision = Decision("deny", f"invalid arguments for {call.name}: {why}", "schema")


def policy(d: Deciding) -> None:
    """The YAML policy: allow, ask or deny, with the rule that decided and the paths it read."""
    d.decision = d.policy.decide(d.call.name, d.arguments)


def tree_boundary(d: Deciding) -> None:
    """A directory moves, or is deleted, with its whole tree. A move is refused when the tree
    holds what the policy hides; either is a person's call when the tree holds (or a move
    would make) an execution surface or a dot-entry, as a change of that one path would be."""
    from cli.tools import moves

    decision = _current(d)
    recursive_delete = d.call.name == "delete_file" and d.arguments.get("recursive") is True
    if not (d.call.name == "move_file" or recursive_delete):
        return
    gone = decision.paths.get("source") or decision.paths.get("path")
    destination = decision.paths.get("destination") or gone
    if gone is None or destination is None:
        return
    moving = "source" in decision.paths
    hides = d.policy.hides if moving else (lambda _path: False)  # gone either way
    crossing = moves.boundary(gone.entry, destination.entry, hides, d.policy.configures, _look(d))
    if crossing.refusal:
        d.decision = Decision("deny", crossing.refusal, "move_boundary", paths=decision.paths)
    elif crossing.unseen and not moving:
        return  # a delete goes to the trash whatever its depth: nothing planted
    elif crossing.caution and not (decision.action == "ask" and decision.needs_human):
        d.decision = dataclasses.replace(
            decision,
            action="ask",
            needs_human=True,
            reason=crossing.caution,
            rule="move_boundary",
        )


def unchanged_content(d: Deciding) -> None:
    """A write of what the file already holds is no change: allowed, asking nobody."""
    d.decision = unchanged.decide(_current(d), d.call.name, d.arguments, d.policy, _look(d))


def foreseen_failure(d: Deciding) -> None:
    """A call that would ask and cannot succeed is not put to a person: it fails."""
    if not d.foresee:
        return
    d.decision = foreseen.decide(_current(d), d.call.name, d.arguments, d.policy, _look(d))


def what_would_be_lost(d: Deciding) -> None:
    """A change whose old content cannot be kept for undo becomes an ask only a person may
    answer, with what would be lost in its warnings."""
    from cli.tools import preflight

    decision = _current(d)
    if decision.rule in (unchanged.RULE, foreseen.RULE):
        return
    d.loss = preflight.unkept(d.call.name, d.arguments, decision.paths, _look(d))
    if d.loss is not None:
        d.decision = preflight.needs_person(decision, d.loss)


STAGES: tuple[Stage, ...] = (
    offered,
    repeats,
    arguments,
    policy,
    tree_boundary,
    unchanged_content,
    foreseen_failure,
    what_would_be_lost,
)


def decide(d: Deciding) -> Decision:
    """Run the stages in order; the first denial settles the call."""
    for stage in STAGES:
        if stage is policy and d.decision is not None:
            continue  # `arguments` already has the policy's word (an unknown/disabled tool)
        stage(d)
        if d.decision is not None and d.decision.action == "deny":
            break
    return _current(d)


def _current(d: Deciding) -> Decision:
    assert d.decision is not None, "the policy stage runs before the stages that read it"
    return d.decision


def _look(d: Deciding) -> ToolContext:
    if d.looking is None:
        d.looking = d.context.started(d.call.name)
    return d.looking
