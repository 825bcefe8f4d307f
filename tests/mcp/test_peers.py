"""Against real, third-party MCP peers, installed by `.ci/mcp-peers` into .ci/peers (never
at test time): the reference server-everything (npm), the Python reference server
mcp-server-time (PyPI), and the official conformance suite in client mode. Without them
these tests skip, saying how to install them; under CI ($METONA_MCP_PEERS_REQUIRED=1, set
by .ci/run) a missing peer fails the run."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import REPO, RunCli
from tests.fakes.fake_ollama import FakeOllama, reply, tool_call

PEERS = REPO / ".ci" / "peers"
NODE_MODULES = PEERS / "node" / "node_modules" / "@modelcontextprotocol"
EVERYTHING = NODE_MODULES / "server-everything" / "dist" / "index.js"
CONFORMANCE = NODE_MODULES / "conformance" / "dist" / "index.js"
TIME_SERVER = PEERS / "py" / "bin" / "mcp-server-time"


def need(path: Path) -> Path:
    if path.exists():
        return path
    why = f"{path.relative_to(REPO)} is not installed: run .ci/mcp-peers"
    if os.environ.get("METONA_MCP_PEERS_REQUIRED") == "1":
        pytest.fail(why)
    pytest.skip(why)


def node() -> str:
    wheel = PEERS / "py" / "bin" / "node"  # .ci/mcp-peers' Node 22 when the machine has none
    return str(wheel) if wheel.exists() else "node"


def config(workspace: Path, name: str, server: dict[str, Any]) -> str:
    data = {
        "mcp": {"servers": {name: server}},
        "policy": {"tools": {f"mcp__{name}__*": "allow"}},
    }
    (workspace / "peers.yaml").write_text(yaml.safe_dump(data))
    return str(workspace / "peers.yaml")


def results(ollama: FakeOllama) -> list[dict[str, Any]]:
    messages = ollama.chat_bodies[1]["messages"]
    return [json.loads(m["content"]) for m in messages if m.get("role") == "tool"]


# -- server-everything ----------------------------------------------------------------------------


def test_server_everything_over_stdio(run_cli: RunCli, ollama: FakeOllama, workspace: Path) -> None:
    cfg = config(workspace, "everything", {"command": node(), "args": [str(need(EVERYTHING))]})
    listed = run_cli("mcp", "list", "-c", cfg, "--json", timeout=90)
    assert listed.code == 0, listed.stdout + listed.stderr
    (row,) = json.loads(listed.stdout)
    assert row["status"] == "ready" and row["protocol_version"] == "2025-11-25"
    for tool in ("echo", "get-sum", "get-tiny-image", "get-resource-reference"):
        assert f"mcp__everything__{tool}" in row["tools"]
    calls = [
        tool_call("mcp__everything__echo", {"message": "hi\nthere"}),
        tool_call("mcp__everything__get-sum", {"a": 2, "b": 3}),
        tool_call("mcp__everything__get-tiny-image", {}),
        tool_call(
            "mcp__everything__get-resource-reference", {"resourceType": "Text", "resourceId": 1}
        ),
        tool_call("mcp__everything__get-sum", {"a": "two", "b": 3}),  # our schema check
        tool_call("mcp__everything__no-such-tool", {}),
    ]
    ollama.enqueue(reply(tool_calls=calls), reply("done"))
    r = run_cli("run", "-c", cfg, "--json", "go", timeout=90)
    assert r.code == 0, r.stderr
    echo, total, image, resource, bad, unknown = results(ollama)
    assert echo["content"] == "Echo: hi\nthere"
    assert total["content"] == "The sum of 2 and 3 is 5."
    assert "[image image/png, about " in image["content"] and "not shown" in image["content"]
    assert resource["success"] is True and "demo://resource" in json.dumps(resource)
    assert bad["success"] is False and "'a' must be a number" in bad["error"]
    assert unknown["success"] is False and "unknown tool" in unknown["error"]
    outcomes = [c["outcome"] for c in json.loads(r.stdout)["tool_calls"]]
    assert outcomes == ["allowed", "allowed", "allowed", "allowed", "invalid", "invalid"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_server_everything_over_streamable_http(
    run_cli: RunCli, ollama: FakeOllama, workspace: Path, tmp_path: Path
) -> None:
    script = need(EVERYTHING)
    port = _free_port()
    env = {**os.environ, "PORT": str(port)}
    log = (tmp_path / "everything.log").open("wb")
    server = subprocess.Popen(
        [node(), str(script), "streamableHttp"], env=env, stdout=log, stderr=log
    )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.1)
        cfg = config(workspace, "web", {"url": f"http://127.0.0.1:{port}/mcp"})
        ollama.enqueue(
            reply(tool_calls=[tool_call("mcp__web__get-sum", {"a": 40, "b": 2})]), reply("42")
        )
        r = run_cli("run", "-c", cfg, "go", timeout=90)
        assert r.code == 0, r.stderr
        assert results(ollama)[0]["content"] == "The sum of 40 and 2 is 42."
    finally:
        server.terminate()
        server.wait(timeout=10)
        log.close()


# -- mcp-server-time (the Python reference servers) -----------------------------------------------


def test_mcp_server_time(run_cli: RunCli, ollama: FakeOllama, workspace: Path) -> None:
    server = {"command": str(need(TIME_SERVER)), "args": ["--local-timezone", "UTC"]}
    cfg = config(workspace, "time", server)
    calls = [
        tool_call("mcp__time__get_current_time", {"timezone": "UTC"}),
        tool_call(
            "mcp__time__convert_time",
            {"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"},
        ),
        tool_call("mcp__time__get_current_time", {"timezone": "Mars/Base"}),
    ]
    ollama.enqueue(reply(tool_calls=calls), reply("done"))
    r = run_cli("run", "-c", cfg, "--json", "what time is it", timeout=90)
    assert r.code == 0, r.stderr
    now, converted, mars = results(ollama)
    assert json.loads(now["content"])["timezone"] == "UTC"
    assert now["structuredContent"]["timezone"] == "UTC"
    target = converted["structuredContent"]["target"]
    assert target["timezone"] == "Asia/Tokyo" and "T21:00:00+09:00" in target["datetime"]
    assert converted["structuredContent"]["time_difference"] == "+9.0h"
    assert mars["success"] is False and "Mars/Base" in mars["error"]
    outcomes = [c["outcome"] for c in json.loads(r.stdout)["tool_calls"]]
    assert outcomes == ["allowed", "allowed", "failed"]


# -- the conformance suite -------------------------------------------------------------------------


@pytest.mark.parametrize("scenario", ["initialize", "tools_call", "sse-retry"])
def test_conformance_client_scenario(scenario: str) -> None:
    suite = need(CONFORMANCE)
    client = f"{sys.executable} {REPO / 'tests' / 'fakes' / 'mcp_conformance_client.py'}"
    if " " in client.replace(f"{sys.executable} ", "", 1) or " " in sys.executable:
        pytest.skip("the suite splits --command on spaces, and this path has one")
    out = subprocess.run(
        [node(), str(suite), "client", "--command", client, "--scenario", scenario],
        capture_output=True,
        text=True,
        timeout=120,
    )
    text = out.stdout + out.stderr
    assert out.returncode == 0, text
    assert "OVERALL: PASSED" in text and "0 failed, 0 warnings" in text
