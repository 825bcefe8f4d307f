"""The OpenAI-compatible dialect without the HTTP: our history in its message shapes, its
answers (streamed deltas or one whole message) accumulated into what the loop takes, and the
small readers both need. Pure; `openai.py` is the client that sends and receives.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeGuard

from cli.backends.messages import (
    ChatChunk,
    Message,
    Stats,
    ToolCall,
    loads_json,
    tool_call,
)
from cli.backends.mime import encoded_type
from cli.errors import StreamError

NS = 1_000_000_000

_CAPABILITY_NAMES = {
    "tools": "tools",
    "tool_use": "tools",
    "function_calling": "tools",
    "thinking": "thinking",
    "reasoning": "thinking",
    "vision": "vision",
    "completion": "completion",
    "chat": "completion",
}
_CONTEXT_ERROR = re.compile(
    r"context (length|window|size)|maximum context|too many tokens|prompt is too long"
    r"|exceeds? the (available )?context|context_length_exceeded|exceed_context_size"
    r"|cannot truncate prompt",
    re.IGNORECASE,
)
# The numbers in a context error. The context the server runs the model with: "This model's
# maximum context length is 2048 tokens" (llama-cpp-python, vLLM), "exceeds the available
# context size (4096 tokens)" (llama-server), "loaded with context length of only 4096 tokens"
# and "n_keep (15028) >= n_ctx (7424)" (LM Studio).
_SERVED_CONTEXT = re.compile(
    r"maximum context length is (\d+)|context size \((\d+) tokens\)"
    r"|context length of only (\d+)|n_ctx \((\d+)\)",
    re.IGNORECASE,
)
# The prompt as the server counted it: "(14768 in the messages, …)" (llama-cpp-python, older
# vLLM), "your request has 5000 input tokens", "your prompt contains at least 6145 input
# tokens" (newer vLLM), "request (4476 tokens) exceeds" (llama-server), "keep the first 10136
# tokens" and "n_keep (15028)" (LM Studio). Never "you requested N tokens": that N holds the
# reply's budget too.
_PROMPT_TOKENS = re.compile(
    r"\((\d+) in the messages|request has (\d+) input tokens|contains at least (\d+) input"
    r"|request \((\d+) tokens\)|keep the first (\d+) tokens|n_keep \((\d+)\)"
    r"|messages resulted in (\d+) tokens",
    re.IGNORECASE,
)
_CALL_ID = re.compile(r"call_(\d{1,9})")


# -- the answer, accumulated --------------------------------------------------------------


@dataclass
class PartialCall:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)  # fragments, joined at the end


@dataclass
class Answer:
    """One model call as it arrived: streamed deltas or one non-streamed message."""

    started: float = 0.0
    ended: float = 0.0
    first_token: float | None = None
    content: str = ""
    thinking: str = ""
    calls: list[PartialCall] = field(default_factory=list)
    slots: dict[int, int] = field(default_factory=dict)  # the server's index → calls[i]
    finish_reason: str | None = None
    usage: dict[str, Any] | None = None
    events: int = 0
    text_deltas: int = 0  # deltas that carried text: the token count when usage is missing
    done: bool = False  # [DONE] arrived
    shown: bool = False  # content or thinking was yielded to the loop
    call_chars: int = 0
    extra_eval: int = 0  # tokens of an earlier streamed attempt (see merge_stats)
    extra_eval_ns: int = 0

    @classmethod
    def from_completion(cls, data: Any) -> Answer:
        """A non-streamed answer: one `message` with the whole content and calls."""
        choice = first_choice(data)
        message = as_dict(choice.get("message"))
        answer = cls(finish_reason=str_or_none(choice.get("finish_reason")))
        usage = as_dict(data).get("usage")
        answer.usage = usage if isinstance(usage, dict) else None
        answer.content = as_str(message.get("content"))
        answer.thinking = _reasoning(message)
        calls = message.get("tool_calls")
        if not isinstance(calls, list) and isinstance(message.get("function_call"), dict):
            calls = [{"function": message["function_call"]}]  # the legacy single-call form
        for raw in as_list(calls):
            answer.add_delta(as_dict(raw), len(answer.calls))
        return answer

    @property
    def needs_redo(self) -> bool:
        if not self.events:  # an empty (or at once dropped) stream: nothing to go on
            return True
        return not self.calls and self.finish_reason in ("tool_calls", "function_call")

    def add_event(self, data: Mapping[str, Any], clock: Callable[[], float]) -> ChatChunk | None:
        self.events += 1
        if isinstance(data.get("usage"), dict):
            self.usage = data["usage"]  # the last chunk, with stream_options.include_usage
        choice = first_choice(data)
        if choice.get("finish_reason"):
            self.finish_reason = str_or_none(choice["finish_reason"])
        delta = as_dict(choice.get("delta"))
        content = as_str(delta.get("content"))
        thinking = _reasoning(delta)
        raw_calls = delta.get("tool_calls")
        if not isinstance(raw_calls, list) and isinstance(delta.get("function_call"), dict):
            raw_calls = [{"index": 0, "function": delta["function_call"]}]
        for raw in raw_calls if isinstance(raw_calls, list) else ():
            self.add_delta(as_dict(raw), None)
        if (content or thinking or raw_calls) and self.first_token is None:
            self.first_token = clock()
        if not (content or thinking):
            return None
        self.content += content
        self.thinking += thinking
        self.text_deltas += 1
        self.shown = True
        return ChatChunk(content=content, thinking=thinking)

    def add_delta(self, raw: Mapping[str, Any], position: int | None) -> None:
        """One tool-call delta (or, with `position`, one whole call). Deltas are keyed by
        `index`; a delta with a new `id` at an index already holding another call starts a
        call of its own (some servers number every call 0)."""
        function = as_dict(raw.get("function"))
        call_id = as_str(raw.get("id"))
        index = raw.get("index")
        if position is not None:
            index = -1 - position  # whole calls: one slot each, never merged
        elif not isinstance(index, int) or isinstance(index, bool):
            index = self._implied_index(call_id)
        slot = self.slots.get(index)
        if slot is not None and call_id and self.calls[slot].id and call_id != self.calls[slot].id:
            slot = None
        if slot is None:
            slot = self.slots[index] = len(self.calls)
            self.calls.append(PartialCall())
        call = self.calls[slot]
        call.id = call.id or call_id
        name = as_str(function.get("name"))
        # Set once: llama-cpp-python repeats the whole name (and id) in every delta.
        call.name = call.name or name
        arguments = function.get("arguments")
        if isinstance(arguments, (dict, list)):  # a server that sends an object, not a string
            arguments = json.dumps(arguments, ensure_ascii=False)
        if isinstance(arguments, str) and arguments:
            call.arguments.append(arguments)
            self.call_chars += len(arguments)
        self.call_chars += len(name)

    def _implied_index(self, call_id: str) -> int:
        """A server that leaves `index` out: a new id starts a call, anything else goes on
        with the last one."""
        if not self.calls or (call_id and call_id != self.calls[-1].id):
            return max(self.slots, default=-1) + 1
        return max(index for index, slot in self.slots.items() if slot == len(self.calls) - 1)

    def check_size(self, limit: int) -> None:
        """Tool-call arguments reach the loop only whole, at the end, so the loop's cap on an
        answer (agent.max_answer_chars, calls included) is applied to them here as well."""
        if len(self.content) + len(self.thinking) + self.call_chars > limit:
            raise StreamError(
                f"the model's answer passed {limit} characters without ending "
                "(agent.max_answer_chars, tool calls included); stopped: it may be repeating "
                "itself"
            )

    def merge_stats(self, streamed: Answer) -> None:
        """A non-streamed redo: its tokens add to those the streamed attempt generated, and
        its time runs from the start of that attempt."""
        self.extra_eval = token_count(streamed.usage, "completion_tokens") or streamed.text_deltas
        self.started = streamed.started
        self.first_token = streamed.first_token
        if self.usage is None:
            self.usage = streamed.usage

    def stats(self) -> Stats:
        """Token counts as the server reports them (`usage`); durations as measured here:
        time to the first token counts as prompt evaluation, the rest as generation. A stream
        without usage (llama-cpp-python ignores stream_options) counts one token a text delta,
        as those servers send them; the prompt then stays 0: unknown."""
        total = max(0, int((self.ended - self.started) * NS))
        first = self.first_token if self.first_token is not None else self.started
        prompt_ns = max(0, min(total, int((first - self.started) * NS)))
        generated = token_count(self.usage, "completion_tokens") or self.text_deltas
        return Stats(
            prompt_eval_count=token_count(self.usage, "prompt_tokens"),
            eval_count=generated + self.extra_eval,
            prompt_eval_duration=prompt_ns,
            eval_duration=total - prompt_ns,
            total_duration=total,
        )

    def chunks(self, calls: tuple[ToolCall, ...], *, text: bool = True) -> Iterator[ChatChunk]:
        """A whole answer as the loop takes it: its text (unless the streamed attempt showed
        text already — it stays, and the redo's is not shown twice), then the done chunk."""
        if text and (self.content or self.thinking):
            yield ChatChunk(content=self.content, thinking=self.thinking)
        yield ChatChunk(
            tool_calls=calls,
            done=True,
            done_reason=done_reason_of(self.finish_reason),
            stats=self.stats(),
        )


# -- history in this dialect ----------------------------------------------------------------


def wire_messages(messages: Sequence[Message]) -> tuple[list[dict[str, Any]], int]:
    """Our (Ollama-shaped) history → this dialect's messages, and the first free n for
    made-up `call_<n>` ids. An assistant message with tool calls carries `content: ""`
    (llama-cpp-python answers null with HTTP 500) and `arguments` as a JSON string; each
    result is `{"role": "tool", "tool_call_id", "content"}`. Calls without an id (a session
    from an old Ollama) get `call_h<n>` here, the same for the call and its result, and the
    same on every request: numbered in order from the start of the history, apart from the
    `call_<n>` ids the client makes up for new calls, so that a longer history never renames
    an earlier call (the server's prompt cache still holds); `thinking` is not sent back (no
    field every server takes)."""
    history = _History(messages)
    return [history.convert(m) for m in messages], history.free


class _History:
    """The conversion's state: the next free `call_<n>`, and the calls of the last assistant
    message that no result has answered yet."""

    def __init__(self, messages: Sequence[Message]) -> None:
        ids = [as_str(as_dict(c).get("id")) for m in messages for c in as_list(m.get("tool_calls"))]
        ids += [as_str(m.get("tool_call_id")) for m in messages]
        numbers = [int(found.group(1)) for i in ids if (found := _CALL_ID.fullmatch(i))]
        self.free = max(numbers, default=-1) + 1
        self._taken = set(ids)
        self._made = 0  # call_h<n> made up so far
        self.pending: list[tuple[str, str]] = []  # (id, name), in order

    def convert(self, message: Message) -> dict[str, Any]:
        role = as_str(message.get("role"))
        content = as_str(message.get("content"))
        if role == "tool":
            call_id = as_str(message.get("tool_call_id")) or self._answered(message)
            self.pending = [p for p in self.pending if p[0] != call_id]
            return {"role": "tool", "tool_call_id": call_id, "content": content}
        wire: dict[str, Any] = {"role": role, "content": content}
        images = [i for i in as_list(message.get("images")) if isinstance(i, str)]
        if images and role == "user":  # Ollama's `images` as content parts with data URLs
            wire["content"] = [
                {"type": "text", "text": content},
                *({"type": "image_url", "image_url": {"url": _data_url(i)}} for i in images),
            ]
        calls = as_list(message.get("tool_calls")) if role == "assistant" else []
        if calls:
            self.pending = []
            wire["tool_calls"] = [self._call(as_dict(call)) for call in calls]
        return wire

    def _call(self, call: Mapping[str, Any]) -> dict[str, Any]:
        call_id = as_str(call.get("id")) or self._new_id()
        function = as_dict(call.get("function"))
        name = as_str(function.get("name"))
        arguments = function.get("arguments")
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments or {}, ensure_ascii=False)
        self.pending.append((call_id, name))
        return {
            "id": call_id,
            "type": "function",
            "function": {"name": name, "arguments": arguments},
        }

    def _answered(self, result: Message) -> str:
        """The call a result without an id answers: the first open one of its tool's name,
        else the first open one (the loop appends results in the calls' order)."""
        name = as_str(result.get("tool_name"))
        match = next((p for p in self.pending if p[1] == name), None)
        match = match or (self.pending[0] if self.pending else None)
        return match[0] if match else self._new_id()

    def _new_id(self) -> str:
        while True:
            made, self._made = f"call_h{self._made}", self._made + 1
            if made not in self._taken:
                return made


def parse_arguments(name: str, text: str, call_id: str | None) -> ToolCall:
    """The concatenated argument fragments of one call → a ToolCall; arguments that are not
    a JSON object become `arguments_error`, which the model reads back."""
    return tool_call(name, text, call_id)


# -- readers ------------------------------------------------------------------------------------


def sse_field(line: bytes) -> tuple[bytes, bytes]:
    """One SSE line as (field, value): (b"", b"") for a blank line, (b":", b"") for a comment
    (`: ping`). A line that is no SSE field at all means this is not an SSE stream."""
    if not line:
        return b"", b""
    if line.startswith(b":"):
        return b":", b""
    name, colon, value = line.partition(b":")
    if colon and name in (b"data", b"event", b"id", b"retry"):
        return name, value[1:] if value.startswith(b" ") else value
    preview = line[:80].decode("utf-8", "replace")
    raise StreamError(
        f"the server sent a line that is not JSON in server-sent events: {preview!r}; "
        "is it an OpenAI-compatible server?"
    )


def _reasoning(message: Mapping[str, Any]) -> str:
    """Thinking is `reasoning_content` (llama.cpp, DeepSeek, LM Studio) or `reasoning`
    (Ollama, newer vLLM); some servers send both with the same text."""
    return as_str(message.get("reasoning_content")) or as_str(message.get("reasoning"))


def first_choice(data: Any) -> dict[str, Any]:
    choices = data.get("choices") if isinstance(data, dict) else None
    if isinstance(choices, list):
        for choice in choices:
            if isinstance(choice, dict) and choice.get("index", 0) == 0:
                return choice
    return {}


def _data_url(encoded: str) -> str:
    return f"data:{encoded_type(encoded)};base64,{encoded}"


def capabilities_of(raw: Any) -> frozenset[str] | None:
    if not isinstance(raw, list) or not raw:
        return None
    names = {_CAPABILITY_NAMES.get(str(c).lower()) for c in raw}
    return frozenset(n for n in names if n)


def done_reason_of(finish_reason: str | None) -> str:
    # As on Ollama, "stop" also for a tool turn: the calls themselves say it is one.
    if finish_reason in (None, "tool_calls", "function_call"):
        return "stop"
    return finish_reason


def error_parts(body: str) -> tuple[str, str]:
    """The message and code of an error body: OpenAI's {"error": {"message", "code"}}, a bare
    {"error": "text"}, vLLM's older {"object": "error", "message"}, FastAPI's {"detail"}."""
    try:
        data = loads_json(body)
    except ValueError:
        return "", ""
    if not isinstance(data, dict):
        return "", ""
    error = data.get("error", data)
    if isinstance(error, str):
        return error, ""
    if not isinstance(error, dict):
        return "", ""
    message = error.get("message", error.get("detail", ""))
    code = " ".join(str(error[k]) for k in ("code", "type") if error.get(k))
    return (message if isinstance(message, str) else ""), code


def is_context_error(detail: str, code: str) -> bool:
    return bool(_CONTEXT_ERROR.search(detail) or _CONTEXT_ERROR.search(code))


def context_numbers(body: str) -> tuple[int | None, int | None]:
    """The context the server runs the model with and the prompt's size in its tokens, as a
    context error states them (None where it does not): llama-server's `n_ctx` and
    `n_prompt_tokens` fields, else the numbers in the message."""
    try:
        data = loads_json(body)
    except ValueError:
        data = None
    error = as_dict(as_dict(data).get("error", data))
    served, prompt = error.get("n_ctx"), error.get("n_prompt_tokens")
    text = body if not isinstance(error.get("message"), str) else error["message"]
    return (
        served if positive(served) else _first_number(_SERVED_CONTEXT, text),
        prompt if positive(prompt) else _first_number(_PROMPT_TOKENS, text),
    )


def _first_number(pattern: re.Pattern[str], text: str) -> int | None:
    found = pattern.search(text)
    number = next((int(g) for g in found.groups() if g), 0) if found else 0
    return number or None


def token_count(usage: Mapping[str, Any] | None, key: str) -> int:
    value = (usage or {}).get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def positive(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def as_dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def as_str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def one_line(text: str) -> str:
    """Error texts may hold newlines (an HTML page, a model's raw output); ours are one line."""
    return " ".join(text.split())
