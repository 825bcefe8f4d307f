"""State written by an earlier release still works after an upgrade: its change store undoes
and redoes, its audit chain verifies (and goes on), its saved chat resumes.

tests/fixtures/store-fda2659.tar.gz was written by commit fda2659 (the last commit before the
package was reorganised into layers) with tests/fixtures/make_old_store.py: one `agent run
--yes` that edited, wrote, made a directory, moved and deleted, then one turn of `agent chat`.
The journal and the audit log name files by absolute path, so the state is unpacked where it
was made (a fixed path under /tmp, one test at a time)."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakes.context import typed
from tests.fakes.fake_ollama import FakeOllama, reply, tool_call
from tests.fixtures.make_old_store import ROOT
from tests.pty.driver import Ttys

TARBALL = Path(__file__).parent.parent / "fixtures" / "store-fda2659.tar.gz"


@pytest.fixture
def old_state() -> Iterator[Path]:
    with open(f"{ROOT}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another run of this test waits for the path
        shutil.rmtree(ROOT, ignore_errors=True)
        with tarfile.open(TARBALL) as tar:
            tar.extractall(ROOT.parent, filter="data")
        try:
            yield ROOT
        finally:
            shutil.rmtree(ROOT, ignore_errors=True)


def env_of(root: Path, server: FakeOllama) -> dict[str, str]:
    home = root / "home"
    return {
        **os.environ,
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_STATE_HOME": str(home / ".local/state"),
        "XDG_DATA_HOME": str(home / ".local/share"),
        "OLLAMA_HOST": server.url,
    }


def agent(root: Path, server: FakeOllama, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cli", *args],
        cwd=root / "project",
        env=env_of(root, server),
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )


def test_a_store_written_by_the_release_before_undoes_redoes_and_verifies(
    old_state: Path, ollama: FakeOllama
) -> None:
    project = old_state / "project"
    verified = agent(old_state, ollama, "audit", "verify")
    assert verified.returncode == 0, verified.stderr
    assert "6 records, chain intact" in verified.stdout

    history = agent(old_state, ollama, "history", "--json")
    assert history.returncode == 0, history.stderr
    tools = [json.loads(line)["tool"] for line in history.stdout.splitlines()]
    assert sorted(tools) == sorted(
        ["edit_file", "write_file", "create_directory", "move_file", "delete_file"]
    )

    undone = agent(old_state, ollama, "undo", "--turn", "-y")
    assert undone.returncode == 0, undone.stdout + undone.stderr
    assert (project / "notes.txt").read_text() == "first line\nsecond line\n"
    assert (project / "old.txt").read_text() == "to be moved\n"
    assert (project / "gone.txt").read_text() == "to be deleted\n"
    assert not (project / "new.txt").exists()
    assert not (project / "made").exists()

    redone = agent(old_state, ollama, "redo", "-y")
    assert redone.returncode == 0, redone.stdout + redone.stderr
    assert (project / "notes.txt").read_text() == "first line\n2nd line\n"

    # The chain goes on from the old records: a new call's record joins it, still intact.
    ollama.enqueue(
        reply(tool_calls=[tool_call("write_file", {"path": "more.txt", "content": "x\n"})]),
        reply("Written."),
    )
    ran = agent(old_state, ollama, "run", "--yes", "-m", "qwen3:8b", "one more file")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    again = agent(old_state, ollama, "audit", "verify")
    assert again.returncode == 0, again.stderr
    assert "7 records, chain intact" in again.stdout


def test_a_chat_saved_by_the_release_before_resumes_with_its_history(
    old_state: Path, ollama: FakeOllama, ttys: Ttys
) -> None:
    listed = agent(old_state, ollama, "sessions", "--json")
    assert listed.returncode == 0, listed.stderr
    [session] = json.loads(listed.stdout)
    assert session["kind"] == "chat" and session["turns"] == 1

    ollama.enqueue(reply("Still here."))
    chat = ttys.chat(
        "--resume", session["name"], host=ollama.url, cwd=old_state / "project", cols=110,
        env=env_of(old_state, ollama), timeout=30,
    )  # fmt: skip
    chat.say("and again", then="Still here")
    chat.quit()
    [body] = ollama.chat_bodies
    said = [typed(m["content"]) for m in body["messages"] if m["role"] in ("user", "assistant")]
    assert said == ["say hello", "Hello from the saved chat.", "and again"]
