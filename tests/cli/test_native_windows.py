"""Native Windows, simulated here: the real `agent` in a subprocess, told by the platform layer
that it is on Windows (METONA_PLATFORM=windows) and without what Windows' Python lacks — the
POSIX-only modules (fcntl, termios, resource, pty, tty, grp, pwd) raise ImportError, and the
os and signal names Windows does not have (O_NOFOLLOW, O_DIRECTORY, killpg, SIGKILL, …) are
gone — before anything of `cli` is imported. Every command must start: those that need POSIX
say so in one line and exit 2, no traceback; --help, --version and config keep working."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import typer

import cli
from cli.app import WINDOWS_READY, built_for
from cli.fs._platform import WINDOWS_LINE

PRELUDE = r"""
import importlib.abc, os, signal, sys

MISSING = ("fcntl", "termios", "resource", "pty", "tty", "grp", "pwd")


class NoPosix(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in MISSING:
            raise ImportError(f"No module named {name!r} (native Windows, simulated)")
        return None


for name in MISSING:
    sys.modules.pop(name, None)
sys.meta_path.insert(0, NoPosix())
for attr in (
    "O_NOFOLLOW", "O_DIRECTORY", "O_NONBLOCK", "O_CLOEXEC", "O_PATH", "O_NOCTTY", "killpg",
    "getpgrp", "getpgid", "setsid", "geteuid", "getuid", "getegid", "getgid", "mkfifo",
    "mknod", "fchdir", "fchown", "lchown", "chown", "pread", "pwrite", "tcgetpgrp", "fork",
    "openpty", "ttyname", "sync", "statvfs", "fstatvfs", "getloadavg",
):
    if hasattr(os, attr):
        delattr(os, attr)
for attr in (
    "SIGHUP", "SIGKILL", "SIGQUIT", "SIGCHLD", "SIGPIPE", "SIGALRM", "SIGUSR1", "SIGUSR2",
    "SIGTSTP", "SIGCONT", "SIGWINCH",
):
    if hasattr(signal, attr):
        delattr(signal, attr)

if sys.argv[1:] == ["--probe"]:
    gone = []
    for name in MISSING:
        try:
            __import__(name)
        except ImportError:
            gone.append(name)
    print(" ".join(gone), hasattr(os, "O_NOFOLLOW"), hasattr(signal, "SIGKILL"))
    raise SystemExit(0)

from cli.app import main

sys.argv = ["agent", *sys.argv[1:]]
main()
"""

# Each command by the words after `agent`, with what it needs to get past its own parser.
REFUSED = {
    "run": ["run", "hello"],
    "chat": ["chat"],
    "models": ["models"],
    "eval": ["eval", "--oracle"],
    "history": ["history"],
    "undo": ["undo"],
    "redo": ["redo"],
    "audit verify": ["audit", "verify"],
    "audit show": ["audit", "show"],
    "sessions": ["sessions"],
    "sessions rm": ["sessions", "rm", "old"],
    "mcp list": ["mcp", "list"],
    "mcp import": ["mcp", "import", "servers.json"],
    "policy explain": ["policy", "explain", "notes.md"],
}
WORKING = {
    "config": ["config"],
    "config path": ["config", "path"],
    "init": ["init"],
}


def windows(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", PRELUDE, *args],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "METONA_PLATFORM": "windows"},
        stdin=subprocess.DEVNULL,
        timeout=60,
    )


def command_paths() -> set[str]:
    """Every command of the real app, by its words ("sessions rm"); a group that runs by
    itself (sessions, config) is one too."""
    found: set[str] = set()

    def walk(command: object, words: list[str]) -> None:
        subcommands = getattr(command, "commands", None)
        if subcommands is None:
            found.add(" ".join(words))
            return
        if words and getattr(command, "invoke_without_command", False):
            found.add(" ".join(words))
        for name, sub in subcommands.items():
            walk(sub, [*words, name])

    walk(typer.main.get_command(built_for([])), [])  # the whole app: every command
    return found


def test_every_command_has_a_windows_case() -> None:
    assert command_paths() == set(REFUSED) | set(WORKING)
    assert set(WORKING) == WINDOWS_READY


def test_the_simulation_takes_away_what_windows_lacks(tmp_path: Path) -> None:
    r = windows(tmp_path, "--probe")
    assert r.returncode == 0, r.stderr
    assert r.stdout == "fcntl termios resource pty tty grp pwd False False\n"


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_a_command_that_needs_posix_says_so_in_one_line(tmp_path: Path, name: str) -> None:
    r = windows(tmp_path, *REFUSED[name])
    assert r.returncode == 2, r.stderr
    assert r.stdout == ""
    assert r.stderr == f"agent: `agent {name}`: {WINDOWS_LINE}\n"
    assert "native Windows is not supported yet" in r.stderr and "WSL2" in r.stderr


def test_version_and_help_work(tmp_path: Path) -> None:
    version = windows(tmp_path, "--version")
    assert version.returncode == 0, version.stderr
    assert version.stdout.startswith("metona-agent ")
    for args in (["--help"], []):
        shown = windows(tmp_path, *args)
        assert shown.returncode == 0, shown.stderr
        assert "Commands" in shown.stdout and "run" in shown.stdout
    # a refused command's own --help still shows what it would do
    run_help = windows(tmp_path, "run", "--help")
    assert run_help.returncode == 0, run_help.stderr
    assert "--model" in run_help.stdout and "Traceback" not in run_help.stderr


def test_config_works(tmp_path: Path, home: Path) -> None:
    path = windows(tmp_path, "config", "path")
    assert path.returncode == 0, path.stderr
    target = Path(path.stdout.splitlines()[0])
    assert target == home / ".config" / "metona-agent" / "config.yaml"
    made = windows(tmp_path, "init")
    assert made.returncode == 0, made.stderr
    assert target.read_bytes() == (Path(cli.__file__).parent / "config.example.yaml").read_bytes()
    shown = windows(tmp_path, "config")
    assert shown.returncode == 0, shown.stderr
    assert "mcp:" in shown.stdout and "Traceback" not in shown.stderr


def test_a_prompt_that_looks_like_help_is_still_refused_in_one_line(tmp_path: Path) -> None:
    """After `--` a word is the prompt, not a flag: `agent run -- --help` is a run."""
    r = windows(tmp_path, "run", "--", "--help")
    assert r.returncode == 2, r.stderr
    assert r.stderr == f"agent: `agent run`: {WINDOWS_LINE}\n"
