"""Sessions you can manage: `agent sessions` (list, --json, rm), chats kept apart from
unfinished runs, /save that never silently overwrites, /turns with honest counts and the
files each turn changed, a resumed session shown again, where it was saved on leaving, the
bound on autosaves, and a failed @attach that sends nothing."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from cli.records.sessions import Session, SessionStore, conversation_turns
from tests.conftest import MakeChat, RunCli
from tests.fakes.context import typed
from tests.fakes.fake_ollama import FakeOllama, Stream, reply, tool_call
from tests.pty.driver import Chat, Ttys

CHAT = [
    {"role": "system", "content": "sys"},
    {"role": "user", "content": "fix the typo"},
    {"role": "assistant", "content": "Fixed it."},
]


@pytest.fixture
def run_cli(run_cli_in_process: RunCli) -> RunCli:
    """`agent` in this process (conftest.run_in_process): no test here is about the process."""
    return run_cli_in_process


def sessions_dir(home: Path) -> Path:
    return home / ".local/share/metona-agent/sessions"


def test_agent_sessions_lists_and_removes(run_cli: RunCli, home: Path, workspace: Path) -> None:
    store = SessionStore(sessions_dir(home))
    store.save("work", "qwen3:8b", CHAT, cwd=str(workspace))
    store.save("run-2026-12-01_10-00-00", "llama3.1", CHAT, kind="run", cwd="/srv")
    r = run_cli("sessions", "--json")
    assert r.code == 0, r.stderr
    rows = {row["name"]: row for row in json.loads(r.stdout)}
    assert set(rows) == {"work", "run-2026-12-01_10-00-00"}
    assert rows["work"] | {"last_used": ""} == {
        "name": "work", "kind": "chat", "last_used": "", "turns": 1,
        "model": "qwen3:8b", "cwd": str(workspace),
    }  # fmt: skip
    assert rows["work"]["last_used"].startswith("20")
    assert rows["run-2026-12-01_10-00-00"]["kind"] == "run"
    text = run_cli("sessions")
    assert text.code == 0 and "work" in text.stdout and "run " in text.stdout
    removed = run_cli("sessions", "rm", "work")
    assert removed.code == 0 and not (sessions_dir(home) / "work.json").exists()
    missing = run_cli("sessions", "rm", "work")
    assert missing.code == 2 and "no saved session 'work'" in missing.stderr


def test_agent_sessions_with_none_saved(run_cli: RunCli) -> None:
    r = run_cli("sessions")
    assert r.code == 0 and "no saved sessions yet" in r.stderr
    assert json.loads(run_cli("sessions", "--json").stdout) == []


def test_an_interrupted_run_is_saved_as_a_run_and_resume_picks_the_chat(
    run_cli: RunCli, ollama: FakeOllama, home: Path, workspace: Path
) -> None:
    store = SessionStore(sessions_dir(home))
    store.save("my-chat", "qwen3:8b", CHAT)
    time.sleep(0.05)
    (workspace / "a.txt").write_text("a")
    ollama.enqueue(
        reply(tool_calls=[tool_call("read_file", {"path": "a.txt"})]),
        Stream([b'{"model":"qwen3:8b","message":{"content":"x"},"done":false}\n'], drop=True),
    )
    r = run_cli("run", "read a")
    assert r.code == 1 and "agent chat --resume run-" in r.stderr
    runs = [s for s in store.listing() if isinstance(s, Session) and s.kind == "run"]
    assert len(runs) == 1 and runs[0].cwd == str(workspace)
    latest = store.latest()  # what `agent chat --resume` without a name opens
    assert latest is not None and latest.name == "my-chat"


def test_chat_resume_without_a_name_reopens_the_last_chat_and_shows_it(
    ollama: FakeOllama, home: Path, workspace: Path, ttys: Ttys
) -> None:
    store = SessionStore(sessions_dir(home))
    long_answer = "The answer, at length. " * 30
    store.save("chat-a", "qwen3:8b", [*CHAT, {"role": "user", "content": "and?"},
               {"role": "assistant", "content": long_answer}], cwd=str(workspace))  # fmt: skip
    time.sleep(0.05)
    store.save("run-2026-12-01_11-00-00", "qwen3:8b", CHAT, kind="run", cwd=str(workspace))
    chat = ttys.chat("--resume", host=ollama.url, cols=120, timeout=20)
    shown = chat.screen.transcript()
    at = [
        next(i for i, row in enumerate(shown) if text in row)
        for text in ("loaded session chat-a: 2 turns", "› fix the typo", "Fixed it.", "› and?")
    ]  # the last turns again, in order
    assert at == sorted(at), shown
    assert "The answer, at length." in " ".join(shown[at[-1] :])
    chat.exit()
    assert "session saved as chat-a" in chat.flat()
    assert "agent chat --resume chat-a" in chat.flat()


def _resume(ttys: Ttys, ollama: FakeOllama) -> Chat:
    return ttys.chat("--resume", host=ollama.url, cols=200, timeout=20)


def test_chat_resume_without_a_name_reopens_this_directorys_chat_not_a_later_one_elsewhere(
    ollama: FakeOllama, home: Path, workspace: Path, tmp_path: Path, ttys: Ttys
) -> None:
    store = SessionStore(sessions_dir(home))
    here = [*CHAT[:1], {"role": "user", "content": "the typo here"}, CHAT[2]]
    store.save("chat-here", "qwen3:8b", here, cwd=str(workspace))
    time.sleep(0.05)
    other = [*CHAT[:1], {"role": "user", "content": "the other project"}, CHAT[2]]
    store.save("chat-there", "qwen3:8b", other, cwd=str(tmp_path))  # saved later
    ollama.enqueue(reply("Still here."))
    chat = _resume(ttys, ollama)
    shown = chat.text()
    assert "loaded session chat-here: 1 turn" in shown
    assert "› the typo here" in shown.split("loaded session chat-here: 1 turn", 1)[1]
    chat.say("and now?", then="Still here.")
    chat.exit()
    users = [typed(m["content"]) for m in ollama.chat_bodies[-1]["messages"] if m["role"] == "user"]
    assert users == ["the typo here", "and now?"]


def test_chat_resume_with_no_chat_in_this_directory_says_so_and_names_the_one_elsewhere(
    ollama: FakeOllama, home: Path, workspace: Path, tmp_path: Path, ttys: Ttys
) -> None:
    store = SessionStore(sessions_dir(home))
    other = [*CHAT[:1], {"role": "user", "content": "the other project"}, CHAT[2]]
    store.save("chat-there", "qwen3:8b", other, cwd=str(tmp_path))
    ollama.enqueue(reply("A new start."))
    chat = _resume(ttys, ollama)
    said = " ".join(chat.flat().split("agent sessions lists them all", 1)[0].split())
    assert f"no saved chat in {workspace}: starting a new one" in said  # as wrapped
    assert f"The latest chat is chat-there in {tmp_path}" in said
    assert "agent chat --resume chat-there reopens it" in said
    chat.say("hello", then="A new start.")
    chat.exit()
    users = [typed(m["content"]) for m in ollama.chat_bodies[-1]["messages"] if m["role"] == "user"]
    assert users == ["hello"]  # nothing of the other directory's chat was sent


def test_save_never_silently_overwrites(make_chat: MakeChat, ollama: FakeOllama) -> None:
    chat = make_chat()
    chat.store.save("keep", "m", CHAT)
    ollama.enqueue(reply("hello"))
    chat.run("hi\r", "/save keep\r")
    assert "a saved session named keep exists; /save keep! replaces it" in chat.text
    assert chat.store.load("keep").messages == CHAT
    chat = make_chat()
    ollama.enqueue(reply("hello"))
    chat.run("hi\r", "/save keep!\r")
    assert "saved as keep" in chat.text
    assert chat.store.load("keep").messages != CHAT


def test_turns_counts_what_was_left_out_and_lists_changed_files(
    make_chat: MakeChat, ollama: FakeOllama, workspace: Path
) -> None:
    answer = "First line of a long answer.\n" + "x" * 700
    ollama.enqueue(
        reply(tool_calls=[tool_call("write_file", {"path": "notes.txt", "content": "n\n"})]),
        reply(answer),
    )
    chat = make_chat("policy: {confirm: none}\n")
    chat.run("write notes\r", "/turns\r")
    hidden = len(answer) - len("First line of a long answer.")
    assert f"First line of a long answer.… (+{hidden} chars)" in chat.text
    assert "changed notes.txt" in chat.text
    assert chat.text.count("1. you: write notes") == 1


def test_conversation_turns_from_history() -> None:
    messages = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "move it"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "c1", "function": {"name": "move_file",
                                      "arguments": {"source": "a", "destination": "b"}}},
            {"id": "c2", "function": {"name": "read_file", "arguments": '{"path": "x"}'}},
        ]},
        {"role": "tool", "tool_call_id": "c1", "content": '{"success": true}'},
        {"role": "tool", "tool_call_id": "c2", "content": '{"success": false, "error": "no"}'},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "c3", "function": {"name": "read_file", "arguments": {"path": ".env"}}},
            {"id": "c4", "function": {"name": "write_file", "arguments": {"path": "y"}}},
            {"id": "c5", "function": {"name": "write_file", "arguments": {"path": "z"}}},
        ]},
        {"role": "tool", "tool_call_id": "c3",
         "content": '{"success": false, "error": "denied: .env looks like a secret"}'},
        {"role": "tool", "tool_call_id": "c4", "content": '{"success": false, "error": '
         '"invalid arguments for write_file: missing required argument: content"}'},
        {"role": "tool", "tool_call_id": "c5",
         "content": '{"success": false, "error": "not run: the user declined"}'},
        {"role": "assistant", "content": "Moved."},
    ]  # fmt: skip
    (turn,) = conversation_turns(messages)
    assert turn.calls == [
        "✓ move_file b",
        "✗ read_file x · failed",
        "✗ read_file .env · denied",
        "✗ write_file y · invalid",
        "✗ write_file z · declined",
    ]
    assert turn.changed == ["b"] and turn.answer == "Moved."


def test_autosaves_are_bounded(make_chat: MakeChat, ollama: FakeOllama) -> None:
    chat = make_chat("agent: {max_sessions: 3}\n")
    for n in range(5):
        chat.store.save(f"old-{n}", "m", CHAT)
        past = time.time() - 1000 + n
        os.utime(chat.store.path(f"old-{n}"), (past, past))
    chat.session.max_sessions = 3  # make_chat builds the session without the config's value
    ollama.enqueue(reply("hello"))
    chat.run("hi\r")
    names = chat.store.names()
    assert len(names) == 3 and chat.session.session_name in names
    assert names[1:] == ["old-4", "old-3"]  # the newest kept, the oldest removed


def test_a_failed_attach_sends_nothing_and_says_so(
    make_chat: MakeChat, ollama: FakeOllama, workspace: Path
) -> None:
    chat = make_chat()
    (workspace / "id_rsa").write_text("-----BEGIN OPENSSH PRIVATE KEY-----\n")
    # Enter again sends what came back into the input: the same message, refused again.
    chat.run("look at @id_rsa please\r", "\r", "\x03")
    assert chat.text.count("@id_rsa not attached") == 2
    assert "the message was not sent (it is back in the input)" in " ".join(chat.text.split("\n"))
    assert ollama.chat_bodies == []


def test_the_farewell_says_so_when_the_last_save_failed(
    make_chat: MakeChat, ollama: FakeOllama
) -> None:
    """A save that fails after an earlier one worked: leaving must not say "session saved
    as …" as if the whole conversation were kept (it holds an older state)."""
    ollama.enqueue(reply("one"), reply("two"))
    chat = make_chat()
    chat.run("first\r")
    assert "session saved as" in chat.text
    name = chat.session.session_name
    path = chat.store.path(name)
    path.unlink()
    path.mkdir()  # where the session file goes: something that cannot be replaced by a file
    seen = len(chat.text)
    chat.run("second\r")
    after = chat.text[seen:]
    assert "could not save the session" in after, after
    assert "session saved as" not in after, after
    assert f"the last save failed (see above): session {name}" in after


def test_the_farewell_of_a_session_never_saved_says_nothing_is_kept(
    make_chat: MakeChat, ollama: FakeOllama, home: Path
) -> None:
    ollama.enqueue(reply("one"))
    chat = make_chat()
    sessions = home / "sessions"
    sessions.parent.mkdir(parents=True, exist_ok=True)
    sessions.write_text("")  # the sessions folder cannot be made
    chat.run("first\r")
    assert "could not save the session" in chat.text
    assert "session saved as" not in chat.text
    assert "the session could not be saved (see above): nothing to resume" in chat.text
