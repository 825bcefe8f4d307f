"""num_ctx sized per request, no silent truncation, and the estimate's correction factor —
against the fake Ollama, which records every request (cli/loop/sizing.py, cli/loop/agent.py)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from cli.backends.messages import ChatRequest
from cli.backends.ollama import OllamaClient
from cli.errors import ContextTooLong
from cli.loop.events import Notice
from cli.loop.sizing import CONTEXT_STEP, MAX_FACTOR, MIN_FACTOR, REPLY_TOKENS, Calibration
from cli.loop.tokens import estimate_tokens, message_tokens
from tests.conftest import MakeAgent, MakeChat, RunCli
from tests.fakes.context import typed
from tests.fakes.fake_ollama import (
    CONTEXT_ERROR,
    FakeOllama,
    HttpError,
    Stream,
    context_error,
    reply,
    tool_call,
)

REMOVED = "was left out to fit the context window"  # a tool result's stub


@pytest.fixture
def run_cli(run_cli_in_process: RunCli) -> RunCli:
    """`agent` in this process (conftest.run_in_process): no test here is about the process."""
    return run_cli_in_process


def estimate_of(body: dict[str, Any]) -> int:
    """Our own estimate of a request as the agent sized it: tool definitions and messages."""
    tools = body.get("tools") or []
    tools_cost = estimate_tokens(json.dumps(tools)) if tools else 0
    return tools_cost + sum(message_tokens(m) for m in body["messages"])


def stepped(tokens: int) -> int:
    return math.ceil(tokens / CONTEXT_STEP) * CONTEXT_STEP


def num_ctx(body: dict[str, Any]) -> int:
    value = body["options"]["num_ctx"]
    assert isinstance(value, int)
    return value


def earlier_turns(count: int, result_chars: int = 0, answer_chars: int = 40) -> list[Any]:
    """History as a resumed session holds it: each turn a question, optionally a read_file
    call with its result, and an answer."""
    messages: list[dict[str, Any]] = []
    for i in range(count):
        messages.append({"role": "user", "content": f"question {i}"})
        if result_chars:
            call = {"function": {"name": "read_file", "arguments": {"path": f"f{i}.txt"}}}
            result = json.dumps({"success": True, "content": f"{i}" * result_chars})
            messages += [
                {"role": "assistant", "content": "", "tool_calls": [call]},
                {"role": "tool", "tool_name": "read_file", "content": result},
            ]
        messages.append({"role": "assistant", "content": f"answer {i} " + "a" * answer_chars})
    return messages


# -- no silent truncation ------------------------------------------------------------------


def test_truncate_and_shift_are_off_on_every_chat_request(
    make_agent: MakeAgent, ollama: FakeOllama
) -> None:
    ollama.enqueue(reply(tool_calls=[tool_call("list_directory", {"path": "."})]), reply("ok"))
    make_agent().run("look")
    assert len(ollama.chat_bodies) == 2
    for body in ollama.chat_bodies:
        assert body["truncate"] is False and body["shift"] is False
        assert isinstance(body["options"]["num_ctx"], int)


def test_the_client_sends_them_whatever_the_request(ollama: FakeOllama) -> None:
    ollama.enqueue(reply("hi"))
    request = ChatRequest("qwen3:8b", [{"role": "user", "content": "hi"}])
    list(OllamaClient(ollama.url).chat(request))
    body = ollama.chat_bodies[0]
    assert (body["truncate"], body["shift"]) == (False, False)


# -- the rule --------------------------------------------------------------------------------


def test_num_ctx_is_prompt_plus_reply_rounded_up_to_a_step(
    make_agent: MakeAgent, ollama: FakeOllama
) -> None:
    ollama.enqueue(reply("ok", prompt_eval_count=0))
    make_agent().run("x " * 20_000)  # about 10,000 tokens
    body = ollama.chat_bodies[0]
    need = estimate_of(body) + REPLY_TOKENS
    assert num_ctx(body) % CONTEXT_STEP == 0
    assert need <= num_ctx(body) < need + CONTEXT_STEP


def test_num_predict_is_the_reply_budget(make_agent: MakeAgent, ollama: FakeOllama) -> None:
    ollama.enqueue(reply("ok", prompt_eval_count=0))
    make_agent("ollama: {options: {num_predict: 20000}}\n").run("hi")
    body = ollama.chat_bodies[0]
    assert num_ctx(body) == stepped(estimate_of(body) + 20_000)
    assert body["options"]["num_predict"] == 20_000


# Each case: the config, the model's trained context, what /api/ps says is loaded, and the
# num_ctx expected for a short prompt (which, with the reply budget, needs 4096 < n <= 8192).
RULE_CASES = [
    pytest.param("", 40960, None, 8192, id="default-two-steps"),
    pytest.param("options: {num_ctx: 10000}", 40960, None, 10000, id="floor-used-as-is"),
    pytest.param("options: {num_ctx: 2048}", 40960, None, 8192, id="floor-below-the-need"),
    pytest.param("max_num_ctx: 4096", 40960, None, 4096, id="cap"),
    pytest.param("", 6144, None, 6144, id="trained-context"),
    pytest.param("options: {num_ctx: 36864}", 40960, None, 36864, id="floor-above-the-cap"),
    pytest.param("options: {num_ctx: 65536}", 40960, None, 40960, id="floor-above-trained"),
    pytest.param("", 40960, 24576, 24576, id="loaded-size-kept"),
    pytest.param("", 40960, 4096, 8192, id="loaded-too-small"),
    pytest.param("", 131072, 65536, 8192, id="loaded-above-the-cap"),
    pytest.param("options: {num_ctx: 16384}", 40960, 12288, 16384, id="loaded-under-floor"),
]


@pytest.mark.parametrize(("config", "trained", "loaded", "expected"), RULE_CASES)
def test_num_ctx_follows_the_rule(
    make_agent: MakeAgent,
    ollama: FakeOllama,
    config: str,
    trained: int,
    loaded: int | None,
    expected: int,
) -> None:
    ollama.add_model("m:1", ["completion", "tools"], context_length=trained)
    if loaded:
        ollama.loaded = {"m:1": loaded}
    ollama.enqueue(reply("ok", prompt_eval_count=0))
    make_agent(f"ollama: {{{config}}}\n", model="m:1").run("hi")
    body = ollama.chat_bodies[0]
    assert CONTEXT_STEP < estimate_of(body) + REPLY_TOKENS <= 2 * CONTEXT_STEP  # the premise
    assert num_ctx(body) == expected


def test_loaded_size_is_asked_once_a_turn_and_then_kept(
    make_agent: MakeAgent, ollama: FakeOllama
) -> None:
    ollama.loaded = {"qwen3:8b": 16384}
    ollama.enqueue(reply(tool_calls=[tool_call("list_directory", {"path": "."})]), reply("ok"))
    make_agent().run("look")
    assert [num_ctx(b) for b in ollama.chat_bodies] == [16384, 16384]
    assert len(ollama.requests_to("/api/ps")) == 1


def test_a_server_without_api_ps_is_sized_without_it(
    make_agent: MakeAgent, ollama: FakeOllama
) -> None:
    ollama.has_ps = False
    ollama.enqueue(reply("ok"))
    events = make_agent().run("hi")
    assert events[-1].answer == "ok"
    assert num_ctx(ollama.chat_bodies[0]) == 8192


def test_a_growing_conversation_moves_up_a_step_only_when_it_must(
    make_agent: MakeAgent, ollama: FakeOllama
) -> None:
    harness = make_agent()
    sizes = []
    for i in range(4):
        ollama.enqueue(reply("ok " * 2000, prompt_eval_count=0))  # ~1500 tokens each
        harness.run(f"question {i}")
        sizes.append(num_ctx(ollama.chat_bodies[-1]))
    assert sizes == sorted(sizes) and all(s % CONTEXT_STEP == 0 for s in sizes)
    assert len(set(sizes)) < len(sizes)  # some turns stayed at the size already loaded


def test_history_beyond_the_cap_is_trimmed_to_it(make_agent: MakeAgent, ollama: FakeOllama) -> None:
    harness = make_agent("ollama: {max_num_ctx: 8192}\n")
    harness.conversation.extend(earlier_turns(10, answer_chars=4000))  # ~10,000 tokens
    ollama.enqueue(reply("ok", prompt_eval_count=0))
    harness.run("now")
    body = ollama.chat_bodies[0]
    assert num_ctx(body) == 8192
    assert estimate_of(body) <= 8192 - REPLY_TOKENS // 2  # room for the answer
    questions = [typed(m["content"]) for m in body["messages"] if m["role"] == "user"]
    assert questions[-1] == "now" and questions[-2].startswith("question 9\n\n")
    assert not any("question 0" in q for q in questions)
    assert "\n\n[Context compacted: " in questions[0]  # the note says what was left out


# -- the server's context error ------------------------------------------------------------


def test_context_error_trims_tool_results_oldest_first_and_retries_once(
    make_agent: MakeAgent, ollama: FakeOllama
) -> None:
    harness = make_agent("ollama: {max_num_ctx: 8192}\n")
    harness.conversation.extend(earlier_turns(3, result_chars=3200))
    ollama.enqueue(context_error(), reply("fitted"))
    events = harness.run("current question")
    first, second = ollama.chat_bodies
    # Everything fitted by our estimate the first time; the server disagreed.
    assert len(first["messages"]) == 1 + 3 * 4 + 1
    assert num_ctx(first) == num_ctx(second) == 8192  # the cap: no more room to ask for
    # Never cut: the system prompt, the tool definitions, the current user message.
    assert second["messages"][0] == first["messages"][0]
    assert second["tools"] == first["tools"]
    # The current message stays (under the note on what was left out, if turns were).
    assert second["messages"][-1]["content"].endswith("current question")
    results = [typed(m["content"]) for m in second["messages"] if m["role"] == "tool"]
    removed = [REMOVED in r for r in results]
    assert removed and removed[0] and removed == sorted(removed, reverse=True)  # oldest first
    questions = [typed(m["content"]) for m in second["messages"] if m["role"] == "user"]
    if len(questions) < 4:  # turns go only once every remaining tool result has gone
        assert all(removed)
    assert estimate_of(second) < estimate_of(first)
    notices = [e.text for e in events if isinstance(e, Notice)]
    assert len(notices) == 1
    assert "longer than the model's context (num_ctx 8192)" in notices[0]
    assert "reduced to a stub" in notices[0] or "reduced to stubs" in notices[0]
    assert events[-1].answer == "fitted"
    # The conversation itself keeps everything: only what was sent was trimmed.
    kept = [typed(m["content"]) for m in harness.conversation if m["role"] == "tool"]
    assert not any(REMOVED in c for c in kept)


def test_context_error_drops_the_oldest_turns_when_there_are_no_results(
    make_agent: MakeAgent, ollama: FakeOllama
) -> None:
    harness = make_agent("ollama: {max_num_ctx: 8192}\n")
    harness.conversation.extend(earlier_turns(4, answer_chars=3200))
    ollama.enqueue(context_error(), reply("fitted"))
    events = harness.run("current question")
    first, second = ollama.chat_bodies
    asked = [typed(m["content"]) for m in first["messages"] if m["role"] == "user"]
    kept = [typed(m["content"]) for m in second["messages"] if m["role"] == "user"]
    assert asked == ["question 0", "question 1", "question 2", "question 3", "current question"]
    # The oldest go; the first message still sent carries the note saying so.
    assert len(kept) < len(asked) and kept[1:] == asked[len(asked) - len(kept) + 1 :]
    first_kept, note = kept[0].split("\n\n", 1)
    assert note.startswith("[Context compacted: ") and first_kept == asked[-len(kept)]
    assert second["messages"][0] == first["messages"][0]
    notice = next(e.text for e in events if isinstance(e, Notice))
    assert "earlier turns left out" in notice


def test_a_context_error_may_raise_num_ctx_below_the_cap(
    make_agent: MakeAgent, ollama: FakeOllama
) -> None:
    ollama.enqueue(context_error(), reply("ok"))
    make_agent().run("x " * 8000)  # about 4,000 tokens
    first, second = ollama.chat_bodies
    assert num_ctx(second) > num_ctx(first)  # our estimate was short: ask for more
    assert second["messages"] == first["messages"]  # and nothing had to be cut


def test_context_error_twice_fails_with_one_line_naming_max_num_ctx(
    run_cli: RunCli, ollama: FakeOllama
) -> None:
    ollama.enqueue(context_error(), context_error())
    r = run_cli("run", "hi")
    assert r.code == 1
    assert len(ollama.chat_bodies) == 2  # retried once, not more
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert sum("longer than the model's context" in line for line in lines) == 1  # the notice
    errors = [line for line in lines if line.startswith("agent:")]
    assert len(errors) == 1 and lines[-1] == errors[0]
    assert "ollama.max_num_ctx" in errors[0]
    assert "Traceback" not in r.stderr


def test_a_context_error_after_the_answer_started_is_not_resent(
    make_agent: MakeAgent, ollama: FakeOllama
) -> None:
    chunk = {"model": "qwen3:8b", "message": {"role": "assistant", "content": "par"}}
    ollama.enqueue(Stream([{**chunk, "done": False}, {"error": CONTEXT_ERROR}]))
    harness = make_agent()
    with pytest.raises(ContextTooLong):
        harness.run("hi")
    assert len(ollama.chat_bodies) == 1
    assert harness.conversation[-1] == {"role": "assistant", "content": "par"}


@pytest.mark.parametrize(
    "text",
    [
        CONTEXT_ERROR,
        "the input length exceeds the context length",
        '{"error":{"code":400,"message":"the request exceeds the available context size, '
        'try increasing it","type":"exceed_context_size_error"}}',
    ],
    ids=["ollama-0.30", "ollama-0.12-runner", "llama-server-passthrough"],
)
@pytest.mark.parametrize("where", ["status", "stream"])
def test_every_wording_of_the_context_error_is_recognised(
    ollama: FakeOllama, text: str, where: str
) -> None:
    ollama.enqueue(HttpError(400, text) if where == "status" else Stream([{"error": text}]))
    request = ChatRequest("qwen3:8b", [{"role": "user", "content": "hi"}])
    with pytest.raises(ContextTooLong) as info:
        list(OllamaClient(ollama.url).chat(request))
    assert "\n" not in info.value.message


# -- the correction factor -------------------------------------------------------------------


@pytest.mark.parametrize(("ratio", "grows"), [(2.0, True), (1.0, False)], ids=["2x", "1x"])
def test_prompt_eval_count_corrects_later_sizing(
    make_agent: MakeAgent, ollama: FakeOllama, ratio: float, grows: bool
) -> None:
    ollama.add_model("big:1", ["completion", "tools"], context_length=131072)
    ollama.prompt_tokens = lambda body: int(ratio * estimate_of(body))  # a denser tokenizer
    ollama.enqueue(reply(tool_calls=[tool_call("list_directory", {"path": "."})]), reply("ok"))
    harness = make_agent("ollama: {max_num_ctx: 131072}\n", model="big:1")
    harness.run("x " * 60_000)  # above a quarter of the cap: the first size is what it needs
    first, second = ollama.chat_bodies
    assert num_ctx(first) == stepped(estimate_of(first) + REPLY_TOKENS)  # no factor yet
    if grows:
        assert num_ctx(second) >= 2 * estimate_of(second) + REPLY_TOKENS
        assert num_ctx(second) > num_ctx(first)
    else:
        assert num_ctx(second) == num_ctx(first)
    assert harness.agent.calibration.factor("big:1") == pytest.approx(ratio, rel=0.01)


def test_the_factor_is_bounded_and_learns_down_slowly() -> None:
    calibration = Calibration()
    calibration.observe("m", 1000, 100_000)
    assert calibration.factor("m") == MAX_FACTOR
    calibration.observe("m", 1000, 1000)
    assert calibration.factor("m") == pytest.approx((MAX_FACTOR + 1) / 2)  # halfway down
    for _ in range(30):
        calibration.observe("m", 1000, 1)
    assert calibration.factor("m") == pytest.approx(MIN_FACTOR, abs=1e-6)
    calibration.observe("m", 1000, 0)  # no count: nothing learnt
    calibration.observe("m", 10, 1000)  # too small a sample
    assert calibration.factor("m") == pytest.approx(MIN_FACTOR, abs=1e-6)
    assert calibration.factor("other") == 1.0  # per model


# -- context use in chat ---------------------------------------------------------------------


def test_chat_stats_show_context_use(make_chat: MakeChat, ollama: FakeOllama) -> None:
    ollama.enqueue(reply("hi", prompt_eval_count=12_000, eval_count=390))
    chat = make_chat("ollama: {options: {num_ctx: 32768}}\n")
    chat.run("hello\r")
    assert "ctx 12.1k/32k" in chat.text


def test_refused_at_the_cap_after_a_long_read_the_retry_compacts_and_differs(
    run_cli: RunCli, ollama: FakeOllama, workspace: Path
) -> None:
    """At ollama.max_num_ctx there is no more context to ask for: the retry must send less
    (the read's result shortened), never the refused request again."""
    (workspace / "c.yaml").write_text("ollama: {max_num_ctx: 8192}\n")
    (workspace / "big.txt").write_text("".join(f"line {i}: some value\n" for i in range(400)))
    ollama.enqueue(
        reply(tool_calls=[tool_call("read_file", {"path": "big.txt"})]),
        context_error(),
        reply("It lists 400 values."),
    )
    r = run_cli("run", "-c", "c.yaml", "--yes", "what is in big.txt?")
    assert r.code == 0, r.stderr
    assert r.stdout == "It lists 400 values.\n"
    refused, resent = ollama.chat_bodies[1:]
    assert num_ctx(refused) == num_ctx(resent) == 8192
    assert resent != refused
    assert len(json.dumps(resent["messages"])) < len(json.dumps(refused["messages"]))
    assert "sending it once more with num_ctx 8192, 1 tool result shortened" in r.stderr
