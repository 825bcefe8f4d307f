"""A file keeps what it was besides its content (issue 19, "Keep what the file was"): its
owner and group, its mode and its user.* extended attributes survive write_file, edit_file,
a trip through the trash (across file systems: a copy) and `agent undo` / `agent redo` —
through the real agent, with real owners and real xattrs on the test's file system."""

from __future__ import annotations

import errno
import json
import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO, RunCli
from tests.fakes.fake_ollama import FakeOllama, reply, tool_call

# Another user and group, which root can give files to (no account needed).
THEIR_UID, THEIR_GID = 1234, 2345
ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not ROOT, reason="only root can give a file to another user")


@pytest.fixture
def run_cli(run_cli_in_process: RunCli) -> RunCli:
    """`agent` in this process (conftest.run_in_process): no test here is about the process."""
    return run_cli_in_process


def xattrs(path: Path) -> dict[str, bytes]:
    return {name: os.getxattr(path, name) for name in os.listxattr(path)}


def tag(path: Path, **values: bytes) -> None:
    """Give `path` user.* attributes, or skip: the file system refuses them (tmpfs takes them
    from Linux 6.6; macOS has no os.setxattr)."""
    if not hasattr(os, "setxattr"):
        pytest.skip("no os.setxattr here (Linux only): the agent carries no attributes over")
    try:
        for name, value in values.items():
            os.setxattr(path, f"user.{name}", value)
    except OSError as exc:
        if exc.errno in (errno.ENOTSUP, errno.EOPNOTSUPP):
            pytest.skip(f"the file system of {path.parent} refuses user.* attributes")
        raise


def identity(path: Path) -> tuple[int, int, str, dict[str, bytes]]:
    """What a file is besides its content: owner, group, mode, extended attributes."""
    info = path.lstat()
    return info.st_uid, info.st_gid, oct(stat.S_IMODE(info.st_mode)), xattrs(path)


def their_file(
    path: Path, content: str, mode: int = 0o640
) -> tuple[int, int, str, dict[str, bytes]]:
    """A file of another user's (root only) or of ours, with a mode and attributes."""
    path.write_text(content)
    tag(path, origin=b"https://example.org/notes", checksum=b"\x00\x01binary")
    if ROOT:
        os.chown(path, THEIR_UID, THEIR_GID)
    os.chmod(path, mode)
    return identity(path)


# -- writes and edits, and their undo --------------------------------------------------------


@needs_root
def test_a_write_as_root_keeps_the_owner_and_xattrs_and_undo_puts_them_back(
    run_cli: RunCli, ollama: FakeOllama, workspace: Path
) -> None:
    # The finding: the new inode of the temp file + rename was root's and had no attributes,
    # and undo's write of the backup was the same kind of write.
    notes = workspace / "notes.txt"
    before = their_file(notes, "my careful notes\n")
    ollama.enqueue(
        reply(tool_calls=[tool_call("write_file", {"path": "notes.txt", "content": "oops\n"})]),
        reply("Rewrote it."),
    )
    assert run_cli("run", "--yes", "rewrite notes").code == 0
    assert notes.read_text() == "oops\n"
    assert identity(notes) == before
    undone = run_cli("undo")
    assert undone.code == 0, undone.stderr
    assert notes.read_text() == "my careful notes\n"
    assert identity(notes) == before
    redone = run_cli("redo")
    assert redone.code == 0, redone.stderr
    assert notes.read_text() == "oops\n" and identity(notes) == before


def test_an_edit_keeps_the_mode_group_and_xattrs_and_so_does_its_undo(
    run_cli: RunCli, ollama: FakeOllama, workspace: Path
) -> None:
    """As any user (as root, the owner too): the part of the finding a user meets."""
    app = workspace / "app.py"
    before = their_file(app, "x = 1\n", mode=0o751)
    groups = [g for g in os.getgroups() if g != os.getegid()]
    if not ROOT and groups:  # a group the user is in, not the one a new file gets
        os.chown(app, -1, groups[0])
        before = identity(app)
    edit = {"path": "app.py", "old_string": "x = 1", "new_string": "x = 2"}
    ollama.enqueue(
        reply(tool_calls=[tool_call("read_file", {"path": "app.py"})]),
        reply(tool_calls=[tool_call("edit_file", edit)]),
        reply("edited"),
    )
    done = run_cli("run", "--yes", "edit it")
    assert done.code == 0, done.stderr
    assert app.read_text() == "x = 2\n"
    assert identity(app) == before
    assert run_cli("undo").code == 0
    assert app.read_text() == "x = 1\n" and identity(app) == before


# -- the trash across file systems ---------------------------------------------------------------


@pytest.fixture
def far_state(workspace: Path) -> Iterator[dict[str, str]]:
    """The agent's state (and so its trash) on another file system than the workspace: a
    move into the trash and back is a copy. The environment to run the agent with."""
    shm = Path("/dev/shm")
    if not shm.is_dir() or shm.stat().st_dev == workspace.stat().st_dev:
        pytest.skip("needs a second file system (/dev/shm) for the state dir")
    state = Path(tempfile.mkdtemp(prefix="metona-test-", dir=shm))
    try:
        yield {"XDG_STATE_HOME": str(state)}
    finally:
        shutil.rmtree(state, ignore_errors=True)


def test_a_file_back_from_the_trash_across_file_systems_keeps_owner_and_xattrs(
    run_cli: RunCli, ollama: FakeOllama, workspace: Path, far_state: dict[str, str]
) -> None:
    """A delete whose trash is on another file system is a copy, and so is its undo: both
    keep the owner (as root), the mode and the attributes, of files and of directories."""
    tree = workspace / "docs"
    tree.mkdir()
    page = tree / "page.md"
    kept = {"page": their_file(page, "# page\n"), "old": their_file(workspace / "old.txt", "o")}
    tag(tree, project=b"docs")
    if ROOT:
        os.chown(tree, THEIR_UID, THEIR_GID)
    os.chmod(tree, 0o750)
    kept["tree"] = identity(tree)
    (workspace / "c.yaml").write_text("policy: {tools: {delete_file: allow}}\n")
    ollama.enqueue(
        reply(
            tool_calls=[
                tool_call("delete_file", {"path": "old.txt"}),
                tool_call("delete_file", {"path": "docs", "recursive": True}),
            ]
        ),
        reply("Deleted."),
    )
    r = run_cli("run", "-c", "c.yaml", "--json", "clean up", env=far_state)
    assert r.code == 0, r.stderr
    assert all(c["result"]["trashed"] for c in json.loads(r.stdout)["tool_calls"])
    assert not tree.exists()
    for _ in range(2):
        undone = run_cli("undo", env=far_state)
        assert undone.code == 0, undone.stderr
    assert page.read_text() == "# page\n"
    now = {"page": identity(page), "old": identity(workspace / "old.txt"), "tree": identity(tree)}
    assert now == kept


def test_what_a_move_replaced_comes_back_from_the_trash_as_it_was(
    run_cli: RunCli, ollama: FakeOllama, workspace: Path, far_state: dict[str, str]
) -> None:
    (workspace / "new.txt").write_text("new\n")
    before = their_file(workspace / "old.txt", "old\n", mode=0o604)
    (workspace / "c.yaml").write_text("policy: {confirm: none}\n")
    move = {"source": "new.txt", "destination": "old.txt", "overwrite": True}
    ollama.enqueue(reply(tool_calls=[tool_call("move_file", move)]), reply("Moved."))
    r = run_cli("run", "-c", "c.yaml", "--json", "replace it", env=far_state)
    assert r.code == 0, r.stderr
    assert json.loads(r.stdout)["tool_calls"][0]["result"]["replaced"] is True
    undone = run_cli("undo", env=far_state)
    assert undone.code == 0, undone.stderr
    assert (workspace / "old.txt").read_text() == "old\n"
    assert identity(workspace / "old.txt") == before


# -- a writer that is not root -------------------------------------------------------------------

AS_A_USER = """
import json, os, sys
from cli.fs import reach, writing
root = sys.argv[1]
for name in ("mine", "theirs"):
    path = os.path.join(root, name)
    writing.write(reach.Target(path, root, name), b"new\\n")
print(json.dumps(os.getgroups()))
"""


@needs_root
def test_a_user_keeps_the_group_they_are_in_and_may_not_keep_another_owner(
    tmp_path: Path,
) -> None:
    """Written as a user (uid 1234, in group 2345) — setpriv and the system's Python, as
    test_sandbox runs the agent as nobody: their own file keeps its group (a chown to the
    same uid and a group they are in is allowed); a file of another user's, writable through
    the group, becomes theirs (a user cannot give a file away) with its group, mode and
    attributes kept, and that is no error."""
    setpriv, python = shutil.which("setpriv"), "/usr/bin/python3"
    if not setpriv or not os.path.exists(python):
        pytest.skip("needs setpriv and /usr/bin/python3 to write as another user")
    # Under /tmp: the test's own temp dir is under root's private one.
    shared = Path(tempfile.mkdtemp(prefix="metona-attrs-", dir="/tmp"))
    try:
        os.chmod(shared, 0o777)
        mine, theirs = shared / "mine", shared / "theirs"
        for path, owner, mode in ((mine, THEIR_UID, 0o640), (theirs, 4321, 0o664)):
            path.write_text("old\n")
            tag(path, note=path.name.encode())
            os.chown(path, owner, THEIR_GID)
            os.chmod(path, mode)
        expected_mine, expected_theirs = identity(mine), identity(theirs)
        argv = [setpriv, f"--reuid={THEIR_UID}", "--regid=1234", f"--groups={THEIR_GID}"]
        env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)}
        proc = subprocess.run(
            [*argv, python, "-c", AS_A_USER, str(shared)],
            capture_output=True, text=True, env=env, timeout=60,
        )  # fmt: skip
        if proc.returncode != 0 and "ModuleNotFoundError" in proc.stderr:
            pytest.skip(f"the system's Python cannot import the agent: {proc.stderr[-200:]}")
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout) == [THEIR_GID]
        assert mine.read_text() == theirs.read_text() == "new\n"
        assert identity(mine) == expected_mine
        assert identity(theirs) == (THEIR_UID, *expected_theirs[1:])
    finally:
        shutil.rmtree(shared, ignore_errors=True)
