"""Loops that end well and tools for every model: the repeat guard, the step limit's wrap-up
(run) and question (chat), empty / thinking-only / cut answers, prompt mode for models
without tool support, and the retry when the server cannot parse a model's own call."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cli.errors import AgentError
from cli.loop.events import Finished, Notice, ToolDecided, ToolResult
from tests.conftest import MakeAgent, MakeChat, RunCli
from tests.fakes.fake_ollama import FakeOllama, HttpError, Stream, reply, tool_call


@pytest.fixture
def run_cli(run_cli_in_process: RunCli) -> RunCli:
    """`agent` in this process (conftest.run_in_process): no test here is about the process."""
    return run_cli_in_process


def of_type(events: list[Any], kind: type) -> list[Any]:
    return [e for e in events if isinstance(e, kind)]


def errors(events: list[Any]) -> list[str]:
    """What the model was told of each failure: the error, and its hint when there is one."""
    return [
        " ".join(str(e.result.get(k, "")) for k in ("error", "hint")).strip()
        for e in of_type(events, ToolResult)
    ]


# -- the repeat guard ----------------------------------------------------------------------------


def test_a_refused_call_repeated_is_refused_as_such_then_the_turn_stops(
    make_agent: MakeAgent, ollama: FakeOllama, workspace: Path
) -> None:
    (workspace / ".env").write_text("TOKEN=1\n")
    for _ in range(6):
        ollama.enqueue(reply(tool_calls=[tool_call("read_file", {"path": ".env"})]))
    events = make_agent().run("read .env")
    said = errors(events)
    assert len(said) == 4  # the fifth is not run: the turn stops
    assert all("looks like a secret" in e for e in said[:2])  # the policy, twice
    for repeat in said[2:]:
        assert repeat.startswith("denied: this exact call already failed or was refused")
        assert "looks like a secret" in repeat  # why, as first refused (in the hint)
        assert "do something else or answer" in repeat
    assert "refused twice" in said[2] and "refused 3 times" in said[3]
    rules = [e.decision.rule for e in of_type(events, ToolDecided)]
    assert rules == ["sensitive", "sensitive", "repeated", "repeated"]
    finished = events[-1]
    assert isinstance(finished, Finished) and finished.stop_reason == "repeating"
    assert len(ollama.chat_bodies) == 5 and ollama.pending == 1


def test_the_guard_counts_exact_calls_only_and_successes_never(
    make_agent: MakeAgent, ollama: FakeOllama, workspace: Path
) -> None:
    (workspace / "a.txt").write_text("a\n")
    # Reading the same file again and again succeeds: not a repeat of a refusal.
    for _ in range(5):
        ollama.enqueue(reply(tool_calls=[tool_call("read_file", {"path": "a.txt"})]))
    # Failing calls that differ in their arguments are not repeats either.
    for n in range(4):
        ollama.enqueue(reply(tool_calls=[tool_call("read_file", {"path": f"missing{n}"})]))
    ollama.enqueue(reply("done"))
    events = make_agent("agent: {max_steps: 20}\n").run("go")
    assert events[-1].stop_reason == "answer"
    assert not any("already refused" in e for e in errors(events))


def test_the_guard_is_per_turn(make_agent: MakeAgent, ollama: FakeOllama, workspace: Path) -> None:
    harness = make_agent()
    for _ in range(2):
        for _ in range(2):
            ollama.enqueue(reply(tool_calls=[tool_call("read_file", {"path": "nope.txt"})]))
        ollama.enqueue(reply("it does not exist"))
        events = harness.run("read nope.txt")
        assert not any("already refused" in e for e in errors(events))


def test_agent_run_exits_3_with_stop_reason_repeating(
    run_cli: RunCli, ollama: FakeOllama, workspace: Path
) -> None:
    for _ in range(5):
        ollama.enqueue(reply(tool_calls=[tool_call("read_file", {"path": "/etc/shadow"})]))
    r = run_cli("run", "--json", "read /etc/shadow")
    assert r.code == 3, r.stderr
    data = json.loads(r.stdout)
    assert data["stop_reason"] == "repeating"
    assert len(data["tool_calls"]) == 4
    assert "kept repeating" in r.stderr


# -- the step limit ------------------------------------------------------------------------------


def test_agent_run_at_the_step_limit_prints_the_models_report(
    run_cli: RunCli, ollama: FakeOllama, workspace: Path
) -> None:
    (workspace / "a.txt").write_text("a\n")
    for n in range(3):
        ollama.enqueue(reply(tool_calls=[tool_call("list_directory", {"path": f"sub{n}"})]))
    ollama.enqueue(reply("I listed three dirs that do not exist. Left: find the right one."))
    r = run_cli("run", "--max-steps", "3", "list things")
    assert r.code == 3, r.stderr
    assert r.stdout == "I listed three dirs that do not exist. Left: find the right one.\n"
    assert "step limit reached" in r.stderr
    last = ollama.chat_bodies[-1]
    assert last["tools"] == ollama.chat_bodies[-2]["tools"]  # the prefix the server holds
    assert "Do not call any tool" in last["messages"][-1]["content"]


def test_a_failed_report_still_ends_at_the_step_limit(
    run_cli: RunCli, ollama: FakeOllama, workspace: Path
) -> None:
    ollama.enqueue(reply(tool_calls=[tool_call("list_directory", {"path": "."})]))
    ollama.enqueue(HttpError(500, "runner crashed"))
    r = run_cli("run", "--json", "--max-steps", "1", "list")
    assert r.code == 3, r.stderr
    assert json.loads(r.stdout)["stop_reason"] == "max_steps"
    assert "no summary" in r.stderr


def test_chat_at_the_step_limit_can_continue(make_chat: MakeChat, ollama: FakeOllama) -> None:
    chat = make_chat("agent: {max_steps: 2}\n")
    for n in range(3):
        ollama.enqueue(reply(tool_calls=[tool_call("list_directory", {"path": f"d{n}"})]))
    ollama.enqueue(reply("Found nothing, sorry."))
    chat.run("look around\r", "c")
    assert "step limit: the model is still calling tools after 2 model calls" in chat.text
    assert "Found nothing, sorry." in chat.text
    assert len(ollama.chat_bodies) == 4 and all("tools" in b for b in ollama.chat_bodies)


def test_chat_at_the_step_limit_can_wrap_up(make_chat: MakeChat, ollama: FakeOllama) -> None:
    chat = make_chat("agent: {max_steps: 2}\n")
    for n in range(2):
        ollama.enqueue(reply(tool_calls=[tool_call("list_directory", {"path": f"d{n}"})]))
    ollama.enqueue(reply("Summary: two dirs, both missing."))
    chat.run("look around\r", "w")
    assert "Summary: two dirs, both missing." in chat.text
    assert ollama.chat_bodies[-1]["tools"] == ollama.chat_bodies[-2]["tools"]


def test_chat_at_the_step_limit_can_stop(make_chat: MakeChat, ollama: FakeOllama) -> None:
    chat = make_chat("agent: {max_steps: 2}\n")
    for n in range(2):
        ollama.enqueue(reply(tool_calls=[tool_call("list_directory", {"path": f"d{n}"})]))
    chat.run("look around\r", "s")
    assert "step limit reached after 2 model calls" in chat.text
    assert len(ollama.chat_bodies) == 2  # no report asked for


# -- empty, thinking-only and cut answers --------------------------------------------------------


def test_an_empty_answer_is_asked_once_more_then_said(
    make_agent: MakeAgent, ollama: FakeOllama
) -> None:
    ollama.enqueue(reply(""), reply(""))
    events = make_agent().run("hi")
    notices = [e.text for e in of_type(events, Notice)]
    assert any("asking it once more" in n for n in notices)
    assert any("empty answer again" in n for n in notices)
    assert events[-1].answer == "" and len(ollama.chat_bodies) == 2


def test_an_answer_only_in_thinking_is_shown_as_the_answer(
    make_agent: MakeAgent, ollama: FakeOllama
) -> None:
    ollama.add_model("qwen3:8b", ["completion", "tools", "thinking"])
    ollama.enqueue(reply("", thinking="The answer is 42."))
    events = make_agent().run("what is it?")
    assert events[-1].answer == "The answer is 42."
    assert any("only in its thinking" in e.text for e in of_type(events, Notice))
    assert len(ollama.chat_bodies) == 1  # not asked again


def test_a_cut_answer_says_how_to_raise_the_limit(
    make_agent: MakeAgent, ollama: FakeOllama
) -> None:
    ollama.enqueue(reply("The list goes: one, two, thr", done_reason="length"))
    events = make_agent("ollama: {options: {num_predict: 64}}\n").run("list")
    notices = [e.text for e in of_type(events, Notice)]
    assert any("cut at ollama.options.num_predict (64 tokens)" in n for n in notices)
    assert events[-1].answer == "The list goes: one, two, thr"


# -- prompt mode and a server that cannot parse the model's calls --------------------------------


def test_prompt_mode_describes_the_tools_and_runs_text_calls(
    make_agent: MakeAgent, ollama: FakeOllama, workspace: Path
) -> None:
    (workspace / "a.txt").write_text("alpha\n")
    call = {"name": "read_file", "arguments": {"path": "a.txt"}}
    ollama.enqueue(reply(f"Let me look.\n<tool_call>{json.dumps(call)}</tool_call>"))
    ollama.enqueue(reply("It says alpha."))
    # Prompt mode as it is without the aids (their own tests: tests/loop/test_aids.py).
    harness = make_agent("agent: {tool_mode: prompt, aids: off}\n")
    events = harness.run("what is in a.txt?")
    first, second = ollama.chat_bodies
    assert "tools" not in first and "tools" not in second
    system = first["messages"][0]["content"]
    assert "[Tool use rules]" in system and "<tool_call>" in system and "edit_file" in system
    result = json.loads(second["messages"][-1]["content"])
    assert result["success"] is True and result["content"] == "alpha\n"
    # The model sees its call as it wrote it.
    assistant = second["messages"][-2]
    assert "<tool_call>" in assistant["content"]
    assert events[-1].answer == "It says alpha."


def test_prompt_mode_calls_go_through_the_policy(
    make_agent: MakeAgent, ollama: FakeOllama, workspace: Path
) -> None:
    call = {"name": "write_file", "arguments": {"path": "x.txt", "content": "x"}}
    ollama.enqueue(reply(f"<tool_call>{json.dumps(call)}</tool_call>"), reply("ok"))
    harness = make_agent("agent: {tool_mode: prompt}\n", answers=[False])
    events = harness.run("write x")
    decided = of_type(events, ToolDecided)[0]
    assert decided.decision.action == "ask" and not decided.allowed
    assert not (workspace / "x.txt").exists()


def test_a_disabled_tool_is_not_described_and_its_text_call_is_text(
    make_agent: MakeAgent, ollama: FakeOllama, workspace: Path
) -> None:
    (workspace / "keep.txt").write_text("k\n")
    call = {"name": "delete_file", "arguments": {"path": "keep.txt"}}
    text = f"<tool_call>{json.dumps(call)}</tool_call>"
    ollama.enqueue(reply(text))
    yaml = "agent: {tool_mode: prompt}\npolicy: {tools: {delete_file: deny}}\n"
    events = make_agent(yaml).run("delete keep.txt")
    assert "delete_file" not in ollama.chat_bodies[0]["messages"][0]["content"]
    assert events[-1].stop_reason == "answer" and events[-1].answer == text
    assert (workspace / "keep.txt").exists()


def test_an_unparsable_tool_call_is_retried_in_prompt_mode_for_the_turn(
    make_agent: MakeAgent, ollama: FakeOllama, workspace: Path
) -> None:
    (workspace / "a.txt").write_text("alpha\n")
    ollama.enqueue(HttpError(500, "error parsing tool call: raw='{\"name\": read_file'"))
    call = {"name": "read_file", "arguments": {"path": "a.txt"}}
    ollama.enqueue(reply(f"<tool_call>{json.dumps(call)}</tool_call>"), reply("alpha it is"))
    harness = make_agent()
    events = harness.run("read a.txt")
    first, retry, after = ollama.chat_bodies
    assert "tools" in first and "tools" not in retry and "tools" not in after
    # The retry describes the tools in the prompt, its reply held to their JSON schema.
    assert "[Tools]" in retry["messages"][0]["content"] and "read_file" in json.dumps(
        retry["format"]
    )
    notices = [e.text for e in of_type(events, Notice)]
    assert sum("could not parse the model's tool call" in n for n in notices) == 1
    assert events[-1].answer == "alpha it is"
    # The next turn starts native again.
    ollama.enqueue(reply("hello"))
    harness.run("hi")
    assert "tools" in ollama.chat_bodies[-1]


def test_a_mid_stream_parse_error_is_retried_without_the_partial_text(
    make_agent: MakeAgent, ollama: FakeOllama
) -> None:
    partial = {"model": "qwen3:8b", "message": {"role": "assistant", "content": "Hi"}}
    ollama.enqueue(Stream([{**partial, "done": False}, {"error": "failed to parse JSON: x"}]))
    ollama.enqueue(reply("Hello!"))
    harness = make_agent()
    events = harness.run("hi")
    assert events[-1].answer == "Hello!"
    assert [m["role"] for m in harness.conversation] == ["system", "user", "assistant"]


def test_a_server_refusing_the_tool_role_gets_labelled_results(
    make_agent: MakeAgent, ollama: FakeOllama, workspace: Path
) -> None:
    (workspace / "a.txt").write_text("alpha\n")
    call = {"name": "read_file", "arguments": {"path": "a.txt"}}
    ollama.enqueue(reply(f"<tool_call>{json.dumps(call)}</tool_call>"))
    ollama.enqueue(HttpError(400, "invalid message role: tool"))
    ollama.enqueue(reply("alpha"))
    # Without the user_results aid, which sends them labelled from the start.
    events = make_agent("agent: {tool_mode: prompt, aids: off}\n").run("read a.txt")
    assert events[-1].answer == "alpha"
    refused, sent = (body["messages"] for body in ollama.chat_bodies[1:])
    assert any(m["role"] == "tool" for m in refused)
    assert not any(m["role"] == "tool" for m in sent)
    labelled = [m for m in sent if m["content"].startswith("[tool result of read_file]")]
    assert len(labelled) == 1 and labelled[0]["role"] == "user"


def test_labelled_results_refused_are_not_sent_again(
    make_agent: MakeAgent, ollama: FakeOllama, workspace: Path
) -> None:
    """With the user_results aid the results already go as labelled user messages: a server
    that still says "invalid message role" would refuse the same request again."""
    (workspace / "a.txt").write_text("alpha\n")
    call = {"name": "read_file", "arguments": {"path": "a.txt"}}
    ollama.enqueue(reply(f"<tool_call>{json.dumps(call)}</tool_call>"))
    ollama.enqueue(HttpError(400, "invalid message role: tool"), reply("never asked for"))
    with pytest.raises(AgentError, match="invalid message role"):
        make_agent("agent: {tool_mode: prompt}\n").run("read a.txt")
    assert len(ollama.chat_bodies) == 2
