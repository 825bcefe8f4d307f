"""Issue 21, friction in `agent chat`, each seen on a terminal (a pty drawn by tests/fakes/vt.py):
the header names the approval mode, an MCP server that cannot start is said when the chat
starts, MCP cards preview the result, `/models` says what `agent models` says, long card lines
hang under their card, and a CRLF file's diff says "CRLF" once."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.fakes.context import typed
from tests.fakes.fake_ollama import FakeOllama, reply, tool_call
from tests.pty.driver import Ttys

pytestmark = pytest.mark.pty

SERVER = str(Path(__file__).resolve().parents[1] / "fakes" / "mcp_server.py")


def write_config(home: Path, data: dict[str, Any]) -> None:
    path = home / ".config" / "metona-agent" / "config.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data))


def mcp_script(tmp: Path) -> str:
    path = tmp / "script.json"
    path.write_text('{"record": "%s"}' % (tmp / "received.jsonl"))
    return str(path)


# -- the header ----------------------------------------------------------------------------


def test_the_header_shows_confirm_none_at_40_columns(
    ollama: FakeOllama, workspace: Path, home: Path, ttys: Ttys
) -> None:
    write_config(home, {"policy": {"confirm": "none"}})
    term = ttys.chat(host=ollama.url, cols=40)
    rows = term.screen.transcript()
    said = [row for row in rows if row.startswith("confirm: none")]
    assert said, "\n".join(rows)
    assert "without asking" in " ".join(rows)


def test_the_header_names_the_default_approval_mode(
    ollama: FakeOllama, workspace: Path, ttys: Ttys
) -> None:
    term = ttys.chat(host=ollama.url, cols=120)
    rows = term.screen.transcript()
    at = next(i for i, row in enumerate(rows) if "metona-agent" in row)
    # a long workspace path (a parallel run's temp dirs are longer) wraps the header's end
    header = " ".join(rows[at : at + 2])
    assert "confirm: write-only" in header, "\n".join(rows)
    assert "writes, edits and moves run without asking" not in term.screen.text()


# -- MCP start-up failures -----------------------------------------------------------------


def test_an_mcp_server_that_cannot_start_is_said_before_the_first_message(
    ollama: FakeOllama, workspace: Path, home: Path, ttys: Ttys
) -> None:
    missing = str(workspace / "no-such-server")
    write_config(home, {"mcp": {"servers": {"broken": {"command": missing}}}})
    term = ttys.chat(host=ollama.url, cols=80)
    term.wait("MCP server broken:")
    term.wait_ready()
    assert ollama.chat_bodies == []  # said with nothing sent
    ollama.enqueue(reply("Hello."))
    term.say("hi", then="Hello.")
    assert term.screen.text().count("MCP server broken:") == 1  # not again at the first message


def test_an_mcp_failure_known_while_typing_shows_above_the_prompt(
    ollama: FakeOllama, workspace: Path, home: Path, ttys: Ttys, tmp_path: Path
) -> None:
    gate = tmp_path / "fail-now"
    # A server that fails only when the test says so: the prompt is being read by then.
    command = f"while [ ! -e {gate} ]; do sleep 0.05; done; exit 3"
    servers = {"late": {"command": "/bin/sh", "args": ["-c", command], "startup_timeout": 120}}
    write_config(home, {"mcp": {"servers": servers}})
    term = ttys.chat(host=ollama.url, cols=80)
    term.keys("half typed")
    term.wait("half typed")
    assert "MCP server late" not in term.screen.text()
    gate.touch()
    term.wait("MCP server late:")
    term.wait_ready(holding="half typed")
    assert ollama.chat_bodies == []
    # What was typed is still there: Enter sends it.
    ollama.enqueue(reply("Got it."))
    term.keys("\r")
    term.wait("Got it.")
    users = [typed(m["content"]) for m in ollama.chat_bodies[0]["messages"] if m["role"] == "user"]
    assert users == ["half typed"]


# -- MCP cards -----------------------------------------------------------------------------


def test_an_mcp_card_previews_the_result_sanitised(
    ollama: FakeOllama, workspace: Path, home: Path, ttys: Ttys, tmp_path: Path
) -> None:
    servers = {"s": {"command": sys.executable, "args": [SERVER, mcp_script(tmp_path)]}}
    write_config(home, {"mcp": {"servers": servers}, "policy": {"tools": {"mcp__s__*": "allow"}}})
    text = "first line of the result\nsecond \x1b[31mred\x1b[0m line"
    ollama.enqueue(
        reply(tool_calls=[tool_call("mcp__s__echo", {"text": text})]),
        reply("It echoed."),
    )
    term = ttys.chat(host=ollama.url, cols=80)
    term.say("echo it", then="It echoed.")
    rows = term.screen.transcript()
    first = next(i for i, row in enumerate(rows) if "allowed by policy" in row)  # title's end
    assert rows[first + 1].strip() == "first line of the result"
    assert rows[first + 2].strip() == "second \\x1b[31mred\\x1b[0m line"  # escapes shown, not run
    assert rows[first + 3].strip().startswith("2 lines")


# -- /models ---------------------------------------------------------------------------------


def test_models_in_chat_shows_what_agent_models_shows(
    ollama: FakeOllama, workspace: Path, ttys: Ttys
) -> None:
    ollama.add_model("gemma3:4b", ["completion", "vision"], context_length=131072, size=3 << 30)
    ollama.loaded["qwen3:8b"] = 8192
    term = ttys.chat(host=ollama.url, cols=120)
    term.say("/models", then="gemma3:4b")
    rows = term.screen.transcript()
    gemma = next(row for row in rows if "gemma3:4b" in row)
    qwen = next(row for row in rows if row.startswith("* qwen3:8b"))
    assert gemma == "  gemma3:4b · 3.0 GB · 128k ctx · tools prompt · vision"
    assert "40k ctx · tools native · tools, thinking · loaded (8k ctx)" in qwen
    assert any(row.strip().startswith("prompt: the model has no tool support") for row in rows)


# -- card lines --------------------------------------------------------------------------------


def test_a_long_card_line_hangs_under_its_card_at_40_columns(
    ollama: FakeOllama, workspace: Path, ttys: Ttys
) -> None:
    path = "a-rather-long-directory/with-a-longer-subdirectory/and-the-file-at-last.md"
    ollama.enqueue(
        reply(tool_calls=[tool_call("write_file", {"path": path, "content": "x\n"})]),
        reply("Written."),
    )
    term = ttys.chat(host=ollama.url, cols=40)
    term.line("write it")
    term.wait_card(then="allow?")
    term.settle()
    rows = term.screen.transcript()
    start = next(i for i, row in enumerate(rows) if "write_file" in row)
    end = next(i for i, row in enumerate(rows) if i > start and "why:" in row)
    card = rows[start + 1 : end + 1]
    assert all(row.startswith(" ") for row in card), "\n".join(rows[start : end + 1])
    term.press("y")
    term.wait_turn_end(then="Written.")
    rows = term.screen.transcript()
    done = max(i for i, row in enumerate(rows) if "write_file" in row)
    assert rows[done + 1].startswith("  "), "\n".join(rows[done:])  # the final card's title too


def test_a_crlf_file_diff_says_crlf_once(ollama: FakeOllama, workspace: Path, ttys: Ttys) -> None:
    (workspace / "win.txt").write_bytes(b"one\r\ntwo\r\nthree\r\n")
    edit = {"path": "win.txt", "old_string": "two", "new_string": "TWO"}
    ollama.enqueue(
        reply(tool_calls=[tool_call("read_file", {"path": "win.txt"})]),
        reply(tool_calls=[tool_call("edit_file", edit)]),
        reply("Edited."),
    )
    term = ttys.chat(host=ollama.url, cols=80)
    term.line("shout two")
    term.wait_card(then="allow?")
    term.settle()
    text = term.screen.text()
    assert "line endings: CRLF" in text
    assert "\\r" not in text
    assert "-two" in text and "+TWO" in text
    term.press("y")
    term.wait_turn_end(then="Edited.")
    assert (workspace / "win.txt").read_bytes() == b"one\r\nTWO\r\nthree\r\n"
