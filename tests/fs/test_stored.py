"""The agent's own files are untrusted input (issue 18): sessions, the change journal and its
index, the audit log and the config, each nested 100,000 deep, huge, not JSON or YAML at all,
or of the wrong types, through the real CLI. Each is a one-line error naming the file (or, in
a list of many, an entry shown as unreadable), never a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli.errors import UsageError
from cli.fs.stored import (
    MAX_CONFIG_BYTES,
    MAX_JOURNAL_BYTES,
    MAX_NOTE_BYTES,
    MAX_RECORD_BYTES,
    MAX_SESSION_BYTES,
    MAX_STORED_DEPTH,
)
from cli.journal.changes import ChangeStore
from cli.journal.records import Change
from cli.records.audit import append_record
from cli.records.sessions import SessionStore
from tests.conftest import RunCli
from tests.fakes.fake_ollama import FakeOllama, reply, tool_call
from tests.pty.driver import Ttys

DEEP = "[" * 100_000 + "]" * 100_000
STATE = Path(".local/state/metona-agent")
SESSIONS = Path(".local/share/metona-agent/sessions")
GOOD = {"version": 1, "kind": "chat", "model": "m", "cwd": "/w", "saved": "2026-01-02T03:04:05"}
MESSAGES = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]


@pytest.fixture
def run_cli(run_cli_in_process: RunCli) -> RunCli:
    """`agent` in this process (conftest.run_in_process): no test here is about the process."""
    return run_cli_in_process


def huge(path: Path, size: int) -> None:
    """A file of `size` bytes (sparse: it costs no disk), zeros: no JSON, no YAML."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as file:
        file.truncate(size)


def one_line_error(stderr: str) -> str:
    assert "Traceback" not in stderr, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    return lines[0]


# -- sessions ------------------------------------------------------------------------------------


def test_attack_agent_sessions_lists_hostile_session_files_as_unreadable(
    run_cli: RunCli, home: Path
) -> None:
    # The finding: `agent sessions` with a session nested 100,000 deep ended in RecursionError.
    folder = home / SESSIONS
    folder.mkdir(parents=True)
    (folder / "good.json").write_text(json.dumps({**GOOD, "messages": MESSAGES}))
    (folder / "deep.json").write_text(DEEP)
    huge(folder / "huge.json", MAX_SESSION_BYTES + 1)
    (folder / "garbage.json").write_text("this is not JSON at all")
    wrong = {**GOOD, "messages": [{"role": "user", "content": {"not": "text"}}]}
    (folder / "wrong.json").write_text(json.dumps(wrong))
    (folder / "list.json").write_text("[1, 2]")
    r = run_cli("sessions")
    assert r.code == 0 and "Traceback" not in r.stderr, r.stderr
    lines = {line.split()[0]: line for line in r.stdout.splitlines()}
    assert set(lines) == {"good", "deep", "huge", "garbage", "wrong", "list"}
    assert "  1 turn " in lines["good"]
    reasons = {
        "deep": f"unreadable: nested deeper than {MAX_STORED_DEPTH} levels",
        "huge": "unreadable: larger than 64 MB",
        "garbage": "unreadable: not JSON (",
        "wrong": "unreadable: holds no valid conversation (message 1: its content is not text)",
        "list": "unreadable: not a session (a JSON object with messages)",
    }
    for name, reason in reasons.items():
        assert reason in lines[name], lines[name]
        assert f"(agent sessions rm {name} removes it)" in lines[name]
    listed = run_cli("sessions", "--json")
    assert listed.code == 0, listed.stderr
    rows = {row["name"]: row for row in json.loads(listed.stdout)}
    assert "error" not in rows["good"] and rows["good"]["turns"] == 1
    assert rows["deep"]["error"] == f"nested deeper than {MAX_STORED_DEPTH} levels"
    assert rows["deep"]["turns"] is None and rows["deep"]["kind"] is None
    assert run_cli("sessions", "rm", "deep").code == 0
    assert not (folder / "deep.json").exists()


@pytest.mark.pty
@pytest.mark.parametrize("name", ["deep", "huge", "garbage", "wrong"])
def test_attack_chat_resume_of_a_hostile_session_is_one_line(
    ollama: FakeOllama, workspace: Path, home: Path, name: str, ttys: Ttys
) -> None:
    folder = home / SESSIONS
    folder.mkdir(parents=True)
    if name == "deep":
        (folder / "deep.json").write_text(DEEP)
    elif name == "huge":
        huge(folder / "huge.json", MAX_SESSION_BYTES + 1)
    elif name == "garbage":
        (folder / "garbage.json").write_bytes(b"\x00\xff not JSON")
    else:
        (folder / "wrong.json").write_text(json.dumps({**GOOD, "messages": {"role": "user"}}))
    chat = ttys.chat("--resume", name, host=ollama.url, cols=200, ready=False, timeout=30)
    status = chat.wait_exit()
    text = chat.raw
    assert "Traceback" not in text, text
    assert f"agent: session {folder / name}.json cannot be read: " in text, text
    assert f"remove it with agent sessions rm {name}" in text
    assert status == 2  # a session that cannot be used, as before: a usage error


def test_a_session_too_large_to_load_again_is_not_saved(tmp_path: Path) -> None:
    store = SessionStore(tmp_path)
    messages = [{"role": "user", "content": "x" * MAX_SESSION_BYTES}]
    with pytest.raises(UsageError, match=r"more than the 64 MB a session file may hold"):
        store.save("big", "m", messages)
    assert not list(tmp_path.iterdir())


# -- the change journal and its index --------------------------------------------------------------


def journal_with(home: Path, *lines: str | bytes) -> Path:
    """A journal holding one real change (#1), then `lines`."""
    store = ChangeStore(home / STATE / "changes")
    store.record(Change("write_file", "create", str(home / "a.txt"), size=1))
    with open(store.journal, "ab") as file:
        for line in lines:
            file.write((line.encode() if isinstance(line, str) else line) + b"\n")
    return store.journal


@pytest.mark.parametrize(
    ("line", "why"),
    [
        (DEEP, f"nested deeper than {MAX_STORED_DEPTH} levels"),
        (json.dumps({"tool": "x" * MAX_RECORD_BYTES}), "a line longer than 1 MB"),
        ("this is not JSON at all", "not a record (not JSON)"),
        ("[1, 2, 3]", "not a record (a JSON object)"),
        (
            json.dumps({"id": 2, "tool": "write_file", "action": "create", "path": ["/etc"]}),
            "its path is a list; it is not as this agent writes it",
        ),
        (json.dumps({"id": 2, "tool": "t", "action": "explode", "path": "/x"}), "its action"),
        (json.dumps({"evict": "all"}), "evict is not a change's id"),
    ],
    ids=["deep", "long-line", "not-json", "not-an-object", "wrong-type", "odd-action", "evict"],
)
def test_attack_a_hostile_journal_line_is_one_line_error_naming_file_and_line(
    run_cli: RunCli, home: Path, line: str, why: str
) -> None:
    journal = journal_with(home, line)
    for command in (("history",), ("undo", "--yes", "--all"), ("redo", "--yes", "--all")):
        r = run_cli(*command)
        assert r.code == 1, (command, r.stderr)
        error = one_line_error(r.stderr)
        assert error.startswith(f"agent: the change journal {journal}, line 2: {why}"), error
        assert "move the file away to start a new history" in error


def test_attack_a_huge_journal_is_refused_before_it_is_read(run_cli: RunCli, home: Path) -> None:
    journal = journal_with(home)
    with open(journal, "ab") as file:
        file.truncate(MAX_JOURNAL_BYTES + 1)
    r = run_cli("history")
    assert r.code == 1
    error = one_line_error(r.stderr)
    assert error == (
        f"agent: the change journal {journal} is larger than 64 MB: move it away to start a "
        "new history (the changes in it can then no longer be undone)"
    )


@pytest.mark.parametrize("index", ["deep", "huge", "garbage", "wrong"])
def test_a_hostile_journal_index_is_passed_over(
    run_cli: RunCli, ollama: FakeOllama, workspace: Path, home: Path, index: str
) -> None:
    # journal.index only saves reading the journal: one that cannot be used is not used.
    path = journal_with(home).with_name("journal.index")
    if index == "deep":
        path.write_text(DEEP)
    elif index == "huge":
        huge(path, MAX_NOTE_BYTES + 1)
    elif index == "garbage":
        path.write_bytes(b"\x00 not JSON")
    else:
        path.write_text(json.dumps({"offset": [], "last_id": {}, "total": "x", "tail": 5}))
    ollama.enqueue(
        reply(tool_calls=[tool_call("write_file", {"path": "b.txt", "content": "b\n"})]),
        reply("done"),
    )
    r = run_cli("run", "--yes", "write b.txt")
    assert r.code == 0, r.stderr
    assert (workspace / "b.txt").read_text() == "b\n"
    rows = run_cli("history").stdout.splitlines()
    assert [row.split()[0] for row in rows] == ["#1", "#2"]


def test_a_hostile_pending_marker_is_passed_over(home: Path, tmp_path: Path) -> None:
    pending = home / STATE / "changes" / "pending"
    pending.mkdir(parents=True)
    (pending / "999999999-deep").write_text(DEEP)
    (pending / "999999998-list").write_text('["temp"]')
    (pending / "999999997-keyless").write_text('{"dir": "/tmp"}')
    huge(pending / "999999996-huge", MAX_NOTE_BYTES + 1)
    assert ChangeStore(home / STATE / "changes").clean_stale() == 0
    assert not list(pending.iterdir())  # the markers of dead processes are gone all the same


def test_every_field_of_a_change_is_read_back_with_its_type_checked() -> None:
    # A field of Change the reader does not know would be dropped from every record read.
    from dataclasses import fields

    from cli.journal.records import _FIELD_TYPES

    assert set(_FIELD_TYPES) == {f.name for f in fields(Change)} - {"evicted"}


def test_a_record_after_a_torn_journal_line_is_kept(home: Path) -> None:
    # A crash mid-append leaves a line cut short: the next change starts a line of its own
    # (before, it completed the torn one into a line that is not JSON, and was lost).
    store = ChangeStore(home / STATE / "changes")
    store.record(Change("write_file", "create", "/w/a", size=1))
    store.journal.write_bytes(store.journal.read_bytes() + b'{"tool": "write_fi')
    store.record(Change("write_file", "create", "/w/b", size=1))
    fresh = ChangeStore(home / STATE / "changes")
    assert [c.path for c in fresh.history()] == ["/w/a", "/w/b"]


# -- the audit log ---------------------------------------------------------------------------------


def audit_with(home: Path, *lines: str) -> Path:
    """The audit log holding one real record, then `lines`."""
    path = home / STATE / "audit.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    append_record(path, {"tool": "read_file", "arguments": {"path": "a"}, "outcome": "allowed"})
    with open(path, "a") as file:
        file.writelines(line + "\n" for line in lines)
    return path


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        (DEEP, f"nested deeper than {MAX_STORED_DEPTH} levels: not a record (edited?)"),
        ('"' + "x" * MAX_RECORD_BYTES + '"', "longer than 1 MB: not a record"),
        ("this is not JSON at all", "not a JSON record (edited or cut short?)"),
        ('{"hash": 5, "prev": []}', "not an audit record: no hash or prev (edited?)"),
    ],
    ids=["deep", "long-line", "not-json", "wrong-types"],
)
def test_attack_audit_verify_names_a_hostile_line(
    run_cli: RunCli, home: Path, line: str, problem: str
) -> None:
    path = audit_with(home, line)
    r = run_cli("audit", "verify")
    assert r.code == 1
    assert one_line_error(r.stderr) == f"agent: {path}, line 2: {problem}"


def test_attack_audit_show_shows_hostile_lines_as_not_records(run_cli: RunCli, home: Path) -> None:
    odd = {"tool": ["x"], "arguments": 5, "time": {}, "duration_ms": [1], "session": 7}
    audit_with(home, DEEP, "x" * (MAX_RECORD_BYTES + 10), "not JSON", json.dumps(odd))
    r = run_cli("audit", "show")
    assert r.code == 0 and "Traceback" not in r.stderr, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == 5 and "read_file" in lines[0]
    for number in (2, 3, 4):
        assert lines[number - 1] == f"line {number}: not an audit record (see agent audit verify)"
    assert "['x']" in lines[4]  # shown as it is, escaped: a record of the wrong types
    as_json = run_cli("audit", "show", "--json")
    assert as_json.code == 0 and "Traceback" not in as_json.stderr
    assert len(as_json.stdout.splitlines()) == 2 and as_json.stderr.count("not an audit") == 3


def test_attack_a_huge_audit_log_line_costs_no_memory_to_read(run_cli: RunCli, home: Path) -> None:
    path = home / STATE / "audit.jsonl"
    huge(path, 64 * 1024 * 1024)  # one line of 64 MB, no newline
    r = run_cli("audit", "verify")
    assert r.code == 1
    assert one_line_error(r.stderr) == f"agent: {path}, line 1: longer than 1 MB: not a record"
    shown = run_cli("audit", "show")
    assert shown.code == 0 and shown.stdout == (
        "line 1: not an audit record (see agent audit verify)\n"
    )


# -- the config ------------------------------------------------------------------------------------

BOMB = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n' + "".join(
    f"{name}: &{name} [{', '.join(['*' + before] * 9)}]\n"
    for before, name in zip("abcdefgh", "bcdefghi", strict=True)
)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("policy: " + DEEP + "\n", "line 1: nested deeper than 64 levels"),
        ("".join(" " * i + "k:\n" for i in range(1000)), "line 64: nested deeper than 64 levels"),
        (BOMB, "line 2: YAML aliases (*name) are not supported here"),
        ("\x00\x01 binary", "invalid YAML: unacceptable character #x0000"),
        ("key: [unclosed\n", "invalid YAML"),
        ("policy: [1, 2]\n", "line 1: policy: expected a mapping of keys, got a list"),
        ("- just\n- a list\n", "(top level): expected a mapping of keys, got a list"),
    ],
    ids=["deep-flow", "deep-block", "billion-laughs", "binary", "not-yaml", "wrong", "list"],
)
def test_attack_a_hostile_config_is_a_config_error(
    run_cli: RunCli, workspace: Path, text: str, why: str
) -> None:
    path = workspace / "hostile.yaml"
    path.write_text(text)
    for command in (("config", "-c", str(path)), ("run", "-c", str(path), "hi")):
        r = run_cli(*command)
        assert r.code == 2, (command, r.stderr)  # a config error, as every other
        error = one_line_error(r.stderr)
        assert error.startswith(f"agent: config {path}"), error
        assert why in error, error


def test_attack_a_huge_config_is_refused_before_it_is_read(
    run_cli: RunCli, workspace: Path
) -> None:
    path = workspace / "huge.yaml"
    huge(path, MAX_CONFIG_BYTES + 1)
    for command in (("config", "-c", str(path)), ("run", "-c", str(path), "hi")):
        r = run_cli(*command)
        assert r.code == 2
        assert one_line_error(r.stderr) == (
            f"agent: cannot read config {path}: larger than 1 MB (a config is a page of "
            "settings): check that -c names the config file"
        )


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (DEEP, "not valid JSON (nested deeper than 64 levels)"),
        (None, "larger than 1 MB"),
        ('{"mcpServers": [1]}', 'expected a JSON object with "mcpServers"'),
    ],
    ids=["deep", "huge", "wrong"],
)
def test_attack_a_hostile_mcp_config_is_one_line(
    run_cli: RunCli, workspace: Path, content: str | None, why: str
) -> None:
    path = workspace / "servers.json"
    if content is None:
        huge(path, MAX_CONFIG_BYTES + 1)
    else:
        path.write_text(content)
    r = run_cli("run", "--mcp-config", str(path), "hi")
    assert r.code == 2
    assert why in one_line_error(r.stderr)
