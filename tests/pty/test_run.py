"""`agent run` asks y/n on a real terminal (pseudo-terminal) when the policy says ask."""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path

import pexpect
import pytest

from tests.fakes.fake_ollama import FakeOllama, reply, tool_call

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


def test_closing_the_terminal_mid_answer_keeps_the_work(
    ollama: FakeOllama, workspace: Path, home: Path
) -> None:
    """The terminal window shut while the answer streams: SIGHUP, then every write to the
    terminal fails (EIO). The run still ends as a SIGHUP ends it: the work saved, one line
    on stderr (here a file, which outlives the terminal), no traceback."""
    import signal
    import time

    from tests.fakes.fake_ollama import Stream

    (workspace / "a.txt").write_text("a\n")
    ollama.enqueue(
        reply(tool_calls=[tool_call("read_file", {"path": "a.txt"})]),
        Stream(reply("a b c d e f").lines[:2], endless=True),
    )
    env = {**os.environ, "OLLAMA_HOST": ollama.url, "HOME": str(home)}
    err = workspace.parent / "err.txt"
    command = f"exec {sys.executable} -m cli run --yes 'read a' 2>{err}"
    child = pexpect.spawn("/bin/sh", ["-c", command], cwd=str(workspace), env=env, timeout=60)
    child.expect("a b")
    pid = child.pid
    # The terminal goes: the kernel hangs its session up. pexpect's close then gives the child
    # a moment to exit and says it "could not terminate" one still saving its work (a loaded
    # machine): that is for the loop below to wait for.
    with contextlib.suppress(pexpect.ExceptionPexpect):
        child.close(force=False)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    said = err.read_text()
    assert "Traceback" not in said, said
    assert f"stopped by {signal.Signals.SIGHUP.name}" in said, said
    saved = sorted((home / ".local/share/metona-agent/sessions").glob("run-*"))
    assert saved, said
