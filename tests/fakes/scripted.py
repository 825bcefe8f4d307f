"""A scripted model in the test's own process, for tests of the loop's logic (as llm's
MockModel): no server, no HTTP, no JSON on a wire. It is a ChatBackend (cli/backends/messages.py)
like the Ollama and OpenAI clients; each test `enqueue`s what the model answers, call by call,
and reads back every request the loop made (`requests`).

The wire stays with the HTTP fakes (tests/fakes/fake_ollama.py, fake_openai.py): the client
tests and the whole-program tests use those. This one is for what happens between the calls.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from cli.backends.messages import ChatChunk, ChatRequest, ModelInfo, Stats, ToolCall


def call(
    name: str, arguments: Mapping[str, Any] | None = None, call_id: str | None = None
) -> ToolCall:
    """One tool call, as a backend hands it to the loop."""
    return ToolCall(name, dict(arguments or {}), call_id)


@dataclass(frozen=True)
class Answer:
    """One model answer: streamed as thinking, then content in small pieces, then the calls,
    then the final chunk with `done_reason` and stats."""

    content: str = ""
    calls: Sequence[ToolCall] = ()
    thinking: str = ""
    done_reason: str = "stop"
    prompt_eval_count: int = 100
    eval_count: int = 20

    def chunks(self, piece: int = 4) -> Iterator[ChatChunk]:
        for i in range(0, len(self.thinking), piece):
            yield ChatChunk(thinking=self.thinking[i : i + piece])
        for i in range(0, len(self.content), piece):
            yield ChatChunk(content=self.content[i : i + piece])
        if self.calls:
            yield ChatChunk(tool_calls=tuple(self.calls))
        stats = Stats(prompt_eval_count=self.prompt_eval_count, eval_count=self.eval_count)
        yield ChatChunk(done=True, done_reason=self.done_reason, stats=stats)


@dataclass
class ScriptedModel:
    """A ChatBackend that answers from a queue. An empty queue is a test's mistake: the loop
    asked for more answers than the test scripted, and says so loudly."""

    capabilities: frozenset[str] = frozenset({"completion", "tools"})
    context_length: int | None = 32768
    models: Sequence[str] = ("qwen3:8b",)
    answers: list[Answer] = field(default_factory=list)
    requests: list[ChatRequest] = field(default_factory=list)

    @property
    def host(self) -> str:
        return "scripted://in-process"

    def enqueue(self, *answers: Answer | str) -> ScriptedModel:
        self.answers += [Answer(a) if isinstance(a, str) else a for a in answers]
        return self

    def chat(self, request: ChatRequest) -> Iterator[ChatChunk]:
        # The loop may change its message list after the call: keep what was sent.
        self.requests.append(
            dataclasses.replace(
                request,
                messages=[dict(m) for m in request.messages],
                tools=list(request.tools),
                options=dict(request.options),
            )
        )
        if not self.answers:
            raise AssertionError(
                f"the model was asked a {len(self.requests)}th time; none scripted"
            )
        return self.answers.pop(0).chunks()

    def list_models(self) -> list[str]:
        return list(self.models)

    def model_info(self, model: str) -> ModelInfo:
        return ModelInfo(model, self.capabilities, context_length=self.context_length)
