"""Issue 21: started in the home directory (or /), the agent would silently allow the whole
tree. `agent chat` says so and asks once; `agent run` says so on stderr, in one line."""

from __future__ import annotations

from pathlib import Path

import pexpect
import pytest

from tests.conftest import RunCli
from tests.fakes.fake_ollama import FakeOllama, reply
from tests.fakes.vt import Term
from tests.pty.test_terminal_ui import at_prompt, say, spawn, terms

__all__ = ["terms"]  # a fixture, imported to be used here


@pytest.fixture
def run_cli(run_cli_in_process: RunCli) -> RunCli:
    """`agent` in this process (conftest.run_in_process): no test here is about the process."""
    return run_cli_in_process


def test_run_in_the_home_directory_says_so_on_stderr(
    run_cli: RunCli, ollama: FakeOllama, home: Path
) -> None:
    ollama.enqueue(reply("hi"))
    done = run_cli("run", "hello", cwd=home)
    assert done.code == 0 and done.stdout.strip() == "hi"
    notes = [line for line in done.stderr.splitlines() if "allowed directory" in line]
    assert notes == [
        f"note: the allowed directory is your home directory ({home.resolve()}): the model "
        "may read and change files anywhere under it"
    ]


def test_run_in_a_project_says_nothing_of_it(run_cli: RunCli, ollama: FakeOllama) -> None:
    ollama.enqueue(reply("hi"))
    done = run_cli("run", "hello")
    assert done.code == 0 and "allowed directory" not in done.stderr


@pytest.mark.pty
@pytest.mark.parametrize("answer", ["n", "y"])
def test_chat_in_the_home_directory_asks_once(
    ollama: FakeOllama, home: Path, terms: list[Term], answer: str
) -> None:
    term = spawn(ollama, home, ["chat"], 80)
    terms.append(term)
    term.wait("work here anyway?")
    term.settle()
    shown = term.screen.text()
    assert "⚠ the allowed directory is your home directory" in shown
    assert "[n] no, quit" in shown
    term.send(answer)
    if answer == "n":
        term.wait("cd into your project, then: agent chat")
        term.child.expect(pexpect.EOF)
        term.child.close()
        assert term.child.exitstatus == 0
        assert ollama.chat_bodies == []
        return
    term.wait(at_prompt)
    ollama.enqueue(reply("Hello there."))
    say(term, "hi")
    term.wait("Hello there.")
    assert term.screen.text().count("work here anyway?") == 1
