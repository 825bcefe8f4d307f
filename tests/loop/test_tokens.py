"""Fitting history into the context window (seed §8.3)."""

from __future__ import annotations

import json
from typing import Any

from cli.loop.tokens import estimate_tokens, message_tokens, shrink_result

SYSTEM = {"role": "system", "content": "rules"}


def turn(i: int, words: int = 50, tools: int = 0) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": f"question {i}"}]
    if tools:
        calls = [
            {"function": {"name": "read_file", "arguments": {"path": f"f{j}"}}}
            for j in range(tools)
        ]
        messages.append({"role": "assistant", "content": "", "tool_calls": calls})
        messages += [
            {"role": "tool", "tool_name": "read_file", "content": "x " * words}
            for _ in range(tools)
        ]
    messages.append({"role": "assistant", "content": f"answer {i} " + "word " * words})
    return messages


def test_token_estimate_counts_cjk_as_one_token_per_character() -> None:
    assert estimate_tokens("abcd" * 100) == 100
    assert estimate_tokens("文件" * 50) == 100


def test_shrink_result_keeps_valid_json_under_the_limit() -> None:
    result = {"success": True, "path": "/x", "content": "y" * 100_000}
    shrunk = shrink_result(result, 5000)
    assert len(json.dumps(shrunk, ensure_ascii=False)) <= 5000
    assert shrunk["cut_for_context"] is True and shrunk["path"] == "/x"
    assert shrink_result({"success": True}, 5000) == {"success": True}


def test_a_message_changed_in_place_is_estimated_afresh() -> None:
    """message_tokens remembers its answer per message (a step estimates the whole history
    again): a message whose content or thinking is replaced is not answered from memory,
    and one with tool calls (a list that could change in place) is never remembered."""
    message: dict[str, object] = {"role": "tool", "content": "x" * 4000}
    first = message_tokens(message)
    assert message_tokens(message) == first == 4 + 1000
    message["content"] = "y" * 400
    assert message_tokens(message) == 4 + 100
    message["thinking"] = "z" * 40
    assert message_tokens(message) == 4 + 110
    calls: list[dict[str, object]] = []
    assistant = {"role": "assistant", "content": "", "tool_calls": calls}
    before = message_tokens(assistant)
    calls.append({"function": {"name": "read_file", "arguments": {"path": "b" * 400}}})
    assert message_tokens(assistant) > before + 100
    calls.append({"function": {"name": "write_file", "arguments": {"path": "c"}}})
    assert message_tokens(assistant) > before + 110
