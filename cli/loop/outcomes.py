"""One vocabulary for what became of a tool call (pure), the same in `agent run`'s trace,
chat's cards, `--json` and the audit log:

- `allowed` — it ran and did what it was asked; by the policy, by you (a person said yes),
  by `--yes`, or for this session (an earlier "always");
- `declined` — a person said no (or stopped the turn);
- `denied` — a rule said no: the policy's (`sensitive`, `outside_allowed`, `disabled`…) or
  the repeat guard's (`repeated`); or the rule asked for a yes (`setting`, `command_deny`…)
  and nobody could be asked (no terminal), which the reason says;
- `invalid` — the call itself was wrong: arguments that break the schema, a tool that does
  not exist, a path that cannot be one;
- `failed` — it was allowed, ran, and failed (a missing file, a non-zero exit);
- `interrupted` — Ctrl-C cut it short (the audit log, and a saved session's replay: the
  result the model was told is `INTERRUPTED_ERROR`).

What a person reads of a refusal or a failure is the fact; what the loop tells the model
to do next (`use list_directory`, `read it again`) travels as the result's `hint` and the
decision's `hint`, which the model reads and nobody else is shown.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from cli.loop.events import ToolDecided

Outcome = Literal["allowed", "declined", "denied", "invalid", "failed", "interrupted"]

# The error a call gets when Ctrl-C stopped the turn before it ran (cli/loop/agent.py).
INTERRUPTED_ERROR = "interrupted by the user"

# Rules that say the call was malformed, not that it was forbidden.
INVALID_RULES = frozenset({"schema", "unknown_tool", "bad_path"})

BY_WORDS: Mapping[str, str] = {
    "policy": "by policy",
    "user": "by you",
    "--yes": "by --yes",
    "session": "for this session",
}

# What the audit log called outcomes before this vocabulary, for reading old records.
_OLD_WORDS: Mapping[str, str] = {"ok": "allowed", "error": "failed"}


def decided_outcome(decided: ToolDecided) -> Outcome:
    """allowed, declined, denied or invalid: what the decision alone says."""
    if decided.allowed:
        return "allowed"
    if decided.decision.rule in INVALID_RULES:
        return "invalid"
    if decided.decision.action == "deny":
        return "denied"
    return "declined" if decided.asked else "denied"


def outcome(decided: ToolDecided, result: Mapping[str, Any]) -> Outcome:
    """The call's outcome once it has run (or was refused)."""
    word = decided_outcome(decided)
    if word == "allowed" and not result.get("success"):
        return "failed"
    return word


def rule(decided: ToolDecided) -> str:
    """The rule that decided (for an ask nobody could answer, the one that asked)."""
    return decided.decision.rule


def label(decided: ToolDecided, result: Mapping[str, Any] | None = None) -> str:
    """`allowed by you`, `denied (sensitive)`, `declined`, `invalid`, `failed`."""
    word = decided_outcome(decided) if result is None else outcome(decided, result)
    return spell(word, by=decided.approved_by, rule=rule(decided))


def spell(word: str, *, by: str | None = None, rule: str | None = None) -> str:
    """An outcome as the trace, the cards and `agent audit show` write it; an old record's
    `ok`/`error` read as allowed/failed."""
    word = _OLD_WORDS.get(word, word)
    if word == "allowed":
        return f"allowed {BY_WORDS[by]}" if by and by in BY_WORDS else "allowed"
    if word == "denied" and rule:
        return f"denied ({rule})"
    return word


def detail(decided: ToolDecided, result: Mapping[str, Any]) -> str:
    """Why, for a person, in one phrase: the policy's reason, the person's own words, the
    tool's error — without what was written for the model (its `hint`)."""
    word = outcome(decided, result)
    if word == "failed":
        return str(result.get("error") or "failed")
    if word == "allowed":
        return ""
    if word == "declined":
        return declined_detail(decided.reason, decided.stop_turn)
    reason = decided.reason
    if word == "invalid":
        reason = reason.removeprefix(f"invalid arguments for {decided.call.name}: ")
    return reason


def declined_detail(reason: str, stop_turn: bool = False) -> str:
    """The model reads "the user declined: too big"; the person reads "you said no: too big"."""
    if stop_turn:
        return "you stopped this turn"
    said = reason.removeprefix("the user declined").removeprefix(":").strip()
    return f"you said no: {said}" if said else "you said no"
