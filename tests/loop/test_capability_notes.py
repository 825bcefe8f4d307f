"""Rough edges a demanding new user hit: capability warnings said once per session, not
every turn; --think on a model that cannot think is said, not dropped."""

from __future__ import annotations

import pytest

from tests.conftest import MakeChat, RunCli
from tests.fakes.fake_ollama import FakeOllama, reply


@pytest.fixture
def run_cli(run_cli_in_process: RunCli) -> RunCli:
    """`agent` in this process (conftest.run_in_process): no test here is about the process."""
    return run_cli_in_process


def test_a_tools_off_model_is_warned_about_once_per_session(
    make_chat: MakeChat, ollama: FakeOllama
) -> None:
    ollama.add_model("gemma:2b", ["completion"])
    ollama.enqueue(reply("one"), reply("two"), reply("three"))
    chat = make_chat("ollama: {model: 'gemma:2b'}\nagent: {tool_mode: native}\n")
    chat.run("first\r", "second\r", "third\r")
    assert chat.text.count("does not support tools") == 1
    assert "one" in chat.text and "three" in chat.text


def test_prompt_mode_is_said_once_per_session(make_chat: MakeChat, ollama: FakeOllama) -> None:
    ollama.add_model("gemma:2b", ["completion"])
    ollama.enqueue(reply("one"), reply("two"))
    chat = make_chat("ollama: {model: 'gemma:2b'}\n")
    chat.run("first\r", "second\r")
    assert chat.text.count("described in the prompt") == 1


def test_think_on_a_model_that_cannot_think_is_said(run_cli: RunCli, ollama: FakeOllama) -> None:
    ollama.add_model("llama3.1:8b", ["completion", "tools"])
    ollama.enqueue(reply("plain"))
    r = run_cli("run", "-m", "llama3.1:8b", "--think", "hi")
    assert r.code == 0 and r.stdout == "plain\n"
    assert "cannot think: thinking stays off" in r.stderr
    assert "think" not in ollama.chat_bodies[0]
