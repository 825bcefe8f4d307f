"""`agent run` asks y/n on a real terminal (pseudo-terminal) when the policy says ask."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pexpect
import pytest

from tests.fake_ollama import FakeOllama, reply, tool_call

pytestmark = pytest.mark.pty


def spawn(ollama: FakeOllama, workspace: Path, *args: str) -> pexpect.spawn:
    env = {**os.environ, "OLLAMA_HOST": ollama.url, "TERM": "dumb"}
    return pexpect.spawn(
        sys.executable,
        ["-m", "cli", *args],
        cwd=str(workspace),
        env=env,
        encoding="utf-8",
        timeout=20,
        dimensions=(40, 120),
    )


@pytest.mark.parametrize(
    ("answer", "written"), [("y", True), ("n", False), ("", False)], ids=["yes", "no", "enter"]
)
def test_run_asks_on_the_terminal(
    ollama: FakeOllama, workspace: Path, answer: str, written: bool
) -> None:
    ollama.enqueue(
        reply(
            tool_calls=[tool_call("write_file", {"path": "out.txt", "content": "line 1\nline 2\n"})]
        ),
        reply("finished"),
    )
    child = spawn(ollama, workspace, "run", "write out.txt")
    child.expect("write_file out.txt")
    child.expect("waiting for confirmation")
    child.expect("new file, 14 B, 2 lines")
    child.expect("line 2")
    child.expect(r"Allow\? \[y/N\] ")
    child.sendline(answer)
    child.expect("finished")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    assert (workspace / "out.txt").exists() == written
    sent = ollama.chat_bodies[1]["messages"][-1]["content"]
    assert ('"success": true' in sent) == written


def test_model_text_in_the_question_is_sanitised(ollama: FakeOllama, workspace: Path) -> None:
    evil = "safe.txt\r\x1b[2Kharmless"
    ollama.enqueue(
        reply(tool_calls=[tool_call("write_file", {"path": evil, "content": "x"})]), reply("ok")
    )
    child = spawn(ollama, workspace, "run", "go")
    child.expect(r"Allow\? \[y/N\] ")
    shown = child.before
    assert "\\r\\x1b[2Kharmless" in shown and "\x1b[2Kharmless" not in shown
    child.sendline("n")
    child.expect(pexpect.EOF)
