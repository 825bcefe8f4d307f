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


def piped_run(ollama: FakeOllama, workspace: Path, prompt: str) -> pexpect.spawn:
    env = {**os.environ, "OLLAMA_HOST": ollama.url, "TERM": "dumb"}
    agent = f"{shlex.quote(sys.executable)} -m cli run {shlex.quote(prompt)}"
    return pexpect.spawn(
        "/bin/sh",
        ["-c", f"printf 'old text\\n' | {agent}"],
        cwd=str(workspace),
        env=env,
        encoding="utf-8",
        timeout=30,
        dimensions=(40, 120),
    )


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
