"""The direction of the arrows: the import rules of pyproject.toml ([tool.importlinter], checked
by `make lint`) hold, each of them fails when it is broken, and nothing happens at import
time."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import REPO

# The contracts: id → name, as pyproject.toml gives them (each `id = ` line is followed by
# its `name = ` line).
CONTRACTS = dict(
    re.findall(
        r'^id = "([^"]+)"\nname = "([^"]+)"$',
        (REPO / "pyproject.toml").read_text(encoding="utf-8"),
        re.MULTILINE,
    )
)


def lint_imports(project: Path) -> subprocess.CompletedProcess[str]:
    """`lint-imports` (the one `make lint` runs) on the project at `project`, whose `cli`
    package is the one analysed: it comes first on the path."""
    binary = Path(sys.executable).with_name("lint-imports")
    assert binary.exists(), f"{binary} is missing: run `make install` (import-linter is in dev)"
    env = {**os.environ, "PYTHONPATH": str(project), "COLUMNS": "200", "NO_COLOR": "1"}
    argv = [str(binary), "--no-cache"]
    return subprocess.run(argv, cwd=project, env=env, capture_output=True, text=True)


@pytest.fixture
def copy(tmp_path: Path) -> Path:
    """The project's package and its pyproject.toml, copied to a temp dir to be broken."""
    shutil.copytree(REPO / "cli", tmp_path / "cli", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def test_the_import_rules_hold() -> None:
    assert set(CONTRACTS) == {"layers", "ui-libraries", "http", "landlock-child", "main"}
    result = lint_imports(REPO)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"Contracts: {len(CONTRACTS)} kept, 0 broken." in result.stdout


def test_the_forbidden_rules_cover_every_layer() -> None:
    """A layer added to the layers contract (which makes every package under cli/ have one)
    must be added to the forbidden rules' lists too: each names every layer but its exceptions."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10: import-linter brings tomli
        import tomli as tomllib
    config = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    contracts = {c["id"]: c for c in config["tool"]["importlinter"]["contracts"]}
    layers = {
        f"cli.{name.strip()}"
        for layer in contracts["layers"]["layers"]
        for name in layer.split("|")
    }
    assert set(contracts["ui-libraries"]["source_modules"]) == layers - {
        "cli.app",
        "cli.commands",
        "cli.ui",
    }
    assert set(contracts["http"]["source_modules"]) == layers - {"cli.backends"}
    assert set(contracts["main"]["forbidden_modules"]) == layers - {"cli.app"}


def test_an_unchanged_copy_passes(copy: Path) -> None:
    """The control for the tests below: the copy alone is not what makes them fail."""
    result = lint_imports(copy)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"Contracts: {len(CONTRACTS)} kept, 0 broken." in result.stdout


def _append(path: str, line: str) -> Callable[[Path], None]:
    def change(root: Path) -> None:
        file = root / path
        file.write_text(file.read_text(encoding="utf-8") + line + "\n", encoding="utf-8")

    return change


def _new_module(root: Path) -> None:
    (root / "cli" / "helpers.py").write_text('"""A module with no layer."""\n', encoding="utf-8")


BREAKS = {
    # Each change, the contract it must break, and what the failure names.
    "upward import": (
        _append("cli/fs/paths.py", "from cli.tools import base"),
        "layers",
        "cli.fs is not allowed to import cli.tools",
    ),
    "upward import under TYPE_CHECKING": (
        # Such imports count (pyproject.toml says why).
        _append(
            "cli/backends/catalog.py",
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from cli.loop import agent",
        ),
        "layers",
        "cli.backends is not allowed to import cli.loop",
    ),
    "a module with no layer": (_new_module, "layers", "cli.helpers"),
    "rich in the core": (
        _append("cli/loop/guards.py", "import rich"),
        "ui-libraries",
        "cli.loop.guards -> rich",
    ),
    "typer in the core": (
        _append("cli/safety/policy.py", "import typer"),
        "ui-libraries",
        "cli.safety.policy -> typer",
    ),
    "requests in a tool": (
        _append("cli/tools/shell.py", "import requests"),
        "http",
        "cli.tools.shell -> requests",
    ),
    "requests elsewhere in cli.mcp": (
        _append("cli/mcp/servers.py", "import requests"),
        "http",
        "cli.mcp.servers -> requests",
    ),
    "cli in the landlock child": (
        _append("cli/safety/sandbox/landlock.py", "import cli"),
        "landlock-child",
        "cli.safety.sandbox.landlock -> cli",
    ),
    "more than cli.app in __main__": (
        _append("cli/__main__.py", "import cli.wiring"),
        "main",
        "cli.__main__ -> cli.wiring",
    ),
}


@pytest.mark.parametrize("case", list(BREAKS))
def test_a_broken_rule_fails_lint(copy: Path, case: str) -> None:
    """One change breaks one contract, and only that one, and the failure names the import
    (or the module) at fault."""
    change, contract, named = BREAKS[case]
    change(copy)
    result = lint_imports(copy)
    assert result.returncode == 1
    assert f"Contracts: {len(CONTRACTS) - 1} kept, 1 broken." in result.stdout
    assert f"{CONTRACTS[contract]} BROKEN" in result.stdout
    assert named in result.stdout.split("Broken contracts", 1)[1]


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
