"""One model call and its streamed answer: the chunks assembled into a turn (text, thinking,
tool calls, the done chunk's stats), a prompt the server refuses as too long sent once more
compacted, an answer cut for length, the wrap-up at the step limit and /compact's summary."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Generator, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from cli.backends.messages import (
    ChatRequest,
    Message,
    ModelInfo,
    Stats,
    ToolCall,
)
from cli.errors import AgentError, ContextTooLong, StreamError
from cli.loop.constrained import read_reply
from cli.loop.events import (
    ContentDelta,
    Event,
    Notice,
    ThinkingDelta,
)
from cli.loop.guards import (
    WRAP_UP,
    rejects_tool_role,
)
from cli.loop.requests import AgentRequests, _Plan, _positive_int, _trim_notice, tools_cost_of
from cli.loop.tokens import message_tokens

# /compact summary: what the model is asked, and the most of its answer kept in the note.
SUMMARISE = (
    "Summarise this conversation so far for yourself, to carry on from it once the older "
    "messages are left out: what the user asked, what you did and found, which files were "
    "changed and how, and what is still open. Do not call any tool. Be brief."
)
MAX_SUMMARY_CHARS = 6000


def _joined(parts: list[str]) -> str:
    """The pieces as one string, kept as that one piece from then on."""
    if len(parts) > 1:
        parts[:] = ["".join(parts)]
    return parts[0] if parts else ""


@dataclass
class _Turn:
    """What one model call streamed, accumulated from every chunk, the last one included
    (some models send their tool calls only in the final `done` chunk)."""

    calls: list[ToolCall] = field(default_factory=list)
    done_reason: str | None = None
    stats: Stats = field(default_factory=Stats)
    calls_chars: int = 0  # the calls as they stand in history, in characters
    # The text as it came, in pieces: joined when read, not copied whole at every chunk
    # (an answer of 20,000 chunks would copy it 20,000 times).
    _content: list[str] = field(default_factory=list)
    _thinking: list[str] = field(default_factory=list)
    _chars: int = 0

    def add_text(self, content: str, thinking: str) -> None:
        if content:
            self._content.append(content)
        if thinking:
            self._thinking.append(thinking)
        self._chars += len(content) + len(thinking)

    @property
    def content(self) -> str:
        return _joined(self._content)

    @property
    def thinking(self) -> str:
        return _joined(self._thinking)

    def add_calls(self, calls: Iterable[ToolCall], limit: int) -> None:
        for call in calls:
            if self.size > limit:
                return  # the answer is over its cap already: the loop ends it
            self.calls.append(call)
            self.calls_chars += len(json.dumps(call.to_message(), ensure_ascii=False))

    @property
    def size(self) -> int:
        """What agent.max_answer_chars caps: text, thinking and tool calls alike, so an answer
        that streams calls forever ends as one that streams text forever does."""
        return self._chars + self.calls_chars

    def message(self, calls: list[ToolCall], content: str) -> Message:
        message: Message = {"role": "assistant", "content": content}
        if self.thinking:
            message["thinking"] = self.thinking
        if calls:
            message["tool_calls"] = [c.to_message() for c in calls]
        return message


class AgentStreaming(AgentRequests):
    """The model calls of the agent and the assembly of what they stream."""

    def _call(
        self,
        conversation: list[Message],
        plan: _Plan,
        info: ModelInfo,
        request_tools: list[dict[str, Any]],
        tools_cost: int,
        reply_format: dict[str, Any] | None = None,
    ) -> Generator[Event, None, tuple[_Turn, _Plan]]:
        """One model call. A prompt the server refuses as longer than its context (we send
        `truncate: false`, so it refuses instead of cutting) is compacted and sent once
        more; refused again, the turn fails naming ollama.max_num_ctx."""
        turn = _Turn()
        try:
            request = self._request(plan, info, request_tools, reply_format)
            yield from self._stream(request, turn, conversation)
            return turn, plan
        except ContextTooLong as exc:
            if turn.size:
                raise  # it came after the answer had started: nothing to resend
            if self._answer_overflowed(exc, plan, info):
                turn.done_reason = "length"  # the answer was cut: the turn ends as "length"
                return turn, plan
            counted = self._learn(exc, plan, info)
        # What the server said may show the message cannot fit at all: refused, not resent.
        self._refuse_unfit(conversation, info, tools_cost)
        harder = self._plan_harder(conversation, plan, info, tools_cost, counted)
        harder = dataclasses.replace(harder, ask_again=plan.ask_again)
        request = self._request(harder, info, request_tools, reply_format)
        if self._as_sent(request) == self._last_request:
            # Nothing could be left out or shortened (one message, the user's own, is all
            # there is) and there is no more num_ctx to ask for: the server would refuse the
            # very same request again. Said now, not sent.
            raise ContextTooLong(self._too_long(harder, info))
        yield Notice(_trim_notice(plan, harder, self._limits(info)))
        turn = _Turn()
        try:
            yield from self._stream(request, turn, conversation)
        except ContextTooLong as exc:
            if turn.size:
                raise
            self._learn(exc, harder, info)  # for the next turn
            raise ContextTooLong(self._too_long(harder, info)) from None
        return turn, harder

    def _stream(
        self, request: ChatRequest, turn: _Turn, conversation: list[Message]
    ) -> Iterator[Event]:
        """Stream one answer into `turn`, yielding its deltas (not the text of one held to a
        JSON schema: the loop shows what it says once it is whole)."""
        show_text = request.format is None
        sent = self._as_sent(request)
        if sent == self._last_request:
            # Every retry of a turn changes what it sends (the context retry sends less or a
            # larger num_ctx, the empty-answer retry asks again in words): the server never
            # evaluates the same request twice in a row. Reaching this is a bug of ours.
            raise AgentError("internal error: the same request was about to be sent twice")
        self._last_request = sent
        changed = self._prefix_change(request)
        if changed:
            yield Notice(changed, detail=True)
        try:
            for chunk in self.backend.chat(request):
                turn.add_text(chunk.content, chunk.thinking)
                if chunk.thinking:
                    yield ThinkingDelta(chunk.thinking)
                if chunk.content and show_text:
                    yield ContentDelta(chunk.content)
                if chunk.tool_calls:
                    turn.add_calls(chunk.tool_calls, self.settings.max_answer_chars)
                if turn.size > self.settings.max_answer_chars:
                    raise StreamError(
                        f"the model's answer passed {self.settings.max_answer_chars} "
                        "characters without ending (agent.max_answer_chars, tool calls "
                        "included); stopped: it may be repeating itself"
                    )
                if chunk.done:
                    turn.done_reason = chunk.done_reason
                    turn.stats = chunk.stats or Stats()
        except BaseException:
            # Ctrl-C, a closed generator or a broken stream: keep what arrived.
            if turn.content or turn.thinking:
                conversation.append(turn.message([], turn.content))
            raise

    def _wrap_up(
        self,
        conversation: list[Message],
        info: ModelInfo,
        steps: int,
        request_tools: list[dict[str, Any]],
        tools_cost: int,
    ) -> Generator[Event, None, tuple[str, Stats]]:
        """One last call that wants no tool call: the model reports what it did and what is
        left. Its answer is kept in the conversation; the request for it is not."""
        # Sent with the turn's tools, as every request of it was (the tools lead the prompt:
        # without them the server would evaluate the whole prompt again), and tool_choice
        # "none" where the protocol has it; the question itself asks for no call. It goes
        # after the conversation as it is fitted, so that a compaction never takes this turn
        # for an earlier one.
        plan = self._plan(conversation, info, tools_cost, None)
        question: Message = {"role": "user", "content": WRAP_UP.format(steps=steps)}
        plan = dataclasses.replace(
            plan,
            messages=[*plan.messages, question],
            estimate=plan.estimate + message_tokens(question),
        )
        turn = _Turn()
        yield Notice("step limit reached: asking the model to sum up what it did")
        yield from self._fitted(plan, info)
        try:
            request = self._request(plan, info, request_tools, tool_choice="none")
            yield from self._stream(request, turn, [])
        except AgentError as exc:
            yield Notice(f"no summary: {exc.message}")
            return "", Stats()
        text = turn.content.strip()
        if not text and turn.calls:
            # Ollama has no tool_choice: the question asks for no call, and a model may
            # make one anyway. It is not run; there is no summary.
            yield Notice("no summary: the model called a tool instead of summing up")
        if text:
            conversation.append({"role": "assistant", "content": turn.content})
            read = read_reply(text, ()) if self._constrains(self.tool_mode(info)) else None
            if read is not None and read[1]:  # the prompt asked for JSON: {"answer": …}
                text = read[1].strip()
        return text, turn.stats

    def _cut_notice(self, info: ModelInfo, plan: _Plan) -> str:
        """What to do about an answer the server ended for length."""
        predict = _positive_int(self.settings.options.get("num_predict"))
        fixed = info.fixed_context
        if predict:
            sent = f"sent as max_tokens {predict}" if fixed else f"{predict} tokens"
            return (
                f"the answer was cut at ollama.options.num_predict ({sent}): raise it for "
                "longer answers, or ask for less"
            )
        if fixed:
            return (
                "the answer was cut by the server's limit on its length or by the end of its "
                "context: set ollama.options.num_predict (sent as max_tokens) to the room an "
                "answer needs, or raise the server's own limit (llama-server: -n), or ask for less"
            )
        return (
            f"the answer was cut when the context was full (num_ctx {plan.num_ctx}): set "
            "ollama.options.num_predict to the room an answer needs (the context grows to "
            "hold it), or ask for less"
        )

    def summarise(self, conversation: list[Message]) -> Generator[Event, None, str]:
        """`/compact summary`: the model's summary of the conversation so far, asked as one
        more message after it (so the request appends to what the server has cached, with
        the same tools). Neither the question nor the answer joins the conversation."""
        yield from self._prewarmed()
        info = self.model_info()
        self._last_request = None  # asked for by the user, maybe again
        tools = self._request_tools(info)
        tools_cost = tools_cost_of(tools) + self._context_cost()
        plan = self._plan(conversation, info, tools_cost, self._held.get(info.name))
        yield from self._fitted(plan, info)
        question: Message = {"role": "user", "content": SUMMARISE}
        plan = dataclasses.replace(
            plan,
            messages=[*plan.messages, question],
            estimate=plan.estimate + message_tokens(question),
        )
        turn = _Turn()
        yield from self._stream(self._request(plan, info, tools, tool_choice="none"), turn, [])
        self._held[info.name] = max(plan.num_ctx, self._held.get(info.name, 0))
        text = turn.content.strip()
        if turn.done_reason == "length":
            raise AgentError(
                "the model's summary was cut for length, so none is kept: set "
                "ollama.options.num_predict higher, or use /compact without a summary"
            )
        if not text:
            raise AgentError(
                "the model sent no summary (it may have called a tool instead); "
                "/compact leaves history out without one"
            )
        if len(text) > MAX_SUMMARY_CHARS:
            text = text[:MAX_SUMMARY_CHARS] + " [summary cut]"
        return text

    def _refused_tool_role(self, exc: AgentError, mode: str, conversation: list[Message]) -> bool:
        """Prompt mode sends no `tools`, and a few servers then refuse `role: tool` messages:
        from then on this model gets its results as labelled user messages. True: retry."""
        model = self.settings.model
        if mode != "prompt" or model in self._no_tool_role or not rejects_tool_role(exc.message):
            return False
        if not any(m.get("role") == "tool" for m in conversation):
            return False
        if self._user_results(self.model_info()):
            return False  # they went as labelled user messages already: nothing to change
        self._no_tool_role.add(model)
        return True
