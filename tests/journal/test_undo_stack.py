"""`agent undo` / `agent redo` as an editor's undo stack: repeated undos walk back, redo walks
forward, a new change clears what could be redone; a whole turn in one step; only the changes
under the current directory unless told otherwise; a write that changes nothing is no change.
Real files, the real CLI, the fake Ollama writing them."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from cli.journal.changes import ChangeStore
from cli.journal.records import Change
from cli.loop.events import ToolCall, ToolDecided, ToolResult
from tests.conftest import MakeAgent, MakeChat, RunCli
from tests.fakes.fake_ollama import FakeOllama, reply, tool_call

CHANGES = Path(".local/state/metona-agent/changes")
YES = "policy:\n  confirm: none\n"


@pytest.fixture
def run_cli(run_cli_in_process: RunCli) -> RunCli:
    """`agent` in this process (conftest.run_in_process): no test here is about the process."""
    return run_cli_in_process


def agent_writes(
    run_cli: RunCli, ollama: FakeOllama, *calls: tuple[str, dict[str, Any]], cwd: Path | None = None
) -> None:
    """One `agent run --yes` (one turn) in which the model makes `calls`, one step each."""
    for name, args in calls:
        ollama.enqueue(reply(tool_calls=[tool_call(name, args)]))
    ollama.enqueue(reply("done"))
    r = run_cli("run", "--yes", "go", cwd=cwd)
    assert r.code == 0, r.stderr


def write(path: str, content: str) -> tuple[str, dict[str, Any]]:
    return ("write_file", {"path": path, "content": content})


def history(run_cli: RunCli, cwd: Path | None = None) -> list[str]:
    return run_cli("history", cwd=cwd).stdout.splitlines()


# -- 1. repeated undo walks back; redo walks forward ------------------------------------------


def test_repeated_undo_takes_back_the_next_change_and_redo_brings_them_back(
    run_cli: RunCli, ollama: FakeOllama, workspace: Path
) -> None:
    notes = workspace / "notes.txt"
    notes.write_text("v1\n")
    agent_writes(run_cli, ollama, write("notes.txt", "v2\n"))  # #1
    agent_writes(run_cli, ollama, write("notes.txt", "v3\n"))  # #2

    assert run_cli("undo").code == 0 and notes.read_text() == "v2\n"
    second = run_cli("undo")  # the change before, not a redo of the first undo
    assert second.code == 0, second.stderr
    assert notes.read_text() == "v1\n"
    rows = history(run_cli)
    assert "(undone by #3)" in rows[1] and "(undone by #4)" in rows[0]
    nothing = run_cli("undo")
    assert nothing.code == 1 and "nothing left to undo" in nothing.stderr
    assert notes.read_text() == "v1\n"

    redo = run_cli("redo")  # the last one undone comes back first
    assert redo.code == 0, redo.stderr
    assert notes.read_text() == "v2\n"
    assert run_cli("redo").code == 0 and notes.read_text() == "v3\n"
    empty = run_cli("redo")
    assert empty.code == 1 and "nothing to redo" in empty.stderr
    rows = history(run_cli)
    assert "(redone by #6)" in rows[1] and "(redone by #5)" in rows[0]

    assert run_cli("undo").code == 0 and notes.read_text() == "v2\n"  # a redo undoes again
    assert run_cli("redo").code == 0 and notes.read_text() == "v3\n"


def test_a_new_change_after_an_undo_clears_what_could_be_redone(
    run_cli: RunCli, ollama: FakeOllama, workspace: Path
) -> None:
    agent_writes(run_cli, ollama, write("a.txt", "a\n"))  # #1
    assert run_cli("undo").code == 0 and not (workspace / "a.txt").exists()
    agent_writes(run_cli, ollama, write("b.txt", "b\n"))  # a new change: the redo stack goes
    r = run_cli("redo")
    assert r.code == 1 and "nothing to redo" in r.stderr
    assert not (workspace / "a.txt").exists()
    assert run_cli("undo", "2").code == 0  # an undo, by id, is still undoable: a redo
    assert (workspace / "a.txt").read_text() == "a\n"


def test_undo_id_takes_back_that_change_and_says_when_it_is_undone_already(
    run_cli: RunCli, ollama: FakeOllama, workspace: Path
) -> None:
    agent_writes(run_cli, ollama, write("a.txt", "a\n"), write("b.txt", "b\n"))  # #1, #2
    assert run_cli("undo", "1").code == 0
    assert not (workspace / "a.txt").exists() and (workspace / "b.txt").exists()
    again = run_cli("undo", "1")
    assert again.code == 1 and "already undone (by #3)" in again.stderr
    assert run_cli("undo").code == 0 and not (workspace / "b.txt").exists()  # #2 is next
    assert run_cli("redo").code == 0 and (workspace / "b.txt").exists()
    assert run_cli("redo").code == 0 and (workspace / "a.txt").exists()


# -- 2. a turn in one step ---------------------------------------------------------------------


def test_undo_turn_takes_back_every_change_of_the_last_turn_and_redo_brings_it_back(
    run_cli: RunCli, ollama: FakeOllama, workspace: Path, home: Path
) -> None:
    (workspace / "keep.txt").write_text("old\n")
    agent_writes(run_cli, ollama, write("earlier.txt", "from the first turn\n"))  # turn 1: #1
    agent_writes(  # turn 2: #2 … #6, the same file written twice among them
        run_cli,
        ollama,
        write("a.txt", "first\n"),
        ("create_directory", {"path": "pkg/sub"}),
        write("pkg/sub/m.py", "x = 1\n"),
        write("keep.txt", "new\n"),
        write("a.txt", "second\n"),
    )
    changes = ChangeStore(home / CHANGES).history()
    assert len({c.turn for c in changes}) == 2 and all(c.turn for c in changes)
    assert len({c.turn for c in changes[1:]}) == 1

    undone = run_cli("undo", "--turn")
    assert undone.code == 0, undone.stderr
    assert not (workspace / "a.txt").exists() and not (workspace / "pkg").exists()
    assert (workspace / "keep.txt").read_text() == "old\n"
    assert (workspace / "earlier.txt").exists()  # another turn
    assert "restored keep.txt as it was before change #5" in undone.stderr
    store = ChangeStore(home / CHANGES)
    undos = store.history()[6:]
    assert [c.undoes for c in undos] == [6, 5, 4, 3, 2]  # newest first
    assert len({c.turn for c in undos}) == 1  # one step: one redo brings it all back
    assert {c.id for c in store.changes_of_turn(changes[1].turn)} == {2, 3, 4, 5, 6}

    redone = run_cli("redo")
    assert redone.code == 0, redone.stderr
    assert (workspace / "a.txt").read_text() == "second\n"
    assert (workspace / "pkg/sub/m.py").read_text() == "x = 1\n"
    assert (workspace / "keep.txt").read_text() == "new\n"
    assert run_cli("undo", "--turn").code == 0 and not (workspace / "a.txt").exists()
    assert run_cli("undo", "--turn").code == 0 and not (workspace / "earlier.txt").exists()


def test_undo_turn_asks_once_before_anything_when_a_file_changed_since(
    run_cli: RunCli, ollama: FakeOllama, workspace: Path
) -> None:
    agent_writes(run_cli, ollama, write("a.txt", "a\n"), write("b.txt", "b\n"))
    (workspace / "a.txt").write_text("edited by hand\n")
    r = run_cli("undo", "--turn", "--yes")
    assert r.code == 1 and "a.txt changed since change #1" in r.stderr
    assert (workspace / "b.txt").read_text() == "b\n"  # nothing of the turn was undone
    assert (workspace / "a.txt").read_text() == "edited by hand\n"


def test_undo_and_redo_in_chat_and_undo_turn(
    make_chat: MakeChat, ollama: FakeOllama, workspace: Path
) -> None:
    (workspace / "n.txt").write_text("v1\n")
    ollama.enqueue(
        reply(tool_calls=[tool_call("write_file", {"path": "n.txt", "content": "v2\n"})]),
        reply(tool_calls=[tool_call("write_file", {"path": "m.txt", "content": "m\n"})]),
        reply("Changed."),
        reply(tool_calls=[tool_call("write_file", {"path": "n.txt", "content": "v3\n"})]),
        reply("Changed again."),
    )
    chat = make_chat(YES)
    code = chat.run(
        "first\r", "second\r", "/undo\r", "/undo\r", "/redo\r", "/undo turn\r", "/redo\r"
    )
    assert code == 0, chat.text
    text = chat.text
    assert "restored n.txt as it was before change #3" in text
    assert "m.txt did not exist before change #2" in text
    # /undo turn took back the first turn (its change #2 is the newest not undone), /redo
    # brought the whole of it back; the second turn's change stays undone.
    assert (workspace / "n.txt").read_text() == "v2\n"
    assert (workspace / "m.txt").read_text() == "m\n"
    assert re.search(r"undid 2 changes of a turn · #\d+-#\d+: /redo brings them back", text)
    store = chat.session.agent.context.changes
    assert store is not None
    turn = store.history()[-1].turn
    assert turn and store.turn != turn  # a redo's records are its own step, not the turn's
    assert [c.path for c in store.changes_of_turn(store.turn)] == [str(workspace / "n.txt")]


# -- 3. only under the current directory; what was restored, and from when ------------------


def test_undo_without_an_id_acts_only_under_the_current_directory(
    run_cli: RunCli, ollama: FakeOllama, workspace: Path
) -> None:
    a, b = workspace / "a", workspace / "b"
    a.mkdir()
    b.mkdir()
    (a / "notes.txt").write_text("a1\n")
    (b / "notes.txt").write_text("b1\n")
    agent_writes(run_cli, ollama, write("notes.txt", "a2\n"), cwd=a)  # #1
    agent_writes(run_cli, ollama, write("notes.txt", "b2\n"), cwd=b)  # #2, the latest

    r = run_cli("undo", cwd=a)
    assert r.code == 0, r.stderr
    assert re.search(
        r"restored notes\.txt as it was before change #1 \(write_file, "
        r"\d{4}-\d\d-\d\d \d\d:\d\d UTC\)",
        r.stderr,
    ), r.stderr
    assert (a / "notes.txt").read_text() == "a1\n" and (b / "notes.txt").read_text() == "b2\n"
    rest = run_cli("undo", cwd=a)
    assert rest.code == 1 and "--all" in rest.stderr and "1 change elsewhere" in rest.stderr
    assert (b / "notes.txt").read_text() == "b2\n"
    everywhere = run_cli("undo", "--all", cwd=a)
    assert everywhere.code == 0, everywhere.stderr
    assert (b / "notes.txt").read_text() == "b1\n"
    assert run_cli("redo", cwd=a).code == 0  # --all's undo is not under a: a's is redone
    assert (a / "notes.txt").read_text() == "a2\n" and (b / "notes.txt").read_text() == "b1\n"


def test_a_forged_move_cannot_make_undo_write_where_the_policy_forbids(
    run_cli: RunCli, home: Path, workspace: Path
) -> None:
    # A forged "move" whose undo would move a file of the attacker's into ~/.ssh.
    (workspace / "key.pub").write_text("ssh-ed25519 attacker\n")
    (home / ".ssh").mkdir()
    victim = home / ".ssh" / "authorized_keys"
    ChangeStore(home / CHANGES).record(
        Change("move_file", "move", str(workspace / "key.pub"), origin=str(victim))
    )
    r = run_cli("undo", "1", "--yes")
    assert r.code == 1 and "not a path the agent may change" in r.stderr
    assert not victim.exists() and (workspace / "key.pub").exists()


# -- 4. a write that changes nothing -----------------------------------------------------------


def tool_results(ollama: FakeOllama) -> list[dict[str, Any]]:
    messages = ollama.chat_bodies[-1]["messages"]
    return [json.loads(m["content"]) for m in messages if m["role"] == "tool"]


def test_writing_what_the_file_holds_is_not_asked_not_journaled_and_reported_unchanged(
    run_cli: RunCli, ollama: FakeOllama, workspace: Path
) -> None:
    (workspace / "same.txt").write_text("same\n")
    ollama.enqueue(
        reply(tool_calls=[tool_call("write_file", {"path": "same.txt", "content": "same\n"})]),
        reply("ok"),
    )
    r = run_cli("run", "write it")  # no --yes, no terminal: an ask would be refused
    assert r.code == 0, r.stderr
    result = tool_results(ollama)[0]
    assert result["success"] is True and result["unchanged"] is True, result
    assert "change" not in result
    assert run_cli("history").stderr.strip() == "no changes recorded yet"


def test_an_edit_that_changes_nothing_is_not_asked_either(
    make_agent: MakeAgent, ollama: FakeOllama, workspace: Path
) -> None:
    text = "x = 1\nmsg = \u201chi\u201d\n"
    (workspace / "app.py").write_text(text)
    harness = make_agent()  # writes are asked; the scripted approver says no
    # Matched ignoring typography, replaced by what the file holds: the same bytes.
    same = {"path": "app.py", "old_string": 'msg = "hi"', "new_string": "msg = \u201chi\u201d"}
    changes = {"path": "app.py", "old_string": "x = 1", "new_string": "x = 2"}
    ollama.enqueue(
        reply(tool_calls=[tool_call("read_file", {"path": "app.py"})]),
        reply(tool_calls=[tool_call("edit_file", same)]),
        reply(tool_calls=[tool_call("edit_file", changes)]),
        reply("ok"),
    )
    events = harness.run("edit")
    results = [e.result for e in events if isinstance(e, ToolResult)]
    assert results[1]["success"] is True and results[1]["unchanged"] is True, results[1]
    assert len(harness.approver.requests) == 1  # only the edit that changes the file
    assert results[2]["success"] is False
    assert (workspace / "app.py").read_text() == text
    store = harness.agent.context.changes
    assert store is not None and store.history() == []


def test_a_file_changed_between_the_check_and_the_write_is_not_written_unasked(
    make_agent: MakeAgent, workspace: Path
) -> None:
    target = workspace / "same.txt"
    target.write_text("same\n")
    harness = make_agent()
    call = ToolCall("write_file", {"path": "same.txt", "content": "same\n"})
    decided = harness.agent.decide(call)
    assert decided.allowed and decided.decision.rule == "unchanged"
    assert harness.approver.requests == []
    target.write_text("someone's edit\n")
    result = harness.agent.execute(decided)
    assert result["success"] is False and "changed" in result["error"]
    assert target.read_text() == "someone's edit\n"


@pytest.mark.parametrize(
    ("yaml", "relative"),
    [("", "../elsewhere.txt"), ("policy:\n  tools: {write_file: deny}\n", "same.txt")],
    ids=["outside-the-allowed-dirs", "denied"],
)
def test_no_shortcut_where_the_policy_would_not_let_it_write(
    make_agent: MakeAgent, workspace: Path, yaml: str, relative: str
) -> None:
    target = workspace / relative
    target.write_text("same\n")
    harness = make_agent(yaml)
    decided: ToolDecided = harness.agent.decide(
        ToolCall("write_file", {"path": relative, "content": "same\n"})
    )
    assert decided.decision.rule != "unchanged" and not decided.allowed
    target.unlink()


# -- 4. issue 21: one line a file; a redo is called a redo; /history means changes ----------


def test_undo_says_one_line_per_file(run_cli: RunCli, ollama: FakeOllama, workspace: Path) -> None:
    (workspace / "keep.txt").write_text("old\n")
    agent_writes(run_cli, ollama, write("keep.txt", "new\n"))  # #1
    one = run_cli("undo")
    assert one.code == 0, one.stderr
    # One change: one line, saying what the file is now and how to bring the change back.
    assert len(one.stderr.splitlines()) == 1
    assert re.fullmatch(
        r"restored keep\.txt as it was before change #1 \(write_file, [\d: -]+ UTC\) "
        r"· #2: `agent redo` brings it back\n",
        one.stderr,
    ), one.stderr
    redo = run_cli("redo")
    assert redo.stderr.count("\n") == 1 and "redid change #1" in redo.stderr

    three = [write(name, "x\n") for name in ("a.txt", "b.txt", "c.txt")]
    agent_writes(run_cli, ollama, *three)
    turn = run_cli("undo", "--turn")
    assert turn.code == 0, turn.stderr
    lines = turn.stderr.splitlines()
    # Three files: three lines, then one saying how to bring them back.
    assert len(lines) == 4, turn.stderr
    assert [line.split(" did not exist")[0] for line in lines[:3]] == ["c.txt", "b.txt", "a.txt"]
    step = r"undid 3 changes of a turn · #\d+-#\d+: `agent redo` brings them back"
    assert re.fullmatch(step, lines[3]), lines[3]


def test_history_calls_a_redo_a_redo(run_cli: RunCli, ollama: FakeOllama, workspace: Path) -> None:
    agent_writes(run_cli, ollama, write("a.txt", "a\n"))  # #1
    assert run_cli("undo").code == 0  # #2
    assert run_cli("redo").code == 0  # #3
    assert run_cli("undo").code == 0  # #4: an undo again
    rows = history(run_cli)
    assert len(rows) == 4
    assert " undo " in rows[1] and "(undoes #1; redone by #3)" in rows[1]
    assert " redo " in rows[2] and "(redoes #1; undone by #4)" in rows[2] and "undo " not in rows[2]
    assert " undo " in rows[3] and "(undoes #1)" in rows[3]


def test_chat_history_lists_changes_and_turns_lists_turns(
    make_chat: MakeChat, ollama: FakeOllama, workspace: Path
) -> None:
    ollama.enqueue(
        reply(tool_calls=[tool_call("write_file", {"path": "n.txt", "content": "n\n"})]),
        reply("Wrote it."),
    )
    chat = make_chat(YES)
    chat.run("write n\r", "/history\r", "/turns\r")
    text = chat.text
    assert re.search(r"#1 +\d{4}-\d\d-\d\d [\d:]+  write_file +create +n\.txt", text), text
    assert "/undo ID takes one back · /turns lists the conversation's turns" in text
    assert text.count("1. you: write n") == 1  # only /turns lists turns
