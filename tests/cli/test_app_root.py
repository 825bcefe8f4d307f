"""The root app and its commands: the commands never import the root (cli.app imports them),
a command line imports only the module of the command it names, and the exit statuses the
code names are the ones README's "Exit codes" table lists."""

from __future__ import annotations

import ast
import importlib
import re
import signal
import subprocess
import sys
from pathlib import Path

from cli.errors import AgentError, ConfigError, ExitStatus, Stopped, StreamError, UsageError

REPO = Path(__file__).resolve().parent.parent.parent
COMMANDS = REPO / "cli" / "commands"


def imported_modules(path: Path) -> set[str]:
    """Every module `path` imports, at the top or inside a function."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def test_no_command_module_imports_the_root_app() -> None:
    modules = sorted(COMMANDS.glob("*.py"))
    assert len(modules) > 5
    for path in modules:
        upward = {m for m in imported_modules(path) if m == "cli.app" or m.startswith("cli.app.")}
        assert not upward, f"{path.name} imports {upward}: the root imports the commands"


def test_every_command_is_declared_where_the_root_looks_for_it() -> None:
    """cli.app's COMMANDS (the order of help, the module to import) against what the modules
    declare: a command added to a module and not to COMMANDS would never be reachable."""
    from cli.app import COMMANDS as LISTED
    from cli.app import _name_of

    declared: dict[str | None, str] = {}
    for path in sorted(COMMANDS.glob("*.py")):
        sheet = getattr(importlib.import_module(f"cli.commands.{path.stem}"), "commands", None)
        for info in [
            *getattr(sheet, "registered_commands", ()),
            *getattr(sheet, "registered_groups", ()),
        ]:
            declared[_name_of(info)] = path.stem
    assert declared == LISTED


def loaded_by(*argv: str) -> set[str]:
    """The modules `python -m cli ARGV` imports."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "cli", *argv],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return {
        line.rsplit("|", 1)[-1].strip()
        for line in proc.stderr.splitlines()
        if line.startswith("import time:")
    }


def test_a_command_line_imports_only_the_module_of_its_command() -> None:
    commands = {m for m in loaded_by("run", "--help") if m.startswith("cli.commands.")}
    assert "cli.commands.run" in commands  # the listing is whole
    assert commands.isdisjoint({f"cli.commands.{m}" for m in ("chat", "models", "changes")})
    assert not {m for m in loaded_by("--version") if m.startswith("cli.commands.")} - {
        "cli.commands"
    }


def test_help_builds_every_command_and_imports_no_http_stack() -> None:
    loaded = loaded_by("--help")
    every = {"run", "chat", "models", "changes", "config", "audit", "sessions", "mcp"}
    assert {f"cli.commands.{m}" for m in every} <= loaded
    assert "requests" not in loaded and "rich" not in loaded and "yaml" not in loaded


def test_exit_statuses_are_the_ones_readme_lists() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Exit codes", 1)[1].split("\n#", 1)[0]
    listed = {
        int(code)
        for row in re.findall(r"^\| ([\d, ]+) \|", section, re.MULTILINE)
        for code in row.split(",")
    }
    assert listed == {int(status) for status in ExitStatus}


def test_each_failure_carries_its_exit_status() -> None:
    assert UsageError("x").exit_code is ExitStatus.USAGE
    assert ConfigError("x").exit_code is ExitStatus.USAGE
    assert StreamError("x").exit_code is ExitStatus.FAILURE
    assert AgentError("x").exit_code is ExitStatus.FAILURE
    assert Stopped(signal.SIGTERM).exit_code is ExitStatus.TERMINATED
    assert Stopped(signal.SIGHUP).exit_code is ExitStatus.HANGUP
    assert ExitStatus.of_signal(signal.SIGINT) is ExitStatus.INTERRUPTED
