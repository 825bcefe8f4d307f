"""Issue 21: `cat x | agent run "fix…"` at a terminal asks on the controlling terminal
(/dev/tty): stdin is the pipe, the person is at the terminal the question is shown on."""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

import pexpect
import pytest

from tests.fakes.fake_ollama import FakeOllama, reply, tool_call

pytestmark = pytest.mark.pty


def shell_on_a_pty(
    ollama: FakeOllama, workspace: Path, line: str, timeout: float = 30
) -> pexpect.spawn:
    """`sh -c LINE` on a pty of 120 columns, in the workspace, pointed at the fake server."""
    env = {**os.environ, "OLLAMA_HOST": ollama.url, "TERM": "dumb"}
    return pexpect.spawn(
        "/bin/sh",
        ["-c", line],
        cwd=str(workspace),
        env=env,
        encoding="utf-8",
        timeout=timeout,
        dimensions=(40, 120),
    )


def piped_run(ollama: FakeOllama, workspace: Path, prompt: str) -> pexpect.spawn:
    agent = f"{shlex.quote(sys.executable)} -m cli run {shlex.quote(prompt)}"
    return shell_on_a_pty(ollama, workspace, f"printf 'old text\\n' | {agent}")


@pytest.mark.parametrize(("answer", "written"), [("y", True), ("n", False)])
def test_piped_run_at_a_terminal_asks_on_the_terminal(
    ollama: FakeOllama, workspace: Path, answer: str, written: bool
) -> None:
    ollama.enqueue(
        reply(tool_calls=[tool_call("write_file", {"path": "fixed.txt", "content": "new\n"})]),
        reply("finished"),
    )
    child = piped_run(ollama, workspace, "fix it")
    child.expect("waiting for confirmation")
    child.expect(r"Allow\? \[y/N\] ")
    child.sendline(answer)
    child.expect("finished")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    assert (workspace / "fixed.txt").exists() == written
    assert "old text" in ollama.chat_bodies[0]["messages"][-1]["content"]  # the pipe was read
    sent = ollama.chat_bodies[1]["messages"][-1]["content"]
    assert "not run from a terminal" not in sent


# A job started in the background: its own process group, which is not the terminal's
# foreground group (what `cmd | agent run … &` in an interactive shell makes).
BACKGROUND = r"""
import os, sys
pid = os.fork()
if pid == 0:
    os.setpgid(0, 0)
    os.execv(sys.executable, [sys.executable, "-m", "cli", "run", sys.argv[1]])
_, status = os.waitpid(pid, os.WUNTRACED)
print("STOPPED" if os.WIFSTOPPED(status) else f"EXIT {os.waitstatus_to_exitcode(status)}")
if os.WIFSTOPPED(status):
    os.kill(pid, 9)
"""


@pytest.mark.parametrize("piped", [True, False], ids=["piped", "stdin-the-terminal"])
def test_a_run_in_the_background_asks_no_one_and_is_not_stopped(
    ollama: FakeOllama, workspace: Path, piped: bool
) -> None:
    """`cmd | agent run … &` (questions would go to /dev/tty) and `agent run … &` (to stdin,
    the terminal itself): from the background, no one is asked."""
    ollama.enqueue(
        reply(tool_calls=[tool_call("write_file", {"path": "fixed.txt", "content": "new\n"})]),
        reply("finished"),
    )
    feed = "printf 'old\\n' | " if piped else ""
    background = f"{shlex.quote(sys.executable)} -c {shlex.quote(BACKGROUND)} fix"
    child = shell_on_a_pty(ollama, workspace, feed + background, timeout=60)
    child.expect(r"STOPPED|EXIT \d+")
    ended = child.after
    child.expect(pexpect.EOF)
    child.close()
    assert ended == "EXIT 0", child.before  # not stopped by SIGTTIN on /dev/tty
    assert not (workspace / "fixed.txt").exists()  # no one was asked: not written
    sent = ollama.chat_bodies[1]["messages"][-1]["content"]
    assert "not run from a terminal" in sent or "no one can be asked" in sent
