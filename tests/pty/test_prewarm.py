"""agent.prewarm: `agent chat`, started in a pseudo-terminal against a fake server that counts
what a server with a KV cache evaluates (tests/fakes/server_work.py), sends the prompt's fixed
start while the user types, so that the first message evaluates no more than itself and the
context block. With `agent.prewarm: false` the first message pays for the whole prompt."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.fakes.context import block_of, first_user_text
from tests.fakes.fake_ollama import FakeOllama, reply
from tests.fakes.fake_openai import Answer, FakeOpenAI
from tests.fakes.server_work import ServerWork, tokenize
from tests.pty.driver import Ttys

pytestmark = pytest.mark.pty
MARKUP = 4  # the fake's markers around a user message, and a token where a prefix ends


def _wait(condition: Callable[[], bool], seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "the prewarm never reached the server"
        time.sleep(0.05)


@pytest.fixture(params=["native", "openai"])
def server(
    request: pytest.FixtureRequest, ollama: FakeOllama, openai: FakeOpenAI
) -> tuple[FakeOllama | FakeOpenAI, list[str]]:
    if request.param == "native":
        ollama.server_work = ServerWork()
        return ollama, ["--host", ollama.url]
    openai.server_work = ServerWork()
    return openai, ["--api", "openai", "--host", openai.url]


def _say_hello(
    ttys: Ttys,
    workspace: Path,
    fake: FakeOllama | FakeOpenAI,
    args: list[str],
    *,
    prewarm: bool,
) -> None:
    """`agent chat` with agent.prewarm on or off: once its prewarm (if any) reached the
    server, one message, "hello", and its answer; then the chat is ended."""
    config = workspace.parent / "chat.yaml"
    config.write_text(f"agent: {{prewarm: {str(prewarm).lower()}}}\n")
    chat = ttys.chat("-c", str(config), *args, cols=110)
    try:
        if prewarm:
            _wait(lambda: len(fake.prewarm_bodies) == 1)  # sent while nobody has typed
        fake.enqueue(
            reply("Hello there.") if isinstance(fake, FakeOllama) else Answer("Hello there.")
        )
        chat.say("hello", then="Hello there.")
    finally:
        chat.close()


def test_with_prewarm_the_first_message_evaluates_only_itself_and_the_context(
    server: tuple[FakeOllama | FakeOpenAI, list[str]], workspace: Path, ttys: Ttys
) -> None:
    fake, args = server
    _say_hello(ttys, workspace, fake, args, prewarm=True)
    (warm,) = fake.prewarm_bodies
    (first,) = fake.chat_bodies
    # The same start: system prompt, tools, and a first user message that is the block.
    assert warm["messages"][0] == first["messages"][0]
    assert warm.get("tools") == first.get("tools")
    block = block_of(first_user_text(first))
    assert block and first_user_text(warm).startswith(block.rstrip("\n"))
    if isinstance(fake, FakeOllama):
        assert warm["options"]["num_predict"] == 1 and warm["stream"] is False
        assert warm["options"]["num_ctx"] == first["options"]["num_ctx"]  # no reload
        assert warm["keep_alive"] == first["keep_alive"]
    else:
        assert warm["max_tokens"] == 1 and warm["stream"] is False
    work = fake.server_work
    assert work is not None and work.requests == 2
    row = work.rows[-1]
    assert not row.reloaded
    assert row.evaluated <= len(tokenize(block)) + len(tokenize("hello")) + MARKUP
    assert row.lcp > 10 * row.evaluated  # the system prompt and the tools were warm


def test_without_prewarm_the_first_message_pays_for_the_whole_prompt(
    server: tuple[FakeOllama | FakeOpenAI, list[str]], workspace: Path, ttys: Ttys
) -> None:
    fake, args = server
    _say_hello(ttys, workspace, fake, args, prewarm=False)
    assert fake.prewarm_bodies == []
    work = fake.server_work
    assert work is not None and work.requests == 1
    block = block_of(first_user_text(fake.chat_bodies[0]))
    assert work.rows[-1].evaluated > 10 * (len(tokenize(block)) + len(tokenize("hello")))
