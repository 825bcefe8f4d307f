"""The aids for small models as the loop applies them, each against a real fake server on
127.0.0.1 (what the client sent is read back): model profiles, the compact tool set,
constrained calls in prompt mode (with the servers that cannot hold to a schema), and tool
results as user messages. Argument repair: tests/tools/test_repair.py."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cli.loop.constrained import read_reply, reply_schema
from cli.loop.events import ContentDelta, Finished, Notice, ToolResult
from cli.tools import COMPACT_TOOLS
from cli.wiring import Choices
from tests.conftest import MakeAgent, harness
from tests.fakes.fake_ollama import FakeOllama, HttpError, reply, tool_call
from tests.fakes.fake_openai import Answer, FakeOpenAI
from tests.fakes.fake_openai import HttpError as OpenAIError


def of_type(events: list[Any], kind: type) -> list[Any]:
    return [e for e in events if isinstance(e, kind)]


def small(ollama: FakeOllama) -> None:
    ollama.add_model(
        "smollm2:135m", ["completion", "tools"], 8192, family="llama", parameter_size="134.52M"
    )


# -- profiles ------------------------------------------------------------------------------


def test_a_small_model_gets_its_profile(
    make_agent: MakeAgent, ollama: FakeOllama, workspace: Path
) -> None:
    """smollm2: prompt mode, temperature 0.2, the compact set, num_ctx 8192 (its context)."""
    small(ollama)
    (workspace / "a.txt").write_text("alpha\n")
    ollama.enqueue(reply('{"name": "read_file", "arguments": {"path": "a.txt"}}'))
    ollama.enqueue(reply('{"answer": "It says alpha."}'))
    events = make_agent(model="smollm2:135m").run("what is in a.txt?")
    first, _second = ollama.chat_bodies
    assert "tools" not in first  # prompt mode, though the model reports tool support
    assert first["options"]["temperature"] == 0.2 and first["options"]["num_ctx"] == 8192
    system = first["messages"][0]["content"]
    for name in ("read_file", "edit_file", "write_file", "list_directory", "search_files"):
        assert f"- {name}:" in system
    assert "- move_file:" not in system and "- git_status:" not in system
    assert of_type(events, ToolResult)[0].result["content"] == "alpha\n"
    assert events[-1].answer == "It says alpha."


def test_what_the_user_set_wins_over_the_profile(make_agent: MakeAgent, ollama: FakeOllama) -> None:
    small(ollama)
    ollama.enqueue(reply("hi"))
    yaml = "ollama: {options: {temperature: 0.9}}\nagent: {tool_mode: native, tool_set: full}\n"
    make_agent(yaml, model="smollm2:135m").run("hi")
    (body,) = ollama.chat_bodies
    assert body["options"]["temperature"] == 0.9
    assert len(body["tools"]) == 10  # native, the full set (run_command is off)


def test_without_the_profiles_aid_a_small_model_is_as_before(
    make_agent: MakeAgent, ollama: FakeOllama
) -> None:
    small(ollama)
    ollama.enqueue(reply("hi"))
    make_agent("agent: {aids: [repair]}\n", model="smollm2:135m").run("hi")
    (body,) = ollama.chat_bodies
    assert body["options"]["temperature"] == 0.7 and len(body["tools"]) == 10
    assert body["options"]["num_ctx"] == 8192  # a quarter of 32768, rounded: as before


def test_the_profile_floor_stays_under_max_num_ctx(
    make_agent: MakeAgent, ollama: FakeOllama
) -> None:
    ollama.add_model("gpt-oss:20b", ["completion", "tools", "thinking"], 131072, family="gptoss")
    ollama.enqueue(reply("hi"))
    make_agent("ollama: {max_num_ctx: 12288}\n", model="gpt-oss:20b").run("hi")
    assert ollama.chat_bodies[0]["options"]["num_ctx"] == 12288  # floor 16384, cap 12288
    assert ollama.chat_bodies[0]["options"]["temperature"] == 1.0


def test_a_profile_of_the_user_s_own(make_agent: MakeAgent, ollama: FakeOllama) -> None:
    ollama.enqueue(reply("hi"))
    yaml = "models:\n  - {match: 'qwen3:*', temperature: 0.4, tool_set: compact}\n"
    make_agent(yaml).run("hi")
    (body,) = ollama.chat_bodies
    assert body["options"]["temperature"] == 0.4
    assert [t["function"]["name"] for t in body["tools"]] == list(COMPACT_TOOLS)
    assert body["tools"] == [t.definition() for t in COMPACT_TOOLS.values()]


# -- the compact tool set ------------------------------------------------------------------


def test_the_compact_set_is_offered_and_the_rest_refused(
    make_agent: MakeAgent, ollama: FakeOllama, workspace: Path
) -> None:
    (workspace / "a.txt").write_text("x")
    ollama.enqueue(
        reply(tool_calls=[tool_call("move_file", {"source": "a.txt", "destination": "b.txt"})]),
        reply("ok"),
    )
    events = make_agent("agent: {tool_set: compact}\n").run("move it")
    assert [t["function"]["name"] for t in ollama.chat_bodies[0]["tools"]] == list(COMPACT_TOOLS)
    result = of_type(events, ToolResult)[0].result
    assert "was not offered" in result["error"] and (workspace / "a.txt").exists()
    full = json.dumps([t.definition() for t in COMPACT_TOOLS.values()])
    assert len(full) < 2500  # a quarter of the full set's 7.2 KB


# -- constrained calls in prompt mode --------------------------------------------------------


def prompt_model(ollama: FakeOllama) -> None:
    ollama.add_model("gemma3:4b", ["completion", "vision"], family="gemma3", parameter_size="4.3B")


def test_ollama_is_sent_the_schema_and_a_json_call_runs(
    make_agent: MakeAgent, ollama: FakeOllama, workspace: Path
) -> None:
    prompt_model(ollama)
    (workspace / "a.txt").write_text("alpha\n")
    ollama.enqueue(reply('{"name": "read_file", "arguments": {"path": "a.txt"}}'))
    ollama.enqueue(reply('{"answer": "It says alpha."}'))
    events = make_agent(model="gemma3:4b").run("what is in a.txt?")
    first, second = ollama.chat_bodies
    schema = first["format"]
    offered = [
        name for name in ("read_file", "edit_file", "write_file") if name in json.dumps(schema)
    ]
    assert offered == ["read_file", "edit_file", "write_file"]
    assert schema["anyOf"][0]["required"] == ["answer"]
    assert second["format"] == schema  # the same schema every step: the same tools
    assert "Reply with one JSON object" in first["messages"][0]["content"]
    assert of_type(events, ToolResult)[0].result["success"] is True
    # The answer's text is shown once, decoded; its JSON is not streamed to the user.
    shown = "".join(e.text for e in of_type(events, ContentDelta))
    assert shown == "It says alpha."
    assert events[-1].answer == "It says alpha." and events[-1].stop_reason == "answer"
    # The model sees its replies as it wrote them.
    assert second["messages"][2] == {
        "role": "assistant",
        "content": '{"name": "read_file", "arguments": {"path": "a.txt"}}',
        "tool_calls": [{"function": {"name": "read_file", "arguments": {"path": "a.txt"}}}],
    }


def test_the_schema_allows_only_offered_calls_with_their_arguments() -> None:
    definitions = [t.definition() for t in COMPACT_TOOLS.values()]
    schema = reply_schema(definitions)
    calls = schema["anyOf"][1:]
    assert [c["properties"]["name"]["enum"] for c in calls] == [[n] for n in COMPACT_TOOLS]
    read = calls[0]["properties"]["arguments"]
    assert read["required"] == ["path"] and read["additionalProperties"] is False
    assert read["properties"]["start_line"] == {
        "type": "integer",
        "description": "First line to return (1-based).",
    }
    assert all(c["additionalProperties"] is False for c in schema["anyOf"])


def test_an_ollama_before_0_5_gets_free_text(make_agent: MakeAgent, ollama: FakeOllama) -> None:
    prompt_model(ollama)
    ollama.version = "0.4.7"
    ollama.enqueue(reply("hi"))
    make_agent(model="gemma3:4b").run("hi")
    (body,) = ollama.chat_bodies
    assert "format" not in body and "<tool_call>" in body["messages"][0]["content"]


def test_a_refused_schema_is_asked_again_in_free_text(
    make_agent: MakeAgent, ollama: FakeOllama
) -> None:
    prompt_model(ollama)
    ollama.enqueue(HttpError(400, "invalid JSON schema in format"), reply("hi"), reply("again"))
    agent = make_agent(model="gemma3:4b")
    events = agent.run("hi")
    refused, retried = ollama.chat_bodies
    assert "format" in refused and "format" not in retried
    assert "<tool_call>" in retried["messages"][0]["content"]
    notices = [e.text for e in of_type(events, Notice)]
    assert any("cannot hold answers to a JSON schema" in n for n in notices)
    assert events[-1].answer == "hi" and events[-1].steps == 1
    agent.run("more")
    assert "format" not in ollama.chat_bodies[-1]  # said once: not sent again


def test_thinking_is_free_text(make_agent: MakeAgent, ollama: FakeOllama) -> None:
    ollama.add_model("deepthink:7b", ["completion", "thinking"], family="qwen2")
    ollama.enqueue(reply("hi"))
    make_agent("ollama: {think: true}\n", model="deepthink:7b").run("hi")
    assert "format" not in ollama.chat_bodies[0]


def test_text_that_is_not_the_schema_is_read_as_prompt_mode_reads_it(
    make_agent: MakeAgent, ollama: FakeOllama, workspace: Path
) -> None:
    """A server that takes `format` and ignores it: the model's <tool_call> still runs."""
    prompt_model(ollama)
    (workspace / "a.txt").write_text("alpha\n")
    call = json.dumps({"name": "read_file", "arguments": {"path": "a.txt"}})
    ollama.enqueue(reply(f"Reading it.\n<tool_call>{call}</tool_call>"), reply("alpha"))
    events = make_agent(model="gemma3:4b").run("read a.txt")
    assert of_type(events, ToolResult)[0].result["success"] is True
    assert events[-1].answer == "alpha"


def test_an_answer_cut_at_the_length_limit_is_shown_as_its_text(
    make_agent: MakeAgent, ollama: FakeOllama
) -> None:
    """SmolLM2 under num_predict 384 in agent eval: the reply ends inside its answer's
    string. The user reads what it said so far, not the JSON around it."""
    prompt_model(ollama)
    ollama.enqueue(reply('{ "answer" : "The port is 8080, and the host\\u00', done_reason="length"))
    events = make_agent(model="gemma3:4b").run("which port?")
    shown = "".join(e.text for e in of_type(events, ContentDelta))
    assert shown == "The port is 8080, and the host"
    assert events[-1].answer == "The port is 8080, and the host"
    assert events[-1].stop_reason == "length"


@pytest.mark.parametrize(
    ("text", "read"),
    [
        ('{"answer": "a\\nb', ([], "a\nb")),
        ('{"answer": "a\\', ([], "a")),  # cut inside an escape
        ('{"answer": "done"', ([], "done")),  # cut before the brace
        ('{"answer": "a\\\\', ([], "a\\")),  # a whole escaped backslash, then the cut
        ('{"answer": "a\\qb', None),  # not JSON's escape: read as free text
        ('{"name": "read_file", "argu', None),  # half a call runs nothing
        ('{"answer": 42', None),
    ],
)
def test_what_a_cut_reply_reads_as(text: str, read: Any) -> None:
    assert read_reply(text, ("read_file",)) == read


@pytest.fixture
def make_openai_agent(openai: FakeOpenAI, workspace: Path, home: Path) -> Iterator[Any]:
    def make(yaml: str = "", model: str = "gemma3:4b") -> Any:
        openai.add_model(model, capabilities=["completion"])
        choices = Choices(model=model, host=openai.url, api="openai")
        return harness(choices, "ollama: {stream: false}\n" + yaml, workspace, home)

    yield make


def test_openai_compatible_servers_get_response_format(
    make_openai_agent: Any, openai: FakeOpenAI
) -> None:
    openai.enqueue(Answer('{"answer": "hi"}'))
    events = make_openai_agent().run("hi")
    (body,) = openai.chat_bodies
    assert body["response_format"]["type"] == "json_schema"
    assert body["response_format"]["json_schema"]["schema"]["anyOf"][0]["required"] == ["answer"]
    assert events[-1].answer == "hi"


def test_llama_cpp_python_s_way_is_tried_when_the_openai_way_is_refused(
    make_openai_agent: Any, openai: FakeOpenAI
) -> None:
    """llama-cpp-python's server takes only `json_object` with a `schema` (HTTP 422 for the
    OpenAI form): tried next, then kept for the session."""
    refusal = (
        "1 validation error: body.response_format.type: Input should be 'text' or 'json_object'"
    )
    openai.enqueue(OpenAIError(422, refusal), Answer('{"answer": "hi"}'), Answer('{"answer": "b"}'))
    agent = make_openai_agent()
    assert agent.run("hi")[-1].answer == "hi"
    agent.run("again")
    first, second, third = openai.chat_bodies
    assert first["response_format"]["type"] == "json_schema"
    assert second["response_format"]["type"] == "json_object"
    assert second["response_format"]["schema"] == first["response_format"]["json_schema"]["schema"]
    assert third["response_format"]["type"] == "json_object"


def test_a_server_that_refuses_both_ways_gets_free_text(
    make_openai_agent: Any, openai: FakeOpenAI
) -> None:
    openai.enqueue(
        OpenAIError(400, "response_format is not supported"),
        OpenAIError(400, "response_format json_object is not supported"),
        Answer("plain hi"),
    )
    events = make_openai_agent().run("hi")
    bodies = openai.chat_bodies
    assert [("response_format" in b) for b in bodies] == [True, True, False]
    assert "<tool_call>" in bodies[-1]["messages"][0]["content"]
    assert events[-1].answer == "plain hi"


# -- tool results as user messages -----------------------------------------------------------


@pytest.mark.parametrize("aids", ["on", "[constrained]"])
def test_prompt_mode_results_go_as_user_messages_under_the_aid(
    make_agent: MakeAgent, ollama: FakeOllama, workspace: Path, aids: str
) -> None:
    prompt_model(ollama)
    (workspace / "a.txt").write_text("alpha\n")
    ollama.enqueue(reply('{"name": "read_file", "arguments": {"path": "a.txt"}}'), reply("ok"))
    make_agent(f"agent: {{aids: {aids}}}\n", model="gemma3:4b").run("read a.txt")
    last = ollama.chat_bodies[1]["messages"][-1]
    if aids == "on":
        assert last["role"] == "user"
        assert last["content"].startswith("[tool result of read_file]\n{")
    else:
        assert last["role"] == "tool"  # as before: a template may drop it
    assert json.loads(last["content"].split("\n", 1)[-1])["content"] == "alpha\n"


def test_a_native_model_s_results_keep_the_tool_role(
    make_agent: MakeAgent, ollama: FakeOllama, workspace: Path
) -> None:
    (workspace / "a.txt").write_text("alpha\n")
    ollama.enqueue(reply(tool_calls=[tool_call("read_file", {"path": "a.txt"})]), reply("ok"))
    events = make_agent().run("read a.txt")
    assert ollama.chat_bodies[1]["messages"][-1]["role"] == "tool"
    assert isinstance(events[-1], Finished)
