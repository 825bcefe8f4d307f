"""One vocabulary for what became of a call — allowed (by whom), declined, denied (rule),
invalid, failed — the same in `agent run`'s trace, `--json`, the audit log and chat's cards;
what was written for the model (its hint) reaches the model and nobody else."""

from __future__ import annotations

import io
import json
import os
import sys
from pathlib import Path
from typing import Any

import pexpect
import pytest

from cli.loop import outcomes
from cli.records.audit import tail
from tests.conftest import MakeChat, RunCli
from tests.fakes.fake_ollama import FakeOllama, reply, tool_call

# One model turn that meets every outcome a call can have without a person.
CALLS = [
    tool_call("read_file", {"path": "notes.txt"}),  # allowed by policy
    tool_call("read_file", {"path": "missing.txt"}),  # failed: no such file
    tool_call("read_file", {"path": ".env"}),  # denied (sensitive)
    tool_call("write_file", {"path": "x.txt"}),  # invalid: no content
    tool_call("read_file", {"path": "sub"}),  # failed, with a hint for the model
    tool_call("write_file", {"path": "y.txt", "content": "y"}),  # denied: no one to ask
    tool_call("frobnicate", {"path": "a"}),  # invalid: no such tool
]
EXPECTED = ["allowed", "failed", "denied", "invalid", "failed", "denied", "invalid"]
RULES = [None, None, "sensitive", "schema", None, "setting", "unknown_tool"]


@pytest.fixture
def run_cli(run_cli_in_process: RunCli) -> RunCli:
    """`agent` in this process (conftest.run_in_process): no test here is about the process."""
    return run_cli_in_process


def _tool_messages(ollama: FakeOllama) -> list[dict[str, Any]]:
    """What the model was sent back for its calls (the request after them)."""
    messages = ollama.chat_bodies[1]["messages"]
    return [json.loads(m["content"]) for m in messages if m.get("role") == "tool"]


def _audit(home: Path) -> list[dict[str, Any]]:
    path = home / ".local/state/metona-agent/audit.jsonl"
    return [record for _, record in tail(path, 100) if record is not None]


@pytest.fixture
def tree(workspace: Path) -> Path:
    (workspace / "notes.txt").write_text("alpha\nbeta\n")
    (workspace / ".env").write_text("TOKEN=abc\n")
    (workspace / "sub").mkdir()
    return workspace


def test_trace_json_and_audit_say_the_same(
    run_cli: RunCli, ollama: FakeOllama, tree: Path, home: Path
) -> None:
    ollama.enqueue(reply(tool_calls=CALLS), reply("done"))
    r = run_cli("run", "--json", "go")
    assert r.code == 0, r.stderr
    trace = [line for line in r.stderr.splitlines() if line.startswith("→")]
    assert trace == [
        "→ read_file notes.txt · allowed by policy · 2 lines, 11 B",
        "→ read_file missing.txt · failed · missing.txt does not exist",
        "→ read_file .env · denied (sensitive) · .env looks like a secret (a credential or key "
        "file); it is never read, searched or written",
        "→ write_file x.txt · invalid · missing required argument: content",
        "→ read_file sub · failed · sub is a directory, not a regular file",
        "→ write_file y.txt (1 B) · denied (setting) · needs a confirmation, and no one "
        "can be asked (not run from a terminal); allow it in the policy or run with --yes",
        "→ frobnicate path='a' · invalid · unknown tool 'frobnicate'",
    ]
    calls = json.loads(r.stdout)["tool_calls"]
    assert [c["outcome"] for c in calls] == EXPECTED
    assert [c["rule"] if c["outcome"] in ("denied", "invalid") else None for c in calls] == RULES
    assert calls[0]["approved_by"] == "policy" and calls[0]["decision"] == "allow"
    records = _audit(home)
    assert [rec["outcome"] for rec in records] == EXPECTED
    assert [rec["rule"] for rec in records][2:4] == ["sensitive", "schema"]
    assert records[5]["rule"] == "setting"


def test_what_is_written_for_the_model_reaches_only_the_model(
    run_cli: RunCli, ollama: FakeOllama, tree: Path
) -> None:
    ollama.enqueue(reply(tool_calls=CALLS), reply("done"))
    r = run_cli("run", "go")
    assert r.code == 0, r.stderr
    for advice in ("use list_directory", "valid tools", "invalid arguments for", "denied:"):
        assert advice not in r.stderr
    sent = _tool_messages(ollama)
    assert sent[4]["hint"] == "use list_directory"
    assert sent[4]["error"] == "sub is a directory, not a regular file"
    assert "valid tools: read_file" in sent[6]["hint"]
    assert sent[2]["error"].startswith("denied: .env looks like a secret")
    # An invalid call is told it was malformed, not that it was forbidden.
    assert (
        sent[3]["error"] == "invalid arguments for write_file: missing required argument: content"
    )
    assert sent[6]["error"] == "unknown tool 'frobnicate'"


def test_no_doubled_words_in_the_trace(run_cli: RunCli, ollama: FakeOllama, tree: Path) -> None:
    """Before: `· denied · denied: …` for every refusal."""
    ollama.enqueue(reply(tool_calls=CALLS), reply("done"))
    r = run_cli("run", "go")
    assert r.code == 0
    for line in r.stderr.splitlines():
        words = [part.strip().split(" ")[0] for part in line.split("·")[1:]]
        assert len(words) == len(set(words)), line


def test_a_person_who_says_no_declined_it(ollama: FakeOllama, workspace: Path, home: Path) -> None:
    ollama.enqueue(
        reply(tool_calls=[tool_call("write_file", {"path": "out.txt", "content": "x\n"})]),
        reply("fine"),
    )
    env = {**os.environ, "OLLAMA_HOST": ollama.url, "TERM": "dumb"}
    child = pexpect.spawn(
        sys.executable,
        ["-m", "cli", "run", "write it"],
        cwd=str(workspace),
        env=env,
        encoding="utf-8",
        timeout=20,
        dimensions=(40, 120),
    )
    child.logfile_read = seen = io.StringIO()
    child.expect(r"Allow\? \[y/N\] ")
    child.sendline("n")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    assert "→ write_file out.txt (2 B) · declined · you said no\r\n" in seen.getvalue()
    (record,) = _audit(home)
    assert record["outcome"] == "declined" and record["rule"] == "setting"
    assert _tool_messages(ollama)[0]["error"] == "not run: the user declined"


# -- chat's cards ----------------------------------------------------------------------------


def test_chat_cards_use_the_same_words(make_chat: MakeChat, ollama: FakeOllama, tree: Path) -> None:
    calls = [*CALLS[:5], tool_call("write_file", {"path": "y.txt", "content": "y"})]
    ollama.enqueue(reply(tool_calls=calls), reply("done"))
    chat = make_chat()
    chat.run("go\r", "n", "too risky\r")
    titles = [line for line in chat.text.splitlines() if " · " in line and "│" not in line]
    text = "\n".join(titles)
    assert "read_file notes.txt · allowed by policy ·" in text
    assert "read_file missing.txt · failed ·" in text
    assert "read_file .env · denied (sensitive)" in text
    assert "write_file x.txt · invalid" in text
    assert "write_file y.txt (1 B) · declined" in text
    assert "you said no: too risky" in chat.text
    assert "missing required argument: content" in chat.text
    for gone in ("blocked by policy", "not approved", "cancelled", "use list_directory"):
        assert gone not in chat.text
    assert "invalid arguments for" not in chat.text


def test_a_cut_line_in_a_card_says_how_much(
    make_chat: MakeChat, ollama: FakeOllama, workspace: Path
) -> None:
    (workspace / "wide.txt").write_text("x" * 300 + "\n")
    ollama.enqueue(reply(tool_calls=[tool_call("read_file", {"path": "wide.txt"})]), reply("ok"))
    chat = make_chat()
    chat.run("read\r")
    (row,) = [line for line in chat.text.splitlines() if "1 │" in line]
    assert len(row) <= 100
    shown = row.count("x")
    assert row.endswith(f"… +{300 - shown} chars")


# -- the words themselves ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("word", "by", "rule", "spelled"),
    [
        ("allowed", "policy", None, "allowed by policy"),
        ("allowed", "user", None, "allowed by you"),
        ("allowed", "--yes", None, "allowed by --yes"),
        ("allowed", "session", None, "allowed for this session"),
        ("denied", None, "sensitive", "denied (sensitive)"),
        ("ok", "user", None, "allowed by you"),  # a record written before this vocabulary
        ("error", "policy", None, "failed"),
        ("declined", None, "setting", "declined"),
        ("interrupted", None, None, "interrupted"),
    ],
)
def test_spelling(word: str, by: str | None, rule: str | None, spelled: str) -> None:
    assert outcomes.spell(word, by=by, rule=rule) == spelled


def test_a_declined_reason_reads_as_the_persons() -> None:
    assert outcomes.declined_detail("the user declined") == "you said no"
    assert outcomes.declined_detail("the user declined: not now") == "you said no: not now"
    assert outcomes.declined_detail("the user stopped this turn", True) == "you stopped this turn"
