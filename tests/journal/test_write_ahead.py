"""Findings of a data-loss hour (issue 19), each replayed on the installed `agent`: a change done
but never recorded, an id given twice, two writers with one survivor. The sweeps of every kill
point and every fill level are in test_crash_sweep.py and test_full_disk.py."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import RunCli
from tests.fakes.fake_ollama import FakeOllama, reply, tool_call

STRACE = shutil.which("strace")
needs_strace = pytest.mark.skipif(
    STRACE is None and os.environ.get("METONA_STRACE_REQUIRED") != "1",
    reason="needs strace (syscall injection); .ci/run installs it",
)
CHANGES = Path(".local/state/metona-agent/changes")
OLD, NEW = "the content a person wrote\n", "what the model wrote\n"


@pytest.fixture
def run_cli(run_cli_in_process: RunCli) -> RunCli:
    """`agent` in this process (conftest.run_in_process): no test here is about the process."""
    return run_cli_in_process


def history(run_cli: RunCli) -> list[dict[str, Any]]:
    done = run_cli("history", "--json")
    return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]


def live(records: list[dict[str, Any]], path: Path) -> list[dict[str, Any]]:
    undone = {r["undoes"] for r in records if r.get("undoes")}
    return [r for r in records if r["path"] == str(path) and r["id"] not in undone]


def agent_argv(*args: str, strace: list[str] | None = None) -> list[str]:
    argv = [sys.executable, "-m", "cli", *args]
    return [STRACE or "strace", "-f", "-qq", "-o", "/dev/null", *strace, *argv] if strace else argv


def env_for(ollama: FakeOllama) -> dict[str, str]:
    return {**os.environ, "OLLAMA_HOST": ollama.url}


# -- a change done but never recorded --------------------------------------------------------------


@needs_strace
@pytest.mark.parametrize("sig", ["SIGKILL", "SIGTERM", "SIGINT"])
def test_a_signal_after_the_rename_leaves_the_change_recorded(
    run_cli: RunCli, ollama: FakeOllama, workspace: Path, home: Path, sig: str
) -> None:
    """On main a signal between an overwrite's rename and its journal record (strace
    `inject=flock:signal=…:when=2`) left the model's text in the file, `agent history` empty
    and `agent undo` saying "nothing to undo". Recorded first now: whatever the signal, the
    file is unchanged, or changed and undone."""
    target = workspace / "notes.txt"
    target.write_text(OLD)
    ollama.enqueue(
        reply(tool_calls=[tool_call("write_file", {"path": "notes.txt", "content": NEW})]),
        reply("done"),
    )
    inject = ["-e", "trace=flock", "-e", f"inject=flock:signal={sig}:when=2"]
    killed = subprocess.run(
        agent_argv("run", "--yes", "go", strace=inject),
        cwd=workspace,
        env=env_for(ollama),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert killed.returncode != 0, killed.stderr
    records = history(run_cli)
    if target.read_text() == OLD:
        assert live(records, target) == [], records
    else:
        assert target.read_text() == NEW and live(records, target), records
        undone = run_cli("undo", "--yes")
        assert undone.code == 0, undone.stderr
        assert target.read_text() == OLD
    assert "Traceback" not in killed.stderr


def test_a_turn_killed_at_a_random_moment_records_every_file_it_changed(
    ollama: FakeOllama, workspace: Path, home: Path, run_cli: RunCli
) -> None:
    """Unpinned signals during a 30-file turn once left 6 files changed and 5 recorded: every
    file that holds the model's text is named by history, and one `agent undo --turn` brings
    every one back."""
    rng = random.Random(19)
    names = [f"f{n:02}.txt" for n in range(30)]
    for attempt in range(3):
        for name in names:
            (workspace / name).write_text(OLD)
        calls = [tool_call("write_file", {"path": n, "content": NEW}) for n in names]
        ollama.forget()
        ollama.enqueue(reply(tool_calls=calls), reply("done"))
        agent = subprocess.Popen(
            agent_argv("run", "--yes", "go"),
            cwd=workspace,
            env=env_for(ollama),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        # Wait for the first write, then kill at a random moment of the rest.
        deadline = time.monotonic() + 60
        while all((workspace / n).read_text() == OLD for n in names):
            assert time.monotonic() < deadline and agent.poll() is None, "no write began"
            time.sleep(0.005)
        time.sleep(rng.uniform(0, 0.05))
        agent.send_signal(signal.SIGKILL)
        agent.wait()
        records = history(run_cli)
        changed = [n for n in names if (workspace / n).read_text() == NEW]
        assert changed, attempt
        for name in changed:
            assert live(records, workspace / name), (attempt, name, "changed, not recorded")
        undone = run_cli("undo", "--turn", "--yes")
        assert undone.code == 0, (attempt, undone.stderr)
        assert all((workspace / n).read_text() == OLD for n in names), attempt
        assert not list(workspace.glob(".metona-tmp.*"))


# -- an id given twice -------------------------------------------------------------------------


def test_an_index_that_disagrees_with_the_journal_does_not_give_an_id_twice(
    run_cli: RunCli, ollama: FakeOllama, workspace: Path, home: Path
) -> None:
    """journal.index with `last_id` edited to 0: the next change got id 1 again and the old
    #1 vanished from history. Ids come from the journal's own last lines."""
    for name, content in (("a.txt", "one\n"), ("b.txt", "two\n")):
        (workspace / name).write_text("before\n")
        ollama.enqueue(
            reply(tool_calls=[tool_call("write_file", {"path": name, "content": content})]),
            reply("done"),
        )
        assert run_cli("run", "--yes", "go").code == 0
        if name == "a.txt":
            index = home / CHANGES / "journal.index"
            summary = json.loads(index.read_text())
            summary["last_id"] = 0
            index.write_text(json.dumps(summary))
    records = history(run_cli)
    assert [r["id"] for r in records] == [1, 2]
    assert [Path(r["path"]).name for r in records] == ["a.txt", "b.txt"]


# -- two writers, one survivor -------------------------------------------------------------------


def _edit_run(line: str, new: str, path: str = "big.txt") -> list[Any]:
    return [
        reply(tool_calls=[tool_call("read_file", {"path": path})]),
        reply(
            tool_calls=[
                tool_call("edit_file", {"path": path, "old_string": line, "new_string": new})
            ]
        ),
        reply("done"),
    ]


# How long strace holds the first agent's rename, in µs: the second must read the file before
# it ends. On a loaded machine the second may start too late; then both edits land (nothing
# is lost either way, which is checked) and the attempt is made again with a longer hold.
HOLDS = (2_000_000, 8_000_000, 30_000_000)


@needs_strace
def test_two_agents_editing_one_file_one_succeeds_and_the_other_gets_the_conflict(
    run_cli: RunCli, workspace: Path, home: Path
) -> None:
    """Two `agent run --yes` editing different lines of one 860 KB file at once: on main both
    said they succeeded and one edit was in neither the file nor any backup. The first here is
    held inside its change (strace delays its rename) while the second reads and edits: the
    second's last look finds the first's save and reports a conflict; nothing is lost."""
    lines = [f"line {n:06} " + "x" * 80 + "\n" for n in range(9500)]
    for attempt, hold in enumerate(HOLDS):
        name = f"big{attempt}.txt"
        (workspace / name).write_text("".join(lines))
        results = _two_agents_at_once(workspace, home, name, hold)
        text = (workspace / name).read_text()
        if results[1]["success"] is True:  # the second read after the first's save: both
            assert "LINE 000010 " in text and "LINE 009000 " in text, results
            continue
        break
    else:
        pytest.fail("the second agent never read the file while the first held its change")
    assert results[0]["success"] is True, results
    assert results[1]["success"] is False and "changed on disk" in results[1]["error"], results
    assert "LINE 000010 " in text and "LINE 009000 " not in text
    records = history(run_cli)
    assert len(live(records, workspace / name)) == 1, records


def _two_agents_at_once(workspace: Path, home: Path, name: str, hold: int) -> list[Any]:
    """The edit_file results of two runs, the first held `hold` µs inside its rename."""
    first, second = FakeOllama().start(), FakeOllama().start()
    try:
        first.enqueue(*_edit_run("line 000010 ", "LINE 000010 ", name))
        second.enqueue(*_edit_run("line 009000 ", "LINE 009000 ", name))
        slow = ["-e", "trace=renameat,rename", "-e", f"inject=renameat:delay_enter={hold}"]
        one = subprocess.Popen(
            agent_argv("run", "--yes", "--json", "go", strace=slow),
            cwd=workspace,
            env=env_for(first),
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        pending = home / CHANGES / "pending"
        deadline = time.monotonic() + 60
        while not (pending.is_dir() and any(p.suffix == ".change" for p in pending.iterdir())):
            assert time.monotonic() < deadline and one.poll() is None, "the first never began"
            time.sleep(0.005)
        two = subprocess.run(
            agent_argv("run", "--yes", "--json", "go"),
            cwd=workspace,
            env=env_for(second),
            capture_output=True,
            text=True,
            timeout=120,
        )
        out_one, _ = one.communicate(timeout=120)
    finally:
        first.stop()
        second.stop()
    return [
        next(c["result"] for c in json.loads(out)["tool_calls"] if c["name"] == "edit_file")
        for out in (out_one, two.stdout)
    ]


@needs_strace
def test_a_save_by_a_person_while_the_write_is_in_flight_is_not_overwritten(
    ollama: FakeOllama, workspace: Path, home: Path, run_cli: RunCli
) -> None:
    """The user saved while the agent's write waited on its temp file's fsync: on main the
    user's line was overwritten without a conflict and was in no backup. The agent's write is
    held (strace delays its lock) while the person saves: its last look refuses."""
    target = workspace / "draft.txt"
    target.write_text(OLD)
    ollama.enqueue(
        reply(tool_calls=[tool_call("write_file", {"path": "draft.txt", "content": NEW})]),
        reply("done"),
    )
    # The second flock of a run is the change's own (the store's lock around the rename).
    slow = ["-e", "trace=flock", "-e", "inject=flock:delay_enter=3000000:when=2"]
    agent = subprocess.Popen(
        agent_argv("run", "--yes", "--json", "go", strace=slow),
        cwd=workspace,
        env=env_for(ollama),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    deadline = time.monotonic() + 60
    while not list(workspace.glob(".metona-tmp.*")):
        assert time.monotonic() < deadline and agent.poll() is None, "the write never began"
        time.sleep(0.005)
    saved = "the person's own save\n"
    target.write_text(saved)  # in place, as an editor that does not rename would
    out, _ = agent.communicate(timeout=120)
    result = json.loads(out)["tool_calls"][0]["result"]
    assert result["success"] is False and "changed on disk" in result["error"], result
    assert target.read_text() == saved
    assert live(history(run_cli), target) == []
