"""Plan mode through `agent run --plan`: what is offered, what the model reads, what a call to
a tool plan mode does not offer gets, and what --json and stream-json say."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from cli.loop.prompt import PLAN_MODE_LINE
from tests.conftest import RunCli
from tests.fakes.context import first_user_text
from tests.fakes.fake_ollama import FakeOllama, reply, tool_call

SERVER = str(Path(__file__).resolve().parents[1] / "fakes" / "mcp_server.py")
PLAN_TOOLS = ["read_file", "list_directory", "search_files", "git_status", "git_diff"]


@pytest.fixture
def run_cli(run_cli_in_process: RunCli) -> RunCli:
    return run_cli_in_process


def offered(body: dict[str, Any]) -> list[str]:
    return [t["function"]["name"] for t in body.get("tools") or []]


def write_config(workspace: Path, data: dict[str, Any]) -> str:
    path = workspace.parent / f"{workspace.name}-agent.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def test_plan_mode_offers_only_the_tools_that_change_nothing_and_says_so(
    run_cli: RunCli, ollama: FakeOllama, workspace: Path
) -> None:
    cfg = write_config(workspace, {"policy": {"tools": {"run_command": "ask"}}})
    ollama.enqueue(reply("1. edit a.txt"), reply("done"))
    r = run_cli("run", "-c", cfg, "--plan", "--json", "plan it")
    assert r.code == 0, r.stderr
    assert json.loads(r.stdout)["mode"] == "plan"
    planned = ollama.chat_bodies[0]
    assert offered(planned) == PLAN_TOOLS
    assert PLAN_MODE_LINE in first_user_text(planned)

    r = run_cli("run", "-c", cfg, "--json", "do it")
    assert r.code == 0, r.stderr
    assert json.loads(r.stdout)["mode"] == "act"
    acting = ollama.chat_bodies[1]
    assert "write_file" in offered(acting) and "run_command" in offered(acting)
    assert PLAN_MODE_LINE not in first_user_text(acting)
    # The system prompt is the same bytes in either mode: the mode is in the context block.
    assert planned["messages"][0] == acting["messages"][0]
    assert planned["messages"][0]["role"] == "system"


def test_a_write_in_plan_mode_is_refused_with_a_line_that_says_plan_mode(
    run_cli: RunCli, ollama: FakeOllama, workspace: Path
) -> None:
    ollama.enqueue(
        reply(tool_calls=[tool_call("write_file", {"path": "a.txt", "content": "x"})]),
        reply("here is the plan"),
    )
    r = run_cli("run", "--plan", "--yes", "--json", "write a.txt")
    assert r.code == 0, r.stderr
    assert not (workspace / "a.txt").exists()
    (call,) = json.loads(r.stdout)["tool_calls"]
    assert call["decision"] == "deny" and call["rule"] == "plan_mode"
    assert "plan mode" in call["result"]["error"]
    sent = [m for m in ollama.chat_bodies[1]["messages"] if m["role"] == "tool"]
    assert "not offered in plan mode" in sent[0]["content"]


def test_stream_json_start_says_the_mode(
    run_cli: RunCli, ollama: FakeOllama, workspace: Path
) -> None:
    ollama.enqueue(reply("plan"))
    r = run_cli("run", "--plan", "--output-format", "stream-json", "plan")
    assert r.code == 0, r.stderr
    start = json.loads(r.stdout.splitlines()[0])
    assert start["type"] == "start" and start["mode"] == "plan"
    assert start["tools"] == PLAN_TOOLS


def test_plan_mode_offers_an_mcp_servers_tools_only_where_it_is_read_only(
    run_cli: RunCli, ollama: FakeOllama, workspace: Path, tmp_path: Path
) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"record": str(tmp_path / "received.jsonl")}))

    def server(**extra: Any) -> dict[str, Any]:
        return {"command": sys.executable, "args": [SERVER, str(script)], **extra}

    cfg = write_config(
        workspace,
        {
            "mcp": {"servers": {"ro": server(read_only=True), "rw": server()}},
            "policy": {"tools": {"mcp__ro__*": "allow", "mcp__rw__*": "allow"}},
        },
    )
    ollama.enqueue(reply("plan"), reply("act"))
    assert run_cli("run", "-c", cfg, "--plan", "plan").code == 0
    assert run_cli("run", "-c", cfg, "act").code == 0
    planned, acting = (offered(b) for b in ollama.chat_bodies)
    assert any(n.startswith("mcp__ro__") for n in planned)
    assert not any(n.startswith("mcp__rw__") for n in planned)
    assert any(n.startswith("mcp__rw__") for n in acting)
    assert [n for n in planned if not n.startswith("mcp__")] == PLAN_TOOLS
