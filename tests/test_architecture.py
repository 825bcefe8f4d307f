"""The direction of the arrows: the core never imports a UI library, and nothing happens at
import time."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

CORE = [
    "cli.loop.agent",
    "cli.loop.approval",
    "cli.records.audit",
    "cli.journal.changes",
    "cli.records.sessions",
    "cli.safety.shell_line",
    "cli.safety.argv",
    "cli.safety.command_options",
    "cli.safety.command_git",
    "cli.safety.command_scripts",
    "cli.config.settings",
    "cli.loop.tokens",
    "cli.errors",
    "cli.loop.events",
    "cli.backends.failures",
    "cli.backends.messages",
    "cli.backends.ollama",
    "cli.backends.openai",
    "cli.backends.openai_dialect",
    "cli.backends.catalog",
    "cli.fs.paths",
    "cli.safety.sandbox.launch",
    "cli.safety.sensitive",
    "cli.safety.policy",
    "cli.safety.secret_files",
    "cli.loop.prompt",
    "cli.tools.schema",
    "cli.loop.sizing",
    "cli.loop.textcalls",
    "cli.loop.toolprompt",
    "cli.loop.guards",
    "cli.mcp.protocol",
    "cli.mcp.transport",
    "cli.mcp.client",
    "cli.mcp.servers",
    "cli.mcp.importing",
    "cli.loop.outcomes",
    "cli.loop.instructions",
    "cli.tools",
    "cli.tools.edits",
    "cli.tools.moves",
    "cli.tools.gate",
]


def test_core_does_not_import_ui_libraries() -> None:
    code = (
        "import sys\n"
        + "".join(f"import {m}\n" for m in CORE)
        + "ui = ('rich', 'prompt_toolkit', 'typer', 'click')\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ui)\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_importing_the_app_has_no_side_effects(home: Path) -> None:
    before = sorted(p for p in home.rglob("*"))
    # built_for([]): the app with every command, their modules imported (cli.app alone has none)
    code = "import cli.app, cli.wiring, cli.ui.trace, cli.ui.confirm; cli.app.built_for([])"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=home)
    assert sorted(p for p in home.rglob("*")) == before


def test_help_does_not_import_the_http_stack() -> None:
    code = "import sys, cli.app; cli.app.built_for([]); print('requests' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
