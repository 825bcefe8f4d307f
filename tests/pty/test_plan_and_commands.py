"""Plan mode and one's own commands in the real `agent chat`, in a pseudo-terminal drawn on
tests/fakes/vt.py: the header and the prompt in plan mode, /plan and /go, a command with
arguments, a project command's first use. Each step waits for a state of the screen (the
prompt ready at the cursor, a question waiting), never for a character alone."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.fakes.context import first_user_text
from tests.fakes.fake_ollama import FakeOllama, reply
from tests.fakes.vt import Screen, Term
from tests.pty.test_terminal_ui import gated, gates, spawn, terms

pytestmark = pytest.mark.pty
__all__ = ["gates", "terms"]  # fixtures, imported to be used here

READY = re.compile(r"^(plan )?›(?: |$)")
WRITE_TOOLS = {"write_file", "edit_file", "create_directory", "move_file", "delete_file"}


def ready(plan: bool | None = None) -> Callable[[Screen], bool]:
    """The prompt is at the cursor (in plan mode, `plan › `; None: either)."""

    def check(screen: Screen) -> bool:
        found = READY.match(screen.cursor_row())
        return found is not None and (plan is None or bool(found.group(1)) == plan)

    return check


def start(ollama: FakeOllama, workspace: Path, terms: list[Term], *args: str) -> Term:
    term = spawn(ollama, workspace, ["chat", *args], 100)
    terms.append(term)
    term.wait(ready())
    term.settle(0.3)
    return term


def say(term: Term, text: str, *, plan: bool | None = None, then: str = "") -> None:
    """Type a line at a ready prompt, then wait until `then` shows and the prompt is ready
    again."""
    term.send(text + "\r")
    if then:
        term.wait(then)
    term.wait(ready(plan))
    term.settle(0.3)


def flat(screen: Screen) -> str:
    """What the screen shows, its rows joined by spaces: a line the terminal wrapped reads
    whole."""
    return " ".join(screen.transcript())


def offered(body: dict[str, object]) -> set[str]:
    return {t["function"]["name"] for t in body.get("tools") or []}  # type: ignore[attr-defined, index]


def user_words(body: dict[str, object]) -> str:
    return first_user_text(body).split("</context>\n\n", 1)[-1]  # type: ignore[arg-type]


def test_plan_mode_header_prompt_status_line_and_go(
    ollama: FakeOllama, workspace: Path, terms: list[Term], gates: list[threading.Event]
) -> None:
    term = start(ollama, workspace, terms, "--plan")
    rows = term.screen.transcript()
    header = " ".join(rows[: next(i for i, r in enumerate(rows) if "/help" in r) + 1])
    assert header.startswith("metona-agent") and " · plan · tools on" in header
    assert "plan mode: only the tools that change nothing" in flat(term.screen)
    assert ready(plan=True)(term.screen)

    stream, gate = gated(reply("Plan: add a test, then fix the bug"), 0)
    gates.append(gate)
    ollama.enqueue(stream, reply("Done it."))
    term.send("how would you fix it?\r")
    term.wait(lambda s: "plan · waiting for qwen3:8b" in s.text())  # the status line
    gate.set()
    term.wait("then fix the bug")
    term.wait(ready(plan=True))
    term.settle(0.3)
    assert not offered(ollama.chat_bodies[0]) & WRITE_TOOLS

    say(term, "/go", plan=False, then="plan mode off: the plan stays in the conversation")
    say(term, "now do it", plan=False, then="Done it.")
    acting = ollama.chat_bodies[1]
    assert "write_file" in offered(acting)
    assert any("then fix the bug" in str(m.get("content")) for m in acting["messages"])

    say(term, "/plan", plan=True, then="/go leaves it")
    say(term, "/plan", plan=False, then="plan mode off")


def test_a_command_with_arguments(
    ollama: FakeOllama, workspace: Path, terms: list[Term], home: Path
) -> None:
    commands = home / ".config" / "metona-agent" / "commands"
    commands.mkdir(parents=True)
    (commands / "review.md").write_text(
        "---\ndescription: review a file\n---\nReview $1 for $2; all: $ARGUMENTS"
    )
    term = start(ollama, workspace, terms)
    say(term, "/help", then="/review [ARGS]")
    assert re.search(r"/review \[ARGS\]\s+review a file \(user\)", term.screen.text())
    ollama.enqueue(reply("Reviewed."))
    say(term, "/review app.py speed", then="Reviewed.")
    assert user_words(ollama.chat_bodies[0]) == "Review app.py for speed; all: app.py speed"


def test_a_project_commands_first_use_shows_its_text_once(
    ollama: FakeOllama, workspace: Path, terms: list[Term]
) -> None:
    commands = workspace / ".metona" / "commands"
    commands.mkdir(parents=True)
    (commands / "fix.md").write_text("---\nplan: true\n---\nFind the bug in $ARGUMENTS")
    term = start(ollama, workspace, terms)
    term.send("/fix parser.py\r")
    term.wait(lambda s: "send it?" in s.cursor_row())
    shown = flat(term.screen)
    assert "project command /fix" in shown and "first use here" in shown
    assert "│ Find the bug in parser.py" in shown
    assert ollama.chat_bodies == []  # nothing is sent before the answer

    ollama.enqueue(reply("It is in line 3."), reply("Again: line 3."))
    term.send("y")
    term.wait("It is in line 3.")
    term.wait(ready(plan=True))  # plan: true put the chat in plan mode
    term.settle(0.3)
    assert user_words(ollama.chat_bodies[0]) == "Find the bug in parser.py"

    say(term, "/fix parser.py", then="Again: line 3.")
    assert flat(term.screen).count("first use here") == 1


def test_a_project_command_not_confirmed_is_not_sent(
    ollama: FakeOllama, workspace: Path, terms: list[Term]
) -> None:
    commands = workspace / ".metona" / "commands"
    commands.mkdir(parents=True)
    (commands / "fix.md").write_text("Delete everything")
    term = start(ollama, workspace, terms)
    term.send("/fix\r")
    term.wait(lambda s: "send it?" in s.cursor_row())
    term.send("n")
    term.wait("/fix was not sent")
    term.wait(ready())
    assert ollama.chat_bodies == []


def test_a_command_whose_model_is_not_on_the_server_is_one_line_and_chat_goes_on(
    ollama: FakeOllama, workspace: Path, terms: list[Term], home: Path
) -> None:
    commands = home / ".config" / "metona-agent" / "commands"
    commands.mkdir(parents=True)
    (commands / "hi.md").write_text("---\nmodel: ghost:1b\n---\nSay hi to $1")
    term = start(ollama, workspace, terms)
    say(term, "/hi you", then="ghost:1b")
    shown = flat(term.screen)
    assert "internal error" not in shown and "Traceback" not in term.raw
    assert ollama.chat_bodies == []  # nothing was sent
    ollama.enqueue(reply("Still here."))
    say(term, "hello", then="Still here.")
    assert ollama.chat_bodies[0]["model"] == "qwen3:8b"
