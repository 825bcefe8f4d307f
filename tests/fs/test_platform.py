"""The platform layer (cli/fs/_platform.py): its portable fallbacks, run for real on this
machine whatever METONA_PLATFORM says, and the lint rule that keeps POSIX-only modules
inside the platform modules."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import cli
from cli.fs import _platform

REPO = Path(cli.__file__).resolve().parent.parent


# -- the lint rule -----------------------------------------------------------------------------


def _ruff(root: Path) -> subprocess.CompletedProcess[str]:
    ruff = Path(sys.executable).parent / "ruff"
    if not ruff.exists():
        found = shutil.which("ruff")
        if found is None:
            pytest.skip("ruff is not installed (make install puts it in the venv)")
        ruff = Path(found)
    return subprocess.run(
        [str(ruff), "check", "--no-cache", "--select", "TID251", "--output-format", "concise"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture
def project_copy(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    shutil.copy(REPO / "pyproject.toml", root / "pyproject.toml")
    shutil.copytree(REPO / "cli", root / "cli", symlinks=True)
    return root


def test_the_platform_modules_alone_may_import_posix_only_modules(project_copy: Path) -> None:
    clean = _ruff(project_copy)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    core = project_copy / "cli" / "journal" / "changes.py"
    core.write_text(core.read_text() + "\nimport fcntl  # noqa: F401\n")
    lazy = project_copy / "cli" / "fs" / "trees.py"
    lazy.write_text(
        lazy.read_text() + "\n\ndef _limit() -> None:\n    import resource  # noqa: F401\n"
    )
    broken = _ruff(project_copy)
    assert broken.returncode == 1
    assert "cli/journal/changes.py" in broken.stdout and "TID251" in broken.stdout
    assert "`fcntl` is banned" in broken.stdout
    assert "cli/fs/trees.py" in broken.stdout and "`resource` is banned" in broken.stdout
    # the platform module itself may
    assert "_platform.py" not in broken.stdout


# -- the choice --------------------------------------------------------------------------------


@pytest.mark.parametrize("forced", ["portable", "windows", "macos", "linux"])
def test_metona_platform_forces_the_choice(forced: str) -> None:
    code = (
        "from cli.fs import _platform as p; "
        "print(p.NAME, p.PORTABLE, p.O_PATH != 0, p.openat2(8) is not None)"
    )
    r = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, _platform.VARIABLE: forced},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    name, portable, o_path, openat2 = r.stdout.split()
    assert name == forced
    assert portable == str(forced in ("portable", "windows"))
    if forced != "linux":  # no O_PATH and no openat2 outside Linux's implementation
        assert (o_path, openat2) == ("False", "False")


# -- no-replace renames: the portable fallback ---------------------------------------------


def _dir(path: Path) -> int:
    return os.open(path, os.O_RDONLY | os.O_DIRECTORY)


def test_the_portable_rename_moves_a_file_and_never_replaces(tmp_path: Path) -> None:
    (tmp_path / "a").write_text("a\n")
    (tmp_path / "taken").write_text("someone's\n")
    fd = _dir(tmp_path)
    try:
        with pytest.raises(FileExistsError):
            _platform._rename_portable(fd, "a", fd, "taken")
        assert (tmp_path / "taken").read_text() == "someone's\n"
        assert (tmp_path / "a").read_text() == "a\n"
        _platform._rename_portable(fd, "a", fd, "b")
    finally:
        os.close(fd)
    assert not (tmp_path / "a").exists()
    assert (tmp_path / "b").read_text() == "a\n"
    assert (tmp_path / "b").stat().st_nlink == 1  # the link made on the way is gone


def test_the_portable_rename_moves_a_symlink_itself(tmp_path: Path) -> None:
    (tmp_path / "link").symlink_to("/etc/passwd")
    fd = _dir(tmp_path)
    try:
        _platform._rename_portable(fd, "link", fd, "moved")
    finally:
        os.close(fd)
    assert os.readlink(tmp_path / "moved") == "/etc/passwd"
    assert not os.path.lexists(tmp_path / "link")


def test_the_portable_rename_moves_a_directory_and_never_replaces(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "f").write_text("f\n")
    (tmp_path / "empty").mkdir()  # rename(2) alone would replace an empty directory
    (tmp_path / "file").write_text("x\n")
    fd = _dir(tmp_path)
    try:
        for taken in ("empty", "file"):
            with pytest.raises(FileExistsError):
                _platform._rename_portable(fd, "d", fd, taken)
        _platform._rename_portable(fd, "d", fd, "e")
    finally:
        os.close(fd)
    assert (tmp_path / "e" / "f").read_text() == "f\n"
    assert not (tmp_path / "d").exists()
    assert (tmp_path / "empty").is_dir() and (tmp_path / "file").read_text() == "x\n"


def test_the_portable_rename_leaves_no_placeholder_when_it_fails(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    fd = _dir(tmp_path)
    try:
        with pytest.raises(OSError) as caught:
            _platform._rename_portable(fd, "d", fd, "d/inside")  # into itself
    finally:
        os.close(fd)
    assert caught.value.errno == errno.EINVAL
    assert list((tmp_path / "d").iterdir()) == []


def test_rename_noreplace_refuses_an_existing_destination(tmp_path: Path) -> None:
    """Whatever implementation this process chose (Linux's, or the forced fallback)."""
    (tmp_path / "a").write_text("a\n")
    (tmp_path / "b").write_text("b\n")
    fd = _dir(tmp_path)
    try:
        with pytest.raises(FileExistsError):
            _platform.rename_noreplace(fd, "a", fd, "b")
        _platform.rename_noreplace(fd, "a", fd, "c")
    finally:
        os.close(fd)
    assert (tmp_path / "b").read_text() == "b\n" and (tmp_path / "c").read_text() == "a\n"


# -- the rest --------------------------------------------------------------------------------


def test_the_umask_is_read_and_left_as_it_was() -> None:
    before = os.umask(0o027)
    try:
        assert _platform.umask() == 0o027
        assert os.umask(0o027) == 0o027
    finally:
        os.umask(before)


def test_the_portable_umask_read_from_threads_at_once_stays_the_same(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_platform, "LINUX", False)  # the read-and-restore fallback
    before = os.umask(0o022)
    seen: list[int] = []
    try:
        threads = [
            threading.Thread(target=lambda: seen.extend(_platform.umask() for _ in range(200)))
            for _ in range(4)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert set(seen) == {0o022}
        assert os.umask(0o022) == 0o022
    finally:
        os.umask(before)


def test_a_child_starts_in_the_held_directory_even_after_it_was_renamed(tmp_path: Path) -> None:
    (tmp_path / "held").mkdir()
    fd = os.open(tmp_path / "held", os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.rename(tmp_path / "held", tmp_path / "moved")
        (tmp_path / "held").mkdir()  # a different directory at the old path
        pwd = shutil.which("pwd")
        assert pwd is not None
        argv, cwd = _platform.child_cwd(fd, [pwd, "-P"])
        r = subprocess.run(argv, cwd=cwd, pass_fds=(fd,), capture_output=True, timeout=60)
    finally:
        os.close(fd)
    assert r.returncode == 0, r.stderr
    assert r.stdout.decode().strip() == str((tmp_path / "moved").resolve())


def test_the_portable_child_enters_the_directory_by_its_fd(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_platform, "LINUX", False)
    monkeypatch.setattr(_platform, "_F_GETPATH", None)
    (tmp_path / "held").mkdir()
    fd = os.open(tmp_path / "held", os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.rename(tmp_path / "held", tmp_path / "moved")
        pwd = shutil.which("pwd")
        assert pwd is not None
        argv, cwd = _platform.child_cwd(fd, [pwd, "-P"])
        assert cwd is None and "/proc" not in " ".join(argv)
        r = subprocess.run(argv, cwd=cwd, pass_fds=(fd,), capture_output=True, timeout=60)
    finally:
        os.close(fd)
    assert r.returncode == 0, r.stderr
    assert r.stdout.decode().strip() == str((tmp_path / "moved").resolve())


def test_full_fsync_syncs_a_file_and_a_directory(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"data")
    for target in (path, tmp_path):
        fd = os.open(target, os.O_RDONLY)
        try:
            _platform.full_fsync(fd)  # raises on a bad fd; nothing here can see the disk
        finally:
            os.close(fd)
    closed = os.open(path, os.O_RDONLY)
    os.close(closed)
    with pytest.raises(OSError):
        _platform.full_fsync(closed)


def test_the_lock_is_exclusive_between_processes(tmp_path: Path) -> None:
    path = tmp_path / "lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        _platform.lock_exclusive(fd)
        code = (
            "import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDWR)\n"
            "try: fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\n"
            "except BlockingIOError: print('held')\n"
            "else: print('free')"
        )
        r = subprocess.run(
            [sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=60
        )
    finally:
        os.close(fd)
    assert r.stdout == "held\n", r.stderr


def test_mount_ids_are_the_kernels_on_linux_and_none_elsewhere(tmp_path: Path) -> None:
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        found = _platform.mount_id(fd)
    finally:
        os.close(fd)
    if _platform.LINUX and os.path.exists("/proc/self/fdinfo"):
        assert isinstance(found, int)
    else:
        assert found is None


def test_a_childs_memory_is_capped_on_linux_and_left_elsewhere() -> None:
    import resource

    child = subprocess.Popen(["sleep", "30"])
    try:
        done = _platform.limit_memory(child.pid, 1 << 30)
        done_heap = _platform.limit_memory(child.pid, 1 << 29, heap_only=True)
        limit = resource.prlimit(child.pid, resource.RLIMIT_AS)
        heap = resource.prlimit(child.pid, resource.RLIMIT_DATA)
    finally:
        child.kill()
        child.wait()
    if _platform.LINUX:
        assert done and done_heap
        assert limit == (1 << 30, 1 << 30) and heap == (1 << 29, 1 << 29)
    else:
        assert not done and not done_heap
        assert limit != (1 << 30, 1 << 30)
