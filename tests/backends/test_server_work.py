"""The fakes' count of a server's prompt evaluation (tests/fakes/server_work.py): per request,
everything after the longest common prefix with the previous request to the same model,
against the tokens that were new — the counter itself, then through both fake servers."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import requests

from cli.backends.messages import ChatRequest
from cli.backends.ollama import OllamaClient
from cli.errors import BackendError
from tests.conftest import MakeAgent
from tests.fakes.fake_ollama import FakeOllama, context_error, reply, tool_call
from tests.fakes.fake_openai import Answer, FakeOpenAI
from tests.fakes.server_work import (
    ServerWork,
    blocks,
    prompt_tokens,
    render_message,
    render_tools,
    tokenize,
)

TOOLS = [{"type": "function", "function": {"name": "read_file", "parameters": {}}}]
SYSTEM = {"role": "system", "content": "You are a careful agent. Use the tools."}


def result(n: int, words: int = 50) -> dict[str, Any]:
    return {"role": "tool", "tool_name": "read_file", "content": f"file {n}: " + "word " * words}


def call(n: int) -> dict[str, Any]:
    function = {"name": "read_file", "arguments": {"path": f"f{n}.txt"}}
    return {"role": "assistant", "content": "", "tool_calls": [{"function": function}]}


def body(
    messages: list[dict[str, Any]], num_ctx: int | None = None, model: str = "m"
) -> dict[str, Any]:
    sent: dict[str, Any] = {"model": model, "tools": TOOLS, "messages": messages}
    if num_ctx is not None:
        sent["options"] = {"num_ctx": num_ctx}
    return sent


def size(*messages: dict[str, Any]) -> int:
    return sum(len(render_message(m)) for m in messages)


def session(steps: int) -> list[list[dict[str, Any]]]:
    """The requests of an append-only run: a prompt, then a read_file call and its result a
    step."""
    history: list[dict[str, Any]] = [SYSTEM, {"role": "user", "content": "read them all"}]
    sent = [list(history)]
    for n in range(steps):
        history += [call(n), result(n)]
        sent.append(list(history))
    return sent


# -- the tokenizer and the rendering --------------------------------------------------------


def test_words_and_punctuation_are_tokens_and_whitespace_is_not() -> None:
    assert tokenize('def f(x):\n    return "a b"') == [
        "def", "f", "(", "x", ")", ":", "return", '"', "a", "b", '"',
    ]  # fmt: skip


def test_a_message_renders_role_fields_and_end_in_a_fixed_order() -> None:
    message = {"tool_name": "read_file", "content": "hi there", "role": "tool"}
    assert render_message(message) == [
        "<|tool|>", "<content>", "hi", "there", "<tool_name>", "read_file", "<|end|>",
    ]  # fmt: skip
    assert render_message(dict(reversed(message.items()))) == render_message(message)


def test_objects_render_as_a_server_reserialises_them_and_strings_as_sent() -> None:
    ollama_call = {"function": {"name": "f", "arguments": {"a": 1, "b": 2}}}
    reordered = {"function": {"arguments": {"b": 2, "a": 1}, "name": "f"}}
    assert render_message({"role": "assistant", "tool_calls": [ollama_call]}) == render_message(
        {"role": "assistant", "tool_calls": [reordered]}
    )
    as_text = {"function": {"name": "f", "arguments": '{"a": 1, "b": 2}'}}
    other_text = {"function": {"name": "f", "arguments": '{"b": 2, "a": 1}'}}
    assert render_message({"role": "assistant", "tool_calls": [as_text]}) != render_message(
        {"role": "assistant", "tool_calls": [other_text]}
    )


def test_the_system_message_comes_first_then_the_tools_then_every_other_message() -> None:
    user = {"role": "user", "content": "hi"}
    sent = body([SYSTEM, user])
    rendered = blocks(sent)
    assert rendered[0] == render_message(SYSTEM)
    assert rendered[1] == render_tools(TOOLS) and rendered[1][0] == "<|tools|>"
    assert rendered[2:] == [render_message(user)]
    assert prompt_tokens(sent) == sum(map(len, rendered))
    assert blocks({"model": "m", "messages": [SYSTEM]}) == [render_message(SYSTEM)]
    # No system message: the tools lead.
    assert blocks(body([user])) == [render_tools(TOOLS), render_message(user)]


# -- the counter -----------------------------------------------------------------------------


def test_an_append_only_session_costs_exactly_the_new_tokens() -> None:
    work = ServerWork()
    for messages in session(10):
        work.observe(body(messages))
    assert work.requests == 11
    assert work.evaluated == work.new == work.rows[-1].tokens
    assert work.ratio == 1.0
    assert work.compactions == 0 and work.rewritten == 0
    for earlier, later in zip(work.rows, work.rows[1:], strict=False):
        assert later.lcp == earlier.tokens
        assert later.evaluated == later.new == later.tokens - earlier.tokens


def test_a_changed_third_message_costs_everything_after_it() -> None:
    work = ServerWork()
    sent = session(4)
    for messages in sent:
        work.observe(body(messages))
    before = work.evaluated
    # The third message (the first call's result) shortened, as trimming every request did.
    changed = list(sent[-1])
    changed[3] = {**changed[3], "content": "[shortened] " + changed[3]["content"][:20]}
    row = work.observe(body(changed))
    kept = len(render_tools(TOOLS)) + size(*changed[:3])
    marker = 2  # <|tool|> <content>, then the first token differs
    assert row.lcp == kept + marker
    assert row.evaluated == row.tokens - kept - marker
    # Nothing was appended: the shortened result is a rewrite, paid for but not new.
    assert row.new == 0 and row.rewritten == len(render_message(changed[3]))
    assert row.compaction and work.compactions == 1
    assert work.evaluated == before + row.evaluated
    assert work.ratio > 1


def test_rewriting_the_history_every_request_costs_more_than_it_adds() -> None:
    """Each request shortens the older results a little more (the old trimming, oldest
    first): they are rendered anew each time, which the server pays for and which is not
    new."""
    work = ServerWork()
    history: list[dict[str, Any]] = [SYSTEM, {"role": "user", "content": "read them all"}]
    for n in range(8):
        shortened = [
            {**m, "content": m["content"][: max(10, len(m["content"]) - 40)]}
            if m["role"] == "tool" and i < len(history) - 2
            else m
            for i, m in enumerate(history)
        ]
        history = [*shortened, call(n), result(n)]
        work.observe(body(history))
    assert work.new == sum(r.new for r in work.rows) < work.evaluated
    assert work.rewritten > 0 and work.compactions == 6
    assert work.ratio > 2
    assert [r.new for r in work.rows[1:]] == [size(call(n), result(n)) for n in range(1, 8)]


def test_a_compaction_to_stubs_costs_what_remains_and_adds_only_what_follows() -> None:
    work = ServerWork()
    sent = session(6)
    for messages in sent:
        work.observe(body(messages))
    stubs = [
        {**m, "content": "[elided: read_file again to see it]"} if m["role"] == "tool" else m
        for m in sent[-1][:-2]
    ]
    compacted = [*stubs, *sent[-1][-2:], call(6), result(6)]
    row = work.observe(body(compacted))
    assert row.new == size(call(6), result(6))
    assert row.rewritten == size(*(m for m in stubs if m["role"] == "tool"))
    first_stub = next(i for i, m in enumerate(stubs) if m["role"] == "tool")
    paid = len(render_tools(TOOLS)) + size(*compacted[:first_stub]) + 2
    assert row.evaluated == row.tokens - paid


def test_a_message_rendered_like_an_earlier_one_is_new_when_repeated() -> None:
    work = ServerWork()
    again = {"role": "user", "content": "continue"}
    work.observe(body([SYSTEM, again]))
    row = work.observe(body([SYSTEM, again, {"role": "assistant", "content": "ok"}, again]))
    assert row.new == size({"role": "assistant", "content": "ok"}, again)
    assert row.rewritten == 0 and row.evaluated == row.new


def test_a_request_sent_again_as_it_was_costs_nothing() -> None:
    work = ServerWork()
    work.observe(body([SYSTEM]))
    again = work.observe(body([SYSTEM]))
    assert again.evaluated == again.new == 0 and not again.compaction


def test_a_message_seen_before_is_not_new_even_after_a_compaction() -> None:
    work = ServerWork()
    first = [SYSTEM, {"role": "user", "content": "go"}, call(0), result(0)]
    work.observe(body(first))
    compacted = [SYSTEM, {"role": "user", "content": "go"}, result(0)]  # the call dropped
    row = work.observe(body(compacted))
    assert row.new == row.rewritten == 0 and row.compaction
    assert row.evaluated == size(result(0))  # what follows the common prefix is paid again


def test_each_model_has_its_own_cache() -> None:
    work = ServerWork()
    work.observe(body([SYSTEM], model="a"))
    other = work.observe(body([SYSTEM], model="b"))
    assert other.lcp == 0 and other.evaluated == other.tokens and other.new == 0
    assert not other.compaction


def test_a_num_ctx_change_reloads_the_model_and_is_counted_after_the_first_request() -> None:
    work = ServerWork()
    sent = session(3)
    sizes = [8192, 8192, 32768, 32768]
    rows = [work.observe(body(m, num_ctx)) for m, num_ctx in zip(sent, sizes, strict=True)]
    assert [r.reloaded for r in rows] == [False, False, True, False]
    assert work.num_ctx_changes == 1
    assert rows[2].evaluated == rows[2].tokens  # the cache went with the old runner
    assert not rows[2].compaction  # the history itself was appended to
    assert work.summary()["num_ctx"] == [8192, 32768]


def test_reset_starts_a_new_session() -> None:
    work = ServerWork()
    work.observe(body([SYSTEM]))
    work.reset()
    row = work.observe(body([SYSTEM]))
    assert work.requests == 1 and row.new == row.evaluated == row.tokens


# -- through the fakes -------------------------------------------------------------------------


def test_the_fake_ollama_counts_what_it_answers(ollama: FakeOllama) -> None:
    ollama.server_work = work = ServerWork()
    ollama.enqueue(reply("one"), context_error(), reply("two"))
    client = OllamaClient(ollama.url)
    history = [SYSTEM, {"role": "user", "content": "hi"}]
    list(client.chat(ChatRequest("qwen3:8b", history, options={"num_ctx": 4096})))
    history += [{"role": "assistant", "content": "one"}, {"role": "user", "content": "more"}]
    with pytest.raises(BackendError):  # refused (a scripted error): not counted
        list(client.chat(ChatRequest("qwen3:8b", history, options={"num_ctx": 4096})))
    list(client.chat(ChatRequest("qwen3:8b", history, options={"num_ctx": 4096})))
    assert work.requests == 2
    assert work.evaluated == work.new == prompt_tokens(ollama.chat_bodies[-1])
    assert work.rows[-1].num_ctx == 4096 and work.num_ctx_changes == 0


def test_the_fake_openai_counts_what_it_does_not_refuse_and_reports_its_count(
    openai: FakeOpenAI,
) -> None:
    openai.server_work = work = ServerWork()
    openai.tokenizer = prompt_tokens
    openai.context = 60
    openai.enqueue(Answer("one"), Answer("two"))
    url = openai.url + "/chat/completions"
    short = {"model": "qwen3:8b", "messages": [SYSTEM, {"role": "user", "content": "hi"}]}
    first = requests.post(url, json=short, timeout=10).json()
    assert first["usage"]["prompt_tokens"] == prompt_tokens(short)
    long = {**short, "messages": [*short["messages"], result(1, words=100)]}
    refused = requests.post(url, json=long, timeout=10)
    assert refused.status_code == 400  # over the server's context: refused, unread
    assert work.requests == 1 and work.evaluated == prompt_tokens(short)
    streamed = {**short, "stream": True, "stream_options": {"include_usage": True}}
    streamed["messages"] = [*short["messages"], {"role": "assistant", "content": "one"}]
    events = requests.post(url, json=streamed, timeout=10).text
    usage = [json.loads(line[6:]) for line in events.splitlines() if line.startswith("data: {")]
    assert usage[-1]["usage"]["prompt_tokens"] == prompt_tokens(streamed)
    assert work.requests == 2 and work.ratio == 1.0


def test_a_short_agent_run_appends_only(
    make_agent: MakeAgent, ollama: FakeOllama, workspace: Path
) -> None:
    """Three read_file steps that fit with room to spare: each request is the previous one
    plus the new messages, so the server evaluates each token once."""
    ollama.server_work = work = ServerWork()
    ollama.prompt_tokens = prompt_tokens
    names = ("a.txt", "b.txt", "c.txt")
    for name in names:
        (workspace / name).write_text(f"{name} " * 50)
    calls = [reply(tool_calls=[tool_call("read_file", {"path": n})]) for n in names]
    ollama.enqueue(*calls, reply("done"))
    make_agent().run("read a, b and c")
    assert work.requests == 4
    assert work.compactions == 0 and work.ratio == 1.0


# -- make e2e's side: the real server's log, and the recording proxy ---------------------------

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))
import server_work as e2e_work  # noqa: E402  (tests/e2e/server_work.py)

PERF = (  # llama.cpp's counters, reset before each completion by llama-cpp-python
    "llama_perf_context_print: prompt eval time =     812.11 ms / {n:5d} tokens "
    "(    1.23 ms per token,   812.00 tokens per second)\n"
)


def test_the_server_log_says_what_each_completion_evaluated() -> None:
    before = PERF.format(n=1732) + "Llama.generate: 1732 prefix-match hit, remaining 7 ...\n"
    task = PERF.format(n=7) + "noise\n" + PERF.format(n=50)
    log = before + task + PERF.format(n=1)
    assert e2e_work.prompt_evaluated(log) == [1732, 7, 50, 1]
    start = len(before)
    assert e2e_work.evaluated_in(log, start, start + len(task)) == 57
    assert e2e_work.evaluated_in(log, 0, len(log)) == 1790


def test_the_figure_is_the_longest_task() -> None:
    works = [
        e2e_work.Work("short", 2, 900, 600, 900),
        e2e_work.Work("long", 8, 3000, 2500, 3000),
        e2e_work.Work("none", 0, 0, 0, 0),
    ]
    lines = e2e_work.report(works)
    assert len(lines) == 3
    assert "(long, the longest task)" in lines[-1] and "1.20x" in lines[-1]
    assert "met)" in lines[-1] and "NOT" not in lines[-1]


def test_the_recorder_passes_requests_on_and_keeps_the_chat_bodies(openai: FakeOpenAI) -> None:
    openai.enqueue(Answer("hello"))
    with e2e_work.Recorder(openai.url) as recorder:
        models = requests.get(recorder.url + "/models", timeout=10)
        assert models.status_code == 200 and models.json()["data"][0]["id"] == "qwen3:8b"
        sent = {"model": "qwen3:8b", "messages": [{"role": "user", "content": "hi"}]}
        answer = requests.post(recorder.url + "/chat/completions", json=sent, timeout=10)
        assert answer.json()["choices"][0]["message"]["content"] == "hello"
        missing = requests.post(
            recorder.url + "/chat/completions", json={**sent, "model": "nope"}, timeout=10
        )
        assert missing.status_code == 404  # errors pass through as they are
        assert recorder.take() == [sent, {**sent, "model": "nope"}]
        assert recorder.take() == []
