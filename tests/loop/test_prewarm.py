"""`agent run --prewarm` and what prewarm sends to each kind of server (chat's own prewarm, in a
real terminal: tests/pty/test_prewarm.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cli.loop.events import Notice
from cli.wiring import Choices
from tests.conftest import MakeAgent, RunCli
from tests.conftest import harness as make_harness
from tests.fakes.context import block_of
from tests.fakes.fake_ollama import FakeOllama, HttpError, reply
from tests.fakes.fake_openai import Answer, FakeOpenAI
from tests.fakes.server_work import ServerWork


def test_run_sends_no_prewarm_unless_asked(run_cli: RunCli, ollama: FakeOllama) -> None:
    ollama.enqueue(reply("ok"))
    assert run_cli("run", "hi").code == 0
    assert ollama.prewarm_bodies == [] and len(ollama.chat_bodies) == 1


def test_run_with_prewarm_sends_the_fixed_start_first(run_cli: RunCli, ollama: FakeOllama) -> None:
    ollama.server_work = work = ServerWork()
    ollama.enqueue(reply("ok"))
    r = run_cli("run", "--prewarm", "hi")
    assert r.code == 0, r.stderr
    (warm,) = ollama.prewarm_bodies
    (first,) = ollama.chat_bodies
    paths = [x.path for x in ollama.requests if x.path == "/api/chat"]
    assert len(paths) == 2 and ollama.requests.index(
        next(x for x in ollama.requests if x.body is warm)
    ) < ollama.requests.index(next(x for x in ollama.requests if x.body is first))
    assert warm["messages"][0] == first["messages"][0] and warm["tools"] == first["tools"]
    assert warm["messages"][1]["content"] == block_of(first["messages"][1]["content"])
    assert warm["options"]["num_ctx"] == first["options"]["num_ctx"]
    assert not work.rows[-1].reloaded


def test_a_failed_prewarm_is_silent_but_under_v(run_cli: RunCli, ollama: FakeOllama) -> None:
    ollama.prewarm_error = HttpError(500, "runner busy")
    ollama.enqueue(reply("ok"), reply("ok"))
    quiet = run_cli("run", "--prewarm", "hi")
    assert quiet.code == 0 and quiet.stdout == "ok\n"
    assert "prewarm" not in quiet.stderr
    loud = run_cli("run", "--prewarm", "-v", "hi")
    assert loud.code == 0 and loud.stdout == "ok\n"
    assert "prewarm: " in loud.stderr and "runner busy" in loud.stderr
    assert len(ollama.prewarm_bodies) == 2 and len(ollama.chat_bodies) == 2


@pytest.mark.parametrize(
    ("owner", "expected"),
    [
        ("llamacpp", {"n_predict": 0, "cache_prompt": True}),  # llama-server: nothing generated
        ("owner", {"max_tokens": 1}),  # llama-cpp-python, LM Studio, vLLM: one token
    ],
)
def test_an_openai_compatible_server_is_asked_for_as_little_as_it_takes(
    openai: FakeOpenAI, workspace: Path, home: Path, owner: str, expected: dict[str, object]
) -> None:
    openai.models["qwen3:8b"] = {"owned_by": owner}
    openai.enqueue(Answer("ok"))
    harness = make_harness(Choices(host=openai.url, api="openai"), "", workspace, home)
    harness.agent.start_prewarm()
    harness.run("hi")
    (warm,) = openai.prewarm_bodies
    assert {key: warm.get(key) for key in expected} == expected
    assert warm["stream"] is False
    if owner == "llamacpp":
        assert "max_tokens" not in warm
    (first,) = openai.chat_bodies
    assert warm["messages"][0] == first["messages"][0] and warm["tools"] == first["tools"]


def test_a_resumed_chat_is_prewarmed_at_the_size_its_first_request_takes(
    make_agent: MakeAgent, ollama: FakeOllama
) -> None:
    """The prewarm is sized for the history the first request carries: Ollama keeps the
    model loaded as it is (a reload would lose what the prewarm put in its cache)."""
    ollama.server_work = work = ServerWork()
    ollama.enqueue(reply("ok"))
    harness = make_agent()
    for i in range(20):
        harness.conversation += [
            {"role": "user", "content": f"q{i} " + "lorem ipsum " * 300},
            {"role": "assistant", "content": "a " * 200},
        ]
    harness.agent.start_prewarm(harness.conversation)
    harness.run("go on")
    (warm,) = ollama.prewarm_bodies
    (first,) = ollama.chat_bodies
    assert warm["options"]["num_ctx"] == first["options"]["num_ctx"] > 8192
    assert not work.rows[-1].reloaded


def test_a_first_message_larger_than_the_prewarm_takes_its_own_size_not_the_most(
    make_agent: MakeAgent, ollama: FakeOllama
) -> None:
    """The prewarm's size is not held as the session's: a first message that needs more gets
    the size it needs, as it would without a prewarm, not the ceiling."""
    sizes = []
    for prewarm in (True, False):
        ollama.requests.clear()
        ollama.enqueue(reply("ok"))
        harness = make_agent()
        if prewarm:
            harness.agent.start_prewarm()
        harness.run("word " * 6000)
        sizes.append(ollama.chat_bodies[0]["options"]["num_ctx"])
    assert sizes[0] == sizes[1] < 32768


def test_a_stalled_prewarm_is_waited_for_a_bounded_time(
    make_agent: MakeAgent, ollama: FakeOllama, monkeypatch: pytest.MonkeyPatch
) -> None:
    import cli.loop.requests as requests_module

    monkeypatch.setattr(requests_module, "PREWARM_WAIT", 0.2)
    ollama.prewarm_delay = 3.0
    ollama.enqueue(reply("ok"))
    harness = make_agent()
    harness.agent.start_prewarm()
    events = harness.run("hi")
    assert events[-1].answer == "ok"
    said = [e.text for e in events if isinstance(e, Notice) and e.detail]
    assert any("prewarm: not done after" in text for text in said)


def test_a_count_of_only_the_uncached_tokens_after_a_prewarm_does_not_shrink_the_estimate(
    make_agent: MakeAgent, ollama: FakeOllama
) -> None:
    """Some servers count only what followed the cached prefix: the first request after a
    prewarm says nothing of the whole, and the estimate is corrected only upwards from it."""
    factors = []
    for prewarm in (False, True):
        ollama.server_work = work = ServerWork()
        ollama.prompt_tokens = lambda body, work=work: work.rows[-1].evaluated
        ollama.enqueue(reply("ok"))
        harness = make_agent()
        if prewarm:
            harness.agent.start_prewarm()
        harness.run("please look at the project and tell me what it does")
        factors.append(harness.agent.calibration.factor("qwen3:8b"))
    without, warm = factors
    assert without > 1.0  # a whole count: learnt
    assert warm >= 1.0  # a count of what followed the warm prefix: not taken for the whole
