"""`think` as Ollama takes it: true/false, or a level (low | medium | high | max) — from the
config, `--think-level`, and `/think` in chat, as it arrives on the wire."""

from __future__ import annotations

import pytest

from cli.config.loading import parse_config
from cli.errors import ConfigError
from cli.loop.events import Notice
from tests.conftest import MakeAgent, MakeChat, RunCli
from tests.fakes.fake_ollama import FakeOllama, reply

THINKER = ["completion", "tools", "thinking"]


@pytest.fixture
def run_cli(run_cli_in_process: RunCli) -> RunCli:
    """`agent` in this process (conftest.run_in_process): no test here is about the process."""
    return run_cli_in_process


@pytest.mark.parametrize("level", ["low", "medium", "high", "max"])
def test_a_level_is_sent_as_the_level(
    make_agent: MakeAgent, ollama: FakeOllama, level: str
) -> None:
    ollama.enqueue(reply("ok"))
    make_agent(f"ollama: {{think: {level}}}\n").run("hi")
    assert ollama.chat_bodies[0]["think"] == level


@pytest.mark.parametrize(("think", "sent"), [(True, True), (False, False), ("high", "high")])
def test_choices_override_the_config(
    make_agent: MakeAgent, ollama: FakeOllama, think: bool | str, sent: bool | str
) -> None:
    ollama.enqueue(reply("ok"))
    make_agent("ollama: {think: low}\n", think=think).run("hi")
    assert ollama.chat_bodies[0]["think"] == sent


@pytest.mark.parametrize(
    ("think", "sent"), [(True, "medium"), ("low", "low"), (False, False)], ids=str
)
def test_gpt_oss_gets_a_level_for_true(
    make_agent: MakeAgent, ollama: FakeOllama, think: bool | str, sent: bool | str
) -> None:
    # gpt-oss (family gptoss, the harmony format) ignores booleans: true would do nothing.
    ollama.add_model("gpt-oss:20b", THINKER, family="gptoss")
    ollama.enqueue(reply("ok"))
    make_agent(model="gpt-oss:20b", think=think).run("hi")
    assert ollama.chat_bodies[0]["think"] == sent


def test_a_level_for_a_model_that_cannot_think_is_left_out(
    make_agent: MakeAgent, ollama: FakeOllama
) -> None:
    ollama.add_model("plain:1", ["completion", "tools"])
    ollama.enqueue(reply("ok"))
    events = make_agent(model="plain:1", think="high").run("hi")
    assert "think" not in ollama.chat_bodies[0]  # a level would be a 400, as true would
    assert any("cannot think" in e.text for e in events if isinstance(e, Notice))


@pytest.mark.parametrize(
    ("text", "value"),
    [("true", True), ("false", False), ("low", "low"), ("max", "max"), ("'high'", "high")],
)
def test_config_accepts_booleans_and_levels(text: str, value: bool | str) -> None:
    assert parse_config(f"ollama:\n  think: {text}\n", "t.yaml").ollama.think == value


@pytest.mark.parametrize("text", ["'very'", "3", "[high]"])
def test_config_refuses_other_values(text: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(f"ollama:\n  think: {text}\n", "t.yaml")
    assert "ollama.think" in info.value.message and "line 2" in info.value.message


@pytest.mark.parametrize("command", ["run", "chat"])
def test_think_level_flag_is_on_run_and_chat(run_cli: RunCli, command: str) -> None:
    r = run_cli(command, "--help")
    assert "--think-level" in r.stdout and "--think" in r.stdout


def test_think_level_flag_reaches_the_wire(run_cli: RunCli, ollama: FakeOllama) -> None:
    ollama.enqueue(reply("Answer.", thinking="Pondering."))
    r = run_cli("run", "--think-level", "max", "q")
    assert r.code == 0, r.stderr
    assert ollama.chat_bodies[0]["think"] == "max"
    assert "Pondering." in r.stderr  # a level is thinking on: it is shown


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--think-level", "extreme"], "expected one of low, medium, high, max"),
        (["--no-think", "--think-level", "low"], "contradict"),
    ],
    ids=["unknown-level", "no-think-and-a-level"],
)
def test_bad_think_level_flags_are_usage_errors(
    run_cli: RunCli, ollama: FakeOllama, args: list[str], message: str
) -> None:
    r = run_cli("run", *args, "q")
    assert r.code == 2
    assert message in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert ollama.chat_bodies == []


def test_slash_think_takes_a_level(make_chat: MakeChat, ollama: FakeOllama) -> None:
    ollama.enqueue(reply("a"), reply("b"), reply("c"))
    chat = make_chat()
    chat.run("/think high\r", "one\r", "/think off\r", "two\r", "/think on\r", "three\r")
    assert [b["think"] for b in ollama.chat_bodies] == ["high", False, True]
    assert "thinking high" in chat.text


def test_slash_think_without_a_value_says_the_state_and_the_choices(
    make_chat: MakeChat, ollama: FakeOllama
) -> None:
    chat = make_chat("ollama: {think: medium}\n")
    chat.run("/think\r", "/think loud\r")
    assert chat.text.count("thinking is medium; /think on, /think off, or a level:") == 2
    assert "low, medium, high, max" in chat.text
