"""The agent loop against the fake Ollama: steps, history, decisions, model misbehaviour."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cli.loop.agent import Agent
from cli.loop.approval import Approval
from cli.loop.events import (
    ContentDelta,
    Finished,
    Notice,
    StepFinished,
    ThinkingDelta,
    ToolCallProposed,
    ToolDecided,
    ToolResult,
)
from cli.loop.requests import ASK_AGAIN
from cli.tools import ALL_TOOLS, Tool
from tests.conftest import MakeAgent
from tests.fakes.context import block_of
from tests.fakes.fake_ollama import FakeOllama, HttpError, Stream, reply, tool_call


def of_type(events: list[Any], kind: type) -> list[Any]:
    return [e for e in events if isinstance(e, kind)]


def tool_messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for m in body["messages"] if m["role"] == "tool"]


def results(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [json.loads(m["content"]) for m in tool_messages(body)]


# -- seed test plan T18-T20 -------------------------------------------------------------------


def test_T18_loop_ends_when_the_answer_has_no_tool_calls(
    make_agent: MakeAgent, ollama: FakeOllama
) -> None:
    ollama.enqueue(reply("Hello there."))
    events = make_agent().run("hi")
    finished = events[-1]
    assert isinstance(finished, Finished)
    assert (finished.stop_reason, finished.answer, finished.steps) == ("answer", "Hello there.", 1)
    assert "".join(e.text for e in of_type(events, ContentDelta)) == "Hello there."
    assert len(ollama.chat_bodies) == 1


def test_T19_loop_stops_after_max_steps_model_calls(
    make_agent: MakeAgent, ollama: FakeOllama, workspace: Path
) -> None:
    (workspace / "a.txt").write_text("a")
    for n in range(10):
        ollama.enqueue(reply(tool_calls=[tool_call("read_file", {"path": f"a.txt#{n}"})]))
    ollama.enqueue(reply("I read a.txt again and again; what is left: stop looping."))
    harness = make_agent()
    events = harness.run("loop forever")
    finished = events[-1]
    assert isinstance(finished, Finished)
    assert finished.stop_reason == "max_steps"
    assert finished.steps == 10
    assert finished.pending_calls == 1
    assert len(of_type(events, ToolResult)) == 9  # the 10th answer's call is not run
    # Then one last request asks for a report; that is the answer. It carries the tools as
    # every request of the turn did (the prefix the server holds), and asks for no call.
    assert len(ollama.chat_bodies) == 11
    wrap = ollama.chat_bodies[-1]
    assert wrap["tools"] == ollama.chat_bodies[-2]["tools"]
    assert "Do not call any tool" in wrap["messages"][-1]["content"]
    assert finished.answer == "I read a.txt again and again; what is left: stop looping."
    # The history stays well-formed: the unrun call still has its tool message, and the
    # report follows it; the request for it is not kept.
    unrun, report = harness.conversation[-2], harness.conversation[-1]
    assert unrun["role"] == "tool" and "step limit" in json.loads(unrun["content"])["error"]
    assert report == {"role": "assistant", "content": finished.answer}


def test_max_steps_setting_is_honoured(
    make_agent: MakeAgent, ollama: FakeOllama, workspace: Path
) -> None:
    (workspace / "a.txt").write_text("a")
    for _ in range(3):
        ollama.enqueue(reply(tool_calls=[tool_call("read_file", {"path": "a.txt"})]))
    events = make_agent("agent: {max_steps: 2}\n").run("go")
    assert events[-1].stop_reason == "max_steps" and events[-1].steps == 2
    assert len(ollama.chat_bodies) == 3  # two steps, then the report without tools


def test_T20_two_parallel_calls_both_run_and_results_keep_their_order(
    make_agent: MakeAgent, ollama: FakeOllama, workspace: Path
) -> None:
    (workspace / "one.txt").write_text("first file\n")
    (workspace / "two.txt").write_text("second file\n")
    ollama.enqueue(
        reply(
            tool_calls=[
                tool_call("read_file", {"path": "two.txt"}, call_id="call_b", index=0),
                tool_call("read_file", {"path": "one.txt"}, call_id="call_a", index=0),
            ]
        ),
        reply("Both read."),
    )
    events = make_agent().run("read both")
    assert [e.call.arguments["path"] for e in of_type(events, ToolResult)] == ["two.txt", "one.txt"]
    second = ollama.chat_bodies[1]
    contents = [r["content"] for r in results(second)]
    assert contents == ["second file\n", "first file\n"]
    assert [m["tool_call_id"] for m in tool_messages(second)] == ["call_b", "call_a"]
    assert [m["tool_name"] for m in tool_messages(second)] == ["read_file", "read_file"]


# -- the history sent back --------------------------------------------------------------------


def test_history_carries_thinking_content_and_object_arguments(
    make_agent: MakeAgent, ollama: FakeOllama, workspace: Path
) -> None:
    (workspace / "n.txt").write_text("x")
    # Arguments as a JSON string, as some models send them: parsed, and sent back as an object.
    ollama.enqueue(
        reply(
            "Let me look.",
            thinking="I should read it.",
            tool_calls=[tool_call("read_file", '{"path": "n.txt"}')],
        ),
        reply("Done."),
    )
    harness = make_agent(think=True)
    events = harness.run("read n")
    assert "".join(e.text for e in of_type(events, ThinkingDelta)) == "I should read it."
    assistant = ollama.chat_bodies[1]["messages"][2]
    assert assistant["role"] == "assistant"
    assert assistant["content"] == "Let me look."
    assert assistant["thinking"] == "I should read it."
    assert assistant["tool_calls"][0]["function"] == {
        "name": "read_file",
        "arguments": {"path": "n.txt"},
    }
    assert results(ollama.chat_bodies[1])[0]["success"] is True


def test_tool_calls_in_the_final_done_chunk_are_run(
    make_agent: MakeAgent, ollama: FakeOllama, workspace: Path
) -> None:
    (workspace / "f.txt").write_text("final\n")
    ollama.enqueue(
        reply(tool_calls=[tool_call("read_file", {"path": "f.txt"})], calls_in_final=True),
        reply("ok"),
    )
    events = make_agent().run("go")
    assert of_type(events, ToolResult)[0].result["content"] == "final\n"


def test_calls_split_across_chunks_keep_arrival_order(
    make_agent: MakeAgent, ollama: FakeOllama, workspace: Path
) -> None:
    for name in ("a", "b", "c"):
        (workspace / f"{name}.txt").write_text(name)
    base = {"model": "qwen3:8b", "created_at": "now", "done": False}
    lines: list[dict[str, Any] | bytes] = [
        {
            **base,
            "message": {
                "role": "assistant",
                "content": "",
                "tool_calls": [tool_call("read_file", {"path": "a.txt"})],
            },
        },
        {
            **base,
            "message": {
                "role": "assistant",
                "content": "",
                "tool_calls": [tool_call("read_file", {"path": "b.txt"})],
            },
        },
        {
            **base,
            "done": True,
            "done_reason": "stop",
            "message": {
                "role": "assistant",
                "content": "",
                "tool_calls": [tool_call("read_file", {"path": "c.txt"})],
            },
        },
    ]
    ollama.enqueue(Stream(lines), reply("ok"))
    events = make_agent().run("go")
    assert [e.result["content"] for e in of_type(events, ToolResult)] == ["a", "b", "c"]


def test_options_keep_alive_and_tools_are_sent(make_agent: MakeAgent, ollama: FakeOllama) -> None:
    ollama.enqueue(reply("hi"))
    make_agent("ollama: {options: {temperature: 0.2}, keep_alive: 10m}\n").run("hi")
    body = ollama.chat_bodies[0]
    # num_ctx is sized per request (tests/loop/test_sizing.py): a short prompt, tools and
    # the reply budget fit in two steps of 4096.
    assert body["options"] == {"num_ctx": 8192, "temperature": 0.2}
    assert body["keep_alive"] == "10m"
    assert body["stream"] is True
    names = [t["function"]["name"] for t in body["tools"]]
    # run_command is deny by default: not offered at all.
    assert names == [
        "read_file",
        "edit_file",
        "write_file",
        "list_directory",
        "search_files",
        "create_directory",
        "move_file",
        "delete_file",
        "git_status",
        "git_diff",
    ]


def test_a_denied_tool_is_not_offered(make_agent: MakeAgent, ollama: FakeOllama) -> None:
    ollama.enqueue(reply("hi"))
    make_agent("policy: {tools: {delete_file: deny, run_command: ask}}\n").run("hi")
    names = [t["function"]["name"] for t in ollama.chat_bodies[0]["tools"]]
    assert "delete_file" not in names and "run_command" in names


# -- capabilities ------------------------------------------------------------------------------


def test_model_without_tools_gets_no_tools_and_a_notice(
    make_agent: MakeAgent, ollama: FakeOllama
) -> None:
    ollama.add_model("gemma:2b", ["completion"])
    ollama.enqueue(reply("plain answer"))
    events = make_agent("agent: {tool_mode: native}\n", model="gemma:2b").run("hi")
    assert "tools" not in ollama.chat_bodies[0]
    assert any("does not support tools" in e.text for e in of_type(events, Notice))
    assert "[Tool use rules]" not in ollama.chat_bodies[0]["messages"][0]["content"]
    assert events[-1].answer == "plain answer"


@pytest.mark.parametrize(
    ("capabilities", "think", "expected"),
    [
        (["completion", "tools", "thinking"], True, True),
        (["completion", "tools", "thinking"], False, False),  # off, since absent means on
        (["completion", "tools"], True, None),  # would be a 400: left out
        (["completion", "tools"], False, None),
    ],
    ids=["thinker-asked", "thinker-not-asked", "non-thinker-asked", "non-thinker-not-asked"],
)
def test_think_is_sent_only_when_asked_and_possible(
    make_agent: MakeAgent,
    ollama: FakeOllama,
    capabilities: list[str],
    think: bool,
    expected: bool | None,
) -> None:
    ollama.add_model("m:1", capabilities)
    ollama.enqueue(reply("ok"))
    events = make_agent(model="m:1", think=think).run("hi")
    assert ollama.chat_bodies[0].get("think") == expected
    cannot = any("cannot think" in e.text for e in of_type(events, Notice))
    assert cannot == (think and "thinking" not in capabilities)


def test_capabilities_are_checked_once_per_model(make_agent: MakeAgent, ollama: FakeOllama) -> None:
    ollama.enqueue(reply("one"), reply("two"))
    harness = make_agent()
    harness.run("first")
    harness.run("second")
    shows = [r for r in ollama.requests if r.path == "/api/show"]
    assert len(shows) == 1
    # The second turn sees the first: the conversation persists.
    roles = [m["role"] for m in ollama.chat_bodies[1]["messages"]]
    assert roles == ["system", "user", "assistant", "user"]


# -- model misbehaviour ------------------------------------------------------------------------


def test_unknown_tool_gets_an_error_listing_valid_tools(
    make_agent: MakeAgent, ollama: FakeOllama
) -> None:
    ollama.enqueue(reply(tool_calls=[tool_call("rm_everything", {"path": "/"})]), reply("sorry"))
    events = make_agent().run("go")
    result = of_type(events, ToolResult)[0].result
    assert result["success"] is False
    assert "unknown tool 'rm_everything'" in result["error"]
    assert "read_file" in result["hint"] and "write_file" in result["hint"]
    assert events[-1].answer == "sorry"
    assert results(ollama.chat_bodies[1])[0] == result


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({}, "missing required argument: path"),
        # (42 for a path, "5" for a line number are mended by agent.aids: repair; these
        # shapes mean nothing else either, and nothing mends them.)
        ({"path": [42]}, "'path' must be a string"),
        ({"path": "a.txt", "encoding": "utf-16"}, "'encoding' must be one of"),
        ({"path": "a.txt", "start_line": "5.5"}, "'start_line' must be an integer"),
        ({"path": "a.txt", "start_line": True}, "'start_line' must be an integer"),
        ({"path": "a.txt", "file": "b"}, "unexpected argument 'file'"),
    ],
    ids=["missing", "wrong-type", "bad-enum", "string-for-int", "bool-for-int", "unknown-arg"],
)
def test_schema_violations_are_answered_not_run(
    make_agent: MakeAgent,
    ollama: FakeOllama,
    workspace: Path,
    arguments: dict[str, Any],
    message: str,
) -> None:
    (workspace / "a.txt").write_text("secret-ish")
    ollama.enqueue(reply(tool_calls=[tool_call("read_file", arguments)]), reply("retrying"))
    events = make_agent().run("go")
    result = of_type(events, ToolResult)[0].result
    assert result["success"] is False
    assert message in result["error"]
    assert "content" not in result


def test_null_optional_arguments_mean_absent(
    make_agent: MakeAgent, ollama: FakeOllama, workspace: Path
) -> None:
    (workspace / "a.txt").write_text("one\n")
    ollama.enqueue(
        reply(tool_calls=[tool_call("read_file", {"path": "a.txt", "start_line": None})]),
        reply("ok"),
    )
    events = make_agent().run("go")
    assert of_type(events, ToolResult)[0].result["content"] == "one\n"


def test_unparseable_string_arguments_are_answered(
    make_agent: MakeAgent, ollama: FakeOllama
) -> None:
    ollama.enqueue(reply(tool_calls=[tool_call("read_file", '{"path": ')]), reply("ok"))
    events = make_agent().run("go")
    result = of_type(events, ToolResult)[0].result
    assert result["success"] is False and "not valid JSON" in result["error"]
    # And the history sends an object, never the broken string (Ollama answers 400 to it).
    assert ollama.chat_bodies[1]["messages"][2]["tool_calls"][0]["function"]["arguments"] == {}


def test_a_tool_that_raises_becomes_an_error_result(
    make_agent: MakeAgent, ollama: FakeOllama, workspace: Path
) -> None:
    def explode(*_args: Any) -> dict[str, Any]:
        raise RuntimeError("disk on fire")

    broken = Tool("read_file", "reads", ALL_TOOLS["read_file"].parameters, explode)
    base = make_agent().agent
    agent = Agent(
        base.backend,
        base.policy,
        base.approver,
        base.context,
        base.settings,
        base.surroundings,
        toolbox={**ALL_TOOLS, "read_file": broken},
    )
    (workspace / "a.txt").write_text("x")
    ollama.enqueue(
        reply(tool_calls=[tool_call("read_file", {"path": "a.txt"})]), reply("it failed")
    )
    events = list(agent.run([], "go"))
    result = of_type(events, ToolResult)[0].result
    assert result == {"success": False, "error": "read_file failed: disk on fire"}
    assert events[-1].answer == "it failed"


@pytest.mark.parametrize(
    "content",
    [
        '{"name": "read_file", "arguments": {"path": "t.txt"}}',
        '```json\n{"name": "read_file", "parameters": {"path": "t.txt"}}\n```',
        'I will read it.\n<tool_call>\n{"name": "read_file", "arguments": {"path": "t.txt"}}'
        "\n</tool_call>",
        "<tool_call>\n<function=read_file>\n<parameter=path>\nt.txt\n</parameter>\n</function>"
        "\n</tool_call>",
        '[TOOL_CALLS] [{"name": "read_file", "arguments": {"path": "t.txt"}}]',
    ],
    ids=["bare-json", "fenced-llama-parameters", "hermes-tagged", "qwen3-coder-xml", "mistral"],
)
def test_tool_call_written_as_text_is_run(
    make_agent: MakeAgent, ollama: FakeOllama, workspace: Path, content: str
) -> None:
    (workspace / "t.txt").write_text("from text call\n")
    ollama.enqueue(reply(content), reply("done"))
    harness = make_agent()
    events = harness.run("go")
    assert of_type(events, ToolResult)[0].result["content"] == "from text call\n"
    sent = ollama.chat_bodies[1]["messages"][2]
    assert sent["tool_calls"][0]["function"] == {
        "name": "read_file",
        "arguments": {"path": "t.txt"},
    }
    assert "<tool_call>" not in sent["content"] and "read_file" not in sent["content"]


def test_json_that_is_not_one_of_our_tools_stays_an_answer(
    make_agent: MakeAgent, ollama: FakeOllama
) -> None:
    answer = '{"name": "Ada", "arguments": {"age": 36}}'
    ollama.enqueue(reply(answer))
    events = make_agent().run("give me json")
    assert not of_type(events, ToolResult)
    assert events[-1].answer == answer


def test_an_empty_answer_is_asked_once_more(make_agent: MakeAgent, ollama: FakeOllama) -> None:
    ollama.enqueue(reply(""), reply("real answer"))
    harness = make_agent()
    events = harness.run("go")
    assert any("empty answer" in e.text for e in of_type(events, Notice))
    assert events[-1].answer == "real answer"
    assert len(ollama.chat_bodies) == 2
    # The empty turn is not kept in history; the request asks again in words (never the
    # same request twice), and those words are not kept either.
    first, again = (body["messages"] for body in ollama.chat_bodies)
    assert [m["role"] for m in again] == ["system", "user"]
    assert again[1]["content"] == first[1]["content"] + "\n\n" + ASK_AGAIN
    assert ASK_AGAIN not in json.dumps(harness.conversation)


def test_an_empty_answer_after_a_tool_result_is_asked_for_in_a_message_of_its_own(
    make_agent: MakeAgent, ollama: FakeOllama, workspace: Path
) -> None:
    (workspace / "a.txt").write_text("a\n")
    ollama.enqueue(
        reply(tool_calls=[tool_call("read_file", {"path": "a.txt"})]), reply(""), reply("a")
    )
    make_agent().run("read a.txt")
    refused, again = (body["messages"] for body in ollama.chat_bodies[1:])
    assert again == [*refused, {"role": "user", "content": ASK_AGAIN}]


def test_too_many_calls_in_one_answer_are_capped(
    make_agent: MakeAgent, ollama: FakeOllama, workspace: Path
) -> None:
    (workspace / "a.txt").write_text("a")
    calls = [tool_call("read_file", {"path": "a.txt"}) for _ in range(40)]
    ollama.enqueue(reply(tool_calls=calls), reply("ok"))
    events = make_agent("policy: {limits: {max_tool_calls_per_step: 5}}\n").run("go")
    assert len(of_type(events, ToolResult)) == 5
    assert any("40 tool calls" in e.text for e in of_type(events, Notice))
    sent = results(ollama.chat_bodies[1])
    assert len(sent) == 40
    assert all("at most 5" in r["error"] for r in sent[5:])


# -- decisions ----------------------------------------------------------------------------------


def test_a_write_asks_and_a_yes_writes(
    make_agent: MakeAgent, ollama: FakeOllama, workspace: Path
) -> None:
    ollama.enqueue(
        reply(tool_calls=[tool_call("write_file", {"path": "out.txt", "content": "hi\n"})]),
        reply("written"),
    )
    harness = make_agent(answers=[True])
    events = harness.run("write it")
    request = harness.approver.requests[0]
    assert request.call.name == "write_file" and request.decision.action == "ask"
    decided = of_type(events, ToolDecided)[0]
    assert decided.allowed and decided.approved_by == "user"
    assert (workspace / "out.txt").read_text() == "hi\n"


def test_a_no_is_sent_to_the_model_with_the_reason(
    make_agent: MakeAgent, ollama: FakeOllama, workspace: Path
) -> None:
    ollama.enqueue(
        reply(tool_calls=[tool_call("write_file", {"path": "out.txt", "content": "hi"})]),
        reply("ok, not writing"),
    )
    harness = make_agent(answers=[Approval(False, by="user", reason="use notes.md instead")])
    harness.run("write it")
    assert not (workspace / "out.txt").exists()
    result = results(ollama.chat_bodies[1])[0]
    assert result["success"] is False
    assert "the user declined: use notes.md instead" in result["error"]


def test_a_policy_denial_is_a_result_and_the_loop_goes_on(
    make_agent: MakeAgent, ollama: FakeOllama
) -> None:
    ollama.enqueue(
        reply(tool_calls=[tool_call("read_file", {"path": "~/.ssh/id_rsa"})]),
        reply("I cannot read that."),
    )
    harness = make_agent()
    events = harness.run("read my key")
    assert harness.approver.requests == []
    result = results(ollama.chat_bodies[1])[0]
    assert result["success"] is False and result["error"].startswith("denied:")
    assert events[-1].answer == "I cannot read that."


def test_stop_turn_cancels_the_remaining_calls(
    make_agent: MakeAgent, ollama: FakeOllama, workspace: Path
) -> None:
    calls = [tool_call("write_file", {"path": f"f{i}.txt", "content": "x"}) for i in range(3)]
    ollama.enqueue(reply(tool_calls=calls))
    harness = make_agent(answers=[True, Approval(False, stop_turn=True)])
    events = harness.run("write three")
    assert isinstance(events[-1], Finished) and events[-1].stop_reason == "stopped"
    assert (workspace / "f0.txt").exists() and not (workspace / "f1.txt").exists()
    tool_results = [json.loads(m["content"]) for m in harness.conversation if m["role"] == "tool"]
    assert len(tool_results) == 3
    assert "cancelled" in tool_results[2]["error"]
    assert len(harness.approver.requests) == 2


def test_events_come_in_order_for_each_call(
    make_agent: MakeAgent, ollama: FakeOllama, workspace: Path
) -> None:
    (workspace / "a.txt").write_text("a")
    ollama.enqueue(reply(tool_calls=[tool_call("read_file", {"path": "a.txt"})]), reply("ok"))
    kinds = [type(e).__name__ for e in make_agent().run("go") if not isinstance(e, ContentDelta)]
    assert kinds == [
        "StepFinished",
        "ToolCallProposed",
        "ToolDecided",
        "ToolResult",
        "StepFinished",
        "Finished",
    ]


# -- interruption ---------------------------------------------------------------------------------


def test_interrupt_mid_stream_keeps_the_partial_answer(
    make_agent: MakeAgent, ollama: FakeOllama
) -> None:
    ollama.enqueue(reply("one two three four five six", token=4, delay=0.01))
    harness = make_agent()
    events = harness.agent.run(harness.conversation, "count")
    seen = ""
    with pytest.raises(KeyboardInterrupt):
        for event in events:
            if isinstance(event, ContentDelta):
                seen += event.text
                if len(seen) >= 8:
                    raise KeyboardInterrupt  # what Ctrl-C does while the consumer prints
    events.close()  # type: ignore[attr-defined]
    assert harness.conversation[-1] == {"role": "assistant", "content": seen}


def test_interrupt_during_a_confirmation_leaves_history_well_formed(
    make_agent: MakeAgent, ollama: FakeOllama
) -> None:
    calls = [tool_call("write_file", {"path": f"f{i}.txt", "content": "x"}) for i in range(2)]
    ollama.enqueue(reply(tool_calls=calls))

    harness = make_agent()

    def ctrl_c(_request: Any) -> Approval:
        raise KeyboardInterrupt

    harness.agent.approver = ctrl_c
    with pytest.raises(KeyboardInterrupt):
        harness.run("write")
    tail = harness.conversation[-3:]
    assert tail[0]["role"] == "assistant" and len(tail[0]["tool_calls"]) == 2
    assert [json.loads(m["content"])["error"] for m in tail[1:]] == ["interrupted by the user"] * 2


# -- server failures propagate as typed errors --------------------------------------------------


def test_server_error_mid_loop_raises_the_typed_error(
    make_agent: MakeAgent, ollama: FakeOllama
) -> None:
    from cli.errors import BackendError

    ollama.enqueue(HttpError(500, "model runner crashed"))
    with pytest.raises(BackendError, match="model runner crashed"):
        make_agent().run("go")


# -- system prompt and context --------------------------------------------------------------------


def test_system_prompt_has_the_rules_and_the_context_block_where_we_are(
    make_agent: MakeAgent, ollama: FakeOllama, workspace: Path
) -> None:
    ollama.enqueue(reply("ok"))
    make_agent('agent: {system_prompt: "Answer in French."}\n').run("hi")
    system, user = ollama.chat_bodies[0]["messages"]
    assert system["role"] == "system"
    text = system["content"]
    assert "[Tool use rules]" in text and "Never read or change files that hold passwords" in text
    assert text.endswith("Answer in French.")
    # Nothing of where or when in the system prompt: it is the same in every run.
    assert str(workspace) not in text and "date" not in text
    assert user["role"] == "user"
    block = block_of(user["content"])
    assert f"Working directory: {workspace}" in block
    assert "Allowed directories" in block and str(workspace) in block
    assert "Today's date: " in block and "Operating system: " in block
    assert user["content"] == block + "hi"


def test_long_history_is_trimmed_to_the_context_window(
    make_agent: MakeAgent, ollama: FakeOllama
) -> None:
    harness = make_agent("ollama: {max_num_ctx: 4096}\n")
    for i in range(6):
        # prompt_eval_count 0: no count to calibrate the estimate with (test_context_sizing)
        ollama.enqueue(reply(f"answer {i} " + "word " * 300, prompt_eval_count=0))
        harness.run(f"question {i}")
    sent = ollama.chat_bodies[-1]["messages"]
    assert sent[0]["role"] == "system"
    assert sent[-1] == {"role": "user", "content": "question 5"}
    assert len(sent) < 12  # older turns were dropped
    assert {"role": "user", "content": "question 0"} not in sent
    assert len(harness.conversation) == 13  # but the conversation itself keeps everything


def test_events_of_a_plain_answer(make_agent: MakeAgent, ollama: FakeOllama) -> None:
    ollama.enqueue(reply("hello", eval_count=42))
    events = make_agent().run("hi")
    step = of_type(events, StepFinished)[0]
    assert step.stats.eval_count == 42 and step.done_reason == "stop" and step.tool_calls == 0
    assert not of_type(events, ToolCallProposed)
    assert events[-1].stats.eval_count == 42
