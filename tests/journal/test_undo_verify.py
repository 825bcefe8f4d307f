"""Verify before restore (issue 19): an undo or a redo checks each backup it would restore
against its record (the size measured when it was kept and, for an overwrite's blob, its
sha256) before it writes anything; a whole turn's backups are all checked before the first is
used. A missing or damaged backup is a one-line refusal naming the change, the backup and what
is wrong, and nothing is written. Stores written before `kept_sha256` existed still undo (by
size). Real files, the real CLI, the fake Ollama making the changes."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from cli.journal.changes import ChangeStore
from cli.journal.records import Change, sha256
from cli.journal.undo import UndoError, apply, plan
from tests.conftest import RunCli
from tests.fakes.fake_ollama import FakeOllama, reply, tool_call
from tests.journal.test_undo_stack import agent_writes, write

CHANGES = Path(".local/state/metona-agent/changes")
# A user's file of 2,690 bytes: the size the finding had.
PRECIOUS = b"".join(f"line {i:03} of what the user wrote\n".encode() for i in range(100))[:2690]


@pytest.fixture
def run_cli(run_cli_in_process: RunCli) -> RunCli:
    """`agent` in this process (conftest.run_in_process): no test here is about the process."""
    return run_cli_in_process


def snapshot(*roots: Path) -> dict[str, tuple[str, bytes]]:
    """Every entry under `roots` (the workspace, the change store): what it is and what it
    holds, to compare byte for byte before and after a refused undo."""
    seen: dict[str, tuple[str, bytes]] = {}
    for root in roots:
        for directory, dirs, files in os.walk(root):
            for name in dirs + files:
                path = Path(directory) / name
                if path.is_symlink():
                    seen[str(path)] = ("link", os.readlink(path).encode())
                elif path.is_dir():
                    seen[str(path)] = ("dir", b"")
                else:
                    seen[str(path)] = ("file", path.read_bytes())
    return seen


def store_of(home: Path) -> ChangeStore:
    return ChangeStore(home / CHANGES)


def backup_of(home: Path, number: int) -> Path:
    change = store_of(home).get(number)
    assert change is not None and change.backup is not None
    return home / CHANGES / change.backup


def refused(run_cli: RunCli, home: Path, *args: str) -> str:
    """Run `agent ARGS`; expect the one-line refusal (exit 1, no traceback) and nothing
    written: the workspace and the change store the same, byte for byte. Its text."""
    roots = (Path.cwd(), home / CHANGES)
    before = snapshot(*roots)
    r = run_cli(*args)
    assert r.code == 1, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    errors = [line for line in r.stderr.splitlines() if line.startswith("agent: ")]
    assert len(errors) == 1, r.stderr
    assert snapshot(*roots) == before
    return errors[0]


def overwritten_notes(run_cli: RunCli, ollama: FakeOllama, workspace: Path) -> Path:
    """Change #1: the model rewrites notes.txt (PRECIOUS) as "the model's version\n"."""
    notes = workspace / "notes.txt"
    notes.write_bytes(PRECIOUS)
    agent_writes(run_cli, ollama, write("notes.txt", "the model's version\n"))
    return notes


NAMES = ("a.txt", "b.txt", "c.txt")


def three_overwrites_in_one_turn(run_cli: RunCli, ollama: FakeOllama, workspace: Path) -> None:
    """Changes #1, #2, #3: the model rewrites a.txt, b.txt and c.txt ("A\n"…) in one turn."""
    for name in NAMES:
        (workspace / name).write_text(f"{name}, as the user left it\n")
    agent_writes(run_cli, ollama, *(write(n, n[0].upper() + "\n") for n in NAMES))


# -- the findings ------------------------------------------------------------------------------


def test_undo_refuses_a_truncated_backup_and_writes_nothing(
    run_cli: RunCli, ollama: FakeOllama, workspace: Path, home: Path
) -> None:
    notes = overwritten_notes(run_cli, ollama, workspace)  # #1
    blob = backup_of(home, 1)
    assert blob.read_bytes() == PRECIOUS
    blob.write_bytes(PRECIOUS[:37])  # truncated by hand

    error = refused(run_cli, home, "undo")
    assert "change #1 cannot be undone" in error
    assert str(blob) in error
    assert "is 37 bytes, the record says 2,690: it was damaged; nothing was undone" in error
    assert "restored" not in error
    assert notes.read_text() == "the model's version\n"


def test_undo_turn_with_a_missing_backup_checks_them_all_and_does_nothing(
    run_cli: RunCli, ollama: FakeOllama, workspace: Path, home: Path
) -> None:
    three_overwrites_in_one_turn(run_cli, ollama, workspace)
    middle = backup_of(home, 2)
    middle.unlink()

    error = refused(run_cli, home, "undo", "--turn")
    assert "change #2 cannot be undone" in error
    assert f"its backup {middle} is missing" in error
    assert "nothing of the turn was undone" in error
    assert "stopped after" not in error
    assert [(workspace / n).read_text() for n in NAMES] == ["A\n", "B\n", "C\n"]
    # The others can still be taken back one at a time, as the error says.
    assert run_cli("undo", "3").code == 0
    assert (workspace / "c.txt").read_text() == "c.txt, as the user left it\n"


# -- what else is checked --------------------------------------------------------------------


def test_a_blob_with_one_byte_flipped_is_refused_by_its_hash(
    run_cli: RunCli, ollama: FakeOllama, workspace: Path, home: Path
) -> None:
    overwritten_notes(run_cli, ollama, workspace)
    blob = backup_of(home, 1)
    assert store_of(home).get(1).kept_sha256 == sha256(PRECIOUS)  # type: ignore[union-attr]
    damaged = bytearray(PRECIOUS)
    damaged[1000] ^= 0x01
    blob.write_bytes(bytes(damaged))  # the same size

    error = refused(run_cli, home, "undo")
    assert "change #1 cannot be undone" in error and str(blob) in error
    assert "sha256" in error and "it was damaged; nothing was undone" in error


def test_a_trashed_file_whose_size_changed_is_refused(
    run_cli: RunCli, ollama: FakeOllama, workspace: Path, home: Path
) -> None:
    (workspace / "old.txt").write_bytes(PRECIOUS)
    (workspace / "c.yaml").write_text("policy: {tools: {delete_file: allow}}\n")
    ollama.enqueue(reply(tool_calls=[tool_call("delete_file", {"path": "old.txt"})]), reply("ok"))
    assert run_cli("run", "-c", "c.yaml", "delete it").code == 0
    trashed = backup_of(home, 1)
    assert trashed.read_bytes() == PRECIOUS and store_of(home).get(1).kept == 2690  # type: ignore[union-attr]
    with trashed.open("ab") as grown:
        grown.write(b"appended in the trash\n")

    error = refused(run_cli, home, "undo")
    assert "change #1 cannot be undone" in error and str(trashed) in error
    assert "is 2,712 bytes, the record says 2,690: it was damaged; nothing was undone" in error
    assert not (workspace / "old.txt").exists()


def test_a_trashed_tree_missing_a_file_is_refused(
    run_cli: RunCli, ollama: FakeOllama, workspace: Path, home: Path
) -> None:
    (workspace / "build" / "sub").mkdir(parents=True)
    (workspace / "build" / "sub" / "a.o").write_bytes(b"\x00" * 500)
    (workspace / "build" / "b.o").write_bytes(b"\x01" * 300)
    (workspace / "c.yaml").write_text("policy: {tools: {delete_file: allow}}\n")
    call = tool_call("delete_file", {"path": "build", "recursive": True})
    ollama.enqueue(reply(tool_calls=[call]), reply("ok"))
    assert run_cli("run", "-c", "c.yaml", "delete it").code == 0
    tree = backup_of(home, 1)
    (tree / "sub" / "a.o").unlink()

    error = refused(run_cli, home, "undo")
    assert "is 300 bytes, the record says 800: it was damaged; nothing was undone" in error


def test_a_redo_whose_backup_is_damaged_is_refused(
    run_cli: RunCli, ollama: FakeOllama, workspace: Path, home: Path
) -> None:
    notes = overwritten_notes(run_cli, ollama, workspace)  # #1
    assert run_cli("undo").code == 0  # #2 keeps the model's version, for a redo
    assert notes.read_bytes() == PRECIOUS
    kept = backup_of(home, 2)
    assert kept.read_text() == "the model's version\n"
    kept.write_text("the model's versioN\n")  # the same size, one byte changed

    error = refused(run_cli, home, "redo")
    assert "change #1 cannot be redone" in error and str(kept) in error
    assert "it was damaged; nothing was redone" in error
    assert notes.read_bytes() == PRECIOUS


def test_a_redo_of_a_turn_checks_every_backup_first(
    run_cli: RunCli, ollama: FakeOllama, workspace: Path, home: Path
) -> None:
    three_overwrites_in_one_turn(run_cli, ollama, workspace)
    assert run_cli("undo", "--turn").code == 0  # #4, #5, #6 undo #3, #2, #1
    assert backup_of(home, 6).read_text() == "A\n"
    backup_of(home, 6).write_text("")  # the last the redo would restore

    error = refused(run_cli, home, "redo")
    assert "is 0 bytes, the record says 2: it was damaged; nothing was redone" in error


def test_undo_all_checks_the_backup_too(
    run_cli: RunCli, ollama: FakeOllama, workspace: Path, home: Path
) -> None:
    (workspace / "sub").mkdir()
    (workspace / "sub" / "notes.txt").write_bytes(PRECIOUS)
    agent_writes(run_cli, ollama, write("notes.txt", "new\n"), cwd=workspace / "sub")
    backup_of(home, 1).unlink()
    error = refused(run_cli, home, "undo", "--all")
    assert "change #1 cannot be undone" in error and "is missing" in error


# -- stores written before kept_sha256 ---------------------------------------------------------


def old_overwrite(home: Path, path: Path, content: bytes, after: bytes, **extra: object) -> Path:
    """A journal line exactly as the code before kept_sha256 (09e58fa) wrote one for an
    overwrite, and its blob: the keys in that order, no kept_sha256."""
    root = home / CHANGES
    (root / "blobs").mkdir(parents=True, exist_ok=True)
    blob = root / "blobs" / "1796184882182-0531890d"
    blob.write_bytes(content)
    record: dict[str, object] = {
        "tool": "write_file", "action": "overwrite", "path": str(path), "kind": "file",
        "size": len(after), "mode": 420, "backup": "blobs/1796184882182-0531890d",
        "after": sha256(after), "undoes": None, "origin": None, "id": 1,
        "time": "2026-12-02T04:14:42+00:00", "session": "6001-bcb7a690", "turn": "",
        "kept": len(content),
    }  # fmt: skip
    record.update(extra)
    record = {k: v for k, v in record.items() if v is not ...}
    with (root / "journal.jsonl").open("a") as journal:
        journal.write(json.dumps(record) + "\n")
    return blob


def test_a_store_from_before_kept_sha256_still_undoes_and_redoes(
    run_cli: RunCli, workspace: Path, home: Path
) -> None:
    notes = workspace / "notes.txt"
    notes.write_text("new\n")
    old_overwrite(home, notes, PRECIOUS, b"new\n")
    assert store_of(home).get(1).kept_sha256 is None  # type: ignore[union-attr]
    undone = run_cli("undo")
    assert undone.code == 0, undone.stderr
    assert notes.read_bytes() == PRECIOUS
    # Nothing alarming about the hash it does not have: checked by size, silently.
    assert "sha256" not in undone.stderr and "warning" not in undone.stderr.lower()
    assert "restored notes.txt" in undone.stderr
    redone = run_cli("redo")  # the undo was recorded by today's code: with its sha256
    assert redone.code == 0, redone.stderr
    assert notes.read_text() == "new\n"


def test_a_store_from_before_kept_sha256_is_still_checked_by_size(
    run_cli: RunCli, workspace: Path, home: Path
) -> None:
    notes = workspace / "notes.txt"
    notes.write_text("new\n")
    blob = old_overwrite(home, notes, PRECIOUS, b"new\n")
    assert store_of(home).get(1).kept == 2690  # type: ignore[union-attr]
    blob.write_bytes(PRECIOUS[:37])
    error = refused(run_cli, home, "undo")
    assert "is 37 bytes, the record says 2,690: it was damaged; nothing was undone" in error


def test_a_record_from_before_kept_is_checked_for_its_backup_only(
    run_cli: RunCli, workspace: Path, home: Path
) -> None:
    # Older still (before `kept`): nothing to compare with, so only that the backup is there.
    notes = workspace / "notes.txt"
    notes.write_text("new\n")
    blob = old_overwrite(home, notes, PRECIOUS, b"new\n", kept=...)
    assert store_of(home).get(1).kept is None  # type: ignore[union-attr]
    blob.unlink()
    error = refused(run_cli, home, "undo")
    assert "is missing" in error and "nothing was undone" in error
    assert notes.read_text() == "new\n"
    blob.write_bytes(PRECIOUS)
    assert run_cli("undo").code == 0
    assert notes.read_bytes() == PRECIOUS


def test_a_blob_damaged_after_the_check_is_not_written(tmp_path: Path) -> None:
    # Between the check before the step and the write (the window a turn's earlier changes
    # take), the bytes actually read are checked again: what is written is what was kept.
    target = tmp_path / "f.txt"
    target.write_text("the model's\n")
    store = ChangeStore(tmp_path / "store")
    first = store.record(
        Change(
            "write_file", "overwrite", str(target), backup=store.keep(PRECIOUS),
            after=sha256(b"the model's\n"), kept_sha256=sha256(PRECIOUS),
        )
    )  # fmt: skip
    checked = plan(store, first.id)
    (store.root / str(first.backup)).write_bytes(PRECIOUS[:37])
    with pytest.raises(UndoError, match=r"is 37 bytes, the record says 2,690: it was damaged"):
        apply(store, checked)
    assert target.read_text() == "the model's\n"
    assert [c.id for c in store.history()] == [1]
