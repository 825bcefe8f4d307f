"""Issue 21: "d", yes to every change under a directory for the rest of the session, beside
"a" (one tool, everywhere); a change made without asking shows what it changed, folded."""

from __future__ import annotations

from pathlib import Path

import pytest

from cli.loop.approval import Approval
from tests.fakes.fake_ollama import FakeOllama, reply, tool_call
from tests.pty.driver import Ttys
from tests.ui.test_approve import MakeChat, make_chat, numbered

__all__ = ["make_chat"]  # a fixture, imported to be used here


def test_d_covers_every_change_under_the_files_directory_only(
    make_chat: MakeChat, workspace: Path
) -> None:
    (workspace / "docs").mkdir()
    (workspace / "src").mkdir()
    chat_ = make_chat()
    first = chat_.ask("write_file", "d", path="docs/a.md", content="a\n")
    assert first == Approval(True, by="user")
    asked, choices = chat_.keys.asked[-1]
    assert "d" in choices and "[d] yes to every change under docs/ this session" in asked
    assert "every change under docs/ is made without asking" in chat_.shown
    # Any change tool, anywhere under docs/: no question.
    assert chat_.approver(chat_.request("write_file", path="docs/deep/b.md", content="b\n")) == (
        Approval(True, by="session")
    )
    assert chat_.approver(chat_.request("create_directory", path="docs/new")) == Approval(
        True, by="session"
    )
    assert len(chat_.keys.asked) == 1
    # Outside docs/ it asks again; a move out of docs/ too; a delete always asks.
    chat_.ask("write_file", "n", path="src/c.md", content="c\n")
    (workspace / "docs" / "a.md").write_text("a\n")
    chat_.ask("move_file", "n", source="docs/a.md", destination="src/a.md")
    chat_.ask("delete_file", "n", path="docs/a.md")
    assert len(chat_.keys.asked) == 4
    assert "d" not in chat_.keys.asked[-1][1]  # never offered for a delete
    chat_.approver.forget()
    chat_.ask("write_file", "n", path="docs/b.md", content="b\n")
    assert len(chat_.keys.asked) == 5


def test_d_at_the_top_names_this_directory(make_chat: MakeChat) -> None:
    chat_ = make_chat()
    chat_.ask("write_file", "d", path="a.md", content="a\n")
    asked, _ = chat_.keys.asked[-1]
    assert "[d] yes to every change under this directory this session" in asked
    assert chat_.approver(chat_.request("edit_file", path="a.md", old_string="x", new_string="y"))


@pytest.mark.pty
def test_d_at_40_columns_then_later_changes_show_a_folded_diff(
    ollama: FakeOllama, workspace: Path, ttys: Ttys
) -> None:
    (workspace / "notes.txt").write_text(numbered(30))
    changed = numbered(30).replace("line 3\n", "line three\n")
    ollama.enqueue(
        reply(tool_calls=[tool_call("write_file", {"path": "todo.md", "content": "- milk\n"})]),
        reply(
            tool_calls=[
                tool_call("write_file", {"path": "notes.txt", "content": changed}),
                tool_call("write_file", {"path": "sub/new.md", "content": numbered(20, "row")}),
            ]
        ),
        reply("Done."),
    )
    term = ttys.chat(host=ollama.url, cols=40)
    term.line("write them")
    term.wait_card(then="allow?")
    term.settle()
    rows = term.screen.rows()
    for label in ("[y] yes", "[n] no", "[a] every write_file", "[d] all under this directory"):
        assert any(label in row for row in rows), rows
    assert "[q] stop" in "\n".join(rows)
    assert all(len(row) <= 40 for row in rows)
    term.press("d")
    term.wait_turn_end(then="Done.")
    term.settle()
    shown = term.screen.text()
    assert shown.count("allow?") == 1  # the later changes were not asked
    assert "-line 3" in shown and "+line three" in shown  # the overwrite's diff
    assert "row 1" in shown and "more lines" in shown  # the new file's first lines, folded
    assert "row 20" not in shown
    assert (workspace / "notes.txt").read_text() == changed
    assert (workspace / "sub" / "new.md").exists()
