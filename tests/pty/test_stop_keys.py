"""Keys that stop (issue 21): Ctrl-C or Esc at a confirmation stops the turn as `q` does; Esc
while an answer streams stops it as Ctrl-C does; Ctrl-C at an empty prompt says how to quit.
The real `agent chat` in a pseudo-terminal, drawn on tests/fakes/vt.py."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from tests.fakes.fake_ollama import FakeOllama, reply, tool_call
from tests.fakes.vt import Term
from tests.pty.test_terminal_ui import at_prompt, chat, count, gated, gates, say, terms, words

pytestmark = pytest.mark.pty
__all__ = ["gates", "terms"]  # fixtures, imported to be used here


@pytest.mark.parametrize("key", ["\x03", "\x1b"], ids=["ctrl-c", "esc"])
def test_ctrl_c_or_esc_at_a_confirmation_stops_the_turn(
    ollama: FakeOllama, workspace: Path, terms: list[Term], key: str
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
    term = chat(ollama, workspace, terms, 80)
    say(term, "write both")
    term.wait("allow?")
    term.settle()
    term.send(key)
    term.wait(lambda s: "stopped this turn" in s.text() and at_prompt(s))
    term.settle()
    shown = term.screen.text()
    assert "reason (optional)" not in shown
    assert shown.count("allow?") == 1  # b.md was not put to the user
    assert not (workspace / "a.md").exists() and not (workspace / "b.md").exists()
    assert len(ollama.chat_bodies) == 1  # the turn went no further


def test_esc_while_streaming_stops_the_answer(
    ollama: FakeOllama, workspace: Path, terms: list[Term], gates: list[threading.Event]
) -> None:
    stream, gate = gated(reply(words(300), token=5), "w040")
    gates.append(gate)
    ollama.enqueue(stream, reply("Next answer."))
    term = chat(ollama, workspace, terms, 80)
    say(term, "count")
    term.wait("w040")
    term.settle()
    term.send("\x1b")
    term.wait(lambda s: "interrupted" in s.text() and at_prompt(s))
    term.settle()
    assert count(term.screen, "w041") == 0
    assert all(count(term.screen, f"w{n:03d}") == 1 for n in range(1, 41))
    # The session goes on.
    say(term, "again")
    term.wait("Next answer.")
    term.wait(at_prompt)


def test_arrow_keys_while_streaming_do_not_stop_it(
    ollama: FakeOllama, workspace: Path, terms: list[Term], gates: list[threading.Event]
) -> None:
    stream, gate = gated(reply(words(60), token=5), "w020")
    gates.append(gate)
    ollama.enqueue(stream)
    term = chat(ollama, workspace, terms, 80)
    say(term, "count")
    term.wait("w020")
    term.send("\x1b[A\x1b[D")
    term.settle()
    gate.set()
    term.wait(lambda s: at_prompt(s) and "w060" in s.text())
    assert "interrupted" not in term.screen.text()


def test_ctrl_c_at_an_empty_prompt_says_how_to_quit(
    ollama: FakeOllama, workspace: Path, terms: list[Term]
) -> None:
    term = chat(ollama, workspace, terms, 80)
    term.send("half typed")
    term.wait("half typed")
    term.child.sendcontrol("c")  # a line to clear: no hint
    term.wait(at_prompt)
    term.settle()
    assert "to quit" not in term.screen.text()
    term.child.sendcontrol("c")
    term.wait(lambda s: "Ctrl-D or /exit to quit" in s.text() and at_prompt(s))
    assert ollama.chat_bodies == []
