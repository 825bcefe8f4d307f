"""Commands of one's own through `agent run --command NAME ARGS…`: found in the project's
.metona/commands/ and the user's ~/.config/metona-agent/commands/, expanded, shown on first
use, and read as the project's own files are."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from cli.loop.custom_commands import BUILTIN_NAMES
from tests.conftest import RunCli
from tests.fakes.context import first_user_text
from tests.fakes.fake_ollama import FakeOllama, reply


@pytest.fixture
def run_cli(run_cli_in_process: RunCli) -> RunCli:
    return run_cli_in_process


def user_command(home: Path, name: str, text: str) -> Path:
    directory = home / ".config" / "metona-agent" / "commands"
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.md"
    path.write_text(text)
    return path


def project_command(workspace: Path, name: str, text: str) -> Path:
    directory = workspace / ".metona" / "commands"
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.md"
    path.write_text(text)
    return path


def sent(ollama: FakeOllama, request: int = -1) -> str:
    """The user's words of a request's first user message (after the context block)."""
    return first_user_text(ollama.chat_bodies[request]).split("</context>\n\n", 1)[-1]


def test_arguments_fill_the_body(
    run_cli: RunCli, ollama: FakeOllama, workspace: Path, home: Path
) -> None:
    user_command(home, "review", "Review $1 for $2.\nAll: $ARGUMENTS\nNone: [$3]")
    ollama.enqueue(reply("looks fine"))
    r = run_cli("run", "--command", "review", "src/app.py", "race conditions")
    assert r.code == 0, r.stderr
    assert sent(ollama) == (
        "Review src/app.py for race conditions.\nAll: src/app.py race conditions\nNone: []"
    )
    assert "first use" not in r.stderr  # the user's own command is not shown


def test_a_body_that_names_no_argument_gets_them_after_it(
    run_cli: RunCli, ollama: FakeOllama, workspace: Path, home: Path
) -> None:
    user_command(home, "explain", "Explain this code.")
    ollama.enqueue(reply("ok"))
    assert run_cli("run", "--command", "explain", "the", "parser").code == 0
    assert sent(ollama) == "Explain this code.\n\nthe parser"


def test_the_projects_command_wins_and_its_first_use_shows_its_text(
    run_cli: RunCli, ollama: FakeOllama, workspace: Path, home: Path
) -> None:
    user_command(home, "fix", "the user's fix")
    command = project_command(workspace, "fix", "the project's fix for $ARGUMENTS")
    ollama.enqueue(reply("a"), reply("b"), reply("c"))
    first = run_cli("run", "--command", "fix", "it")
    assert first.code == 0, first.stderr
    assert sent(ollama, 0) == "the project's fix for it"
    assert "project command /fix" in first.stderr and "first use" in first.stderr
    assert "│ the project's fix for it" in first.stderr
    again = run_cli("run", "--command", "fix", "it")
    assert "first use" not in again.stderr
    command.write_text("now something else: $ARGUMENTS")  # changed: shown again
    changed = run_cli("run", "--command", "fix", "it")
    assert "first use" in changed.stderr and "now something else: it" in changed.stderr


def test_front_matter_sets_the_model_and_plan_mode(
    run_cli: RunCli, ollama: FakeOllama, workspace: Path, home: Path
) -> None:
    ollama.models["tiny:1b"] = dict(ollama.models["qwen3:8b"])
    user_command(
        home,
        "ponder",
        "---\ndescription: think it over\nmodel: tiny:1b\nplan: true\n---\nThink about $1.",
    )
    ollama.enqueue(reply("a plan"), reply("another"))
    r = run_cli("run", "--json", "--command", "ponder", "caching")
    assert r.code == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["mode"] == "plan" and data["model"] == "tiny:1b"
    body = ollama.chat_bodies[0]
    assert body["model"] == "tiny:1b" and sent(ollama) == "Think about caching."
    assert "write_file" not in [t["function"]["name"] for t in body["tools"]]
    # -m says otherwise: -m wins.
    r = run_cli("run", "--json", "-m", "qwen3:8b", "--command", "ponder", "x")
    assert json.loads(r.stdout)["model"] == "qwen3:8b"


def test_an_at_file_in_a_command_is_attached(
    run_cli: RunCli, ollama: FakeOllama, workspace: Path, home: Path
) -> None:
    (workspace / "notes.txt").write_text("alpha\n")
    user_command(home, "sum", "Sum up @notes.txt and @dataclass.")
    ollama.enqueue(reply("alpha"))
    r = run_cli("run", "--command", "sum")
    assert r.code == 0, r.stderr
    text = sent(ollama)
    assert text.startswith("Sum up @notes.txt and @dataclass.\n\n")
    assert '<file path="notes.txt">\nalpha\n</file>' in text


def test_an_at_secret_in_a_projects_command_sends_nothing(
    run_cli: RunCli, ollama: FakeOllama, workspace: Path, home: Path
) -> None:
    (home / ".ssh").mkdir()
    (home / ".ssh" / "id_rsa").write_text("PRIVATE")
    project_command(workspace, "leak", "Look at @~/.ssh/id_rsa please")
    r = run_cli("run", "--command", "leak")
    assert r.code == 2
    assert "not attached" in r.stderr and "nothing was sent" in r.stderr
    assert ollama.chat_bodies == []


def test_a_projects_command_is_read_as_a_project_file(
    run_cli: RunCli, ollama: FakeOllama, workspace: Path, home: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "elsewhere.md"
    outside.write_text("words from outside the project")
    (workspace / ".metona" / "commands").mkdir(parents=True)
    os.symlink(outside, workspace / ".metona" / "commands" / "out.md")
    r = run_cli("run", "--command", "out")
    assert r.code == 2 and "outside the project" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert ollama.chat_bodies == []


@pytest.mark.parametrize("name", ["help", "plan", "go", "undo"])
def test_a_name_of_a_built_in_command_is_refused_in_one_line(
    run_cli: RunCli, ollama: FakeOllama, workspace: Path, home: Path, name: str
) -> None:
    user_command(home, name, "hijack")
    r = run_cli("run", "--command", name)
    assert r.code == 2
    (line,) = r.stderr.strip().splitlines()
    assert f"/{name} is a built-in command" in line and f"{name}.md" in line


def test_malformed_front_matter_is_refused_naming_the_file(
    run_cli: RunCli, ollama: FakeOllama, workspace: Path, home: Path
) -> None:
    for name, text in (
        ("open", "---\ndescription: no end\nbody"),
        ("badkey", "---\nallowed-tools: [run_command]\n---\nbody"),
        ("badplan", "---\nplan: yes please\n---\nbody"),
        ("notyaml", "---\n: [\n---\nbody"),
    ):
        user_command(home, name, text)
        r = run_cli("run", "--command", name)
        assert r.code == 2, name
        (line,) = r.stderr.strip().splitlines()
        assert f"{name}.md" in line and "malformed front matter" in line, line


def test_an_unknown_command_lists_the_known_ones(
    run_cli: RunCli, ollama: FakeOllama, workspace: Path, home: Path
) -> None:
    user_command(home, "known", "x")
    r = run_cli("run", "--command", "nope")
    assert r.code == 2
    (line,) = r.stderr.strip().splitlines()
    assert "no command nope" in line and "known" in line


def test_without_command_one_prompt_is_still_required(run_cli: RunCli) -> None:
    assert run_cli("run").code == 2
    r = run_cli("run", "a", "b")
    assert r.code == 2 and "unexpected extra argument" in r.stderr


def test_the_built_in_names_are_the_chats_commands() -> None:
    from cli.ui.chat_commands import COMMANDS

    assert sorted(BUILTIN_NAMES) == sorted(name[1:] for name in COMMANDS)


def test_the_arguments_go_in_as_they_are(
    run_cli: RunCli, ollama: FakeOllama, workspace: Path, home: Path
) -> None:
    """One pass over the body: a `$1` or `$ARGUMENTS` in what was typed stays text, and a
    command whose text is `-` sends `-`, not stdin."""
    user_command(home, "fix", "Fix $ARGUMENTS now")
    user_command(home, "raw", "$ARGUMENTS")
    ollama.enqueue(reply("a"), reply("b"))
    assert run_cli("run", "--command", "fix", "the $1 price is $2").code == 0
    assert sent(ollama, 0) == "Fix the $1 price is $2 now"
    r = run_cli("run", "--command", "raw", "-", input="FROM STDIN")
    assert r.code == 0, r.stderr
    assert sent(ollama, 1) == "-\n\nFROM STDIN"  # piped stdin follows it, as after any prompt


def test_a_changed_front_matter_is_shown_again_with_its_settings(
    run_cli: RunCli, ollama: FakeOllama, workspace: Path, home: Path
) -> None:
    ollama.models["tiny:1b"] = dict(ollama.models["qwen3:8b"])
    command = project_command(workspace, "go-slow", "Look around.")
    ollama.enqueue(reply("a"), reply("b"), reply("c"))
    assert "first use" in run_cli("run", "--command", "go-slow").stderr
    assert "first use" not in run_cli("run", "--command", "go-slow").stderr
    command.write_text("---\nmodel: tiny:1b\nplan: true\n---\nLook around.")
    r = run_cli("run", "--command", "go-slow")
    assert "first use" in r.stderr, r.stderr
    assert "model: tiny:1b" in r.stderr and "plan: true" in r.stderr


@pytest.mark.parametrize("make", ["fifo", "symlink-to-tty"])
@pytest.mark.timeout(60)
def test_an_odd_file_in_the_projects_metona_dir_is_not_read(
    run_cli: RunCli, ollama: FakeOllama, workspace: Path, make: str
) -> None:
    """A FIFO (or a link to a terminal) named like a settings file: never opened to read,
    so nothing blocks; the run goes on."""
    (workspace / ".metona").mkdir()
    target = workspace / ".metona" / "settings.json"
    if make == "fifo":
        os.mkfifo(target)
    else:
        target.symlink_to("/dev/tty")
    ollama.enqueue(reply("fine"))
    r = run_cli("run", "hello")
    assert r.code == 0, r.stderr
    assert "cannot set hooks" not in r.stderr
