"""Issue 21: started in the home directory (or /), the agent would silently allow the whole
tree. `agent chat` says so and asks once; `agent run` says so on stderr, in one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import RunCli
from tests.fakes.fake_ollama import FakeOllama, reply
from tests.pty.driver import Ttys


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
    ollama: FakeOllama, home: Path, ttys: Ttys, answer: str
) -> None:
    term = ttys.chat(host=ollama.url, cwd=home, cols=80, ready=False)
    term.wait_card(then="work here anyway?")
    term.settle()
    shown = term.screen.text()
    assert "⚠ the allowed directory is your home directory" in shown
    assert "[n] no, quit" in shown
    term.press(answer)
    if answer == "n":
        term.wait("cd into your project, then: agent chat")
        assert term.wait_exit() == 0
        assert ollama.chat_bodies == []
        return
    term.wait_ready()
    ollama.enqueue(reply("Hello there."))
    term.say("hi", then="Hello there.")
    assert term.screen.text().count("work here anyway?") == 1
