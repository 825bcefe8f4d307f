"""What keeps a confused model's turn ending well (pure): the repeat guard, what to do at the
step limit, and the ways a server fails on a model's own tool calls.

Local models repeat a failing call until the step limit (opencode#21850, claude-code#29944;
seen here with a 135M model: seven identical denied `list_directory` calls and an empty
answer). The agent is the part that can stop that: it tells the model the call was already
refused, and then ends the turn.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from cli.backends.messages import Message, ToolCall

# A call refused this many times before is not run again: the model is told so.
REFUSE_AFTER = 2
# … and one refused this many times before ends the turn (stop_reason "repeating").
STOP_AFTER = 4


@dataclass
class _Failures:
    count: int = 0
    why: str = ""  # the first failure's error, which the model is reminded of


@dataclass
class RepeatGuard:
    """The calls that failed or were denied in this turn, by tool and exact arguments."""

    _seen: dict[str, _Failures] = field(default_factory=dict)

    @staticmethod
    def key(call: ToolCall) -> str:
        arguments = json.dumps(call.arguments, sort_keys=True, ensure_ascii=False, default=str)
        return f"{call.name}\x00{arguments}\x00{call.arguments_error or ''}"

    def verdict(self, call: ToolCall) -> Literal["run", "refuse", "stop"]:
        failures = self._seen.get(self.key(call))
        count = failures.count if failures else 0
        if count >= STOP_AFTER:
            return "stop"
        return "refuse" if count >= REFUSE_AFTER else "run"

    def refusal(self, call: ToolCall) -> tuple[str, str]:
        """Why the call is not run (for anyone) and what the model should do (its hint)."""
        failures = self._seen.get(self.key(call)) or _Failures()
        return (
            f"this exact call already failed or was refused {_times(failures.count)} in this turn",
            f"it failed with: {failures.why}; do something else or answer",
        )

    def record(self, call: ToolCall, result: Mapping[str, Any]) -> None:
        if result.get("success") is not False:
            return
        failures = self._seen.setdefault(self.key(call), _Failures())
        failures.count += 1
        if not failures.why:
            failures.why = str(result.get("error") or "it failed")


def _times(count: int) -> str:
    return {1: "once", 2: "twice"}.get(count, f"{count} times")


# -- the step limit ------------------------------------------------------------------------------


@dataclass(frozen=True)
class StepLimitAnswer:
    """What to do when the model is still calling tools at the step limit."""

    action: Literal["continue", "wrap", "stop"]
    steps: int = 0  # with "continue": how many more model calls


def wrap_up_always(_steps: int) -> StepLimitAnswer:
    """`agent run`: one last call without tools, for a report of what was done."""
    return StepLimitAnswer("wrap")


WRAP_UP = (
    "You have used all {steps} steps allowed for this request, so no more tools can run. "
    "Do not call any tool. In a few sentences, tell the user what you did, what you found, "
    "and what is left to do."
)


# -- servers failing on the model's own calls ----------------------------------------------------

# Ollama's words when its parser cannot read the tool call a model wrote (ollama#18563
# qwen3-coder, #15315 gemma, #11781 gpt-oss): HTTP 500 or an error mid-stream.
_UNPARSABLE = ("error parsing tool call", "failed to parse")


def unparsable_call(message: str) -> bool:
    """Did the server fail on the model's own tool-call syntax?"""
    lowered = message.lower()
    return any(words in lowered for words in _UNPARSABLE)


def rejects_tool_role(message: str) -> bool:
    """Did the server refuse `role: tool` messages (some do when no `tools` are sent)?"""
    lowered = message.lower()
    return "role" in lowered and "tool" in lowered


def labelled_results(messages: list[Message]) -> list[Message]:
    """Tool results as user messages labelled as such, for a server that refuses the tool
    role without tools (prompt mode). They stay data: the label says whose output it is."""
    out: list[Message] = []
    for message in messages:
        if message.get("role") != "tool":
            out.append(message)
            continue
        name = message.get("tool_name") or "a tool"
        out.append(
            {"role": "user", "content": f"[tool result of {name}]\n{message.get('content', '')}"}
        )
    return out
