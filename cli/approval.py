"""Who answers when the policy says "ask" (pure: the terminal question lives in ui/)."""

from __future__ import annotations

import fnmatch
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from cli.backends.messages import ToolCall
from cli.config import MCP_PREFIX
from cli.policy import Decision


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


def refuse_without_terminal(request: ApprovalRequest) -> Approval:
    """No terminal to ask on: every ask is a no. What only a person may approve says so, and
    why (the model reads it): neither --yes nor the policy would let it run."""
    decision = request.decision
    if decision.needs_human:
        why = "; ".join((decision.reason, *decision.warnings))
        return Approval(
            False,
            by="",
            reason="needs a person's confirmation, and no one can be asked (not run from a "
            f"terminal; --yes does not cover it): {why}",
        )
    return Approval(
        False,
        by="",
        reason="needs a confirmation, and no one can be asked (not run from a terminal); "
        "allow it in the policy or run with --yes",
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
        if self._listed(request.call.name) and request.decision.standing_yes_ok:
            return Approval(True, by="--yes")
        return self.fallback(request)

    def _listed(self, name: str) -> bool:
        """In policy.unattended: by name, or for an MCP tool by a `*` pattern there
        (`mcp__time__*`); an MCP tool is never covered otherwise."""
        if name in self.unattended:
            return True
        return name.startswith(MCP_PREFIX) and any(
            p.startswith(MCP_PREFIX) and fnmatch.fnmatchcase(name, p) for p in self.unattended
        )
