"""edit_file and move_file: the matching stages, the errors a model can act on, the policy on
both sides of a move, a directory's tree at the policy's edges, and undo for both — through
the real agent against the fake server, with real files."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from cli.errors import ToolError
from cli.fs.renaming import rename
from cli.loop.events import ToolDecided, ToolResult
from cli.tools.base import ToolContext
from cli.tools.edits import EditFailed, plan_edit
from tests.conftest import Harness, MakeAgent, RunCli
from tests.fakes.fake_ollama import FakeOllama, reply, tool_call

# -- the matching stages (pure) ----------------------------------------------------------------

CODE = "def f():\n    x = 1\n    return x\n\n\ndef g():\n    return 2\n"


@pytest.fixture
def run_cli(run_cli_in_process: RunCli) -> RunCli:
    """`agent` in this process (conftest.run_in_process): no test here is about the process."""
    return run_cli_in_process


@pytest.mark.parametrize(
    ("text", "old", "new", "expected", "stage"),
    [
        pytest.param(CODE, "x = 1", "x = 2", CODE.replace("x = 1", "x = 2"), "exact", id="exact"),
        pytest.param(
            "a = 1   \nb = 2\t\n", "a = 1\nb = 2", "c = 3", "c = 3\n", "trailing whitespace",
            id="trailing-whitespace",
        ),
        pytest.param(
            CODE, "x = 1\nreturn x", "y = 3\nif y:\n    return y",
            "def f():\n    y = 3\n    if y:\n        return y\n\n\ndef g():\n    return 2\n",
            "indentation", id="reindented-to-the-file",
        ),
        pytest.param(
            "msg = “don’t” — ok\n", "msg = \"don't\" - ok", "msg = 'x'", "msg = 'x'\n",
            "typography", id="typographic-quotes-and-dashes",
        ),
        pytest.param(
            "a\u00a0b\n", "a b", "ab", "ab\n", "typography", id="non-breaking-space",
        ),
        pytest.param(
            "one\r\ntwo\r\nthree\r\n", "two\nthree", "2\n3", "one\r\n2\r\n3\r\n", "exact",
            id="crlf-kept",
        ),
        pytest.param(
            "keep\ndrop me  \nkeep too\n", "drop me\n", "", "keep\nkeep too\n",
            "trailing whitespace", id="lines-deleted-leniently",
        ),
    ],
)  # fmt: skip
def test_stages(text: str, old: str, new: str, expected: str, stage: str) -> None:
    edit = plan_edit(text, old, new)
    assert (edit.text, edit.stage) == (expected, stage)


def test_an_earlier_stage_wins_and_exact_beats_lenient() -> None:
    # "x = 1" matches exactly once; the indented form would match leniently too.
    edit = plan_edit("x = 1\n    x = 1  \n", "x = 1\n", "y\n")
    assert edit.stage == "exact" and edit.text == "y\n    x = 1  \n"


def test_a_lenient_match_must_be_unique() -> None:
    text = "if a:\n    go()  \nif b:\n  go()\t\n"  # never exactly "go()\n"
    with pytest.raises(
        EditFailed, match=r"matches 2 places \(ignoring indentation\), at lines 2, 4"
    ):
        plan_edit(text, "go()\n", "stop()\n")


def test_several_exact_matches_need_replace_all() -> None:
    with pytest.raises(EditFailed) as info:
        plan_edit(CODE, "return", "yield")
    message, hint = str(info.value), info.value.hint
    assert "at lines 3, 7" in message
    assert "add surrounding lines" in hint and "replace_all" in hint
    edit = plan_edit(CODE, "return", "yield", replace_all=True)
    assert edit.replacements == 2 and edit.text.count("yield") == 2
    assert edit.line_range == (3, 7) and (edit.added, edit.removed) == (2, 2)


def test_no_match_quotes_the_most_similar_lines_with_numbers() -> None:
    with pytest.raises(EditFailed) as info:
        plan_edit(CODE, "    retrun x\n", "    return y\n")
    assert "not found" in str(info.value)
    assert "    3:     return x" in info.value.hint  # for the model, not the person


@pytest.mark.parametrize(
    ("old", "new", "words"),
    [("", "x", "old_string is empty"), ("same", "same", "are the same")],
    ids=["empty-old", "old-equals-new"],
)
def test_pointless_edits_are_refused(old: str, new: str, words: str) -> None:
    with pytest.raises(EditFailed, match=words):
        plan_edit("same\n", old, new)


def test_line_range_and_diff_stat() -> None:
    edit = plan_edit("a\nb\nc\n", "b\n", "B1\nB2\nB3\n")
    assert edit.line_range == (2, 4)
    assert (edit.added, edit.removed) == (3, 1)


def test_matching_is_not_quadratic_on_a_big_file() -> None:
    # 20,000 identical lines and a snippet that matches none: the scan stays linear-ish
    # (one comparison per line, a bounded number of ratio computations).
    text = "value = 1\n" * 20_000
    with pytest.raises(EditFailed, match="not found"):
        plan_edit(text, "something else entirely = 2\nand more\n", "x")


# -- edit_file through the agent ----------------------------------------------------------------


def results(events: list[Any]) -> list[dict[str, Any]]:
    return [e.result for e in events if isinstance(e, ToolResult)]


def decisions(events: list[Any]) -> list[ToolDecided]:
    return [e for e in events if isinstance(e, ToolDecided)]


def run_calls(
    harness: Harness, ollama: FakeOllama, *calls: tuple[str, dict[str, Any]]
) -> list[dict[str, Any]]:
    """One turn in which the model makes `calls` one step at a time, then answers."""
    for name, args in calls:
        ollama.enqueue(reply(tool_calls=[tool_call(name, args)]))
    ollama.enqueue(reply("done"))
    return results(harness.run("go"))


YES = "policy:\n  confirm: none\n"


def test_edit_after_read_changes_the_file_and_reports_it(
    make_agent: MakeAgent, ollama: FakeOllama, workspace: Path
) -> None:
    (workspace / "app.py").write_text(CODE)
    out = run_calls(
        make_agent(YES),
        ollama,
        ("read_file", {"path": "app.py"}),
        ("edit_file", {"path": "app.py", "old_string": "x = 1", "new_string": "x = 42"}),
    )
    edited = out[1]
    assert edited["success"] is True, edited
    assert edited["path"] == str(workspace / "app.py")
    assert edited["replacements"] == 1
    assert edited["line_range"] == [2, 2]
    assert edited["diff_stat"] == {"added": 1, "removed": 1}
    assert isinstance(edited["change"], int)
    assert (workspace / "app.py").read_text() == CODE.replace("x = 1", "x = 42")


def test_edit_without_reading_first_is_refused(
    make_agent: MakeAgent, ollama: FakeOllama, workspace: Path
) -> None:
    (workspace / "app.py").write_text(CODE)
    out = run_calls(
        make_agent(YES),
        ollama,
        ("edit_file", {"path": "app.py", "old_string": "x = 1", "new_string": "x = 2"}),
    )
    assert out[0]["success"] is False and "was not read" in out[0]["error"]
    assert "read_file first" in out[0]["hint"]
    assert (workspace / "app.py").read_text() == CODE


def test_an_edit_over_someone_elses_change_is_a_conflict(
    make_agent: MakeAgent, ollama: FakeOllama, workspace: Path
) -> None:
    target = workspace / "app.py"
    target.write_text(CODE)
    harness = make_agent(YES)
    run_calls(harness, ollama, ("read_file", {"path": "app.py"}))
    target.write_text(CODE + "# someone's edit\n")
    out = run_calls(
        harness,
        ollama,
        ("edit_file", {"path": "app.py", "old_string": "x = 1", "new_string": "x = 2"}),
    )
    assert out[0]["success"] is False and "changed on disk" in out[0]["error"]
    assert target.read_text() == CODE + "# someone's edit\n"


def test_two_failed_edits_suggest_write_file_and_the_count_is_per_turn(
    make_agent: MakeAgent, ollama: FakeOllama, workspace: Path
) -> None:
    (workspace / "app.py").write_text(CODE)
    harness = make_agent(YES)
    bad = {"path": "app.py", "old_string": "nothing like this", "new_string": "x"}
    out = run_calls(
        harness, ollama, ("read_file", {"path": "app.py"}), ("edit_file", bad), ("edit_file", bad)
    )
    first, second = out[1]["hint"], out[2]["hint"]  # what the model is told to do
    assert "write_file" not in first
    assert "failed 2 times" in second and "write_file the whole new content" in second
    again = run_calls(harness, ollama, ("edit_file", bad))  # a new turn: counted afresh
    assert "write_file" not in again[0]["hint"]


def test_edit_is_asked_under_write_only_and_yes_approves_it(
    run_cli: RunCli, ollama: FakeOllama, workspace: Path
) -> None:
    (workspace / "app.py").write_text(CODE)
    edit = {"path": "app.py", "old_string": "x = 1", "new_string": "x = 7"}
    ollama.enqueue(
        reply(tool_calls=[tool_call("read_file", {"path": "app.py"})]),
        reply(tool_calls=[tool_call("edit_file", edit)]),
        reply("edited"),
    )
    refused = run_cli("run", "edit it")  # no terminal: an ask is denied
    assert refused.code == 0 and (workspace / "app.py").read_text() == CODE
    ollama.enqueue(
        reply(tool_calls=[tool_call("read_file", {"path": "app.py"})]),
        reply(tool_calls=[tool_call("edit_file", edit)]),
        reply("edited"),
    )
    done = run_cli("run", "--yes", "edit it")  # edit_file is in policy.unattended
    assert done.code == 0, done.stderr
    assert (workspace / "app.py").read_text() == CODE.replace("x = 1", "x = 7")


def test_edit_of_a_protected_file_needs_a_person_and_a_secret_is_denied(
    make_agent: MakeAgent, ollama: FakeOllama, workspace: Path
) -> None:
    (workspace / ".bashrc").write_text("alias ll=ls\n")
    (workspace / ".env").write_text("TOKEN=x\n")
    harness = make_agent("policy:\n  confirm: none\n")
    rc = {"path": ".bashrc", "old_string": "ll", "new_string": "x"}
    env = {"path": ".env", "old_string": "x", "new_string": "y"}
    ollama.enqueue(
        reply(tool_calls=[tool_call("edit_file", rc)]),
        reply(tool_calls=[tool_call("edit_file", env)]),
        reply("done"),
    )
    events = harness.run("go")
    first, second = decisions(events)
    assert first.decision.rule == "protected" and first.decision.needs_human
    assert not first.allowed  # the scripted approver says no
    assert second.decision.action == "deny" and second.decision.rule == "sensitive"
    assert (workspace / ".bashrc").read_text() == "alias ll=ls\n"


def test_an_edit_can_be_undone(
    make_agent: MakeAgent, run_cli: RunCli, ollama: FakeOllama, workspace: Path
) -> None:
    (workspace / "app.py").write_text(CODE)
    run_calls(
        make_agent(YES),
        ollama,
        ("read_file", {"path": "app.py"}),
        ("edit_file", {"path": "app.py", "old_string": "x = 1", "new_string": "x = 2"}),
    )
    assert "edit_file" in run_cli("history").stdout
    undone = run_cli("undo")
    assert undone.code == 0, undone.stderr
    assert (workspace / "app.py").read_text() == CODE


def test_edit_confirmation_shows_the_diff(
    make_agent: MakeAgent, ollama: FakeOllama, workspace: Path
) -> None:
    from rich.console import Console

    from cli.ui.approval_card import describe

    (workspace / "app.py").write_text(CODE)
    harness = make_agent()
    run_calls(harness, ollama, ("read_file", {"path": "app.py"}))
    edit = {"path": "app.py", "old_string": "x = 1", "new_string": "x = 9"}
    ollama.enqueue(reply(tool_calls=[tool_call("edit_file", edit)]), reply("ok"))
    harness.run("edit")
    request = harness.approver.requests[-1]
    lines, shown = describe(request, str(workspace))
    console = Console(width=100, record=True, color_system=None)
    for line in lines:
        console.print(line)
    text = console.export_text()
    assert "1 replacement at lines 2-2" in text
    assert "-    x = 1" in text and "+    x = 9" in text
    assert {"old_string", "new_string"} <= shown


# -- move_file ------------------------------------------------------------------------------------


def move(source: str, destination: str, **extra: Any) -> tuple[str, dict[str, Any]]:
    return ("move_file", {"source": source, "destination": destination, **extra})


def test_move_renames_and_undo_moves_it_back_and_redo_again(
    make_agent: MakeAgent, run_cli: RunCli, ollama: FakeOllama, workspace: Path
) -> None:
    (workspace / "draft.md").write_text("text\n")
    out = run_calls(make_agent(YES), ollama, move("draft.md", "docs/notes/final.md"))
    assert out[0]["success"] is True, out[0]
    assert out[0]["type"] == "file" and out[0]["replaced"] is False
    assert not (workspace / "draft.md").exists()
    assert (workspace / "docs/notes/final.md").read_text() == "text\n"  # parents made
    undone = run_cli("undo")
    assert undone.code == 0, undone.stderr
    assert "move" in undone.stderr
    assert (workspace / "draft.md").read_text() == "text\n"
    assert not (workspace / "docs/notes/final.md").exists()
    redone = run_cli("redo")
    assert redone.code == 0, redone.stderr
    assert (workspace / "docs/notes/final.md").read_text() == "text\n"


def test_an_existing_destination_needs_overwrite_and_is_kept_for_undo(
    make_agent: MakeAgent, run_cli: RunCli, ollama: FakeOllama, workspace: Path
) -> None:
    (workspace / "new.txt").write_text("new\n")
    (workspace / "old.txt").write_text("old\n")
    harness = make_agent(YES)
    out = run_calls(harness, ollama, move("new.txt", "old.txt"))
    assert out[0]["success"] is False and "set overwrite" in out[0]["hint"]
    assert (workspace / "old.txt").read_text() == "old\n"
    out = run_calls(harness, ollama, move("new.txt", "old.txt", overwrite=True))
    assert out[0]["success"] is True and out[0]["replaced"] is True
    assert (workspace / "old.txt").read_text() == "new\n" and not (workspace / "new.txt").exists()
    undone = run_cli("undo")
    assert undone.code == 0, undone.stderr
    assert (workspace / "new.txt").read_text() == "new\n"
    assert (workspace / "old.txt").read_text() == "old\n"  # back from the trash


def test_a_directory_moves_whole_and_is_never_replaced(
    make_agent: MakeAgent, ollama: FakeOllama, workspace: Path
) -> None:
    (workspace / "src" / "pkg").mkdir(parents=True)
    (workspace / "src" / "pkg" / "a.py").write_text("a\n")
    (workspace / "dest").mkdir()
    harness = make_agent(YES)
    out = run_calls(harness, ollama, move("src", "dest", overwrite=True))
    assert out[0]["success"] is False and "never replaced" in out[0]["error"]
    assert "dest/src" in out[0]["hint"]
    out = run_calls(harness, ollama, move("src", "dest/src"))
    assert out[0]["success"] is True and out[0]["type"] == "directory"
    assert (workspace / "dest/src/pkg/a.py").read_text() == "a\n"
    out = run_calls(harness, ollama, move("dest", "dest/src/pkg/inner"))
    assert out[0]["success"] is False and "inside" in out[0]["error"]


def test_a_symlink_moves_as_a_link(
    make_agent: MakeAgent, ollama: FakeOllama, workspace: Path
) -> None:
    (workspace / "target.txt").write_text("t\n")
    os.symlink("target.txt", workspace / "link")
    out = run_calls(make_agent(YES), ollama, move("link", "renamed-link"))
    assert out[0]["success"] is True and out[0]["type"] == "symlink"
    assert os.readlink(workspace / "renamed-link") == "target.txt"
    assert (workspace / "target.txt").read_text() == "t\n"


@pytest.mark.parametrize(
    ("source", "destination", "rule"),
    [
        (".env", "env.txt", "sensitive"),  # a secret made readable by renaming it
        ("notes.txt", ".env", "sensitive"),
        ("notes.txt", "/tmp/elsewhere.txt", "outside_allowed"),
        ("notes.txt", "../outside.txt", "outside_allowed"),
    ],
    ids=["secret-source", "secret-destination", "outside-absolute", "outside-dotdot"],
)
def test_a_move_never_crosses_the_policy_boundary(
    make_agent: MakeAgent,
    ollama: FakeOllama,
    workspace: Path,
    source: str,
    destination: str,
    rule: str,
) -> None:
    (workspace / ".env").write_text("TOKEN=1\n")
    (workspace / "notes.txt").write_text("n\n")
    ollama.enqueue(reply(tool_calls=[tool_call(*move(source, destination))]), reply("ok"))
    events = make_agent(YES).run("go")
    decided = decisions(events)[0]
    assert decided.decision.action == "deny" and decided.decision.rule == rule
    assert (workspace / ".env").read_text() == "TOKEN=1\n"
    assert (workspace / "notes.txt").read_text() == "n\n"


def test_moving_onto_an_execution_surface_needs_a_person(
    make_agent: MakeAgent, ollama: FakeOllama, workspace: Path
) -> None:
    (workspace / "script.sh").write_text("echo hi\n")
    ollama.enqueue(reply(tool_calls=[tool_call(*move("script.sh", ".git/hooks/pre-commit"))]))
    ollama.enqueue(reply("ok"))
    events = make_agent(YES).run("go")
    decided = decisions(events)[0]
    assert decided.decision.needs_human and not decided.allowed
    assert not (workspace / ".git").exists()


def test_a_directory_holding_a_secret_does_not_move(
    make_agent: MakeAgent, ollama: FakeOllama, workspace: Path
) -> None:
    # Renamed, the tree would still hold the key, but under a name nothing protects if the
    # secret is one by where it is: refused outright, whatever it holds.
    (workspace / "project" / "deploy").mkdir(parents=True)
    (workspace / "project" / "deploy" / "id_rsa").write_text("KEY\n")
    ollama.enqueue(reply(tool_calls=[tool_call(*move("project", "archive/project"))]))
    ollama.enqueue(reply("ok"))
    events = make_agent(YES).run("go")
    decided = decisions(events)[0]
    assert decided.decision.action == "deny" and decided.decision.rule == "move_boundary"
    assert "id_rsa" in decided.decision.reason
    assert (workspace / "project" / "deploy" / "id_rsa").exists()


def test_a_secret_by_location_is_not_unprotected_by_moving_its_parent(
    make_agent: MakeAgent, ollama: FakeOllama, home: Path
) -> None:
    # ~/.config/gh/hosts.yml is a secret because of where it is; ~/cfg/gh/hosts.yml would
    # not be. The home dir allowed, moving ~/.config is refused.
    gh = home / ".config" / "gh"
    gh.mkdir(parents=True)
    (gh / "hosts.yml").write_text("oauth_token: x\n")
    yaml = f"policy:\n  confirm: none\n  allowed_dirs: [{home}]\n"
    ollama.enqueue(reply(tool_calls=[tool_call(*move(str(home / ".config"), str(home / "cfg")))]))
    ollama.enqueue(reply("ok"))
    events = make_agent(yaml).run("go")
    decided = decisions(events)[0]
    assert decided.decision.action == "deny", decided.decision
    assert (gh / "hosts.yml").exists() and not (home / "cfg").exists()


def test_a_directory_holding_an_execution_surface_needs_a_person(
    make_agent: MakeAgent, ollama: FakeOllama, workspace: Path
) -> None:
    (workspace / "repo" / ".git").mkdir(parents=True)
    (workspace / "repo" / ".git" / "config").write_text("[core]\n")
    ollama.enqueue(reply(tool_calls=[tool_call(*move("repo", "repo2"))]), reply("ok"))
    harness = make_agent(YES)
    events = harness.run("go")
    decided = decisions(events)[0]
    assert decided.decision.rule == "move_boundary" and decided.decision.needs_human
    assert (workspace / "repo").is_dir() and not (workspace / "repo2").exists()


def test_an_allowed_dir_itself_cannot_be_moved(
    make_agent: MakeAgent, ollama: FakeOllama, workspace: Path
) -> None:
    ollama.enqueue(reply(tool_calls=[tool_call(*move(str(workspace), "x"))]), reply("ok"))
    decided = decisions(make_agent(YES).run("go"))[0]
    assert decided.decision.action == "deny" and decided.decision.rule == "allowed_root"


def test_move_is_asked_even_with_yes(run_cli: RunCli, ollama: FakeOllama, workspace: Path) -> None:
    # move_file is not in policy.unattended by default: without a terminal it is denied.
    (workspace / "a.txt").write_text("a\n")
    ollama.enqueue(reply(tool_calls=[tool_call(*move("a.txt", "b.txt"))]), reply("ok"))
    r = run_cli("run", "--yes", "move it")
    assert r.code == 0, r.stderr
    assert (workspace / "a.txt").exists() and not (workspace / "b.txt").exists()


def test_rename_never_replaces_what_appeared_at_the_destination(workspace: Path) -> None:
    # The tool checks the destination first; if something appears there before the rename,
    # renameat2(RENAME_NOREPLACE) refuses instead of overwriting it.
    (workspace / "a.txt").write_text("a\n")
    (workspace / "b.txt").write_text("someone's file\n")
    ctx = ToolContext(cwd=str(workspace), roots=(str(workspace),))
    src = ctx.target(str(workspace / "a.txt"))
    dst = ctx.target(str(workspace / "b.txt"))
    with pytest.raises(ToolError, match="appeared meanwhile"):
        rename(src, dst)
    assert (workspace / "b.txt").read_text() == "someone's file\n"
    assert (workspace / "a.txt").read_text() == "a\n"


def test_the_tree_check_enters_every_directory(
    make_agent: MakeAgent, ollama: FakeOllama, workspace: Path
) -> None:
    # Listing and search skip noise dirs (.cache, .hg, .idea…); the move check must not: a
    # secret below one would otherwise move out from under its protection.
    private = workspace / "proj" / ".cache" / "private"
    private.mkdir(parents=True)
    (private / "data.txt").write_text("TOP SECRET\n")
    yaml = f"policy:\n  confirm: none\n  secrets: ['{workspace}/proj/.cache/private']\n"
    ollama.enqueue(reply(tool_calls=[tool_call(*move("proj", "p2"))]), reply("ok"))
    decided = decisions(make_agent(yaml).run("go"))[0]
    assert decided.decision.action == "deny" and decided.decision.rule == "move_boundary"
    assert (private / "data.txt").exists() and not (workspace / "p2").exists()


def test_a_tree_that_cannot_be_looked_through_needs_a_person(
    make_agent: MakeAgent, ollama: FakeOllama, workspace: Path
) -> None:
    if os.geteuid() == 0:
        pytest.skip("root reads every directory: run as a user to see an unreadable one")
    (workspace / "d" / "sub").mkdir(parents=True)
    os.chmod(workspace / "d", 0o311)  # can pass through, cannot list
    try:
        ollama.enqueue(reply(tool_calls=[tool_call(*move("d", "e"))]), reply("ok"))
        decided = decisions(make_agent(YES).run("go"))[0]
        assert decided.decision.needs_human and decided.decision.rule == "move_boundary"
    finally:
        os.chmod(workspace / "d", 0o755)


def test_undo_of_a_directory_move_looks_through_its_tree(
    make_agent: MakeAgent, run_cli: RunCli, ollama: FakeOllama, workspace: Path
) -> None:
    # Moved out as tools → gh (nothing in it ran code), filled with a virtual environment
    # (its bin/ runs by name once activated), moved back by an undo: that would plant an
    # environment in tools/ without a person.
    (workspace / "tools").mkdir()
    (workspace / "tools" / "README").write_text("tools\n")
    out = run_calls(make_agent(YES), ollama, move("tools", "gh"))
    assert out[0]["success"] is True, out[0]
    (workspace / "gh" / "venv" / "bin").mkdir(parents=True)
    (workspace / "gh" / "venv" / "bin" / "python").write_text("#!/bin/sh\n")
    r = run_cli("undo", "--yes")
    assert r.code != 0 and "execution surface" in r.stderr
    assert not (workspace / "tools").exists()


def test_undo_that_would_bring_back_a_dot_entry_needs_a_person(
    make_agent: MakeAgent, run_cli: RunCli, ollama: FakeOllama, workspace: Path
) -> None:
    (workspace / ".github").mkdir()
    (workspace / ".github" / "CODEOWNERS").write_text("* @me\n")
    # Moving a dot-entry away needs a person (cli/safety/policy.py `dot_entry`): one says yes.
    out = run_calls(make_agent(YES, answers=[True]), ollama, move(".github", "gh"))
    assert out[0]["success"] is True, out[0]
    r = run_cli("undo", "--yes")
    assert r.code != 0 and "may configure a program" in r.stderr
    assert not (workspace / ".github").exists() and (workspace / "gh").exists()


def test_a_change_to_a_name_that_is_not_utf8_is_recorded(
    make_agent: MakeAgent, run_cli: RunCli, ollama: FakeOllama, workspace: Path
) -> None:
    name = os.fsdecode(b"x\xff.txt")  # a lone surrogate in Python's view of the name
    target = os.path.join(workspace, name)
    with open(os.fsencode(target), "wb") as f:
        f.write(b"old precious\n")
    out = run_calls(
        make_agent(YES),
        ollama,
        ("read_file", {"path": name}),
        ("edit_file", {"path": name, "old_string": "old precious", "new_string": "gone"}),
    )
    assert out[1]["success"] is True, out[1]
    assert isinstance(out[1]["change"], int)
    undone = run_cli("undo", "--yes")
    assert undone.code == 0, undone.stderr
    with open(os.fsencode(target), "rb") as f:
        assert f.read() == b"old precious\n"
