"""Fitting a conversation into the model's context window (seed §8.3), by estimate (pure).

Ollama cuts an over-long prompt silently from the front, system prompt and tool definitions
first (and, sent `truncate: false`, refuses it instead). So we fit history ourselves into
the `num_ctx` chosen for the request (cli/sizing.py), less the room kept for the reply: the
system prompt and the current turn always stay; older turns go whole, oldest first, so an
assistant message with tool calls is never separated from its tool results. When the server
still refuses the prompt, `trim_harder` cuts old tool results before whole turns.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cli.backends.messages import Message

_MESSAGE_OVERHEAD = 4  # role markers and separators of a chat template


def estimate_tokens(text: str) -> int:
    """About 4 characters a token for ASCII text, about one a token for CJK and other
    non-ASCII scripts: rough, but on the safe side for code and prose."""
    if text.isascii():  # C speed, the common case
        return (len(text) + 3) // 4
    ascii_chars = len(text.encode("ascii", "ignore"))  # the characters below U+0080
    return (ascii_chars + 3) // 4 + (len(text) - ascii_chars)


# message_tokens' answers by message: a step estimates every message of the history again
# (three times), and a tool result's content is large. An entry is used only while the
# message still holds the very same content and thinking strings (immutable: a message
# changed in place is estimated afresh); one with tool calls (a list, which could change
# in place) is never cached. An entry keeps its message alive, so its id is not reused;
# what the entries keep alive that the conversation no longer holds (after /clear, say) is
# bounded: past _MAX_HELD characters the cache starts afresh.
_ESTIMATES: dict[int, tuple[Mapping[str, Any], object, object, int]] = {}
_MAX_HELD = 32 * 1024 * 1024
_held = [0]


def message_tokens(message: Mapping[str, Any]) -> int:
    if message.get("tool_calls") is not None:
        return _message_tokens(message)
    key = id(message)
    content, thinking = message.get("content"), message.get("thinking")
    known = _ESTIMATES.get(key)
    if known is not None and known[0] is message and known[1] is content and known[2] is thinking:
        return known[3]
    tokens = _message_tokens(message)
    size = (len(content) if isinstance(content, str) else 0) + (
        len(thinking) if isinstance(thinking, str) else 0
    )
    if _held[0] + size > _MAX_HELD:
        _ESTIMATES.clear()
        _held[0] = 0
    _ESTIMATES[key] = (message, content, thinking, tokens)
    _held[0] += size
    return tokens


def _message_tokens(message: Mapping[str, Any]) -> int:
    total = _MESSAGE_OVERHEAD
    for key in ("content", "thinking"):
        value = message.get(key)
        if isinstance(value, str):
            total += estimate_tokens(value)
    if message.get("tool_calls"):
        total += estimate_tokens(json.dumps(message["tool_calls"], ensure_ascii=False))
    return total


def fit_messages(
    messages: Sequence[Message],
    budget: int,
    tokens: Callable[[Mapping[str, Any]], int] = message_tokens,
) -> list[Message]:
    """The messages to send: system + as many whole recent turns as fit in `budget` tokens;
    if the current turn alone is too big, its oldest tool results are shortened. `tokens`
    is message_tokens, or the same answers already known (the agent's plan has them)."""
    if not messages:
        return []
    system = [messages[0]] if messages[0].get("role") == "system" else []
    turns = _split_turns(list(messages[len(system) :]))
    if not turns:
        return list(system)
    remaining = budget - sum(tokens(m) for m in system)
    current = turns[-1]
    remaining -= sum(tokens(m) for m in current)
    kept: list[list[Message]] = []
    for turn in reversed(turns[:-1]):
        cost = sum(tokens(m) for m in turn)
        if cost > remaining:
            break
        kept.insert(0, turn)
        remaining -= cost
    if remaining < 0:
        current = _shorten_tool_results(current, -remaining)
    return [*system, *(m for turn in kept for m in turn), *current]


@dataclass(frozen=True)
class Trimmed:
    """History trimmed harder, and what it took."""

    messages: list[Message]
    results_cut: int = 0  # tool results removed or shortened
    turns_dropped: int = 0  # whole earlier turns left out


def trim_harder(messages: Sequence[Message], budget: int) -> Trimmed:
    """After the server refused a prompt as longer than its context: the messages cut to
    `budget` tokens in this order: tool results of earlier turns, oldest first, are removed;
    then earlier turns go whole, oldest first; then the current turn's tool results are
    shortened, oldest first. The system prompt and the current user message always stay
    (the tool definitions are not in `messages`: they are never cut either)."""
    if not messages:
        return Trimmed([])
    system = [messages[0]] if messages[0].get("role") == "system" else []
    turns = _split_turns(list(messages[len(system) :]))
    if not turns:
        return Trimmed(list(system))
    earlier, current = [list(t) for t in turns[:-1]], turns[-1]
    total = sum(message_tokens(m) for m in [*system, *(m for t in turns for m in t)])
    cut = 0
    for turn in earlier:
        for index, message in enumerate(turn):
            content = message.get("content")
            if total <= budget:
                break
            if message.get("role") != "tool" or not isinstance(content, str):
                continue
            stub = {**message, "content": _removed(len(content))}
            saved = message_tokens(message) - message_tokens(stub)
            if saved > 0:
                turn[index], total, cut = stub, total - saved, cut + 1
    dropped = 0
    while earlier and total > budget:
        total -= sum(message_tokens(m) for m in earlier.pop(0))
        dropped += 1
    if total > budget:
        shortened = _shorten_tool_results(current, total - budget)
        cut += sum(1 for old, new in zip(current, shortened, strict=True) if old is not new)
        current = shortened
    return Trimmed([*system, *(m for t in earlier for m in t), *current], cut, dropped)


def _removed(chars: int) -> str:
    note = (
        f"this tool result ({chars} characters) was removed to fit the context window; "
        "call the tool again if you still need it"
    )
    return json.dumps({"cut_for_context": True, "note": note})


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
