"""Fitting history into the context window (seed §8.3)."""

from __future__ import annotations

import json
from typing import Any

from cli.context import estimate_tokens, fit_messages, message_tokens, shrink_result

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


def test_everything_is_kept_when_it_fits() -> None:
    messages = [SYSTEM, *turn(1), *turn(2)]
    assert fit_messages(messages, 100_000) == messages


def test_oldest_turns_go_first_and_the_system_prompt_stays() -> None:
    messages = [SYSTEM, *turn(1, 400), *turn(2, 400), *turn(3, 400)]
    budget = sum(message_tokens(m) for m in [SYSTEM, *turn(2, 400), *turn(3, 400)])
    fitted = fit_messages(messages, budget)
    assert fitted[0] == SYSTEM
    assert [m["content"] for m in fitted if m["role"] == "user"] == ["question 2", "question 3"]


def test_a_tool_call_is_never_separated_from_its_results() -> None:
    messages = [SYSTEM, *turn(1, 100, tools=3), *turn(2, 100, tools=2), *turn(3, 10)]
    for budget in range(50, 2000, 25):
        fitted = fit_messages(messages, budget)
        for index, message in enumerate(fitted):
            if message.get("tool_calls"):
                following = fitted[index + 1 : index + 1 + len(message["tool_calls"])]
                assert [m["role"] for m in following] == ["tool"] * len(message["tool_calls"])
            if message["role"] == "tool":
                assert any(m.get("tool_calls") for m in fitted[:index])


def test_the_current_turn_stays_and_its_big_results_are_shortened() -> None:
    current = turn(9, 5000, tools=2)
    fitted = fit_messages([SYSTEM, *turn(1), *current], 1000)
    assert [m["role"] for m in fitted] == ["system"] + [m["role"] for m in current]
    tool_contents = [m["content"] for m in fitted if m["role"] == "tool"]
    assert any("characters cut to fit the context window" in c for c in tool_contents)
    assert sum(message_tokens(m) for m in fitted) < sum(
        message_tokens(m) for m in [SYSTEM, *current]
    )


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
