"""The typed events the agent loop yields. `run` and `chat` are two consumers of these."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from cli.backends.messages import Stats, ToolCall
from cli.loop.hooks import HookRun
from cli.safety.policy import Decision

# "empty": the model sent no text, not even after being asked once more.
StopReason = Literal["answer", "max_steps", "stopped", "repeating", "length", "empty"]


@dataclass(frozen=True)
class Notice:
    """Something the user should know that is not part of the answer (e.g. tools are off).
    A `detail` is shown only when asked for (`agent run -v`)."""

    text: str
    detail: bool = False


@dataclass(frozen=True)
class ThinkingDelta:
    text: str


@dataclass(frozen=True)
class ContentDelta:
    text: str


@dataclass(frozen=True)
class ToolCallProposed:
    """The model asked for a call; nothing has been decided yet."""

    call: ToolCall
    step: int


@dataclass(frozen=True)
class ToolDecided:
    """The final say on a call. `approved_by` is "policy", "user", "--yes" or "session" (an
    earlier "always" answer) when it runs, "" when it does not."""

    call: ToolCall
    decision: Decision
    allowed: bool
    approved_by: str
    reason: str  # why it was denied, or why it was asked
    arguments: Mapping[str, Any] = field(default_factory=dict)  # as checked by the schema
    stop_turn: bool = False  # the user answered "stop this turn"
    asked: bool = False  # a person was asked (and, when not allowed, said no)


@dataclass(frozen=True)
class ToolResult:
    call: ToolCall
    result: Mapping[str, Any]
    duration: float  # seconds
    decision: ToolDecided


@dataclass(frozen=True)
class StepFinished:
    """One model call is complete."""

    step: int
    stats: Stats
    tool_calls: int
    done_reason: str | None


@dataclass(frozen=True)
class ContextUse:
    """How full the model's context was after the last model call of a turn."""

    used: int  # tokens: the prompt as the server counted it, plus the answer
    size: int  # the num_ctx that call was given


@dataclass(frozen=True)
class Finished:
    """The turn is over. `answer` is the last assistant text."""

    stop_reason: StopReason
    answer: str
    steps: int
    stats: Stats
    wall_time: float
    pending_calls: int = 0  # calls the model asked for after the step limit: not run
    context: ContextUse | None = None


Event = (
    Notice
    | ThinkingDelta
    | ContentDelta
    | ToolCallProposed
    | ToolDecided
    | ToolResult
    | StepFinished
    | Finished
    | HookRun
)
