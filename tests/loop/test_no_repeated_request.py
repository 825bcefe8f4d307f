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
from cli.loop.events import Notice
from cli.loop.requests import ASK_AGAIN
from tests.conftest import MakeAgent, RunCli
from tests.fakes.fake_ollama import FakeOllama, HttpError, Stream, context_error, reply, tool_call
from tests.fakes.fake_openai import Answer, FakeOpenAI
from tests.fakes.fake_openai import HttpError as OpenAIHttpError

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
    from cli.loop.streaming import _Turn

    return _Turn()


def test_asked_again_after_labelled_results_no_two_user_messages_follow_each_other(
    make_agent: MakeAgent, ollama: FakeOllama, workspace: Path
) -> None:
    (workspace / "a.txt").write_text("a\n")
    ollama.enqueue(reply(f"<tool_call>{json.dumps(CALL)}</tool_call>"), reply(""), reply("a"))
    make_agent("agent: {tool_mode: prompt}\n").run("read a.txt")
    again = ollama.chat_bodies[-1]["messages"]
    roles = [m["role"] for m in again]
    assert all(not (a == b == "user") for a, b in itertools.pairwise(roles)), roles
    assert again[-1]["content"].startswith("[tool result of read_file]")
    assert again[-1]["content"].endswith(ASK_AGAIN)


def test_a_wrap_up_answered_with_a_call_says_there_is_no_summary(
    make_agent: MakeAgent, ollama: FakeOllama, workspace: Path
) -> None:
    (workspace / "a.txt").write_text("a\n")
    ollama.enqueue(_read("a.txt"), _read("a.txt"), _read("a.txt"))
    events = make_agent("agent: {max_steps: 2}\n").run("read a.txt")
    said = [e.text for e in events if isinstance(e, Notice)]
    assert "no summary: the model called a tool instead of summing up" in said
    assert events[-1].stop_reason == "max_steps"


def test_a_fixed_context_server_is_not_sent_the_same_bytes_again(
    run_cli: RunCli, openai: FakeOpenAI
) -> None:
    """LM Studio's refusal says the context it runs with and /models says nothing: the retry
    could differ only in num_ctx, which such a server is never sent."""
    too_long = (
        "Trying to keep the first tokens when context the overflows. However, the model is "
        "loaded with context length of only 4096 tokens, which is not enough."
    )
    openai.enqueue(OpenAIHttpError(400, too_long), OpenAIHttpError(400, too_long), Answer("never"))
    r = run_cli("run", "--api", "openai", "--host", openai.url, "hi " * 1200)
    assert r.code == 1
    bodies = openai.chat_bodies
    assert all(a != b for a, b in itertools.pairwise(bodies)), len(bodies)
