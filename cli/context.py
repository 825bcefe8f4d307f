"""Fitting a conversation into the model's context window (seed §8.3), by estimate (pure).

Ollama cuts an over-long prompt silently from the front, system prompt and tool definitions
first, and still answers 200. So we trim ourselves, keeping ~20 % headroom: the system
prompt and the current turn always stay; older turns go whole, oldest first, so an assistant
message with tool calls is never separated from its tool results.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from cli.backends.messages import Message

HEADROOM = 0.8
_MESSAGE_OVERHEAD = 4  # role markers and separators of a chat template


def estimate_tokens(text: str) -> int:
    """About 4 characters a token for ASCII text, about one a token for CJK and other
    non-ASCII scripts: rough, but on the safe side for code and prose."""
    ascii_chars = sum(1 for c in text if c < "\x80")
    return (ascii_chars + 3) // 4 + (len(text) - ascii_chars)


def message_tokens(message: Mapping[str, Any]) -> int:
    total = _MESSAGE_OVERHEAD
    for key in ("content", "thinking"):
        value = message.get(key)
        if isinstance(value, str):
            total += estimate_tokens(value)
    if message.get("tool_calls"):
        total += estimate_tokens(json.dumps(message["tool_calls"], ensure_ascii=False))
    return total


def fit_messages(messages: Sequence[Message], budget: int) -> list[Message]:
    """The messages to send: system + as many whole recent turns as fit in `budget` tokens;
    if the current turn alone is too big, its oldest tool results are shortened."""
    if not messages:
        return []
    system = [messages[0]] if messages[0].get("role") == "system" else []
    turns = _split_turns(list(messages[len(system) :]))
    if not turns:
        return list(system)
    remaining = budget - sum(message_tokens(m) for m in system)
    current = turns[-1]
    remaining -= sum(message_tokens(m) for m in current)
    kept: list[list[Message]] = []
    for turn in reversed(turns[:-1]):
        cost = sum(message_tokens(m) for m in turn)
        if cost > remaining:
            break
        kept.insert(0, turn)
        remaining -= cost
    if remaining < 0:
        current = _shorten_tool_results(current, -remaining)
    return [*system, *(m for turn in kept for m in turn), *current]


def _split_turns(messages: list[Message]) -> list[list[Message]]:
    """A turn starts at each user message and runs to the next one."""
    turns: list[list[Message]] = []
    for message in messages:
        if message.get("role") == "user" or not turns:
            turns.append([])
        turns[-1].append(message)
    return turns


def _shorten_tool_results(turn: list[Message], excess: int) -> list[Message]:
    out = []
    for message in turn:
        content = message.get("content")
        if excess > 0 and message.get("role") == "tool" and isinstance(content, str):
            tokens = estimate_tokens(content)
            keep_tokens = max(64, tokens - excess)
            if keep_tokens < tokens:
                keep_chars = keep_tokens * 4 if content.isascii() else keep_tokens
                cut = len(content) - keep_chars
                message = {
                    **message,
                    "content": content[:keep_chars]
                    + f"\n[{cut} characters cut to fit the context window]",
                }
                excess -= tokens - keep_tokens
        out.append(message)
    return out


def shrink_result(result: Mapping[str, Any], max_chars: int) -> dict[str, Any]:
    """A tool result whose JSON stays under `max_chars`: the longest text fields are cut
    (never the structure, so the model still reads valid JSON)."""
    shrunk = dict(result)
    size = len(json.dumps(shrunk, ensure_ascii=False))
    if size <= max_chars:
        return shrunk
    for key in sorted(
        (k for k, v in shrunk.items() if isinstance(v, str)), key=lambda k: -len(shrunk[k])
    ):
        over = size - max_chars
        if over <= 0:
            break
        value: str = shrunk[key]
        keep = max(0, len(value) - over - 100)
        shrunk[key] = value[:keep] + f"\n[{len(value) - keep} characters cut: result too long]"
        size = len(json.dumps(shrunk, ensure_ascii=False))
    shrunk["cut_for_context"] = True
    return shrunk
