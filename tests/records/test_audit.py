"""The audit log: redaction, the hash chain and its verifier, concurrent writers, failures that
must not end a session, and the real `agent run`, `agent audit` and chat paths."""

from __future__ import annotations

import hashlib
import io
import json
import os
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prompt_toolkit.history import InMemoryHistory
from prompt_toolkit.input import create_pipe_input
from prompt_toolkit.output import DummyOutput
from rich.console import Console

from cli.backends.messages import Stats, ToolCall
from cli.config.loading import parse_config
from cli.loop.events import (
    Event,
    Finished,
    Notice,
    ToolCallProposed,
    ToolDecided,
    ToolResult,
)
from cli.records.audit import GENESIS, append_record, default_path, verify
from cli.records.audit_events import AuditLog, audited, summarise_arguments
from cli.records.sessions import SessionStore
from cli.safety.policy import Decision
from cli.safety.redaction import REDACTED, redact
from cli.ui.approve import ChatApprover
from cli.ui.chat_commands import COMMANDS
from cli.ui.editor import ChatCompleter, make_prompt
from cli.ui.keys import PromptKeys
from cli.ui.render import ChatRenderer
from cli.ui.repl import ChatSession
from cli.wiring import Choices, build_agent
from tests.conftest import REPO, MakeAgent, RunCli
from tests.fakes.fake_ollama import FakeOllama, reply, tool_call

NOW = 1_750_000_000.25  # 2025-06-15T15:06:40.250Z


@pytest.fixture
def run_cli(run_cli_in_process: RunCli) -> RunCli:
    """`agent` in this process (conftest.run_in_process): no test here is about the process."""
    return run_cli_in_process


def clock() -> float:
    return NOW


def result_event(
    name: str = "read_file",
    arguments: dict[str, Any] | None = None,
    *,
    action: str = "allow",
    allowed: bool = True,
    by: str = "policy",
    rule: str = "setting",
    reason: str = "allowed by policy",
    result: dict[str, Any] | None = None,
    asked: bool = False,
) -> ToolResult:
    call = ToolCall(name, arguments if arguments is not None else {"path": "a.txt"})
    decision = Decision(action, reason, rule)  # type: ignore[arg-type]
    decided = ToolDecided(call, decision, allowed, by, reason, call.arguments, asked=asked)
    return ToolResult(call, result or {"success": allowed}, 0.0042, decided)


def records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def write_log(path: Path, count: int) -> None:
    log = AuditLog(path, "s1", clock)
    for index in range(count):
        assert log.record(result_event(arguments={"path": f"file{index}.txt"}))


# -- redaction --------------------------------------------------------------------------------

SECRETS = [
    ("openai-key", "export OPENAI_API_KEY=sk-proj-abcdefghij1234567890", "sk-proj-abcdefghij"),
    ("anthropic-key", "key sk-ant-api03-abcdefghij1234567890xyz", "abcdefghij1234567890xyz"),
    ("github-token", "git push https://ghp_abcdefghijklmnopqrstuvwxyz012345@x", "ghp_abcdefghij"),
    ("aws-key-id", "aws configure set id AKIAIOSFODNN7EXAMPLE", "AKIAIOSFODNN7EXAMPLE"),
    ("slack-token", "post xoxb-123456789012-abcdefghijkl", "xoxb-123456789012"),
    (
        "private-key",
        "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAA\n-----END OPENSSH PRIVATE"
        " KEY-----",
        "b3BlbnNzaC1rZXktdjEAAAA",
    ),
    ("bearer-header", 'curl -H "Authorization: Bearer tok3n-s3cret-value" https://x', "tok3n-s3"),
    ("basic-header", "curl -H 'Authorization: Basic dXNlcjpodW50ZXIy' x", "dXNlcjpodW50ZXIy"),
    ("token-equals", "curl https://api.example/?token=0123456789abcdef0123456789abcdef", "0123456"),
    ("password-env", "DB_PASSWORD=hunter2-hunter2 ./migrate", "hunter2"),
    ("password-flag", "deploy --password hunter2-hunter2 --user bob", "hunter2"),
    ("password-flag-equals", "deploy --password=hunter2-hunter2", "hunter2"),
    ("api-key-flag", "tool --api-key 9f8e7d6c5b4a39281706", "9f8e7d6c5b4a"),
    ("mysql-p", "mysql -u root -phunter2-hunter2 shop", "hunter2"),
    ("sshpass-p", "sshpass -p hunter2-hunter2 ssh host", "hunter2"),
    ("curl-user", "curl -u bob:hunter2-hunter2 https://x", "hunter2"),
    ("url-credentials", "git clone https://bob:hunter2-hunter2@example.org/r.git", "hunter2"),
    ("json-secret", '{"client_secret": "hunter2-hunter2"}', "hunter2"),
    ("jwt", "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTYifQ.c2lnbmF0dXJlLXZhbHVl", "eyJhbGciOi"),
]


@pytest.mark.parametrize(("text", "secret"), [s[1:] for s in SECRETS], ids=[s[0] for s in SECRETS])
def test_secret_shapes_are_redacted(text: str, secret: str) -> None:
    redacted = redact(text)
    assert secret not in redacted
    assert REDACTED in redacted


@pytest.mark.parametrize(
    "text",
    [
        "mkdir -p src/app",
        "ssh -p 2222 host uptime",
        "mysql -P 3306 -e 'select 1'",
        "git show 3f2a9c1e8b7d6a5f4e3d2c1b0a9f8e7d6c5b4a39",
        "grep -rn 'TODO' src/",
        "echo my-secret-garden is a book",
    ],
    ids=["mkdir-p", "ssh-port", "mysql-port", "git-sha", "grep", "word-secret"],
)
def test_ordinary_commands_are_kept(text: str) -> None:
    assert redact(text) == text


def test_the_parts_around_a_secret_are_kept() -> None:
    assert (
        redact("deploy --password hunter2 --user bob") == "deploy --password [redacted] --user bob"
    )
    assert redact('curl -H "Authorization: Bearer abcdefgh12345" https://x') == (
        'curl -H "Authorization: Bearer [redacted]" https://x'
    )


def test_arguments_named_like_secrets_are_redacted_whatever_their_value() -> None:
    summary = summarise_arguments(
        {"path": "a.txt", "password": 1234, "api_key": "x", "headers": {"Authorization": "y"}}
    )
    assert summary == {
        "path": "a.txt",
        "password": REDACTED,
        "api_key": REDACTED,
        "headers": {"Authorization": REDACTED},
    }


def test_content_is_summarised_by_size_and_sha256() -> None:
    content = "héllo\nwörld\n"
    raw = content.encode("utf-8")
    summary = summarise_arguments({"path": "a.txt", "content": content})
    assert summary == {
        "path": "a.txt",
        "content": {"bytes": len(raw), "sha256": hashlib.sha256(raw).hexdigest()},
    }


def test_long_strings_are_summarised_but_paths_and_commands_kept() -> None:
    query = "q" * 300
    command = "echo " + "x" * 300
    huge = "echo " + "y" * 5000
    summary = summarise_arguments({"query": query, "command": command, "path": "p" * 300})
    assert summary["query"] == {
        "bytes": 300,
        "sha256": hashlib.sha256(query.encode()).hexdigest(),
    }
    assert summary["command"] == command
    assert summary["path"] == "p" * 300
    huge_summary = summarise_arguments({"command": huge})["command"]
    assert huge_summary["bytes"] == len(huge) and huge_summary["start"] == huge[:200]


def test_no_secret_and_no_result_content_reaches_the_file(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    log = AuditLog(path, "s1", clock)
    for _name, text, _secret in SECRETS:
        log.record(result_event("run_command", {"command": text}, result={"success": True}))
    log.record(
        result_event(
            "write_file",
            {"path": ".env.example", "content": "OPENAI_API_KEY=sk-" + "z" * 30},
            result={"success": True, "path": ".env.example", "bytes": 48},
        )
    )
    log.record(result_event("read_file", {"path": "a", "token": "plain-token-value"}))
    log.record(
        result_event(
            "run_command",
            {"command": "cat notes"},
            result={"success": True, "stdout": "RESULT-CONTENT-MARKER", "exitCode": 0},
        )
    )
    log.record(
        result_event(
            "read_file",
            {"path": "x"},
            action="deny",
            allowed=False,
            by="",
            rule="schema",
            reason="invalid arguments: got 'sk-abcdefghij0123456789'",
        )
    )
    text = path.read_text()
    leaked = [secret for _name, _text, secret in SECRETS if secret in text]
    assert leaked == []
    for secret in ("z" * 30, "plain-token-value", "RESULT-CONTENT-MARKER", "abcdefghij0123456789"):
        assert secret not in text
    assert verify(path).intact


# -- records and the chain --------------------------------------------------------------------


def test_a_record_has_the_documented_fields(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    log = AuditLog(path, "0123456789ab", clock, cwd="/work")
    log.record(
        result_event("run_command", {"command": "ls"}, result={"success": True, "exitCode": 0})
    )
    (record,) = records(path)
    assert record == {
        "time": "2025-06-15T15:06:40.250Z",
        "session": "0123456789ab",
        "seq": 1,
        "cwd": "/work",
        "tool": "run_command",
        "arguments": {"command": "ls"},
        "decision": "allow",
        "rule": "setting",
        "approved_by": "policy",
        "outcome": "allowed",
        "error": None,
        "duration_ms": 4,
        "result_bytes": len('{"exitCode":0,"success":true}'),
        "exit_code": 0,
        "prev": GENESIS,
        "hash": record["hash"],
    }
    body = {k: v for k, v in record.items() if k != "hash"}
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"))
    assert record["hash"] == hashlib.sha256(canonical.encode()).hexdigest()


@pytest.mark.parametrize(
    ("event", "expected"),
    [
        (result_event(), ("allow", "policy", "allowed", None)),
        (
            result_event(result={"success": False, "error": "a.txt does not exist"}),
            ("allow", "policy", "failed", "a.txt does not exist"),
        ),
        (
            result_event(action="deny", allowed=False, by="", rule="blocked_dir", reason="/etc"),
            ("deny", None, "denied", "/etc"),
        ),
        (
            result_event(
                action="ask", allowed=False, by="", reason="the user declined", asked=True
            ),
            ("deny", None, "declined", "the user declined"),
        ),
        (
            result_event(action="ask", allowed=False, by="", reason="no one can be asked"),
            ("deny", None, "denied", "no one can be asked"),
        ),
        (result_event(action="ask", by="--yes"), ("allow", "--yes", "allowed", None)),
    ],
    ids=["allowed", "failed", "denied", "declined", "unanswered", "yes"],
)
def test_outcomes(tmp_path: Path, event: ToolResult, expected: tuple[Any, ...]) -> None:
    path = tmp_path / "audit.jsonl"
    AuditLog(path, "s", clock).record(event)
    (record,) = records(path)
    assert (record["decision"], record["approved_by"], record["outcome"], record["error"]) == (
        expected
    )


def test_an_intact_chain_verifies(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    write_log(path, 5)
    lines = path.read_bytes().splitlines()
    assert json.loads(lines[0])["prev"] == GENESIS
    assert json.loads(lines[3])["prev"] == hashlib.sha256(lines[2]).hexdigest()
    check = verify(path)
    assert (check.intact, check.records) == (True, 5)


def test_an_empty_log_is_intact(tmp_path: Path) -> None:
    (tmp_path / "audit.jsonl").write_bytes(b"")
    assert verify(tmp_path / "audit.jsonl").records == 0


def _edit(lines: list[bytes]) -> list[bytes]:
    lines[2] = lines[2].replace(b'"outcome":"allowed"', b'"outcome":"failed"')
    return lines


def _edit_and_rehash(lines: list[bytes]) -> list[bytes]:
    record = json.loads(lines[2])
    record["arguments"] = {"path": "innocent.txt"}
    del record["hash"]
    canonical = json.dumps(record, sort_keys=True, separators=(",", ":")).encode()
    record["hash"] = hashlib.sha256(canonical).hexdigest()
    lines[2] = json.dumps(record, separators=(",", ":")).encode()
    return lines


TAMPERING = [
    ("edit-a-field", _edit, 3, "hash does not match its content (edited?)"),
    ("edit-and-rehash", _edit_and_rehash, 4, "prev does not match line 3 (deleted or reordered?)"),
    ("delete-a-line", lambda ls: ls[:2] + ls[3:], 3, "prev does not match line 2 (deleted"),
    ("reorder", lambda ls: [ls[0], ls[2], ls[1], *ls[3:]], 2, "prev does not match line 1"),
    ("delete-the-first", lambda ls: ls[1:], 1, "prev is not the start of a chain"),
    ("insert-a-blank-line", lambda ls: [*ls[:2], b"", *ls[2:]], 3, "not a JSON record"),
]


@pytest.mark.parametrize(
    ("tamper", "line", "problem"), [t[1:] for t in TAMPERING], ids=[t[0] for t in TAMPERING]
)
def test_tampering_is_caught_at_its_line(
    tmp_path: Path, tamper: Any, line: int, problem: str
) -> None:
    path = tmp_path / "audit.jsonl"
    write_log(path, 5)
    path.write_bytes(b"\n".join(tamper(path.read_bytes().splitlines())) + b"\n")
    check = verify(path)
    assert check.line == line
    assert check.problem is not None and check.problem.startswith(problem)
    assert check.records == line - 1


def test_a_truncated_last_line_is_caught(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    write_log(path, 3)
    path.write_bytes(path.read_bytes()[:-40])
    check = verify(path)
    assert (check.line, check.problem) == (3, "the last line is cut short (truncated?)")


def test_a_record_after_a_torn_line_starts_on_its_own_line(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    write_log(path, 2)
    path.write_bytes(path.read_bytes()[:-10])  # a crash mid-write
    AuditLog(path, "s2", clock).record(result_event())
    lines = path.read_bytes().splitlines()
    assert len(lines) == 3 and json.loads(lines[2])["session"] == "s2"
    check = verify(path)
    assert (check.line, check.records) == (2, 1)  # the torn line is reported, not the new one


def test_the_file_is_private(tmp_path: Path) -> None:
    path = tmp_path / "state" / "metona-agent" / "audit.jsonl"
    AuditLog(path, "s", clock).record(result_event())
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700


# -- two agents at once -----------------------------------------------------------------------

_WRITER = """
import sys, time
from pathlib import Path
from cli.records.audit_events import AuditLog
from cli.loop.events import ToolDecided, ToolResult
from cli.backends.messages import ToolCall
from cli.safety.policy import Decision

path, session, start = Path(sys.argv[1]), sys.argv[2], float(sys.argv[3])
log = AuditLog(path, session)
call = ToolCall("read_file", {"path": "a.txt"})
decided = ToolDecided(call, Decision("allow", "ok", "setting"), True, "policy", "ok")
while time.time() < start:
    time.sleep(0.0005)
for _ in range(200):
    assert log.record(ToolResult(call, {"success": True}, 0.001, decided)), log.error
"""


def test_two_processes_appending_at_once_keep_one_chain(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    start = str(time.time() + 1.5)  # both are imported and waiting by then
    writers = [
        subprocess.Popen([sys.executable, "-c", _WRITER, str(path), name, start], cwd=REPO)
        for name in ("first", "second")
    ]
    assert [w.wait(timeout=60) for w in writers] == [0, 0]
    check = verify(path)
    assert (check.intact, check.records) == (True, 400)
    by_session: dict[str, list[int]] = {"first": [], "second": []}
    for record in records(path):
        by_session[record["session"]].append(record["seq"])
    assert by_session == {"first": list(range(1, 201)), "second": list(range(1, 201))}


# -- the stream wrapper -----------------------------------------------------------------------


def _finished() -> Finished:
    return Finished("answer", "done", 1, Stats(), 0.1)


def test_audited_passes_every_event_through_unchanged(tmp_path: Path) -> None:
    first, second = result_event(), result_event("list_directory", {"path": "."})
    stream: list[Event] = [
        ToolCallProposed(first.call, 1),
        first.decision,
        first,
        second,
        _finished(),
    ]
    log = AuditLog(tmp_path / "audit.jsonl", "s", clock)
    passed = list(audited(stream, log))
    assert len(passed) == len(stream) and all(a is b for a, b in zip(passed, stream, strict=True))
    assert [r["tool"] for r in records(log.path)] == ["read_file", "list_directory"]


def test_an_unwritable_log_warns_once_and_the_stream_goes_on(tmp_path: Path) -> None:
    (tmp_path / "state").write_text("a file where the state dir should be")
    log = AuditLog(tmp_path / "state" / "metona-agent" / "audit.jsonl", "s", clock)
    turn: list[Event] = [result_event(), result_event(), _finished()]
    first_turn = list(audited(turn, log))
    second_turn = list(audited(turn, log))  # chat: the next turn does not warn again
    notices = [e for e in first_turn + second_turn if isinstance(e, Notice)]
    assert len(notices) == 1
    assert notices[0].text.startswith("the audit log could not be written (")
    assert str(tmp_path / "state") in notices[0].text
    assert [e for e in first_turn if not isinstance(e, Notice)] == turn
    assert first_turn.index(notices[0]) == 1  # right after the call it could not record


def test_a_record_that_failed_outside_the_stream_is_warned_at_its_next_event(
    tmp_path: Path,
) -> None:
    """chat records an @file attachment itself, before the turn (cli/ui/chat_attach.py): when that
    record fails, the warning comes with the turn's first event, tool call or not."""
    (tmp_path / "state").write_text("a file where the state dir should be")
    log = AuditLog(tmp_path / "state" / "metona-agent" / "audit.jsonl", "s", clock)
    log.record(result_event())  # the attachment, recorded by the REPL
    turn: list[Event] = [_finished()]
    passed = list(audited(turn, log))
    assert passed[0] is turn[0]
    assert len(passed) == 2 and isinstance(passed[1], Notice)
    assert passed[1].text.startswith("the audit log could not be written (")


def test_closing_the_stream_mid_call_closes_the_loop_and_records_the_call(
    make_agent: MakeAgent, ollama: FakeOllama, workspace: Path, tmp_path: Path
) -> None:
    (workspace / "a.txt").write_text("alpha\n")
    ollama.enqueue(
        reply(tool_calls=[tool_call("read_file", {"path": "a.txt"}), tool_call("read_file", {})])
    )
    harness = make_agent()
    log = AuditLog(tmp_path / "audit.jsonl", "s", clock)
    events = audited(harness.agent.run(harness.conversation, "read a.txt"), log)
    for event in events:
        if isinstance(event, ToolDecided):
            break  # as a Ctrl-C in the renderer would
    events.close()
    # The loop's own cleanup ran: every call the model asked for has its tool message.
    tool_results = [json.loads(m["content"]) for m in harness.conversation if m["role"] == "tool"]
    assert [r["error"] for r in tool_results] == ["interrupted by the user"] * 2
    (record,) = records(log.path)
    assert (record["tool"], record["decision"], record["approved_by"]) == (
        "read_file",
        "allow",
        "policy",
    )
    assert (record["outcome"], record["duration_ms"]) == ("interrupted", None)


def test_ctrl_c_inside_a_tool_is_recorded_and_propagates(tmp_path: Path) -> None:
    event = result_event("run_command", {"command": "make deploy"})

    def loop() -> Iterator[Event]:
        yield ToolCallProposed(event.call, 1)
        yield event.decision
        raise KeyboardInterrupt  # as Ctrl-C while the command runs

    log = AuditLog(tmp_path / "audit.jsonl", "s", clock)
    seen: list[Event] = []
    with pytest.raises(KeyboardInterrupt):
        seen.extend(audited(loop(), log))
    (record,) = records(log.path)
    assert (record["tool"], record["arguments"], record["outcome"]) == (
        "run_command",
        {"command": "make deploy"},
        "interrupted",
    )
    assert record["error"] == "interrupted before it finished"


def test_a_whole_turn_of_the_real_loop_is_recorded(
    make_agent: MakeAgent, ollama: FakeOllama, workspace: Path, tmp_path: Path
) -> None:
    (workspace / "a.txt").write_text("alpha\n")
    ollama.enqueue(
        reply(
            tool_calls=[
                tool_call("read_file", {"path": "a.txt"}),
                tool_call("write_file", {"path": "b.txt", "content": "beta\n"}),
            ]
        ),
        reply("Done."),
    )
    harness = make_agent(answers=[False])
    log = AuditLog(tmp_path / "audit.jsonl", "s", clock)
    events = list(audited(harness.agent.run(harness.conversation, "go"), log))
    assert isinstance(events[-1], Finished)
    summary = [(r["tool"], r["decision"], r["outcome"]) for r in records(log.path)]
    assert summary == [("read_file", "allow", "allowed"), ("write_file", "deny", "declined")]


# -- agent run and agent audit, end to end ----------------------------------------------------

SECRET_CONTENT = "OPENAI_API_KEY=sk-abcdefghijklmnop0123456789\n"


def run_four_calls(run_cli: RunCli, ollama: FakeOllama, workspace: Path) -> Path:
    """`agent run --yes` with a call of each kind: allowed by the policy, denied by a rule,
    approved by --yes, and a disabled command carrying a password."""
    (workspace / "notes.txt").write_text("NOTES-CONTENT-MARKER\n")
    ollama.enqueue(
        reply(
            tool_calls=[
                tool_call("read_file", {"path": "notes.txt"}),
                tool_call("read_file", {"path": "/etc/shadow"}),
                tool_call("write_file", {"path": "out.txt", "content": SECRET_CONTENT}),
                tool_call("run_command", {"command": "deploy --password hunter2-hunter2"}),
            ]
        ),
        reply("Done."),
    )
    r = run_cli("run", "--yes", "do the four things")
    assert r.code == 0, r.stderr
    assert r.stdout == "Done.\n"
    return default_path(os.environ)


def test_run_records_one_call_each_with_its_decision(
    run_cli: RunCli, ollama: FakeOllama, workspace: Path
) -> None:
    path = run_four_calls(run_cli, ollama, workspace)
    logged = records(path)
    assert [
        (r["tool"], r["decision"], r["rule"], r["approved_by"], r["outcome"]) for r in logged
    ] == [
        ("read_file", "allow", "setting", "policy", "allowed"),
        ("read_file", "deny", "blocked_dir", None, "denied"),
        ("write_file", "allow", "setting", "--yes", "allowed"),
        ("run_command", "deny", "disabled", None, "denied"),
    ]
    assert len({r["session"] for r in logged}) == 1
    assert [r["seq"] for r in logged] == [1, 2, 3, 4]
    assert {r["cwd"] for r in logged} == {str(workspace)}
    raw = SECRET_CONTENT.encode()
    assert logged[2]["arguments"]["content"] == {
        "bytes": len(raw),
        "sha256": hashlib.sha256(raw).hexdigest(),
    }
    assert logged[3]["arguments"] == {"command": "deploy --password [redacted]"}
    text = path.read_text()
    for secret in ("sk-abcdefghijklmnop", "hunter2", "NOTES-CONTENT-MARKER"):
        assert secret not in text
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_attack_edit_file_strings_are_logged_as_size_and_sha256(
    run_cli: RunCli, ollama: FakeOllama, workspace: Path
) -> None:
    # The finding: edit_file's old_string and new_string went into the log verbatim, while
    # write_file's content was size and sha256. A record written before the change (its
    # strings verbatim) stays on the same chain: it still shows and verifies.
    path = default_path(os.environ)
    path.parent.mkdir(parents=True)
    old = {"path": "x.txt", "old_string": "OLD-SECRET-TEXT", "new_string": "OLD-NEW-TEXT"}
    append_record(  # as the agent wrote it then
        path,
        {
            "time": "2026-01-02T03:04:05.678Z",
            "session": "0123456789ab",
            "seq": 1,
            "cwd": str(workspace),
            "tool": "edit_file",
            "arguments": old,
            "decision": "allow",
            "rule": "setting",
            "approved_by": "--yes",
            "outcome": "allowed",
            "error": None,
            "duration_ms": 3,
            "result_bytes": 40,
        },
    )
    (workspace / "notes.txt").write_text("the draft says PRIVATE-PLAN here\n")
    edit = {"path": "notes.txt", "old_string": "PRIVATE-PLAN", "new_string": "PUBLIC-PLAN"}
    ollama.enqueue(
        reply(tool_calls=[tool_call("read_file", {"path": "notes.txt"})]),
        reply(tool_calls=[tool_call("edit_file", edit)]),
        reply("edited"),
    )
    r = run_cli("run", "--yes", "edit notes.txt")
    assert r.code == 0, r.stderr
    assert (workspace / "notes.txt").read_text() == "the draft says PUBLIC-PLAN here\n"
    text = path.read_text()
    assert "PRIVATE-PLAN" not in text and "PUBLIC-PLAN" not in text
    before, _read, logged = records(path)
    assert before["arguments"] == old
    assert (logged["tool"], logged["approved_by"], logged["outcome"]) == (
        "edit_file",
        "--yes",
        "allowed",
    )
    assert logged["arguments"] == {
        "path": "notes.txt",
        "old_string": {"bytes": 12, "sha256": hashlib.sha256(b"PRIVATE-PLAN").hexdigest()},
        "new_string": {"bytes": 11, "sha256": hashlib.sha256(b"PUBLIC-PLAN").hexdigest()},
    }
    checked = run_cli("audit", "verify")
    assert (checked.code, checked.stdout) == (0, "3 records, chain intact\n"), checked.stderr
    shown = run_cli("audit", "show")
    assert shown.code == 0, shown.stderr
    assert [line.split()[3:5] for line in shown.stdout.splitlines()] == [
        ["edit_file", "x.txt"],
        ["read_file", "notes.txt"],
        ["edit_file", "notes.txt"],
    ]


def test_each_run_is_a_new_session_on_the_same_chain(
    run_cli: RunCli, ollama: FakeOllama, workspace: Path
) -> None:
    (workspace / "a.txt").write_text("a\n")
    for _ in range(2):
        ollama.enqueue(reply(tool_calls=[tool_call("read_file", {"path": "a.txt"})]), reply("ok"))
        assert run_cli("run", "read a.txt").code == 0
    logged = records(default_path(os.environ))
    assert len(logged) == 2 and logged[0]["session"] != logged[1]["session"]
    assert verify(default_path(os.environ)).intact


def test_run_without_a_terminal_records_the_refusal(
    run_cli: RunCli, ollama: FakeOllama, workspace: Path
) -> None:
    ollama.enqueue(
        reply(tool_calls=[tool_call("write_file", {"path": "x.txt", "content": "x"})]),
        reply("Could not."),
    )
    assert run_cli("run", "write x.txt").code == 0
    (record,) = records(default_path(os.environ))
    assert (record["decision"], record["rule"], record["approved_by"], record["outcome"]) == (
        "deny",
        "setting",
        None,
        "denied",  # nobody said no: nobody could be asked
    )
    assert "no one can be asked" in record["error"]


def test_audit_verify_and_show(run_cli: RunCli, ollama: FakeOllama, workspace: Path) -> None:
    run_four_calls(run_cli, ollama, workspace)
    r = run_cli("audit", "verify")
    assert (r.code, r.stdout, r.stderr) == (0, "4 records, chain intact\n", "")

    r = run_cli("audit", "show")
    assert r.code == 0, r.stderr
    rows = r.stdout.splitlines()
    assert len(rows) == 4
    assert all(row.startswith("2") and "ms" in row for row in rows)  # the time; the duration
    expected = [
        ("read_file", "notes.txt", "allowed by policy"),
        ("read_file", "/etc/shadow", "denied (blocked_dir)"),
        ("write_file", "out.txt", "allowed by --yes"),
        ("run_command", "deploy --password [redacted]", "denied (disabled)"),
    ]
    for row, words in zip(rows, expected, strict=True):
        assert all(word in row for word in words), row

    r = run_cli("audit", "show", "-n", "2", "--json")
    assert r.code == 0
    shown = [json.loads(line) for line in r.stdout.splitlines()]
    assert shown == records(default_path(os.environ))[2:]


@pytest.mark.parametrize(
    ("tamper", "words"),
    [
        (
            lambda ls: [ls[0], ls[1].replace('"outcome":"denied"', '"outcome":"allowed"'), *ls[2:]],
            "line 2: hash does not match its content (edited?)",
        ),
        (lambda ls: [ls[0], *ls[2:]], "line 2: prev does not match line 1 (deleted or reordered?)"),
    ],
    ids=["edited", "deleted"],
)
def test_audit_verify_names_the_tampered_line(
    run_cli: RunCli, ollama: FakeOllama, workspace: Path, tamper: Any, words: str
) -> None:
    path = run_four_calls(run_cli, ollama, workspace)
    path.write_text("\n".join(tamper(path.read_text().splitlines())) + "\n")
    r = run_cli("audit", "verify")
    assert r.code == 1
    assert r.stderr == f"agent: {path}, {words}\n"


def test_audit_verify_and_show_read_another_file(run_cli: RunCli, tmp_path: Path) -> None:
    path = tmp_path / "copy.jsonl"
    write_log(path, 3)
    assert run_cli("audit", "verify", "--file", str(path)).stdout == "3 records, chain intact\n"
    assert len(run_cli("audit", "show", "--file", str(path)).stdout.splitlines()) == 3


def test_audit_without_a_log(run_cli: RunCli) -> None:
    r = run_cli("audit", "verify")  # a fresh install (tests/records/test_audit_fresh.py)
    assert (r.code, r.stderr) == (0, "") and r.stdout.startswith("no records yet")
    r = run_cli("audit", "show")
    assert (r.code, r.stdout) == (0, "")
    assert "no tool calls recorded yet" in r.stderr


def test_run_goes_on_when_the_log_cannot_be_written(
    run_cli: RunCli, ollama: FakeOllama, workspace: Path, tmp_path: Path
) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    (workspace / "a.txt").write_text("a\n")
    read = tool_call("read_file", {"path": "a.txt"})
    ollama.enqueue(reply(tool_calls=[read, read]), reply("Read it twice."))
    r = run_cli("run", "read a.txt twice", env={"XDG_STATE_HOME": str(blocker)})
    assert r.code == 0, r.stderr
    assert r.stdout == "Read it twice.\n"
    assert r.stderr.count("audit log could not be written") == 1
    assert "Traceback" not in r.stderr


# -- agent chat -------------------------------------------------------------------------------


@pytest.fixture
def chat_session(ollama: FakeOllama, workspace: Path, home: Path) -> Iterator[Any]:
    """Runs a chat session as `agent chat` builds it, with its keys typed through a pipe;
    returns what it printed."""
    with create_pipe_input() as pipe:

        def run(log: AuditLog, *keys: str) -> str:
            out = io.StringIO()
            console = Console(file=out, width=100, color_system=None, force_terminal=False)
            keyboard = PromptKeys(input=pipe, output=DummyOutput())
            approver = ChatApprover(console, keyboard, cwd=str(workspace))
            agent = build_agent(
                Choices(host=ollama.url),
                parse_config("", "t.yaml"),
                environ=dict(os.environ),
                cwd=str(workspace),
                home=str(home),
                approver=lambda _policy: approver,
            )
            prompt = make_prompt(
                ChatCompleter(COMMANDS, str(workspace)),
                InMemoryHistory(),
                input=pipe,
                output=DummyOutput(),
            )
            renderer = ChatRenderer(console, cwd=str(workspace))
            store = SessionStore(home / "sessions")
            session = ChatSession(
                agent, console, renderer, approver, store, prompt=prompt, audit_log=log
            )
            pipe.send_text("".join(keys) + "\x04")  # Ctrl-D ends the session
            assert session.run() == 0
            return out.getvalue()

        yield run


def test_chat_records_calls_approved_by_the_user_and_by_the_session(
    chat_session: Any, ollama: FakeOllama, workspace: Path, tmp_path: Path
) -> None:
    ollama.enqueue(
        reply(
            tool_calls=[
                tool_call("write_file", {"path": "a.txt", "content": "a\n"}),
                tool_call("write_file", {"path": "b.txt", "content": "b\n"}),
            ]
        ),
        reply("Wrote both."),
    )
    log = AuditLog(tmp_path / "audit.jsonl", "chat1", clock, cwd=str(workspace))
    text = chat_session(log, "write a and b\r", "a")
    assert "Wrote both." in text
    logged = records(log.path)
    assert [(r["tool"], r["approved_by"], r["outcome"]) for r in logged] == [
        ("write_file", "user", "allowed"),
        ("write_file", "session", "allowed"),
    ]
    assert verify(log.path).intact


def test_chat_warns_once_per_session_when_the_log_cannot_be_written(
    chat_session: Any, ollama: FakeOllama, workspace: Path, tmp_path: Path
) -> None:
    (workspace / "a.txt").write_text("a\n")
    read = tool_call("read_file", {"path": "a.txt"})
    ollama.enqueue(reply(tool_calls=[read]), reply("one"), reply(tool_calls=[read]), reply("two"))
    (tmp_path / "blocker").write_text("")
    log = AuditLog(tmp_path / "blocker" / "audit.jsonl", "chat2", clock)
    text = chat_session(log, "first\r", "second\r")
    assert "one" in text and "two" in text
    assert text.count("audit log could not be written") == 1


# -- the module -------------------------------------------------------------------------------


def test_the_audit_module_is_core(home: Path) -> None:
    """No UI library, and nothing written at import: the log appears on the first call."""
    code = (
        "import sys, cli.records.audit, cli.records.audit_events, cli.safety.redaction\n"
        "ui = ('rich', 'prompt_toolkit', 'typer', 'click')\n"
        "print(','.join(sorted(m for m in sys.modules if m.split('.')[0] in ui)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert (out.returncode, out.stdout.strip()) == (0, "")
    assert not default_path(os.environ).parent.exists()
