"""Plan mode and one's own commands in the real `agent chat`, in a pseudo-terminal drawn on
tests/fakes/vt.py: the header and the prompt in plan mode, /plan and /go, a command with
arguments, a project command's first use. Each step waits for a state of the screen (the
prompt ready at the cursor, a question waiting), never for a character alone."""

from __future__ import annotations

import re
import threading
from pathlib import Path

import pytest

from tests.cli.test_custom_commands import project_command, user_command
from tests.fakes.context import first_user_text
from tests.fakes.fake_ollama import FakeOllama, reply
from tests.pty.driver import Chat, Ttys, flat
from tests.pty.test_terminal_ui import gated, gates

pytestmark = pytest.mark.pty
__all__ = ["gates"]  # a fixture, imported to be used here

WRITE_TOOLS = {"write_file", "edit_file", "create_directory", "move_file", "delete_file"}


def start(ttys: Ttys, ollama: FakeOllama, *args: str) -> Chat:
    term = ttys.chat(*args, host=ollama.url)
    term.settle(0.3)
    return term


def header_rows(term: Chat) -> list[str]:
    """The chat header's rows: from the first row to the one ending in `/help`."""
    rows = term.screen.transcript()
    return rows[: next(i for i, r in enumerate(rows) if "/help" in r) + 1]


def offered(body: dict[str, object]) -> set[str]:
    return {t["function"]["name"] for t in body.get("tools") or []}  # type: ignore[attr-defined, index]


def user_words(body: dict[str, object]) -> str:
    return first_user_text(body).split("</context>\n\n", 1)[-1]  # type: ignore[arg-type]


def test_plan_mode_header_prompt_status_line_and_go(
    ollama: FakeOllama, workspace: Path, ttys: Ttys, gates: list[threading.Event]
) -> None:
    term = start(ttys, ollama, "--plan")
    header = " ".join(header_rows(term))
    assert header.startswith("metona-agent") and " · plan · tools on" in header
    assert "plan mode: only the tools that change nothing" in flat(term.screen)
    assert term.ready(plan=True)(term.screen)

    stream, gate = gated(reply("Plan: add a test, then fix the bug"), 0)
    gates.append(gate)
    ollama.enqueue(stream, reply("Done it."))
    term.line("how would you fix it?", plan=True)
    term.wait(lambda s: "plan · waiting for qwen3:8b" in s.text())  # the status line
    gate.set()
    term.wait_turn_end(then="then fix the bug", plan=True)
    term.settle(0.3)
    assert not offered(ollama.chat_bodies[0]) & WRITE_TOOLS

    term.say("/go", then="plan mode off: the plan stays in the conversation", after=False)
    term.say("now do it", then="Done it.", plan=False, after=False)
    acting = ollama.chat_bodies[1]
    assert "write_file" in offered(acting)
    assert any("then fix the bug" in str(m.get("content")) for m in acting["messages"])

    term.say("/plan", then="/go leaves it", after=True)
    term.say("/plan", then="plan mode off", after=False)


def test_a_command_with_arguments(
    ollama: FakeOllama, workspace: Path, ttys: Ttys, home: Path
) -> None:
    user_command(
        home, "review", "---\ndescription: review a file\n---\nReview $1 for $2; all: $ARGUMENTS"
    )
    term = start(ttys, ollama)
    term.say("/help", then="/review [ARGS]")
    assert re.search(r"/review \[ARGS\]\s+review a file \(user\)", term.screen.text())
    ollama.enqueue(reply("Reviewed."))
    term.say("/review app.py speed", then="Reviewed.")
    assert user_words(ollama.chat_bodies[0]) == "Review app.py for speed; all: app.py speed"


def test_a_project_commands_first_use_shows_its_text_once(
    ollama: FakeOllama, workspace: Path, ttys: Ttys
) -> None:
    project_command(workspace, "fix", "---\nplan: true\n---\nFind the bug in $ARGUMENTS")
    term = start(ttys, ollama)
    term.line("/fix parser.py")
    term.wait_state(term.asking_for("send it?"))
    shown = flat(term.screen)
    assert "project command /fix" in shown and "first use here" in shown
    assert "│ Find the bug in parser.py" in shown
    assert ollama.chat_bodies == []  # nothing is sent before the answer

    ollama.enqueue(reply("It is in line 3."), reply("Again: line 3."))
    term.press("y")
    term.wait_turn_end(then="It is in line 3.", plan=True)  # plan: true: the chat in plan mode
    term.settle(0.3)
    assert user_words(ollama.chat_bodies[0]) == "Find the bug in parser.py"

    term.say("/fix parser.py", then="Again: line 3.")
    assert flat(term.screen).count("first use here") == 1


def test_a_project_command_not_confirmed_is_not_sent(
    ollama: FakeOllama, workspace: Path, ttys: Ttys
) -> None:
    project_command(workspace, "fix", "Delete everything")
    term = start(ttys, ollama)
    term.line("/fix")
    term.press("n", then="send it?")
    term.wait_turn_end(then="/fix was not sent")
    assert ollama.chat_bodies == []


def test_a_command_whose_model_is_not_on_the_server_is_one_line_and_chat_goes_on(
    ollama: FakeOllama, workspace: Path, ttys: Ttys, home: Path
) -> None:
    user_command(home, "hi", "---\nmodel: ghost:1b\n---\nSay hi to $1")
    term = start(ttys, ollama)
    term.say("/hi you", then="ghost:1b")
    shown = flat(term.screen)
    assert "internal error" not in shown and "Traceback" not in term.raw
    assert ollama.chat_bodies == []  # nothing was sent
    ollama.enqueue(reply("Still here."))
    term.say("hello", then="Still here.")
    assert ollama.chat_bodies[0]["model"] == "qwen3:8b"


@pytest.mark.parametrize("cols", [40, 60])
def test_a_narrow_header_breaks_between_its_parts(
    ollama: FakeOllama, workspace: Path, ttys: Ttys, cols: int
) -> None:
    """At 40 columns the header takes several rows: each breaks between two parts, so
    `confirm: write-only` is never split from its mode."""
    term = ttys.chat("--plan", host=ollama.url, cols=cols)
    header = header_rows(term)
    assert len(header) > 1 and all(len(row) <= cols for row in header)
    assert any("confirm: write-only" in row for row in header), header
    joined = " ".join(header)
    assert " · plan · tools on · confirm: write-only · think" in joined, joined
