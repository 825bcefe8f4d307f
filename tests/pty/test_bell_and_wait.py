"""Issue 21: a confirmation that waits rings the terminal bell (agent.bell), and the answer's
stats give the time the turn worked and the time it waited for the person apart."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from cli.backends.messages import Stats
from cli.loop.events import Finished
from cli.ui.render import ChatRenderer
from tests.fakes.fake_ollama import FakeOllama, reply, tool_call
from tests.pty.driver import Ttys


def test_the_stats_give_working_and_waiting_time_apart() -> None:
    out = io.StringIO()
    console = Console(file=out, width=100, color_system=None)
    waited = [3.0]  # what the approver had counted before this turn
    renderer = ChatRenderer(console, cwd="/", waited=lambda: waited[0])
    renderer.begin("m")
    waited[0] += 12.34  # the person took this long to answer this turn's questions
    renderer.handle(Finished("ok", "answer", 1, Stats(eval_count=5), 16.5))
    renderer.close()
    assert out.getvalue().splitlines()[-1] == "5 tokens · 4.2 s working · 12.3 s waiting for you"
    # A turn nobody was asked in: one time, as before.
    renderer.begin("m")
    renderer.handle(Finished("ok", "answer", 1, Stats(eval_count=5), 2.0))
    renderer.close()
    assert out.getvalue().splitlines()[-1] == "5 tokens · 2.0 s"


@pytest.mark.pty
@pytest.mark.parametrize("bell", [True, False], ids=["default", "bell-false"])
def test_a_waiting_confirmation_rings_the_bell(
    ollama: FakeOllama, workspace: Path, home: Path, ttys: Ttys, bell: bool
) -> None:
    if not bell:
        config = home / ".config" / "metona-agent" / "config.yaml"
        config.parent.mkdir(parents=True, exist_ok=True)
        config.write_text("agent:\n  bell: false\n")
    ollama.enqueue(
        reply(tool_calls=[tool_call("write_file", {"path": "todo.md", "content": "x\n"})]),
        reply("Written."),
    )
    term = ttys.chat(host=ollama.url, cols=80)
    assert "\a" not in term.raw
    term.line("write it")
    term.wait_card(then="allow?")
    term.settle()
    assert ("\a" in term.raw) is bell
    term.press("y")
    term.wait_turn_end(then="Written.")
    assert "waiting for you" in term.screen.text()
