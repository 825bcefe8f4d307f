"""`/undo` says which session a change came from when it is not this chat's own: the chat's
saved name (recorded with each change), or "an earlier session" for a change recorded
without one (an `agent run`, or a change store written before names were recorded, which
still undoes). The real program in a pseudo-terminal against the fake Ollama."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.conftest import RunCli
from tests.fakes.fake_ollama import FakeOllama, reply, tool_call
from tests.pty.driver import Chat, Ttys

CHANGES = Path(".local/state/metona-agent/changes")


@pytest.fixture
def run_cli(run_cli_in_process: RunCli) -> RunCli:
    """`agent` in this process (conftest.run_in_process): no test here is about the process."""
    return run_cli_in_process


def chat(ttys: Ttys, ollama: FakeOllama, config: Path) -> Chat:
    return ttys.chat("--config", str(config), host=ollama.url, cols=200, timeout=20)


def said(chat: Chat) -> str:
    """What the chat printed since the last line typed, as plain words."""
    return chat.since_line()


def first_chat_writes(ttys: Ttys, ollama: FakeOllama, workspace: Path, config: Path) -> str:
    """A chat in which the model rewrites notes.txt (v1 → v2); the name it is saved under."""
    (workspace / "notes.txt").write_text("v1\n")
    ollama.enqueue(
        reply(tool_calls=[tool_call("write_file", {"path": "notes.txt", "content": "v2\n"})]),
        reply("Rewrote it."),
    )
    first = chat(ttys, ollama, config)
    first.say("rewrite the notes", then="Rewrote it.")
    first.exit()
    saved = re.search(r"session saved as (\S+) ", first.flat())
    assert saved, first.text()
    name = saved.group(1)
    assert (workspace / "notes.txt").read_text() == "v2\n"
    return name


def test_undo_in_a_fresh_chat_names_the_session_the_change_came_from(
    ollama: FakeOllama, workspace: Path, tmp_path: Path, ttys: Ttys
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("policy:\n  confirm: none\n")
    name = first_chat_writes(ttys, ollama, workspace, config)
    ollama.enqueue(
        reply(tool_calls=[tool_call("write_file", {"path": "todo.md", "content": "- a\n"})]),
        reply("Made the list."),
    )
    second = chat(ttys, ollama, config)
    second.say("make a list", then="Made the list.")
    second.say("/undo", then="/redo brings it back")  # this chat's own change: no session
    own = said(second)
    assert "todo.md did not exist before change #2" in own
    assert "from" not in own.split("todo.md did not exist", 1)[1]
    second.say("/undo", then="/redo brings it back")  # the first chat's change
    assert "restored notes.txt as it was before change #1 (write_file, " in said(second)
    assert f"UTC, from session {name})" in said(second)
    second.exit()
    assert (workspace / "notes.txt").read_text() == "v1\n"
    assert not (workspace / "todo.md").exists()


def test_a_change_store_written_before_session_names_still_undoes_from_an_earlier_session(
    ollama: FakeOllama, workspace: Path, home: Path, tmp_path: Path, ttys: Ttys
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("policy:\n  confirm: none\n")
    first_chat_writes(ttys, ollama, workspace, config)
    # The journal as the agent wrote it before session names were recorded.
    journal = home / CHANGES / "journal.jsonl"
    records = [json.loads(line) for line in journal.read_text().splitlines()]
    assert any(r.get("session_name") for r in records)
    for record in records:
        record.pop("session_name", None)
    journal.write_text("".join(json.dumps(r) + "\n" for r in records))
    (home / CHANGES / "journal.index").unlink(missing_ok=True)
    second = chat(ttys, ollama, config)
    second.say("/undo", then="/redo brings it back")
    assert "restored notes.txt as it was before change #1" in said(second)
    assert "UTC, from an earlier session)" in said(second)
    second.exit()
    assert (workspace / "notes.txt").read_text() == "v1\n"


def test_undo_in_chat_names_the_agent_run_a_change_came_from(
    ollama: FakeOllama, workspace: Path, tmp_path: Path, run_cli: RunCli, ttys: Ttys
) -> None:
    (workspace / "notes.txt").write_text("v1\n")
    ollama.enqueue(
        reply(tool_calls=[tool_call("write_file", {"path": "notes.txt", "content": "v2\n"})]),
        reply("done"),
    )
    assert run_cli("run", "--yes", "rewrite the notes").code == 0
    config = tmp_path / "config.yaml"
    config.write_text("policy:\n  confirm: none\n")
    later = chat(ttys, ollama, config)
    later.say("/undo", then="/redo brings it back")
    assert re.search(r"UTC, from session run-[0-9_-]+\)", said(later))
    later.exit()
    assert (workspace / "notes.txt").read_text() == "v1\n"
