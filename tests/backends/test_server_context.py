"""Issue 20, the server's side of the context: `num_ctx` that changes as seldom as it can (each
change is a reload), the context each kind of server really runs with (llama-server's /props,
vLLM's /v1/models, LM Studio's own API, the numbers in a context error), a message that cannot
fit refused before it is sent, and an answer the server cut for length told apart from an
answer. Against the fake servers on 127.0.0.1, and the real CLI where it is about what users
see."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from cli.backends.messages import ChatRequest
from cli.backends.openai import OpenAIClient
from cli.errors import ContextTooLong, MessageTooLong
from cli.loop.events import ContextUse, Finished, Notice
from cli.loop.tokens import estimate_tokens, message_tokens
from cli.wiring import Choices
from tests.conftest import Harness, MakeAgent, MakeChat, RunCli, harness
from tests.fakes.fake_ollama import FakeOllama, reply, tool_call
from tests.fakes.fake_openai import Answer, Call, FakeOpenAI, HttpError

SERVER_FLAG = "-c/--ctx-size"  # in every "load the model with a larger context" advice


@pytest.fixture
def run_cli(run_cli_in_process: RunCli) -> RunCli:
    """`agent` in this process (conftest.run_in_process): no test here is about the process."""
    return run_cli_in_process


def estimate_of(body: dict[str, Any]) -> int:
    """Our own estimate of a request as the agent sized it: tool definitions and messages."""
    tools = body.get("tools") or []
    cost = estimate_tokens(json.dumps(tools)) if tools else 0
    return cost + sum(message_tokens(m) for m in body["messages"])


def earlier_turns(count: int, answer_chars: int) -> list[dict[str, Any]]:
    """History as a resumed session holds it: a question and an answer a turn."""
    messages: list[dict[str, Any]] = []
    for i in range(count):
        messages.append({"role": "user", "content": f"question {i}"})
        messages.append({"role": "assistant", "content": f"answer {i} " + "a" * answer_chars})
    return messages


def questions(body: dict[str, Any]) -> list[str]:
    return [m["content"] for m in body["messages"] if m["role"] == "user"]


def notices(events: list[Any]) -> list[str]:
    return [e.text for e in events if isinstance(e, Notice)]


def one_error_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.startswith("agent:")]
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr
    return lines[0]


MakeOpenAIAgent = Callable[..., Harness]


@pytest.fixture
def make_openai_agent(openai: FakeOpenAI, workspace: Path, home: Path) -> MakeOpenAIAgent:
    """The real agent against the fake OpenAI-compatible server (`--api openai`)."""

    def make(yaml: str = "", *, max_steps: int | None = None) -> Harness:
        choices = Choices(host=openai.url, api="openai", max_steps=max_steps)
        return harness(choices, yaml, workspace, home)

    return make


# -- reloads only when unavoidable -----------------------------------------------------------


def test_a_session_growing_to_the_cap_changes_num_ctx_once_after_the_first_request(
    make_agent: MakeAgent, ollama: FakeOllama
) -> None:
    ollama.follow_loads = True  # /api/ps says what the last request loaded, as Ollama's does
    harness = make_agent()  # max_num_ctx 32768, the model trained for 40960
    for i in range(24):  # ~1,500 tokens a turn: from a small prompt to past the cap
        ollama.enqueue(reply("ok " * 2000, prompt_eval_count=0))
        harness.run(f"question {i}")
    sizes = [b["options"]["num_ctx"] for b in ollama.chat_bodies]
    assert sizes[-1] == 32768  # it did grow to the cap (and was trimmed there)
    assert sizes == sorted(sizes)  # never shrinks
    changes = sum(1 for a, b in itertools.pairwise(sizes) if a != b)
    assert changes <= 1, sizes
    assert len(ollama.loads) <= 2  # the first load, and at most one reload


def test_num_ctx_never_shrinks_within_a_session(make_agent: MakeAgent, ollama: FakeOllama) -> None:
    ollama.follow_loads = True
    harness = make_agent()
    harness.conversation.extend(earlier_turns(12, answer_chars=4000))  # ~12,000 tokens
    ollama.enqueue(reply("ok", prompt_eval_count=0), reply("ok", prompt_eval_count=0))
    harness.run("long one")
    grown = ollama.chat_bodies[-1]["options"]["num_ctx"]
    assert grown > 8192  # the premise: more than a small prompt's size
    # The model was unloaded meanwhile (keep_alive ran out) and the history cleared (/clear):
    # the next request still asks for the session's size, not a smaller one (a reload each).
    ollama.loaded.clear()
    harness.conversation.clear()
    harness.run("short one")
    assert ollama.chat_bodies[-1]["options"]["num_ctx"] == grown


def test_a_loaded_size_that_holds_the_prompt_is_kept_and_outgrown_once(
    make_agent: MakeAgent, ollama: FakeOllama
) -> None:
    ollama.follow_loads = True
    ollama.loaded = {"qwen3:8b": 12288}  # another session left it loaded with this
    harness = make_agent()
    for i in range(20):
        ollama.enqueue(reply("ok " * 2000, prompt_eval_count=0))
        harness.run(f"question {i}")
    sizes = [b["options"]["num_ctx"] for b in ollama.chat_bodies]
    assert sizes[0] == 12288  # no reload to start with
    assert set(sizes) == {12288, 32768}  # then straight to the cap: one reload, not five
    assert ollama.loads == [32768]


def test_the_step_limit_summary_keeps_the_sessions_num_ctx(
    make_agent: MakeAgent, ollama: FakeOllama
) -> None:
    ollama.follow_loads = True
    ollama.loaded = {"qwen3:8b": 16384}
    ollama.enqueue(
        reply(tool_calls=[tool_call("list_directory", {"path": "."})]), reply("what I did")
    )
    events = make_agent(max_steps=1).run("look")
    assert isinstance(events[-1], Finished) and events[-1].stop_reason == "max_steps"
    assert [b["options"]["num_ctx"] for b in ollama.chat_bodies] == [16384, 16384]
    assert ollama.loads == []  # the summary's request did not reload the model


# -- the server's real context on every protocol ----------------------------------------------

SERVED = 16384


def serve_context(openai: FakeOpenAI, source: str) -> None:
    """The fake says it runs the model with SERVED tokens, where that server says it."""
    if source == "llama-server-props":
        openai.models["qwen3:8b"] = {"owned_by": "llamacpp", "meta": {"n_ctx_train": 131072}}
        openai.props = {"default_generation_settings": {"n_ctx": SERVED}, "total_slots": 1}
    elif source == "vllm-max-model-len":
        openai.models["qwen3:8b"] = {"owned_by": "vllm", "max_model_len": SERVED}
    elif source in ("lm-studio-v1", "lm-studio-v0"):
        openai.lm_studio_api = source[-2:]
        openai.lm_studio = {
            "qwen3:8b": {
                "state": "loaded",
                "loaded_context_length": SERVED,
                "max_context_length": 131072,
            }
        }
    openai.context = SERVED  # and refuses more, as it would


SOURCES = ["llama-server-props", "vllm-max-model-len", "lm-studio-v1", "lm-studio-v0"]


@pytest.mark.parametrize("source", SOURCES)
def test_history_is_fitted_to_the_context_the_server_says_it_runs(
    make_openai_agent: MakeOpenAIAgent, openai: FakeOpenAI, source: str
) -> None:
    serve_context(openai, source)
    harness = make_openai_agent()  # max_num_ctx 32768: more than the server runs
    harness.conversation.extend(earlier_turns(10, answer_chars=8000))  # ~20,000 tokens
    openai.enqueue(Answer("ok"), Answer("ok"))
    events = harness.run("now")
    harness.run("and now")
    assert len(openai.chat_bodies) == 2  # both fitted the first time: never refused
    for body in openai.chat_bodies:
        assert "num_ctx" not in body
        assert openai.prompt_tokens_of(body) < SERVED
    first = openai.chat_bodies[0]
    assert questions(first)[-1] == "now" and "question 0" not in questions(first)
    use = next(e.context for e in events if isinstance(e, Finished))
    assert isinstance(use, ContextUse) and use.size == SERVED  # chat's `ctx …/16k`


@pytest.mark.parametrize("api", ["v1", "v0"])
def test_lm_studio_says_the_context_a_loaded_model_runs_with(openai: FakeOpenAI, api: str) -> None:
    openai.lm_studio_api = api
    openai.add_model("qwen3-8b")
    openai.add_model("gemma-3-4b")
    openai.lm_studio = {
        "qwen3-8b": {"state": "loaded", "loaded_context_length": 4096, "max_context_length": 40960},
        "gemma-3-4b": {"state": "not-loaded", "max_context_length": 131072},
    }
    client = OpenAIClient(openai.url)
    loaded = client.model_info("qwen3-8b")
    assert (loaded.context_length, loaded.context_served, loaded.fixed_context) == (
        4096,
        True,
        True,
    )
    # Not loaded: LM Studio loads it with its own default; the most it can be is a bound.
    waiting = client.model_info("gemma-3-4b")
    assert (waiting.context_length, waiting.context_served) == (131072, False)
    asked = [r.path for r in openai.requests if r.path.startswith("/api/")]
    assert asked == (
        [f"/api/{api}/models"] if api == "v1" else ["/api/v1/models", "/api/v0/models"]
    )


@pytest.mark.parametrize(
    ("style", "prompt_reads"),
    [
        ("llama-cpp-python", "exact"),
        ("llama.cpp", "exact"),
        ("vllm", "at least"),
        ("lmstudio", "exact"),
    ],
)
def test_a_context_error_carries_the_servers_numbers(
    openai: FakeOpenAI, style: str, prompt_reads: str
) -> None:
    openai.context, openai.context_style = 2048, style
    body_messages = [{"role": "user", "content": "x" * 40_000}]
    counted = openai.prompt_tokens_of({"messages": body_messages})
    with pytest.raises(ContextTooLong) as info:
        list(OpenAIClient(openai.url).chat(ChatRequest("qwen3:8b", body_messages)))
    assert info.value.context == 2048
    expected = counted + 1 if prompt_reads == "at least" else counted
    assert info.value.prompt_tokens == expected
    assert "max_num_ctx" not in info.value.message and "\n" not in info.value.message


def test_the_2048_token_error_teaches_the_context_and_history_is_fitted_to_it(
    make_openai_agent: MakeOpenAIAgent, openai: FakeOpenAI
) -> None:
    openai.context = 8192  # llama-cpp-python --n_ctx 8192: it says so only when refusing
    harness = make_openai_agent()
    harness.conversation.extend(earlier_turns(10, answer_chars=8000))  # ~20,000 tokens
    openai.enqueue(Answer("fitted"), Answer("fitted again"))
    events = harness.run("now")
    assert events[-1].answer == "fitted"
    refused, resent = openai.chat_bodies
    assert openai.prompt_tokens_of(refused) > 8192 >= openai.prompt_tokens_of(resent)
    [said] = notices(events)  # once, about the refusal
    assert "longer than the model's context (8192 tokens)" in said
    assert "num_ctx" not in said
    # Learnt: the next turn fits the first time.
    harness.run("next")
    assert len(openai.chat_bodies) == 3
    assert openai.prompt_tokens_of(openai.chat_bodies[2]) <= 8192


def test_a_piped_prompt_too_big_for_a_2048_context_is_refused_in_one_line(
    run_cli: RunCli, openai: FakeOpenAI
) -> None:
    openai.context = 2048  # llama-cpp-python --n_ctx 2048
    r = run_cli("run", "--api", "openai", "--host", openai.url, "-", input="y" * 32_000)
    assert r.code == 1
    error = one_error_line(r.stderr)
    assert len(openai.chat_bodies) == 1  # what the server said is final: no futile resend
    assert "message is about 8.0k tokens (32.0k characters): with the system prompt" in error
    assert "the context of 2048 tokens the server runs 'qwen3:8b' with" in error
    assert f"load the model with a larger context ({'llama-server: ' + SERVER_FLAG}" in error
    assert "max_num_ctx" not in error and "num_ctx 2" not in error
    assert "sending it once more" not in r.stderr


def test_with_max_num_ctx_at_the_servers_size_a_too_big_message_is_never_sent(
    run_cli: RunCli, openai: FakeOpenAI, workspace: Path
) -> None:
    openai.context = 2048
    (workspace / "c.yaml").write_text("ollama:\n  max_num_ctx: 2048\n")
    args = ("run", "-c", "c.yaml", "--api", "openai", "--host", openai.url, "-")
    r = run_cli(*args, input="y" * 32_000)
    assert r.code == 1
    error = one_error_line(r.stderr)
    assert openai.chat_bodies == []  # refused before sending
    assert "message is about 8.0k tokens" in error
    # The cap is the limit the agent applies here, and the server does not say its own: both
    # ways out are named, the server's first.
    assert "the 2048 tokens of ollama.max_num_ctx (the server does not say" in error
    assert SERVER_FLAG in error


def test_refused_twice_the_failure_names_the_servers_context_not_the_cap(
    run_cli: RunCli, openai: FakeOpenAI, workspace: Path
) -> None:
    openai.models["qwen3:8b"] = {"owned_by": "llamacpp"}
    openai.props = {"default_generation_settings": {"n_ctx": 8192}}
    (workspace / "big.txt").write_text("".join(f"line {i}: value\n" for i in range(400)))
    too_long = "the request exceeds the available context size, try increasing it"  # no numbers
    read = Answer(tool_calls=[Call("read_file", {"path": "big.txt"})])
    openai.enqueue(read, HttpError(400, too_long), HttpError(400, too_long))
    r = run_cli("run", "--api", "openai", "--host", openai.url, "--yes", "read big.txt")
    assert r.code == 1 and len(openai.chat_bodies) == 3  # sent once more, trimmed, not more
    refused, resent = openai.chat_bodies[1:]
    assert resent != refused and len(json.dumps(resent)) < len(json.dumps(refused))
    error = one_error_line(r.stderr)
    assert "bounded by the context of 8192 tokens the server runs 'qwen3:8b' with" in error
    assert SERVER_FLAG in error and "max_num_ctx" not in error and "num_ctx" not in error
    notice = next(line for line in r.stderr.splitlines() if "sending it once more" in line)
    assert "(8192 tokens)" in notice and "num_ctx" not in notice


def test_refused_with_nothing_to_leave_out_the_same_request_is_not_sent_again(
    run_cli: RunCli, openai: FakeOpenAI
) -> None:
    """One message, the user's, is all the conversation holds, and the server's context is
    what it is: the retry would be the refused request byte for byte. It is not sent."""
    openai.models["qwen3:8b"] = {"owned_by": "llamacpp"}
    openai.props = {"default_generation_settings": {"n_ctx": 8192}}
    too_long = "the request exceeds the available context size, try increasing it"
    openai.enqueue(HttpError(400, too_long), Answer("never asked for"))
    r = run_cli("run", "--api", "openai", "--host", openai.url, "hi")
    assert r.code == 1 and len(openai.chat_bodies) == 1
    error = one_error_line(r.stderr)
    assert "bounded by the context of 8192 tokens the server runs 'qwen3:8b' with" in error
    assert "sending it once more" not in r.stderr


# Each case: the config, the server (native, or the fake OpenAI server with what it says), and
# what the refusal must name and must not.
REFUSALS = [
    pytest.param(
        "max_num_ctx: 8192",
        "native",
        [
            "the 8192 tokens of ollama.max_num_ctx",
            "raise ollama.max_num_ctx (now 8192) up to 40960",
        ],
        [SERVER_FLAG],
        id="ollama-cap",
    ),
    pytest.param(
        "",
        "native-trained-8k",
        ["the 8192 tokens model 'small:1' was trained for", "use a model with a longer context"],
        ["max_num_ctx"],
        id="ollama-trained",
    ),
    pytest.param(
        "",
        "llama-server-props",
        ["the context of 8192 tokens the server runs 'qwen3:8b' with", SERVER_FLAG],
        ["max_num_ctx"],
        id="llama-server",
    ),
    pytest.param(
        "max_num_ctx: 8192",
        "vllm-32k",
        ["the 8192 tokens of ollama.max_num_ctx (the server serves 32768)", "up to 32768"],
        [SERVER_FLAG],
        id="cap-below-the-server",
    ),
    pytest.param(
        "max_num_ctx: 4096",
        "vllm-8k",
        ["the 4096 tokens of ollama.max_num_ctx (the server serves 8192)", SERVER_FLAG],
        ["up to 8192"],  # would not be enough
        id="cap-below-a-server-too-small",
    ),
]


@pytest.mark.parametrize(("config", "server", "names", "never"), REFUSALS)
def test_the_refusal_names_the_limit_and_never_a_cap_that_is_not_it(
    make_agent: MakeAgent,
    make_openai_agent: MakeOpenAIAgent,
    ollama: FakeOllama,
    openai: FakeOpenAI,
    config: str,
    server: str,
    names: list[str],
    never: list[str],
) -> None:
    yaml = f"ollama: {{{config}}}\n"
    if server == "native":
        harness = make_agent(yaml)
    elif server == "native-trained-8k":
        ollama.add_model("small:1", ["completion", "tools"], context_length=8192)
        harness = make_agent(yaml, model="small:1")
    else:
        if server == "llama-server-props":
            openai.models["qwen3:8b"] = {"owned_by": "llamacpp"}
            openai.props = {"default_generation_settings": {"n_ctx": 8192}}
        else:
            served = 32768 if server == "vllm-32k" else 8192
            openai.models["qwen3:8b"] = {"owned_by": "vllm", "max_model_len": served}
        harness = make_openai_agent(yaml)
    harness.conversation.extend(earlier_turns(2, answer_chars=100))
    kept = list(harness.conversation)
    with pytest.raises(MessageTooLong) as info:
        harness.run("summarise this: " + "z" * 60_000)
    message = info.value.message
    assert "\n" not in message and "message is about 15.0k tokens" in message
    assert ", whatever older history is left out, so it was not sent: " in message
    for words in names:
        assert words in message
    for words in never:
        assert words not in message
    assert ollama.chat_bodies == [] and openai.chat_bodies == []  # never sent
    assert harness.conversation[1:] == kept  # nor kept: the history is as it was


def test_an_attachment_too_big_is_refused_in_chat_and_not_sent(
    make_chat: MakeChat, ollama: FakeOllama, workspace: Path
) -> None:
    (workspace / "big.txt").write_text(("a line of a big file " * 6 + "\n") * 500)  # 63 KB
    chat = make_chat("ollama: {max_num_ctx: 8192}\n")
    chat.run("what is in @big.txt\r")
    assert ollama.chat_bodies == []
    text = " ".join(chat.text.split())
    assert "attached big.txt" in text
    assert "cannot fit the 8192 tokens of ollama.max_num_ctx" in text
    assert not any(m.get("role") == "user" for m in chat.session.conversation)


# -- cut answers are not answers --------------------------------------------------------------


@pytest.mark.parametrize("api", ["native", "openai"])
def test_a_reply_cut_for_length_is_stop_reason_length_and_exit_3(
    run_cli: RunCli, ollama: FakeOllama, openai: FakeOpenAI, api: str
) -> None:
    if api == "native":
        ollama.enqueue(reply("The list goes: one, two, thr", done_reason="length"))
        args: tuple[str, ...] = ()
    else:
        openai.enqueue(Answer("The list goes: one, two, thr", finish_reason="length"))
        args = ("--api", "openai", "--host", openai.url)
    r = run_cli("run", *args, "--json", "list them all")
    assert r.code == 3
    record = json.loads(r.stdout)
    assert record["stop_reason"] == "length"
    assert record["answer"] == "The list goes: one, two, thr"  # what came is kept
    assert "the answer was cut" in r.stderr and "ollama.options.num_predict" in r.stderr
    if api == "openai":
        assert "max_tokens" in r.stderr


def test_without_json_a_cut_answer_still_exits_3(run_cli: RunCli, ollama: FakeOllama) -> None:
    ollama.enqueue(reply("half an ans", done_reason="length"))
    r = run_cli("run", "go on")
    assert (r.code, r.stdout.strip()) == (3, "half an ans")


def test_chat_says_an_answer_was_cut_and_how_to_get_it_whole(
    make_chat: MakeChat, ollama: FakeOllama
) -> None:
    ollama.enqueue(reply("The list goes: one, two, thr", done_reason="length"))
    chat = make_chat()
    chat.run("list them all\r")
    text = " ".join(chat.text.split())
    assert "the answer was cut when the context was full" in text
    assert "set ollama.options.num_predict" in text and "or ask for less" in text
    assert "max_num_ctx" not in text  # not the limit that cut it


def test_an_empty_answer_cut_for_length_is_not_asked_again(
    make_agent: MakeAgent, ollama: FakeOllama
) -> None:
    ollama.enqueue(reply("", done_reason="length"), reply("should not be asked"))
    events = make_agent("ollama: {options: {num_predict: 16}}\n").run("go")
    assert len(ollama.chat_bodies) == 1  # the same limit would cut it again
    assert isinstance(events[-1], Finished) and events[-1].stop_reason == "length"


def test_a_server_without_its_context_is_still_sized_by_the_cap(
    make_openai_agent: MakeOpenAIAgent, openai: FakeOpenAI
) -> None:
    """A server that says nothing and refuses nothing: what was always done (history fitted
    to max_num_ctx), with no probe of LM Studio's or llama-server's own API."""
    openai.enqueue(Answer("ok"))
    events = make_openai_agent().run("hi")
    use = next(e.context for e in events if isinstance(e, Finished))
    assert use is not None and use.size == 32768
    assert [r.path for r in openai.requests if not r.path.startswith("/v1/")] == []


def test_a_refusal_counting_the_answer_too_is_an_answer_cut_for_length(
    make_openai_agent: MakeOpenAIAgent, openai: FakeOpenAI, workspace: Path
) -> None:
    """llama-cpp-python answers 400 when the model's answer fills its context, counting the
    prompt and the answer so far: far more than the prompt held, by an estimate its own
    counts corrected. That is an answer cut for length (stop_reason "length", with the
    advice to bound it), not a message too long to send, and no history is cut."""
    (workspace / "a.txt").write_text("alpha\n")
    openai.tokenizer = lambda body: (len(json.dumps(body["messages"])) + 3) // 4
    overflow = (
        "This model's maximum context length is 4096 tokens. However, you requested 4100 "
        "tokens (4100 in the messages, None in the completion). Please reduce the length of "
        "the messages or completion."
    )
    openai.enqueue(
        Answer(tool_calls=[Call("read_file", {"path": "a.txt"})]),
        HttpError(400, overflow, code="context_length_exceeded"),
    )
    events = make_openai_agent().run("read a.txt")
    finished = events[-1]
    assert isinstance(finished, Finished) and finished.stop_reason == "length"
    said = " ".join(notices(events))
    assert "ollama.options.num_predict (sent as max_tokens)" in said
    assert "longer than the model's context" not in said  # not taken for a long prompt
    assert len(openai.chat_bodies) == 2  # not resent with less history
