"""No request is sent twice in a row within a turn: the server would evaluate it again (and,
for a refusal, refuse it again). Every retry the loop makes sends something else, and the one
place that sends a request refuses one identical to the last (Agent._stream)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest

from cli.backends.messages import ChatRequest
from cli.errors import AgentError, ContextTooLong
from tests.conftest import MakeAgent
from tests.fakes.fake_ollama import FakeOllama, HttpError, Stream, context_error, reply, tool_call

BIG = "".join(f"line {i}: some value\n" for i in range(400))
CALL = {"name": "read_file", "arguments": {"path": "a.txt"}}


def _read(path: str) -> Any:
    return reply(tool_calls=[tool_call("read_file", {"path": path})])


# Each case: the config, what the server answers in order, and whether the turn fails.
CASES = {
    "empty answer, then one": ("", [reply(""), reply("done")], False),
    "empty answer twice": ("", [reply(""), reply("")], False),
    "empty answer after a tool result": ("", [_read("a.txt"), reply(""), reply("a")], False),
    "context refusal after a long read": (
        "ollama: {max_num_ctx: 8192}\n",
        [_read("big.txt"), context_error(), reply("done")],
        False,
    ),
    "context refusal of the user's message alone": (
        "ollama: {max_num_ctx: 8192}\n",
        [context_error(), reply("never asked for")],
        True,
    ),
    "tool role refused": (
        "agent: {tool_mode: prompt, aids: off}\n",
        [
            reply(f"<tool_call>{json.dumps(CALL)}</tool_call>"),
            HttpError(400, "invalid message role: tool"),
            reply("a"),
        ],
        False,
    ),
    "labelled results refused": (
        "agent: {tool_mode: prompt}\n",
        [
            reply(f"<tool_call>{json.dumps(CALL)}</tool_call>"),
            HttpError(400, "invalid message role: tool"),
            reply("never asked for"),
        ],
        True,
    ),
    "a tool call the server could not parse": (
        "",
        [
            Stream(
                [
                    {"model": "qwen3:8b", "message": {"role": "assistant", "content": "x"}},
                    {"error": "error parsing tool call: raw='{bad'"},
                ]
            ),
            reply("done"),
        ],
        False,
    ),
    "the step limit's summary": (
        "agent: {max_steps: 2}\n",
        [_read("a.txt"), _read("a.txt"), reply("I read a.txt twice.")],
        False,
    ),
}


@pytest.mark.parametrize("case", CASES)
def test_no_turn_sends_the_same_request_twice_in_a_row(
    make_agent: MakeAgent, ollama: FakeOllama, workspace: Path, case: str
) -> None:
    config, answers, fails = CASES[case]
    (workspace / "a.txt").write_text("a\n")
    (workspace / "big.txt").write_text(BIG)
    ollama.enqueue(*answers)
    harness = make_agent(config)
    prompt = "summarise:\n\n" + BIG if "alone" in case else "read a.txt"
    if fails:
        with pytest.raises(AgentError):
            harness.run(prompt)
    else:
        harness.run(prompt)
    bodies = ollama.chat_bodies
    assert len(bodies) >= 1 + (not fails)
    for before, after in itertools.pairwise(bodies):
        assert after != before, f"{case}: the same request was sent twice in a row"
    assert ollama.pending <= 1  # nothing asked for that the case did not expect


def test_the_refused_message_alone_is_said_not_resent(
    make_agent: MakeAgent, ollama: FakeOllama
) -> None:
    ollama.enqueue(context_error(), reply("never asked for"))
    with pytest.raises(ContextTooLong, match="does not fit the model's context"):
        make_agent("ollama: {max_num_ctx: 8192}\n").run("summarise:\n\n" + BIG)
    assert len(ollama.chat_bodies) == 1


def test_the_one_place_that_sends_refuses_the_last_request_again(
    make_agent: MakeAgent, ollama: FakeOllama
) -> None:
    """The guard itself: whatever path would reach it with the same request."""
    ollama.enqueue(reply("once"), reply("twice"))
    agent = make_agent().agent
    request = ChatRequest("qwen3:8b", [{"role": "user", "content": "hi"}])
    list(agent._stream(request, _turn(), []))
    with pytest.raises(AgentError, match="the same request was about to be sent twice"):
        list(agent._stream(request, _turn(), []))
    assert len(ollama.chat_bodies) == 1


def _turn() -> Any:
    from cli.loop.agent import _Turn

    return _Turn()
