"""Keys that stop (issue 21): Ctrl-C or Esc at a confirmation stops the turn as `q` does; Esc
while an answer streams stops it as Ctrl-C does; Ctrl-C at an empty prompt says how to quit.
The real `agent chat` in a pseudo-terminal, drawn on tests/fakes/vt.py."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from tests.fakes.fake_ollama import FakeOllama, reply, tool_call
from tests.pty.driver import Ttys
from tests.pty.test_terminal_ui import count, gated, gates, words

pytestmark = pytest.mark.pty
__all__ = ["gates"]  # a fixture, imported to be used here


@pytest.mark.parametrize("key", ["\x03", "\x1b"], ids=["ctrl-c", "esc"])
def test_ctrl_c_or_esc_at_a_confirmation_stops_the_turn(
    ollama: FakeOllama, workspace: Path, ttys: Ttys, key: str
) -> None:
    ollama.enqueue(
        reply(
            tool_calls=[
                tool_call("write_file", {"path": "a.md", "content": "a\n"}),
                tool_call("write_file", {"path": "b.md", "content": "b\n"}),
            ]
        ),
        reply("Should never be asked for."),
    )
    term = ttys.chat(host=ollama.url, cols=80)
    term.line("write both")
    term.wait_card(then="allow?")
    term.settle()
    term.press(key)
    term.wait_turn_end(then="stopped this turn")
    term.settle()
    shown = term.screen.text()
    assert "reason (optional)" not in shown
    assert shown.count("allow?") == 1  # b.md was not put to the user
    assert not (workspace / "a.md").exists() and not (workspace / "b.md").exists()
    assert len(ollama.chat_bodies) == 1  # the turn went no further


def test_esc_while_streaming_stops_the_answer(
    ollama: FakeOllama, workspace: Path, ttys: Ttys, gates: list[threading.Event]
) -> None:
    stream, gate = gated(reply(words(300), token=5), "w040")
    gates.append(gate)
    ollama.enqueue(stream, reply("Next answer."))
    term = ttys.chat(host=ollama.url, cols=80)
    term.line("count")
    term.wait("w040")
    term.settle()
    term.type_ahead("\x1b")
    term.wait_turn_end(then="interrupted")
    term.settle()
    assert count(term.screen, "w041") == 0
    assert all(count(term.screen, f"w{n:03d}") == 1 for n in range(1, 41))
    # The session goes on.
    term.say("again", then="Next answer.")


def test_arrow_keys_while_streaming_do_not_stop_it(
    ollama: FakeOllama, workspace: Path, ttys: Ttys, gates: list[threading.Event]
) -> None:
    stream, gate = gated(reply(words(60), token=5), "w020")
    gates.append(gate)
    ollama.enqueue(stream)
    term = ttys.chat(host=ollama.url, cols=80)
    term.line("count")
    term.wait("w020")
    term.type_ahead("\x1b[A\x1b[D")
    term.settle()
    gate.set()
    term.wait_turn_end(then="w060")
    assert "interrupted" not in term.screen.text()


def test_ctrl_c_at_an_empty_prompt_says_how_to_quit(
    ollama: FakeOllama, workspace: Path, ttys: Ttys
) -> None:
    term = ttys.chat(host=ollama.url, cols=80)
    term.keys("half typed")
    term.wait("half typed")
    term.keys("\x03")  # a line to clear: no hint
    term.wait_ready()
    term.settle()
    assert "to quit" not in term.screen.text()
    term.keys("\x03")
    term.wait("Ctrl-D or /exit to quit")
    term.wait_ready()
    assert ollama.chat_bodies == []
