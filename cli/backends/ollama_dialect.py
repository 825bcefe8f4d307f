"""Ollama's native API without the HTTP: /api/chat's body, its NDJSON chunks (and the tool
calls in them) as the loop takes them, and the small readers of its answers. Pure;
`ollama.py` is the client that sends and receives.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from cli.backends.messages import ChatChunk, ChatRequest, Stats, ToolCall, loads_json, tool_call


def _version_at_least(version: str, least: tuple[int, ...]) -> bool:
    """ "0.12.3" (or "0.5.0-rc1") at least `least`; False for what is not a version."""
    parts = re.findall(r"\d+", version.split("-")[0])[: len(least)]
    return len(parts) == len(least) and tuple(int(p) for p in parts) >= least


def _chat_body(request: ChatRequest, *, stream: bool) -> dict[str, Any]:
    """/api/chat's body for `request`, without its reply format."""
    body: dict[str, Any] = {
        "model": request.model,
        "messages": request.messages,
        "stream": stream,
        "options": dict(request.options),
        # An over-long prompt is an error (ContextTooLong), never cut silently from the
        # front, system prompt and tools first (api/types.go ChatRequest; v0.12.6+, older
        # servers ignore the fields).
        "truncate": False,
        "shift": False,
    }
    if request.tools:
        body["tools"] = request.tools
    if request.think is not None:
        body["think"] = request.think
    if request.keep_alive is not None:
        body["keep_alive"] = request.keep_alive
    return body


def _refuses_format(message: str) -> bool:
    """An HTTP error about the JSON schema sent as `format` (not about the prompt)."""
    low = message.lower()
    return "format" in low and ("schema" in low or "grammar" in low or "invalid" in low)


def parse_chunk(data: Mapping[str, Any]) -> ChatChunk:
    """One NDJSON object from /api/chat → a ChatChunk (tool calls normalised)."""
    message = data.get("message")
    if type(message) is dict and not data.get("done") and "tool_calls" not in message:
        # The usual chunk, a token of text or thinking: what the general case below gives.
        content, thinking = message.get("content"), message.get("thinking")
        return ChatChunk(
            content=content if type(content) is str else "",
            thinking=thinking if type(thinking) is str else "",
        )
    if not isinstance(message, dict):
        message = {}
    done = bool(data.get("done"))
    stats = None
    if done:
        stats = Stats(
            **{
                name: _int(data.get(name))
                for name in (
                    "prompt_eval_count",
                    "eval_count",
                    "eval_duration",
                    "prompt_eval_duration",
                    "load_duration",
                    "total_duration",
                )
            }
        )
    raw_calls = message.get("tool_calls")
    calls = tuple(parse_tool_call(c) for c in raw_calls) if isinstance(raw_calls, list) else ()
    return ChatChunk(
        content=_str(message.get("content")),
        thinking=_str(message.get("thinking")),
        tool_calls=calls,
        done=done,
        done_reason=data.get("done_reason") if done else None,
        stats=stats,
    )


def parse_tool_call(raw: Any) -> ToolCall:
    """Normalise one tool call. Some models send `arguments` as a JSON string: parse it; the
    loop always sends an object back."""
    if not isinstance(raw, dict):
        return ToolCall("", {}, arguments_error="the tool call is not an object")
    function = raw["function"] if isinstance(raw.get("function"), dict) else raw
    name = _str(function.get("name"))
    call_id = raw.get("id") if isinstance(raw.get("id"), str) else None
    return tool_call(name, function.get("arguments", {}), call_id)


def _context_length(model_info: Any) -> int | None:
    if not isinstance(model_info, dict):
        return None
    for key, value in model_info.items():
        if key.endswith(".context_length") and isinstance(value, int):
            return value
    return None


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def one_line(text: str) -> str:
    """Error texts from servers may hold newlines (an HTML page, a model's raw output);
    our messages are one line."""
    return " ".join(text.split())


def _error_text(body: str) -> str:
    try:
        data = loads_json(body)
    except ValueError:  # JSONTooDeep included: then the raw text is shown, cut short
        return ""
    if isinstance(data, dict):
        err = data.get("error")
        if isinstance(err, dict):  # OpenAI-style {"error": {"message": ...}}
            err = err.get("message")
        if isinstance(err, str):
            return err
    return ""
