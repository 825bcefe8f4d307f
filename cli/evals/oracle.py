"""The oracle: a scripted model that plays a task's reference solution (`agent eval --oracle`).

It is a ChatBackend like the real clients, so the solution runs through the whole agent loop
(the policy, the tools, the checks before a call is put to a person), one call a step, then
the answer. The step it is at is read from the conversation it is sent (the model calls
answered so far since the task's prompt), not kept: a step asked again (the loop's retries)
gets the same answer. A task that passes under the oracle is solvable and its checks hold
for a right answer.
"""

from __future__ import annotations

from collections.abc import Iterator

from cli.backends.messages import ChatChunk, ChatRequest, ModelInfo, Stats, ToolCall
from cli.evals.tasks import Solution

ORACLE_MODEL = "oracle"


class Oracle:
    """Answers every request of one task from its solution."""

    def __init__(self, solution: Solution | None) -> None:
        self.solution = solution or Solution((), "")

    @property
    def host(self) -> str:
        return "oracle://built-in"

    def chat(self, request: ChatRequest) -> Iterator[ChatChunk]:
        step = _steps_done(request)
        calls = self.solution.calls
        if step < len(calls):
            call = calls[step]
            chosen = ToolCall(call.tool, dict(call.arguments), f"call_{step}")
            yield ChatChunk(tool_calls=(chosen,))
        else:
            yield ChatChunk(content=self.solution.answer)
        yield ChatChunk(done=True, done_reason="stop", stats=Stats())

    def list_models(self) -> list[str]:
        return [ORACLE_MODEL]

    def model_info(self, model: str) -> ModelInfo:
        return ModelInfo(model, frozenset({"completion", "tools"}), context_length=131072)


def _steps_done(request: ChatRequest) -> int:
    """The assistant messages with tool calls since the last user message that is no tool
    result: the calls of the solution already made."""
    done = 0
    for message in reversed(request.messages):
        role = message.get("role")
        if role == "assistant" and message.get("tool_calls"):
            done += 1
        elif role == "user" and not str(message.get("content", "")).startswith("[tool result"):
            break
    return done
