"""Who answers when the policy says "ask" (pure: the terminal question lives in ui/)."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from cli.backends.messages import ToolCall
from cli.config.settings import is_mcp_name
from cli.safety.policy import Decision, mcp_rule, shorten_name


@dataclass(frozen=True)
class ApprovalRequest:
    call: ToolCall
    arguments: Mapping[str, Any]  # checked against the schema
    decision: Decision


@dataclass(frozen=True)
class Approval:
    approved: bool
    by: str = "user"  # who said yes: "user", "--yes", "session"
    reason: str = ""  # why not, in the user's words or ours: the model reads it
    stop_turn: bool = False  # "q": answer nothing more this turn


class Approver(Protocol):
    def __call__(self, request: ApprovalRequest) -> Approval: ...


def covered(unattended: Collection[str], request: ApprovalRequest) -> bool:
    """Does policy.unattended list this call's tool: by name, or an MCP tool by its name or
    a `*` pattern there (`mcp__time__*`), judged as the policy judges it, by the name its
    server listed it by (never only by the name the model was offered)?"""
    name = request.decision.mcp_name or request.call.name
    if not is_mcp_name(name):
        return name in unattended
    return mcp_rule(unattended, name) is not None


class NoOneToAsk:
    """No terminal to ask on: every ask is a no. The model (and the trace) reads why, and
    what would let the call run in a run like this one: under --yes (`yes`), what
    policy.unattended does not cover, never "run with --yes"; without it, --yes only where
    policy.unattended would then approve the call."""

    def __init__(self, unattended: Collection[str] = (), *, yes: bool = False) -> None:
        self.unattended = frozenset(unattended)
        self.yes = yes

    def __call__(self, request: ApprovalRequest) -> Approval:
        return Approval(False, by="", reason=self.reason(request))

    def reason(self, request: ApprovalRequest) -> str:
        decision = request.decision
        name = decision.mcp_name or request.call.name
        if decision.needs_human:
            why = "; ".join((decision.reason, *decision.warnings))
            cover = "policy.unattended never covers it" if self.yes else "--yes does not cover it"
            return (
                "needs a person's confirmation, and no one can be asked (not run from a "
                f"terminal; {cover}): {why}"
            )
        asked = "needs a confirmation, and no one can be asked (not run from a terminal); "
        if decision.outside_allowed:
            never = "policy.unattended" if self.yes else "--yes"
            return (
                f"{asked}{never} never covers a path outside the allowed directories: add its "
                "directory to policy.allowed_dirs"
            )
        if self.yes:
            return (
                f"{asked}policy.unattended does not list {shorten_name(name)}: add it there, or "
                "allow it in policy.tools"
            )
        if covered(self.unattended, request):
            return f"{asked}allow it in the policy or run with --yes"
        return (
            f"{asked}allow it in policy.tools, or add {shorten_name(name)} to policy.unattended "
            "and run with --yes"
        )


class UnattendedApprover:
    """`--yes`: approve asks for the tools in policy.unattended, never one that reaches
    outside the allowed dirs (--yes never widens what is reachable) nor one that needs a
    person (protected files, the agent's own config, hard links, commands on the deny list);
    pass the rest on."""

    def __init__(self, unattended: Collection[str], fallback: Approver) -> None:
        self.unattended = frozenset(unattended)
        self.fallback = fallback

    def __call__(self, request: ApprovalRequest) -> Approval:
        if covered(self.unattended, request) and request.decision.standing_yes_ok:
            return Approval(True, by="--yes")
        return self.fallback(request)
