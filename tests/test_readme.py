"""What README and docs/ promise, kept by tests: the two commands README opens with, the safety
figures in docs/safety.md, which must equal what the test suite actually runs, and links,
module paths and sizes that stay true as the code moves."""

from __future__ import annotations

import re
from pathlib import Path

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
DOCS = REPO / "docs"
SAFETY = (DOCS / "safety.md").read_text(encoding="utf-8")
CHAT = (DOCS / "chat-and-run.md").read_text(encoding="utf-8")
RESOLVERS = 2  # openat2 and the O_NOFOLLOW walk: the adversarial tests run both


def figure(label: str) -> int:
    """The count in docs/safety.md's figures table, in the row that starts with `label`."""
    row = re.search(rf"^\| {re.escape(label)}[^|]*\| (\d+) \|", SAFETY, re.MULTILINE)
    assert row, f"no row for {label!r} in the figures table of docs/safety.md"
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
    assert figure("bypasses of the default command deny list") == len(BYPASS_CORPUS) * len(KINDS)
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


def test_chat_table_names_every_command() -> None:
    """The chat command table (docs/chat-and-run.md) is complete: every slash command the REPL
    knows has a row."""
    from cli.ui.chat_commands import COMMANDS

    rows = "\n".join(line for line in CHAT.splitlines() if line.startswith("| `/"))
    missing = [name for name in COMMANDS if not re.search(re.escape(name) + r"(?![\w-])", rows)]
    assert missing == []


def test_readme_is_a_five_minute_read() -> None:
    """README is the newcomer's guide (at most 15 KB); the rest lives in docs/."""
    assert len(README.encode("utf-8")) <= 15_000


def markdown_files() -> list[Path]:
    return [REPO / "README.md", REPO / "CHANGELOG.md", *sorted(DOCS.glob("*.md"))]


def test_readme_links_every_document_in_docs() -> None:
    linked = set(re.findall(r"\]\(docs/([\w.-]+\.md)(?:#[\w-]*)?\)", README))
    assert sorted(path.name for path in DOCS.glob("*.md")) == sorted(linked)


def anchors(text: str) -> set[str]:
    """The anchors GitHub makes of a Markdown file's headings."""
    found = set()
    for heading in re.findall(r"^#+ (.+)$", text, re.MULTILINE):
        slug = re.sub(r"[^\w\- ]", "", heading.lower().replace("`", ""))
        found.add(slug.replace(" ", "-"))
    return found


def test_every_link_in_readme_and_docs_leads_somewhere() -> None:
    """A relative link names a file in the repository and, with #anchor, a heading in it."""
    broken = []
    for source in markdown_files():
        text = source.read_text(encoding="utf-8")
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue  # https:, mailto:
            path, _, anchor = target.partition("#")
            resolved = (source.parent / path).resolve() if path else source
            if not resolved.exists():
                broken.append(f"{source.name}: {target}")
            elif anchor and anchor not in anchors(resolved.read_text(encoding="utf-8")):
                broken.append(f"{source.name}: {target} (no such heading)")
    assert broken == []


def test_every_path_named_in_readme_and_docs_exists() -> None:
    """Module and file paths the text names (cli/loop/window.py, bench/scaling.png…) follow
    the code when it moves."""
    missing = []
    for source in markdown_files():
        text = source.read_text(encoding="utf-8")
        for path in re.findall(r"(?<![\w./$-])((?:cli|tests|bench)/[\w./-]*\w)", text):
            if not (REPO / path).exists():
                missing.append(f"{source.name}: {path}")
    assert missing == []


def test_no_reference_to_documents_outside_the_repository() -> None:
    """No section signs, seed or design notes: a reader has only what the repository holds."""
    pattern = re.compile(r"§|\bthe seed\b|\bseed's\b|design (?:note|doc)", re.IGNORECASE)
    found = [
        f"{source.name}: {match.group(0)}"
        for source in markdown_files()
        for match in pattern.finditer(source.read_text(encoding="utf-8"))
    ]
    assert found == []
