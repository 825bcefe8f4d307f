"""Issue 21, small frictions: search_files without `path` searches the working directory (small
models leave it out); a card's title shows every argument given a value that is not its
default (six `list_directory file.txt` calls differed only in `recursive`); counts of one are
singular ("1 turn", "1 entry")."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console

from cli.backends.messages import ToolCall
from cli.loop.events import ToolDecided, ToolResult
from cli.records.sessions import SessionStore
from cli.safety.policy import Decision
from cli.ui.render import ChatRenderer
from cli.ui.text import result_summary
from tests.conftest import RunCli
from tests.fakes.fake_ollama import FakeOllama, reply, tool_call


@pytest.fixture
def run_cli(run_cli_in_process: RunCli) -> RunCli:
    """`agent` in this process (conftest.run_in_process): no test here is about the process."""
    return run_cli_in_process


def test_search_files_without_path_searches_the_working_directory(
    run_cli: RunCli, ollama: FakeOllama, workspace: Path
) -> None:
    (workspace / "src").mkdir()
    (workspace / "src" / "app.py").write_text("x = 1  # TODO tidy\n")
    ollama.enqueue(
        reply(tool_calls=[tool_call("search_files", {"query": "TODO"})]),
        reply("Found it."),
    )
    done = run_cli("run", "find the todos")
    assert done.code == 0, done.stderr
    result = json.loads(ollama.chat_bodies[1]["messages"][-1]["content"])
    assert result["success"] is True, result
    assert [r["path"] for r in result["results"]] == ["src/app.py"]
    schema = next(
        t["function"]
        for t in ollama.chat_bodies[0]["tools"]
        if t["function"]["name"] == "search_files"
    )
    assert schema["parameters"]["required"] == ["query"]


def card_titles(calls: list[ToolCall]) -> list[str]:
    out = io.StringIO()
    renderer = ChatRenderer(Console(file=out, width=120, color_system=None), cwd="/w")
    for call in calls:
        decided = ToolDecided(call, Decision("allow", "allowed", "setting"), True, "policy", "")
        result = {"success": True, "entries": [], "total": 0}
        renderer.handle(ToolResult(call, result, 0.01, decided))
    return [line for line in out.getvalue().splitlines() if "list_directory" in line]


def test_cards_show_the_arguments_that_differ_from_their_defaults() -> None:
    calls = [
        ToolCall("list_directory", {"path": "file.txt"}),
        ToolCall("list_directory", {"path": "file.txt", "recursive": True}),
        ToolCall("list_directory", {"path": "file.txt", "recursive": False}),
        ToolCall("list_directory", {"path": "file.txt", "recursive": True, "max_depth": 2}),
        ToolCall("list_directory", {"path": "file.txt", "include_hidden": True}),
        ToolCall("list_directory", {"path": "file.txt", "filter_extension": ".py"}),
    ]
    titles = [t.split(" · ")[0] for t in card_titles(calls)]
    assert titles == [
        "✅ 📁 list_directory file.txt",
        "✅ 📁 list_directory file.txt (recursive)",
        "✅ 📁 list_directory file.txt",  # false is the default: nothing to tell
        "✅ 📁 list_directory file.txt (recursive, max_depth=2)",
        "✅ 📁 list_directory file.txt (include_hidden)",
        "✅ 📁 list_directory file.txt (filter_extension='.py')",
    ]


def test_counts_of_one_are_singular(run_cli: RunCli, home: Path, workspace: Path) -> None:
    assert result_summary("list_directory", {"success": True, "total": 1}) == "1 entry"
    assert result_summary("list_directory", {"success": True, "total": 2}) == "2 entries"
    found = {"success": True, "total_matches": 1, "total_files": 1}
    assert result_summary("search_files", found) == "1 match in 1 file"
    store = SessionStore(home / ".local/share/metona-agent/sessions")
    chat = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    store.save("one", "qwen3:8b", chat, cwd=str(workspace))
    listed = run_cli("sessions")
    assert listed.code == 0, listed.stderr
    row = next(line for line in listed.stdout.splitlines() if line.startswith("one "))
    assert "  1 turn " in row and "turns" not in row
