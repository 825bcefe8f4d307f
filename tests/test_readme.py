"""README promises that tests keep: the two commands it opens with, and the safety figures,
which must equal what the test suite actually runs."""

from __future__ import annotations

import re

import tests.adversarial.test_paths as paths
from cli.safety.sandbox.launch import KINDS
from tests.adversarial.test_bypass_corpus import BYPASS_CORPUS
from tests.adversarial.test_crash_sweep import KILL_POINTS
from tests.adversarial.test_full_disk import CASES, LEVELS
from tests.adversarial.test_hostile import FAULTS
from tests.conftest import REPO
from tests.journal.test_data_safety import INTERRUPT_DELAYS, KILLS
from tests.loop.test_properties import LOOP_EXAMPLES, SPLIT_EXAMPLES
from tests.records.test_redaction import REDACTION_CORPUS
from tests.safety.test_command_options import OPTION_LINES
from tests.safety.test_dot_entries import GENERATED_HOME, GENERATED_PROJECT
from tests.safety.test_path_classes import SECRET_PATHS, SURFACE_PATHS
from tests.safety.test_sandbox_view import CREDENTIALS, PLACES, ROUTES, SOCKETS
from tests.safety.test_shell_line_differential import FIXED_LINES, GENERATED_EXAMPLES

README = (REPO / "README.md").read_text(encoding="utf-8")
RESOLVERS = 2  # openat2 and the O_NOFOLLOW walk: the adversarial tests run both


def figure(label: str) -> int:
    """The count in the Safety table's row that starts with `label`."""
    row = re.search(rf"^\| {re.escape(label)}[^|]*\| (\d+) \|", README, re.MULTILINE)
    assert row, f"no row for {label!r} in README's Safety table"
    return int(row.group(1))


def test_readme_opens_with_the_two_commands() -> None:
    block = README.split("```sh", 1)[1].split("```", 1)[0]
    commands = [line.split("#")[0].strip() for line in block.strip().splitlines()]
    assert commands == ["make run", "make test"]


def cases(test: object) -> int:
    """How many cases pytest makes of a test function: its parametrize marks multiplied."""
    count = 1
    for mark in getattr(test, "pytestmark", []):
        if mark.name == "parametrize":
            count *= len(mark.args[1])
    return count


def test_safety_figures_are_what_the_tests_run() -> None:
    races = [getattr(paths, n) for n in dir(paths) if n.startswith("test_race_")]
    assert figure("adversarial path strings") == (
        len(paths.ADVERSARIAL_PATHS) * len(paths.TOOL_CALLS) * RESOLVERS
    )
    assert figure("races") == sum(cases(test) for test in races) * RESOLVERS
    assert figure("bypasses of the seed's command deny list") == len(BYPASS_CORPUS) * len(KINDS)
    assert figure("server faults injected") == len(FAULTS) * 2 + 1  # + connection refused
    assert figure("crashes during a write") == KILLS + 1 + len(INTERRUPT_DELAYS)
    assert figure("property-test examples") == LOOP_EXAMPLES + SPLIT_EXAMPLES
    assert figure("credential paths") == len(SECRET_PATHS)
    assert figure("audit redaction forms") == len(REDACTION_CORPUS)
    assert figure("matcher lines tried differentially") == len(FIXED_LINES) + GENERATED_EXAMPLES
    assert figure("execution surfaces") == len(SURFACE_PATHS)
    assert figure("writing or running options of allowed programs") == len(OPTION_LINES)
    assert figure("dot-paths no list names") == len(GENERATED_HOME) + len(GENERATED_PROJECT)
    assert figure("credential names × places") == len(CREDENTIALS) * len(PLACES) * len(KINDS)
    assert figure("Unix sockets outside the allowed dirs") == len(SOCKETS) * len(KINDS)
    assert figure("routes to memory") == len(ROUTES) * len(KINDS)
    assert figure("kill points swept") == sum(KILL_POINTS.values())
    assert figure("fill levels tried") == len(LEVELS) * len(CASES)


def test_readme_first_screen_says_how_to_use_it_on_a_project() -> None:
    """A newcomer's first screen: an install that puts `agent` on PATH, and where to start it."""
    first = README.split("## ", 1)[0]
    assert "pipx install /path/to/metona-agent" in first and "uv tool install" in first
    assert "cd ~/code/your-project && agent chat" in first


def test_readme_chat_table_names_every_command() -> None:
    """The chat command table is complete: every slash command the REPL knows has a row."""
    from cli.ui.repl import COMMANDS

    rows = "\n".join(line for line in README.splitlines() if line.startswith("| `/"))
    missing = [name for name in COMMANDS if not re.search(re.escape(name) + r"(?![\w-])", rows)]
    assert missing == []
