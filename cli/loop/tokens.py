"""Our estimate of what a message costs in tokens, and tool results cut to a size (pure).

Ollama cuts an over-long prompt silently from the front, system prompt and tool definitions
first (and, sent `truncate: false`, refuses it instead). So we fit history ourselves into
the `num_ctx` chosen for the request (cli/loop/sizing.py), less the room kept for the reply, by
this estimate corrected by what the server counted (cli/loop/sizing.py's Calibration); how the
history is fitted, append-only between compactions, is cli/loop/window.py.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

_MESSAGE_OVERHEAD = 4  # role markers and separators of a chat template
# An image a message carries (cli/loop/images.py), in our estimate: gemma3 takes 256 tokens an
# image, llava 576, qwen2.5-vl up to a few thousand; the server's count corrects it.
IMAGE_TOKENS = 1024


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
    images = message.get("images")
    if isinstance(images, list):
        total += IMAGE_TOKENS * len(images)
    return total


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
