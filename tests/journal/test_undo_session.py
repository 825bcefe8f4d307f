"""`/undo` says which session a change came from when it is not this chat's own: the chat's
saved name (recorded with each change), or "an earlier session" for a change recorded
without one (an `agent run`, or a change store written before names were recorded, which
still undoes). The real program in a pseudo-terminal against the fake Ollama."""

from __future__ import annotations

import json
import os
import re
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pexpect
import pytest

from tests.conftest import RunCli
from tests.fakes.fake_ollama import FakeOllama, reply, tool_call

CHANGES = Path(".local/state/metona-agent/changes")
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


@pytest.fixture
def run_cli(run_cli_in_process: RunCli) -> RunCli:
    """`agent` in this process (conftest.run_in_process): no test here is about the process."""
    return run_cli_in_process


@contextmanager
def chat(ollama: FakeOllama, workspace: Path, config: Path) -> Iterator[pexpect.spawn]:
    env = {**os.environ, "OLLAMA_HOST": ollama.url, "PROMPT_TOOLKIT_NO_CPR": "1"}
    child = pexpect.spawn(
        sys.executable, ["-m", "cli", "chat", "--config", str(config)], cwd=str(workspace),
        env=env, encoding="utf-8", timeout=20, dimensions=(40, 200),
    )  # fmt: skip
    try:
        child.expect("›")
        yield child
    finally:
        if child.isalive():
            child.kill(signal.SIGKILL)


def said(child: pexpect.spawn) -> str:
    """What the chat printed before the last match, as plain words."""
    return " ".join(ANSI.sub("", str(child.before)).split())


def first_chat_writes(ollama: FakeOllama, workspace: Path, config: Path) -> str:
    """A chat in which the model rewrites notes.txt (v1 → v2); the name it is saved under."""
    (workspace / "notes.txt").write_text("v1\n")
    ollama.enqueue(
        reply(tool_calls=[tool_call("write_file", {"path": "notes.txt", "content": "v2\n"})]),
        reply("Rewrote it."),
    )
    with chat(ollama, workspace, config) as first:
        first.send("rewrite the notes\r")
        first.expect("Rewrote it.")
        first.expect("›")
        first.send("/exit\r")
        first.expect(r"session saved as (\S+) ")
        name = str(first.match.group(1))
        first.expect(pexpect.EOF)
    assert (workspace / "notes.txt").read_text() == "v2\n"
    return name


def test_undo_in_a_fresh_chat_names_the_session_the_change_came_from(
    ollama: FakeOllama, workspace: Path, tmp_path: Path
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("policy:\n  confirm: none\n")
    name = first_chat_writes(ollama, workspace, config)
    ollama.enqueue(
        reply(tool_calls=[tool_call("write_file", {"path": "todo.md", "content": "- a\n"})]),
        reply("Made the list."),
    )
    with chat(ollama, workspace, config) as second:
        second.send("make a list\r")
        second.expect("Made the list.")
        second.expect("›")  # the prompt is back: a line typed before it would wait there
        second.send("/undo\r")  # this chat's own change: no session named
        second.expect("/redo brings it back")
        own = said(second)
        assert "todo.md did not exist before change #2" in own
        assert "from" not in own.split("todo.md did not exist", 1)[1]
        second.expect("›")
        second.send("/undo\r")  # the first chat's change
        second.expect("/redo brings it back")
        assert "restored notes.txt as it was before change #1 (write_file, " in said(second)
        assert f"UTC, from session {name})" in said(second)
        second.expect("›")
        second.send("/exit\r")
        second.expect(pexpect.EOF)
    assert (workspace / "notes.txt").read_text() == "v1\n"
    assert not (workspace / "todo.md").exists()


def test_a_change_store_written_before_session_names_still_undoes_from_an_earlier_session(
    ollama: FakeOllama, workspace: Path, home: Path, tmp_path: Path
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("policy:\n  confirm: none\n")
    first_chat_writes(ollama, workspace, config)
    # The journal as the agent wrote it before session names were recorded.
    journal = home / CHANGES / "journal.jsonl"
    records = [json.loads(line) for line in journal.read_text().splitlines()]
    assert any(r.get("session_name") for r in records)
    for record in records:
        record.pop("session_name", None)
    journal.write_text("".join(json.dumps(r) + "\n" for r in records))
    (home / CHANGES / "journal.index").unlink(missing_ok=True)
    with chat(ollama, workspace, config) as second:
        second.send("/undo\r")
        second.expect("/redo brings it back")
        assert "restored notes.txt as it was before change #1" in said(second)
        assert "UTC, from an earlier session)" in said(second)
        second.expect("›")
        second.send("/exit\r")
        second.expect(pexpect.EOF)
    assert (workspace / "notes.txt").read_text() == "v1\n"


def test_undo_in_chat_names_the_agent_run_a_change_came_from(
    ollama: FakeOllama, workspace: Path, tmp_path: Path, run_cli: RunCli
) -> None:
    (workspace / "notes.txt").write_text("v1\n")
    ollama.enqueue(
        reply(tool_calls=[tool_call("write_file", {"path": "notes.txt", "content": "v2\n"})]),
        reply("done"),
    )
    assert run_cli("run", "--yes", "rewrite the notes").code == 0
    config = tmp_path / "config.yaml"
    config.write_text("policy:\n  confirm: none\n")
    with chat(ollama, workspace, config) as later:
        later.send("/undo\r")
        later.expect("/redo brings it back")
        assert re.search(r"UTC, from session run-[0-9_-]+\)", said(later))
        later.expect("›")
        later.send("/exit\r")
        later.expect(pexpect.EOF)
    assert (workspace / "notes.txt").read_text() == "v1\n"
