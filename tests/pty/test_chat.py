"""`agent chat` end to end: the real program in a pseudo-terminal against the fake Ollama,
driven by tests/pty/driver.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.fakes.context import typed
from tests.fakes.fake_ollama import FakeOllama, reply, tool_call
from tests.pty.driver import Chat, Ttys

pytestmark = pytest.mark.pty


@pytest.fixture
def chat(ttys: Ttys, ollama: FakeOllama) -> Chat:
    term = ttys.chat(host=ollama.url, cols=110)
    assert "metona-agent" in term.text()
    return term


def test_chat_session_end_to_end(chat: Chat, ollama: FakeOllama, workspace: Path) -> None:
    (workspace / "notes.txt").write_text("old line\nkeep\n")

    # A new file is asked for, and "y" writes it.
    ollama.enqueue(
        reply(tool_calls=[tool_call("write_file", {"path": "todo.md", "content": "- milk\n"})]),
        reply("Created todo.md."),
    )
    chat.line("make a todo list")
    chat.wait("waiting for confirmation")
    chat.press("y", then="[y] yes")
    chat.wait_turn_end(then="Created todo.md.")
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
    chat.line("rewrite the notes")
    chat.wait("-old line")
    chat.wait("+new line")
    chat.press("n", then="[n] no")
    chat.reply_line("reason", "")  # no reason
    chat.wait_turn_end(then="Left it as it was.")
    assert (workspace / "notes.txt").read_text() == "old line\nkeep\n"

    # Ctrl-C in the middle of a stream stops it; the REPL stays up and usable.
    ollama.enqueue(reply("counting " + " ".join(str(i) for i in range(400)), token=6, delay=0.03))
    chat.line("count to 400")
    chat.wait("counting")
    chat.interrupt()
    chat.wait_turn_end(then="interrupted")

    # History reaches the model on the next turn, the partial answer included.
    ollama.enqueue(reply("You asked me to count."))
    chat.say("what did I ask?", then="You asked me to count.")
    sent = ollama.chat_bodies[-1]["messages"]
    users = [typed(m["content"]) for m in sent if m["role"] == "user"]
    assert users == ["make a todo list", "rewrite the notes", "count to 400", "what did I ask?"]
    partial = [m for m in sent if m["role"] == "assistant" and m["content"].startswith("counting")]
    assert len(partial) == 1 and len(partial[0]["content"]) < len("counting ") + 1500
    declined = [json.loads(m["content"]) for m in sent if m["role"] == "tool"][1]
    assert declined["success"] is False and "declined" in declined["error"]

    assert chat.exit() == 0


def test_ctrl_d_quits_and_ctrl_c_clears_the_line(chat: Chat, ollama: FakeOllama) -> None:
    chat.keys("half typed")
    chat.wait("half typed")
    chat.keys("\x03")
    # Between two prompts the terminal is in cooked mode and would swallow a Ctrl-D as
    # end-of-file: quit() waits for the new prompt to take the terminal.
    assert chat.quit() == 0
    assert ollama.chat_bodies == []


def test_chat_exits_1_when_the_server_is_unreachable(ttys: Ttys) -> None:
    chat = ttys.chat(host="127.0.0.1:9", ready=False)
    chat.wait("cannot reach Ollama at http://127.0.0.1:9")
    assert chat.wait_exit() == 1
    assert "Traceback" not in chat.raw


def test_chat_exits_1_for_an_unknown_model(ttys: Ttys, ollama: FakeOllama) -> None:
    chat = ttys.chat("-m", "ghost:1b", host=ollama.url, ready=False)
    chat.wait("ollama pull ghost:1b")
    assert chat.wait_exit() == 1


def test_resume_reopens_the_latest_session(ttys: Ttys, ollama: FakeOllama) -> None:
    ollama.enqueue(reply("Noted: the code word is heron."))
    first = ttys.chat(host=ollama.url)
    first.say("the code word is heron", then="Noted")
    first.exit()

    ollama.enqueue(reply("It was heron."))
    second = ttys.chat("--resume", host=ollama.url)
    second.say("what was the code word?", then="It was heron.")
    second.exit("/bye")
    users = [typed(m["content"]) for m in ollama.chat_bodies[-1]["messages"] if m["role"] == "user"]
    assert users == ["the code word is heron", "what was the code word?"]
