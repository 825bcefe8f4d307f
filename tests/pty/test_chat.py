"""`agent chat` end to end: the real program in a pseudo-terminal against the fake Ollama."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pexpect
import pytest

from tests.fakes.context import typed
from tests.fakes.fake_ollama import FakeOllama, reply, tool_call

pytestmark = pytest.mark.pty
PROMPT = "›"


@pytest.fixture
def chat(ollama: FakeOllama, workspace: Path) -> Iterator[pexpect.spawn]:
    env = {
        **os.environ,
        "OLLAMA_HOST": ollama.url,
        "TERM": "xterm-256color",
        "PROMPT_TOOLKIT_NO_CPR": "1",  # nobody answers cursor-position requests in a test
    }
    child = pexpect.spawn(
        sys.executable,
        ["-m", "cli", "chat"],
        cwd=str(workspace),
        env=env,
        encoding="utf-8",
        timeout=60,
        dimensions=(40, 110),
    )
    child.expect("metona-agent")
    child.expect(PROMPT)
    yield child
    if child.isalive():
        child.terminate(force=True)


def say(child: pexpect.spawn, text: str) -> None:
    child.send(text + "\r")


def test_chat_session_end_to_end(chat: pexpect.spawn, ollama: FakeOllama, workspace: Path) -> None:
    (workspace / "notes.txt").write_text("old line\nkeep\n")

    # A new file is asked for, and "y" writes it.
    ollama.enqueue(
        reply(tool_calls=[tool_call("write_file", {"path": "todo.md", "content": "- milk\n"})]),
        reply("Created todo.md."),
    )
    say(chat, "make a todo list")
    chat.expect("waiting for confirmation")
    chat.expect(r"\[y\] yes")
    chat.send("y")
    chat.expect("Created todo.md.")
    chat.expect(PROMPT)
    assert (workspace / "todo.md").read_text() == "- milk\n"

    # An overwrite shows the diff; "n" leaves the file alone.
    ollama.enqueue(
        reply(
            tool_calls=[
                tool_call("write_file", {"path": "notes.txt", "content": "new line\nkeep\n"})
            ]
        ),
        reply("Left it as it was."),
    )
    say(chat, "rewrite the notes")
    chat.expect("-old line")
    chat.expect(r"\+new line")
    chat.expect(r"\[n\] no")
    chat.send("n")
    chat.expect("reason")
    chat.send("\r")  # no reason
    chat.expect("Left it as it was.")
    chat.expect(PROMPT)
    assert (workspace / "notes.txt").read_text() == "old line\nkeep\n"

    # Ctrl-C in the middle of a stream stops it; the REPL stays up and usable.
    ollama.enqueue(reply("counting " + " ".join(str(i) for i in range(400)), token=6, delay=0.03))
    say(chat, "count to 400")
    chat.expect("counting")
    chat.sendcontrol("c")
    chat.expect("interrupted")
    chat.expect(PROMPT)

    # History reaches the model on the next turn, the partial answer included.
    ollama.enqueue(reply("You asked me to count."))
    say(chat, "what did I ask?")
    chat.expect("You asked me to count.")
    chat.expect(PROMPT)
    sent = ollama.chat_bodies[-1]["messages"]
    users = [typed(m["content"]) for m in sent if m["role"] == "user"]
    assert users == ["make a todo list", "rewrite the notes", "count to 400", "what did I ask?"]
    partial = [m for m in sent if m["role"] == "assistant" and m["content"].startswith("counting")]
    assert len(partial) == 1 and len(partial[0]["content"]) < len("counting ") + 1500
    declined = [json.loads(m["content"]) for m in sent if m["role"] == "tool"][1]
    assert declined["success"] is False and "declined" in declined["error"]

    say(chat, "/exit")
    chat.expect(pexpect.EOF)
    chat.close()
    assert chat.exitstatus == 0


def test_ctrl_d_quits_and_ctrl_c_clears_the_line(chat: pexpect.spawn, ollama: FakeOllama) -> None:
    chat.send("half typed")
    chat.expect("half typed")
    chat.sendcontrol("c")
    chat.expect(PROMPT)
    # Between two prompts the terminal is in cooked mode and would swallow a Ctrl-D as
    # end-of-file; give the new prompt a moment to take the terminal.
    time.sleep(0.5)
    chat.sendcontrol("d")
    chat.expect(pexpect.EOF)
    chat.close()
    assert chat.exitstatus == 0
    assert ollama.chat_bodies == []


def test_chat_exits_1_when_the_server_is_unreachable(workspace: Path) -> None:
    env = {**os.environ, "OLLAMA_HOST": "127.0.0.1:9", "PROMPT_TOOLKIT_NO_CPR": "1"}
    child = pexpect.spawn(
        sys.executable,
        ["-m", "cli", "chat"],
        cwd=str(workspace),
        env=env,
        encoding="utf-8",
        timeout=60,
    )
    child.expect("cannot reach Ollama at http://127.0.0.1:9")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 1
    assert "Traceback" not in (child.before or "")


def test_chat_exits_1_for_an_unknown_model(ollama: FakeOllama, workspace: Path) -> None:
    env = {**os.environ, "OLLAMA_HOST": ollama.url, "PROMPT_TOOLKIT_NO_CPR": "1"}
    child = pexpect.spawn(
        sys.executable,
        ["-m", "cli", "chat", "-m", "ghost:1b"],
        cwd=str(workspace),
        env=env,
        encoding="utf-8",
        timeout=60,
    )
    child.expect("ollama pull ghost:1b")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 1


def test_resume_reopens_the_latest_session(ollama: FakeOllama, workspace: Path) -> None:
    env = {
        **os.environ,
        "OLLAMA_HOST": ollama.url,
        "TERM": "xterm-256color",
        "PROMPT_TOOLKIT_NO_CPR": "1",
    }

    def spawn(*args: str) -> pexpect.spawn:
        child = pexpect.spawn(
            sys.executable,
            ["-m", "cli", "chat", *args],
            cwd=str(workspace),
            env=env,
            encoding="utf-8",
            timeout=60,
        )
        child.expect(PROMPT)
        return child

    ollama.enqueue(reply("Noted: the code word is heron."))
    first = spawn()
    say(first, "the code word is heron")
    first.expect("Noted")
    first.expect(PROMPT)
    say(first, "/exit")
    first.expect(pexpect.EOF)

    ollama.enqueue(reply("It was heron."))
    second = spawn("--resume")
    say(second, "what was the code word?")
    second.expect("It was heron.")
    second.expect(PROMPT)  # a line typed while the turn ends waits at the next prompt, unsent
    say(second, "/bye")
    second.expect(pexpect.EOF)
    users = [typed(m["content"]) for m in ollama.chat_bodies[-1]["messages"] if m["role"] == "user"]
    assert users == ["the code word is heron", "what was the code word?"]
