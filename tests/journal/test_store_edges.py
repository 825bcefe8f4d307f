"""Nothing lost at the backup store's edges (issue 7): a change whose old content cannot be kept
needs a person, eviction never drops a backup of the running session, never crosses a mount
point or follows a link, and trees of any depth are measured, moved, copied and removed
without a RecursionError, `agent undo` of them included.

Real files in temp dirs, the real `agent` program where a user would see the output, a real
bind mount where one is needed (we run as root; skipped with the reason otherwise).
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pexpect
import pytest

from cli.fs import _platform, reach
from cli.journal.changes import ChangeStore
from cli.journal.records import Change
from tests.conftest import MakeAgent, MakeChat, RunCli
from tests.fakes.fake_ollama import FakeOllama, reply, tool_call

CHANGES = Path(".local/state/metona-agent/changes")
DEPTH = 2000  # levels: twice Python's default recursion limit


@pytest.fixture
def run_cli(run_cli_in_process: RunCli) -> RunCli:
    """`agent` in this process (conftest.run_in_process): no test here is about the process."""
    return run_cli_in_process


# -- helpers -------------------------------------------------------------------------------------


def make_deep(top: Path, depth: int, leaf: bytes | None = None) -> None:
    """`top/d/d/…/d` with `depth` directories below top (top itself created too), made
    through dir fds: the absolute path of the deepest is longer than PATH_MAX."""
    top.mkdir()
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(depth):
            os.mkdir("d", dir_fd=fd)
            child = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = child
        if leaf is not None:
            out = os.open("leaf.txt", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
            os.write(out, leaf)
            os.close(out)
    finally:
        os.close(fd)


def depth_of(top: Path) -> tuple[int, bytes | None]:
    """How many `d` levels are below top, and the content of leaf.txt at the bottom."""
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    levels = 0
    try:
        while True:
            try:
                child = os.open("d", os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            except FileNotFoundError:
                break
            os.close(fd)
            fd = child
            levels += 1
        try:
            leaf = os.open("leaf.txt", os.O_RDONLY, dir_fd=fd)
        except FileNotFoundError:
            return levels, None
        try:
            return levels, os.read(leaf, 1 << 16)
        finally:
            os.close(leaf)
    finally:
        os.close(fd)


def remove_deep(top: Path) -> None:
    """Remove a tree deeper than rmtree can go (pytest's clean-up cannot): move each level's
    children up, one level per round. Independent of the code under test."""
    if not top.is_dir() or top.is_symlink():
        return
    counter = itertools.count()
    while True:
        with os.scandir(top) as listing:
            entries = list(listing)
        if not entries:
            break
        for entry in entries:
            path = Path(entry.path)
            if not entry.is_dir(follow_symlinks=False):
                path.unlink()
                continue
            with os.scandir(path) as listing:
                children = list(listing)
            for child in children:
                os.rename(child.path, top / f"up{next(counter)}")
            path.rmdir()
    top.rmdir()


def clean_store(home: Path) -> None:
    trash = home / CHANGES / "trash"
    if trash.is_dir():
        for slot in trash.iterdir():
            remove_deep(slot)


def no_traceback(text: str) -> bool:
    return "Traceback" not in text and "RecursionError" not in text


def tool_results(ollama: FakeOllama) -> list[dict[str, object]]:
    messages = ollama.chat_bodies[-1]["messages"]
    return [json.loads(m["content"]) for m in messages if m["role"] == "tool"]


def spawn(ollama: FakeOllama, workspace: Path, *args: str) -> pexpect.spawn:
    env = {**os.environ, "OLLAMA_HOST": ollama.url, "TERM": "dumb"}
    return pexpect.spawn(
        sys.executable, ["-m", "cli", *args], cwd=str(workspace), env=env,
        encoding="utf-8", timeout=30, dimensions=(50, 200),
    )  # fmt: skip


def mount_points() -> list[str]:
    """Every mount point, from /proc/self/mountinfo (os.path.ismount cannot tell a bind
    mount of the same file system: the same device on both sides)."""
    points = []
    with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as table:
        for line in table:
            where = line.split()[4]
            for code in ("\\040", "\\011", "\\012", "\\134"):
                where = where.replace(code, chr(int(code[1:], 8)))
            points.append(where)
    return points


def mounted(point: Path) -> bool:
    return os.path.realpath(point) in mount_points()


@pytest.fixture
def bind_mount(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Path]]:
    """Bind mounts made by the test. Afterwards every mount below pytest's temp dir that was
    not there before is unmounted (lazily if busy), wherever a move may have taken it."""
    base = str(tmp_path_factory.getbasetemp().resolve())
    before = set(mount_points())
    mounts: list[Path] = []
    yield mounts
    for _ in range(5):
        left = [p for p in mount_points() if p not in before and p.startswith(base + "/")]
        if not left:
            break
        for point in reversed(left):
            if subprocess.run(["umount", point], capture_output=True).returncode != 0:
                subprocess.run(["umount", "-l", point], capture_output=True)
    assert not [p for p in mount_points() if p not in before and p.startswith(base + "/")]


def mount_bind(mounts: list[Path], source: Path, point: Path) -> None:
    fd = os.open(source, os.O_RDONLY | os.O_DIRECTORY)
    try:
        if _platform.mount_id(fd) is None:
            pytest.skip(
                f"the platform layer ({_platform.NAME}) tells mounts by st_dev alone, which "
                "cannot see a bind mount of the same file system (Linux reads mnt_id)"
            )
    finally:
        os.close(fd)
    done = subprocess.run(["mount", "--bind", str(source), str(point)], capture_output=True)
    if done.returncode != 0:
        reason = done.stderr.decode(errors="replace").strip() or f"exit {done.returncode}"
        pytest.skip(f"needs a bind mount (root, mount permitted): mount --bind failed: {reason}")
    mounts.append(point)


def second_file_system(workspace: Path) -> Path:
    shm = Path("/dev/shm")
    if not shm.is_dir() or shm.stat().st_dev == workspace.stat().st_dev:
        pytest.skip("needs a second file system (/dev/shm) for the state dir")
    return shm / f"metona-edges-{os.getpid()}-{os.urandom(3).hex()}"


# -- a backup too big for the store ----------------------------------------------------------------

BIG = b"precious line of the user's data\n" * 200  # 6.6 KB
LIMIT_YAML = "policy:\n  limits: {max_backup_bytes: 1000}\n"


@pytest.mark.pty
def test_attack_data_loss_at_store_edges_too_big_backup(
    run_cli: RunCli, ollama: FakeOllama, workspace: Path
) -> None:
    (workspace / "c.yaml").write_text(LIMIT_YAML)
    big = workspace / "big.txt"
    big.write_bytes(BIG)
    write = tool_call("write_file", {"path": "big.txt", "content": "replaced\n"})

    # Under --yes, no terminal: refused, and the model reads why.
    ollama.enqueue(reply(tool_calls=[write]), reply("could not"))
    r = run_cli("run", "--yes", "--json", "-c", "c.yaml", "rewrite big.txt")
    assert r.code == 0, r.stderr
    assert big.read_bytes() == BIG
    call = json.loads(r.stdout)["tool_calls"][0]
    assert call["decision"] == "deny"
    error = call["result"]["error"]
    assert "needs a person's confirmation" in error and "policy.unattended never covers" in error
    assert "larger than policy.limits.max_backup_bytes" in error
    assert "cannot be undone" in error
    assert "cannot be undone" in tool_results(ollama)[0]["error"]
    assert run_cli("history").stderr.strip() == "no changes recorded yet"

    # A person on the terminal (even with --yes given) is asked, told, and may say yes.
    ollama.enqueue(reply(tool_calls=[write]), reply("rewrote it"))
    child = spawn(ollama, workspace, "run", "--yes", "-c", "c.yaml", "rewrite big.txt")
    child.expect("waiting for confirmation")
    child.expect("larger than policy.limits.max_backup_bytes")
    child.expect("cannot be undone")
    child.expect(r"Allow\? \[y/N\] ")
    child.sendline("y")
    child.expect("rewrote it")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    assert big.read_text() == "replaced\n"
    result = tool_results(ollama)[0]
    assert result["success"] is True and "cannot be undone" in str(result["note"])
    history = run_cli("history").stdout
    assert "overwrite" in history and "cannot be undone" in history
    undo = run_cli("undo")
    assert undo.code == 1 and "cannot be undone" in undo.stderr and no_traceback(undo.stderr)


def test_store_edges_tools_allow_and_no_terminal_still_need_a_person(
    run_cli: RunCli, ollama: FakeOllama, workspace: Path
) -> None:
    (workspace / "c.yaml").write_text(
        "policy:\n  tools: {write_file: allow}\n  limits: {max_backup_bytes: 1000}\n"
    )
    (workspace / "big.txt").write_bytes(BIG)
    (workspace / "small.txt").write_text("small\n")
    ollama.enqueue(
        reply(
            tool_calls=[
                tool_call("write_file", {"path": "big.txt", "content": "x"}),
                tool_call("write_file", {"path": "small.txt", "content": "y"}),
            ]
        ),
        reply("ok"),
    )
    r = run_cli("run", "--json", "-c", "c.yaml", "rewrite both")
    calls = json.loads(r.stdout)["tool_calls"]
    assert [c["decision"] for c in calls] == ["deny", "allow"]
    assert "cannot be undone" in calls[0]["result"]["error"]
    assert (workspace / "big.txt").read_bytes() == BIG
    assert (workspace / "small.txt").read_text() == "y"  # what can be kept runs as before


def test_store_edges_chat_confirms_with_the_warning_and_no_always(
    make_chat: MakeChat, ollama: FakeOllama, workspace: Path
) -> None:
    (workspace / "big.txt").write_bytes(BIG)
    ollama.enqueue(
        reply(tool_calls=[tool_call("write_file", {"path": "small.txt", "content": "s\n"})]),
        reply(tool_calls=[tool_call("write_file", {"path": "big.txt", "content": "b\n"})]),
        reply("done"),
    )
    chat = make_chat(LIMIT_YAML)
    # "a" for the first write_file; the big one is still asked, and an "a" there is not
    # one of the keys offered (ignored): the "y" after it answers.
    assert chat.run("write both\r", "a", "a", "y") == 0
    text = chat.text
    assert "larger than policy.limits.max_backup_bytes" in text and "cannot be undone" in text
    assert text.count("runs without asking for the rest of this session") == 1
    assert text.count("waiting for confirmation") == 2
    assert (workspace / "big.txt").read_text() == "b\n"


def test_store_edges_a_file_that_grew_after_the_check_is_not_overwritten(
    make_agent: MakeAgent, ollama: FakeOllama, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    notes = workspace / "notes.txt"
    notes.write_text("short\n")
    grown = b"grown by someone else\n" * 100

    def grow(path: str) -> None:  # between the decision and the write (the race window)
        if path == str(notes):
            notes.write_bytes(grown)

    monkeypatch.setattr(reach, "before_use", grow)
    ollama.enqueue(
        reply(tool_calls=[tool_call("write_file", {"path": "notes.txt", "content": "new\n"})]),
        reply("ok"),
    )
    make_agent("policy: {confirm: none, limits: {max_backup_bytes: 1000}}\n").run("write")
    result = tool_results(ollama)[0]
    assert result["success"] is False and "not overwritten" in str(result["error"])
    assert notes.read_bytes() == grown


def test_store_edges_a_person_agrees_to_lose_only_the_file_they_were_shown(
    make_agent: MakeAgent, ollama: FakeOllama, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    big = workspace / "big.txt"
    big.write_bytes(BIG)
    other = BIG.replace(b"precious", b"PRECIOUS") + b"more\n"

    def swap(path: str) -> None:  # after the person said yes to losing BIG
        if path == str(big):
            big.write_bytes(other)

    monkeypatch.setattr(reach, "before_use", swap)
    ollama.enqueue(
        reply(tool_calls=[tool_call("write_file", {"path": "big.txt", "content": "x"})]),
        reply("ok"),
    )
    harness = make_agent(LIMIT_YAML, answers=[True])
    harness.run("write")
    [request] = harness.approver.requests
    assert request.decision.needs_human and not request.decision.standing_yes_ok
    assert any("cannot be undone" in w for w in request.decision.warnings)
    assert tool_results(ollama)[0]["success"] is False
    assert big.read_bytes() == other


# -- eviction within the running session ----------------------------------------------------------


def test_attack_data_loss_at_store_edges_same_run_eviction(
    run_cli: RunCli, ollama: FakeOllama, workspace: Path
) -> None:
    (workspace / "c.yaml").write_text("policy:\n  limits: {max_backup_bytes: 2500}\n")
    for i in range(5):
        (workspace / f"f{i}.txt").write_text(str(i) * 1000)
    calls = [
        tool_call("write_file", {"path": f"f{i}.txt", "content": f"new {i}\n"}, index=i)
        for i in range(5)
    ]
    ollama.enqueue(reply(tool_calls=calls), reply("done"))
    r = run_cli("run", "--yes", "--json", "-c", "c.yaml", "rewrite all five")
    assert r.code == 0, r.stderr
    results = [c["result"] for c in json.loads(r.stdout)["tool_calls"]]
    assert [res["success"] for res in results] == [True, True, False, False, False]
    for res in results[2:]:
        assert "takes the backup store over policy.limits.max_backup_bytes" in res["error"]
        assert "none of them is dropped" in res["error"]
    for i in range(2, 5):
        assert (workspace / f"f{i}.txt").read_text() == str(i) * 1000
    history = run_cli("history").stdout
    assert len(history.splitlines()) == 2 and "cannot be undone" not in history
    for number in ("2", "1"):
        undone = run_cli("undo", number)
        assert undone.code == 0, undone.stderr
    assert [(workspace / f"f{i}.txt").read_text() for i in range(2)] == ["0" * 1000, "1" * 1000]


def test_store_edges_a_person_lets_the_store_go_over_and_nothing_is_dropped(
    make_agent: MakeAgent, ollama: FakeOllama, workspace: Path
) -> None:
    for i in range(4):
        (workspace / f"f{i}.txt").write_text(str(i) * 1000)
    ollama.enqueue(
        reply(
            tool_calls=[
                tool_call("write_file", {"path": f"f{i}.txt", "content": "new"}, index=i)
                for i in range(4)
            ]
        ),
        reply("ok"),
    )
    harness = make_agent(
        "policy: {confirm: none, limits: {max_backup_bytes: 2500}}\n", answers=[True, True]
    )
    harness.run("rewrite")
    assert len(harness.approver.requests) == 2  # the 3rd and the 4th
    assert all(r.decision.rule == "backup_store_full" for r in harness.approver.requests)
    store = harness.agent.context.changes
    assert store is not None
    changes = store.history()
    assert [c.undoable for c in changes] == [True] * 4  # over the limit, nothing dropped
    # The next run is another session: the oldest of the earlier one's go first.
    (workspace / "g.txt").write_text("g" * 10)
    ollama.enqueue(
        reply(tool_calls=[tool_call("write_file", {"path": "g.txt", "content": "x"})]), reply("ok")
    )
    make_agent("policy: {confirm: none, limits: {max_backup_bytes: 2500}}\n").run("one more")
    assert [c.undoable for c in store.history()] == [False, False, True, True, True]


def test_store_edges_chat_session_keeps_its_backups_across_turns(
    make_chat: MakeChat, ollama: FakeOllama, workspace: Path
) -> None:
    for i in range(3):
        (workspace / f"f{i}.txt").write_text(str(i) * 1000)
        ollama.enqueue(
            reply(tool_calls=[tool_call("write_file", {"path": f"f{i}.txt", "content": "n"})]),
            reply(f"turn {i}"),
        )
    chat = make_chat("policy:\n  confirm: none\n  limits: {max_backup_bytes: 2500}\n")
    assert chat.run("one\r", "two\r", "three\r", "n", "\r") == 0
    assert "takes the backup store over" in chat.text
    assert (workspace / "f2.txt").read_text() == "2" * 1000  # declined: not written
    store = chat.session.agent.context.changes
    assert store is not None
    assert [c.undoable for c in store.history()] == [True, True]


# -- mounts and links in the store ---------------------------------------------------------------


def test_attack_data_loss_at_store_edges_bind_mount(
    run_cli: RunCli,
    ollama: FakeOllama,
    workspace: Path,
    home: Path,
    tmp_path_factory: pytest.TempPathFactory,
    bind_mount: list[Path],
) -> None:
    # Someone's photos, bind-mounted into a directory an earlier session's delete put in
    # the trash (a delete moves a directory with its mounts; so could a user's own mount).
    photos = tmp_path_factory.mktemp("photos")
    (photos / "holiday.jpg").write_bytes(b"\xff\xd8 photo " * 400)
    (photos / "album").mkdir()
    (photos / "album" / "more.jpg").write_bytes(b"\xff\xd8 more " * 400)
    earlier = ChangeStore(home / CHANGES)
    slot = earlier.trash_slot()
    project = slot / "project"
    (project / "mnt").mkdir(parents=True)
    (project / "build.log").write_bytes(b"x" * 3000)
    mount_bind(bind_mount, photos, project / "mnt")
    earlier.record(
        Change(
            "delete_file", "delete", str(workspace / "project"), kind="directory",
            backup=earlier.relative(project),
        )
    )  # fmt: skip
    before = sorted((p.relative_to(photos), p.read_bytes()) for p in photos.rglob("*.jpg"))

    # This run's change makes the store evict the earlier session's trash.
    (workspace / "c.yaml").write_text("policy:\n  limits: {max_backup_bytes: 2000}\n")
    ollama.enqueue(
        reply(tool_calls=[tool_call("write_file", {"path": "new.txt", "content": "hi\n"})]),
        reply("ok"),
    )
    r = run_cli("run", "--yes", "-c", "c.yaml", "write new.txt")
    assert r.code == 0, r.stderr
    assert sorted((p.relative_to(photos), p.read_bytes()) for p in photos.rglob("*.jpg")) == before
    assert not (project / "build.log").exists()  # the store's own files did go
    assert "cannot be undone" in run_cli("history").stdout.splitlines()[0]


def test_store_edges_size_accounting_does_not_count_a_mount_or_a_link(
    home: Path, tmp_path_factory: pytest.TempPathFactory, bind_mount: list[Path]
) -> None:
    # An earlier session's trash: 100 bytes of its own, a link to and a mount of 50 KB that
    # are not. Counted right, the store is under its 10 KB and nothing is evicted.
    big = tmp_path_factory.mktemp("big")
    (big / "blob").write_bytes(b"b" * 50_000)
    earlier = ChangeStore(home / CHANGES)
    slot = earlier.trash_slot()
    (slot / "tree" / "mnt").mkdir(parents=True)
    (slot / "tree" / "own.txt").write_bytes(b"o" * 100)
    (slot / "tree" / "link").symlink_to(big)
    mount_bind(bind_mount, big, slot / "tree" / "mnt")
    earlier.record(
        Change(
            "delete_file", "delete", "/x/tree", kind="directory",
            backup=earlier.relative(slot / "tree"),
        )
    )  # fmt: skip
    now = ChangeStore(home / CHANGES, max_bytes=10_000)
    now.record(Change("write_file", "overwrite", "/x/f", backup=now.keep(b"y" * 100)))
    assert [c.undoable for c in now.history()] == [True, True]
    assert (slot / "tree" / "own.txt").exists()
    assert (big / "blob").stat().st_size == 50_000


@pytest.mark.parametrize("trash", [True, False], ids=["trash", "no-trash"])
def test_store_edges_a_delete_never_empties_a_mount_inside_the_tree(
    run_cli: RunCli,
    ollama: FakeOllama,
    workspace: Path,
    home: Path,
    tmp_path_factory: pytest.TempPathFactory,
    bind_mount: list[Path],
    trash: bool,
) -> None:
    outside = tmp_path_factory.mktemp("elsewhere")
    (outside / "keep.txt").write_text("not the agent's\n")
    (workspace / "proj" / "data").mkdir(parents=True)
    (workspace / "proj" / "a.txt").write_text("a\n")
    mount_bind(bind_mount, outside, workspace / "proj" / "data")
    (workspace / "c.yaml").write_text(
        f"policy: {{trash: {str(trash).lower()}, tools: {{delete_file: allow}}}}\n"
    )
    ollama.enqueue(
        reply(tool_calls=[tool_call("delete_file", {"path": "proj", "recursive": True})]),
        reply("ok"),
    )
    r = run_cli("run", "--json", "-c", "c.yaml", "delete proj")
    result = json.loads(r.stdout)["tool_calls"][0]["result"]
    assert result["success"] is False and "mount point" in result["error"]
    assert (outside / "keep.txt").read_text() == "not the agent's\n"
    assert (workspace / "proj" / "a.txt").read_text() == "a\n"
    assert mounted(workspace / "proj" / "data")


def test_store_edges_a_forged_backup_name_is_never_evicted_outside_the_store(
    home: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    victim = tmp_path_factory.mktemp("victim")
    (victim / "thesis.tex").write_text("years of work\n")
    forged = ChangeStore(home / CHANGES)
    for backup in (str(victim), f"trash/../../../../../..{victim}", f"blobs/../../{victim.name}"):
        forged.record(Change("write_file", "overwrite", str(victim / "x"), backup=backup))
    store = ChangeStore(home / CHANGES, max_bytes=0)
    store.record(Change("write_file", "overwrite", "/x", backup=store.keep(b"new")))
    assert (victim / "thesis.tex").read_text() == "years of work\n"


# -- trees of any depth ----------------------------------------------------------------------------


def test_attack_hangs_and_tracebacks_undo_deep_tree(
    run_cli: RunCli, ollama: FakeOllama, workspace: Path, home: Path
) -> None:
    deep = "/".join(["d"] * DEPTH)
    ollama.enqueue(
        reply(tool_calls=[tool_call("create_directory", {"path": deep})]), reply("made it")
    )
    try:
        r = run_cli("run", "--yes", "--json", "make a deep tree")
        assert r.code == 0, r.stderr
        assert json.loads(r.stdout)["tool_calls"][0]["result"]["success"] is True
        assert depth_of(workspace) == (DEPTH, None)

        undone = run_cli("undo")
        assert undone.code == 0, undone.stderr
        assert no_traceback(undone.stderr)
        assert not (workspace / "d").exists()

        redone = run_cli("redo")  # the undo of the undo: the whole tree comes back
        assert redone.code == 0, redone.stderr
        assert depth_of(workspace) == (DEPTH, None)

        # A file appeared deep inside since: undo refuses in one line, moves nothing.
        fd = os.open(workspace, os.O_RDONLY)
        for _ in range(DEPTH):
            child = os.open("d", os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = child
        os.close(os.open("late.txt", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd))
        os.close(fd)
        refused = run_cli("undo", "1")
        assert refused.code == 1 and no_traceback(refused.stderr)
        assert len(refused.stderr.strip().splitlines()) <= 2  # what it would do, and why not
        assert "holds files now" in refused.stderr
        assert depth_of(workspace)[0] == DEPTH
    finally:
        remove_deep(workspace / "d")
        clean_store(home)


def test_store_edges_undo_of_a_deep_recursive_delete(
    run_cli: RunCli, ollama: FakeOllama, workspace: Path, home: Path
) -> None:
    make_deep(workspace / "tree", DEPTH, b"at the bottom\n")
    (workspace / "c.yaml").write_text("policy: {tools: {delete_file: allow}}\n")
    ollama.enqueue(
        reply(tool_calls=[tool_call("delete_file", {"path": "tree", "recursive": True})]),
        reply("deleted"),
    )
    try:
        r = run_cli("run", "--json", "-c", "c.yaml", "delete the tree")
        assert r.code == 0, r.stderr
        result = json.loads(r.stdout)["tool_calls"][0]["result"]
        assert result["success"] is True and result["trashed"] is True, result
        assert result["removed"] == {"files": 1, "directories": DEPTH + 1}
        assert not (workspace / "tree").exists()
        undone = run_cli("undo")
        assert undone.code == 0 and no_traceback(undone.stderr), undone.stderr
        assert depth_of(workspace / "tree") == (DEPTH, b"at the bottom\n")
    finally:
        remove_deep(workspace / "tree")
        clean_store(home)


def test_store_edges_deep_trees_across_file_systems(
    make_agent: MakeAgent, ollama: FakeOllama, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = second_file_system(workspace)
    monkeypatch.setenv("XDG_STATE_HOME", str(state))
    make_deep(workspace / "tree", DEPTH, b"bottom\n")
    try:
        ollama.enqueue(
            reply(tool_calls=[tool_call("delete_file", {"path": "tree", "recursive": True})]),
            reply("ok"),
        )
        harness = make_agent("policy: {tools: {delete_file: allow}}\n")
        harness.run("delete tree")
        assert tool_results(ollama)[0]["trashed"] is True
        assert not (workspace / "tree").exists()
        from cli.journal.undo import apply, plan

        store = harness.agent.context.changes
        assert store is not None
        apply(store, plan(store, None))  # copied back across, then removed from the trash
        assert depth_of(workspace / "tree") == (DEPTH, b"bottom\n")
        slots = list((state / "metona-agent/changes/trash").iterdir())
        assert slots and all(not any(slot.iterdir()) for slot in slots)
    finally:
        remove_deep(workspace / "tree")
        for slot in (state / "metona-agent/changes/trash").glob("*"):
            remove_deep(slot)
        subprocess.run(["rm", "-rf", str(state)], check=False)


def test_store_edges_delete_too_big_to_copy_across_file_systems_needs_a_person(
    make_agent: MakeAgent, ollama: FakeOllama, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = second_file_system(workspace)
    monkeypatch.setenv("XDG_STATE_HOME", str(state))
    yaml = "policy:\n  tools: {delete_file: allow}\n  limits: {max_backup_bytes: 1000}\n"
    (workspace / "tree" / "sub").mkdir(parents=True)
    (workspace / "tree" / "sub" / "data.bin").write_bytes(b"d" * 5000)
    try:
        call = tool_call("delete_file", {"path": "tree", "recursive": True})
        ollama.enqueue(reply(tool_calls=[call]), reply("ok"))
        declined = make_agent(yaml, answers=[False])
        declined.run("delete tree")
        [request] = declined.approver.requests
        assert request.decision.needs_human and request.decision.rule == "no_backup"
        assert any("deleted for good" in w for w in request.decision.warnings)
        assert (workspace / "tree" / "sub" / "data.bin").stat().st_size == 5000

        ollama.enqueue(reply(tool_calls=[call]), reply("ok"))
        approved = make_agent(yaml, answers=[True])
        approved.run("delete tree")
        result = tool_results(ollama)[0]
        assert result["success"] is True and result["trashed"] is False
        assert "cannot be undone" in str(result["note"])
        assert not (workspace / "tree").exists()
        store = approved.agent.context.changes
        assert store is not None
        assert [c.undoable for c in store.history()] == [False]
    finally:
        subprocess.run(["rm", "-rf", str(state)], check=False)


def test_store_edges_evicting_a_deep_tree_of_an_earlier_session(
    home: Path, workspace: Path
) -> None:
    earlier = ChangeStore(home / CHANGES)
    slot = earlier.trash_slot()
    make_deep(slot / "tree", DEPTH, b"x" * 500)
    try:
        first = earlier.record(
            Change(
                "delete_file", "delete", str(workspace / "tree"), kind="directory",
                backup=earlier.relative(slot / "tree"),
            )
        )  # fmt: skip
        assert first.kept == 500
        now = ChangeStore(home / CHANGES, max_bytes=100)
        now.record(Change("write_file", "overwrite", str(workspace / "f"), backup=now.keep(b"y")))
        assert now.history()[0].evicted
        assert not slot.exists()
    finally:
        remove_deep(slot)


# -- the journal's summary: a write reads what was appended, not the whole history ----------


def _store(root: Path, max_bytes: int = 10**9) -> ChangeStore:
    return ChangeStore(root, max_bytes=max_bytes)  # a fresh session, as each agent has


def _overwrite(store: ChangeStore, n: int, size: int = 100) -> Change:
    backup = store.keep(b"o" * size)
    return store.record(Change("write_file", "overwrite", f"/w/f{n}", backup=backup))


def _summary(root: Path) -> dict[str, object]:
    return json.loads((root / "journal.index").read_text())


def test_store_summary_stands_for_the_journal_and_a_new_process_reads_none_of_it(
    tmp_path: Path,
) -> None:
    root = tmp_path / "store"
    first = _store(root)
    for n in range(30):
        _overwrite(first, n)
    summary = _summary(root)
    assert summary["offset"] == (root / "journal.jsonl").stat().st_size
    assert (summary["last_id"], summary["total"]) == (30, 3000)
    # Proof that the next store reads none of the journal before the offset: its first
    # 25 lines made unreadable (the bytes just before the offset, which the summary checks,
    # kept) do not change what it records, while a full read would lose them.
    journal = root / "journal.jsonl"
    lines = journal.read_bytes().split(b"\n")
    lines[:25] = [b"x" * len(line) for line in lines[:25]]
    journal.write_bytes(b"\n".join(lines))
    second = _store(root)
    assert _overwrite(second, 31).id == 31
    assert _summary(root)["total"] == 3100
    assert second.room() == 10**9 - 100  # its own backup only


def test_store_summary_that_no_longer_matches_is_not_used(tmp_path: Path) -> None:
    root = tmp_path / "store"
    first = _store(root)
    for n in range(5):
        _overwrite(first, n)
    # The journal rewritten by hand (one change dropped): the bytes before the summary's
    # offset differ, so the next store reads the journal itself.
    journal = root / "journal.jsonl"
    kept = [line for line in journal.read_text().splitlines() if '"id": 3,' not in line]
    journal.write_text("\n".join(kept) + "\n")
    second = _store(root)
    assert _overwrite(second, 9).id == 6
    assert [c.id for c in second.history()] == [1, 2, 4, 5, 6]
    assert _summary(root)["total"] == 500


def test_store_summary_and_lines_of_other_processes_since(tmp_path: Path) -> None:
    """Two agents writing in turn: each reads the other's lines since its last look, and
    one that evicts another's backup (known only from before its summary) reads it all."""
    root = tmp_path / "store"
    a, b = _store(root, max_bytes=1000), _store(root, max_bytes=1000)
    ids = []
    for n in range(6):
        ids.append(_overwrite(a if n % 2 == 0 else b, n, 150).id)
    assert ids == [1, 2, 3, 4, 5, 6]
    c = _store(root, max_bytes=1000)
    for n in range(6, 10):
        _overwrite(c, n, 150)  # each goes over 1000 bytes: the oldest backup goes
    history = c.history()
    evicted = [ch.id for ch in history if ch.evicted]
    assert evicted == [1, 2, 3, 4]
    assert not any(ch.evicted for ch in history if ch.session == c.session)
    assert _summary(root)["total"] == 900
    for ch in history:
        backup = root / ch.backup if ch.backup else None
        assert backup is not None and backup.exists() == (not ch.evicted)


def test_a_backup_and_the_journal_are_durable_with_their_directory_entries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A blob fsynced in a directory that was not can be gone after a power loss on some
    file systems while the journal naming it survives: the store fsyncs each blob's
    directory after the blob, before the journal names it, and the journal's directory when
    the journal is created. (Spied on os.fsync: which paths it was given, in order.)"""
    synced: list[str] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    store = ChangeStore(tmp_path / "changes")
    name = store.keep(b"old content")
    store.record(Change("write_file", "overwrite", "/x/f", backup=name))
    blob, blobs = str(store.root / name), str(store.root / "blobs")
    journal, root = str(store.journal), str(store.root)
    assert synced == [blob, blobs, journal, root]
    synced.clear()
    store.record(Change("write_file", "overwrite", "/x/f", backup=store.keep(b"newer")))
    assert synced[1:] == [blobs, journal]  # the journal exists now: its entry is durable
