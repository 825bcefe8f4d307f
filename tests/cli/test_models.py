"""`agent models` through the real program, /api/show in parallel, and "did you mean" for
models the server does not have."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from cli.backends.catalog import MAX_WORKERS, gather
from cli.backends.ollama import OllamaClient
from cli.config.settings import TOOL_NAMES
from cli.errors import ModelNotFound
from tests.conftest import MakeChat, RunCli
from tests.fakes.fake_ollama import FakeOllama, HttpError, Recorded

FIELDS = {
    "name",
    "size",
    "parameter_size",
    "quantization",
    "context_length",
    "capabilities",
    "loaded",
    "tools",
    "profile",
}


@pytest.fixture
def run_cli(run_cli_in_process: RunCli) -> RunCli:
    """`agent` in this process (conftest.run_in_process): no test here is about the process."""
    return run_cli_in_process


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def server(ollama: FakeOllama) -> FakeOllama:
    """A server with a few kinds of model; qwen3:8b (there from the start) is loaded."""
    ollama.models.clear()
    ollama.add_model("qwen3:8b", ["completion", "tools", "thinking"], 40960, size=5_200_000_000)
    ollama.add_model(
        "llama3.1:8b", ["completion", "tools"], 131072, size=4_900_000_000, family="llama"
    )
    ollama.add_model(
        "gemma3:4b",
        ["completion", "vision"],
        131072,
        size=3_300_000_000,
        family="gemma3",
        parameter_size="4.3B",
        quantization="Q4_0",
    )
    ollama.loaded = {"qwen3:8b": 16384}
    return ollama


def max_in_flight(records: list[Recorded]) -> int:
    """The most requests that were being answered at the same moment."""
    edges = sorted([(r.started, 1) for r in records] + [(r.finished, -1) for r in records])
    current = peak = 0
    for _, step in edges:
        current += step
        peak = max(peak, current)
    return peak


# -- the table and --json --------------------------------------------------------------------


def test_the_table(run_cli: RunCli, server: FakeOllama) -> None:
    r = run_cli("models")
    assert r.code == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].split() == [
        "NAME",
        "SIZE",
        "PARAMS",
        "QUANT",
        "CONTEXT",
        "TOOLS",
        "PROFILE",
        "CAPABILITIES",
        "LOADED",
    ]
    rows = {line.split()[0]: line for line in lines[1:4]}
    assert list(rows) == ["gemma3:4b", "llama3.1:8b", "qwen3:8b"]  # sorted
    qwen = rows["qwen3:8b"]
    assert "4.8 GB" in qwen and "8.2B" in qwen and "Q4_K_M" in qwen and "40k" in qwen
    assert "tools, thinking" in qwen and qwen.rstrip().endswith("yes (16k ctx)")
    assert "128k" in rows["llama3.1:8b"] and "yes" not in rows["llama3.1:8b"]
    gemma = rows["gemma3:4b"]
    assert "prompt  gemma3   vision" in gemma and "4.3B" in gemma and "Q4_0" in gemma
    # Columns line up: each header starts where its column's values start.
    start = lines[0].index("TOOLS")
    assert [line[start:].split()[0] for line in rows.values()] == ["prompt", "native", "native"]
    start = lines[0].index("PROFILE")  # each model's profile (agent.aids: profiles)
    assert [line[start:].split()[0] for line in rows.values()] == ["gemma3", "llama3", "qwen3"]
    start = lines[0].index("CAPABILITIES")
    assert all(line[start:].startswith(("tools", "vision")) for line in rows.values())


def test_a_model_without_tool_support_gets_them_in_the_prompt(
    run_cli: RunCli, server: FakeOllama
) -> None:
    """Issue 21: `agent models` said gemma3:4b had "✗ no tools" and "cannot read or change
    files", while `agent run -m gemma3:4b` reads files through prompt-mode tools."""
    r = run_cli("models")
    assert "no tools" not in r.stdout and "cannot read or change files" not in r.stdout
    words = " ".join(r.stdout.split())
    assert "prompt: the model has no tool support of its own; the system prompt describes" in words
    data = {item["name"]: item["tools"] for item in json.loads(run_cli("models", "--json").stdout)}
    assert data == {"gemma3:4b": "prompt", "llama3.1:8b": "native", "qwen3:8b": "native"}


EVERY_TOOL_DENIED = "{" + ", ".join(f"{name}: deny" for name in TOOL_NAMES) + "}"


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ("agent: {tool_mode: native}\n", {"gemma3:4b": "none", "qwen3:8b": "native"}),
        ("agent: {tool_mode: prompt}\n", {"gemma3:4b": "prompt", "qwen3:8b": "prompt"}),
        (
            "policy:\n  tools: " + EVERY_TOOL_DENIED + "\n",
            {"gemma3:4b": "none", "qwen3:8b": "none"},
        ),
    ],
    ids=["native", "prompt", "every-tool-denied"],
)
def test_the_tools_column_follows_agent_tool_mode_and_the_policy(
    run_cli: RunCli, server: FakeOllama, home: Path, config: str, expected: dict[str, str]
) -> None:
    path = home / "models.yaml"
    path.write_text(config)
    data = json.loads(run_cli("models", "-c", str(path), "--json").stdout)
    tools = {item["name"]: item["tools"] for item in data if item["name"] in expected}
    assert tools == expected
    table = run_cli("models", "-c", str(path)).stdout
    if "none" in expected.values():
        assert "none: no tools (agent.tool_mode is native" in " ".join(table.split())


def test_json_has_exactly_the_fields(run_cli: RunCli, server: FakeOllama) -> None:
    r = run_cli("models", "--json")
    assert r.code == 0, r.stderr
    data = json.loads(r.stdout)
    assert isinstance(data, list) and len(data) == 3
    assert all(set(item) == FIELDS for item in data)
    by_name = {item["name"]: item for item in data}
    assert by_name["qwen3:8b"] == {
        "name": "qwen3:8b",
        "size": 5_200_000_000,
        "parameter_size": "8.2B",
        "quantization": "Q4_K_M",
        "context_length": 40960,
        "capabilities": ["completion", "thinking", "tools"],
        "loaded": True,
        "tools": "native",
        "profile": {
            "name": "qwen3",
            "source": "built-in",
            "tool_mode": "native",
            "temperature": 0.7,
            "think": False,
            "num_ctx": 8192,
            "tool_set": "full",
        },
    }
    assert by_name["gemma3:4b"]["loaded"] is False
    assert "tools" not in by_name["gemma3:4b"]["capabilities"]


def test_what_the_user_set_shows_null_in_the_profile(
    run_cli: RunCli, server: FakeOllama, workspace: Path
) -> None:
    """The profile's values are what it would set; a key the user set is theirs, not its."""
    (workspace / "cfg.yaml").write_text(
        "agent: {tool_mode: prompt}\n"
        "ollama:\n  think: true\n  options: {temperature: 0.1, num_ctx: 4096}\n"
    )
    data = json.loads(run_cli("models", "-c", "cfg.yaml", "--json").stdout)
    profile = {item["name"]: item for item in data}["qwen3:8b"]["profile"]
    assert profile == {
        "name": "qwen3",
        "source": "built-in",
        "tool_mode": None,
        "temperature": None,
        "think": None,
        "num_ctx": None,
        "tool_set": "full",
    }


def test_a_server_without_api_ps_says_loaded_is_unknown(
    run_cli: RunCli, server: FakeOllama
) -> None:
    server.has_ps = False
    data = json.loads(run_cli("models", "--json").stdout)
    assert [item["loaded"] for item in data] == [None, None, None]
    table = run_cli("models").stdout.splitlines()
    assert all(line.rstrip().endswith("?") for line in table[1:4])


def test_no_models(run_cli: RunCli, ollama: FakeOllama) -> None:
    ollama.models.clear()
    r = run_cli("models")
    assert r.code == 0 and r.stdout == ""
    assert "no models on" in r.stderr and "ollama pull" in r.stderr
    assert run_cli("models", "--json").stdout == "[]\n"


def test_host_and_config_are_taken_like_run_and_chat(
    run_cli: RunCli, server: FakeOllama, home: Path
) -> None:
    dead = {"OLLAMA_HOST": f"127.0.0.1:{closed_port()}"}
    assert run_cli("models", "--host", server.url, env=dead).code == 0
    config = home / "models.yaml"
    config.write_text(f'ollama:\n  host: "{server.url}"\n')
    env = {"OLLAMA_HOST": ""}
    r = run_cli("models", "-c", str(config), "--json", env=env)
    assert r.code == 0, r.stderr and len(json.loads(r.stdout)) == 3


def test_an_unreachable_server_is_one_line_and_exit_1(run_cli: RunCli) -> None:
    r = run_cli("models", "--host", f"127.0.0.1:{closed_port()}")
    assert r.code == 1
    assert r.stderr.count("\n") == 1 and "ollama serve" in r.stderr


def test_help_names_the_json_fields(run_cli: RunCli) -> None:
    r = run_cli("models", "--help")
    assert r.code == 0
    for flag in ("--json", "--host", "--config", "-c"):
        assert flag in r.stdout
    assert "parameter_size" in r.stdout


# -- parallel and cached ---------------------------------------------------------------------


def test_details_are_asked_for_in_parallel_and_bounded(run_cli: RunCli, ollama: FakeOllama) -> None:
    for i in range(40):
        ollama.add_model(f"model{i:02}:7b")
    ollama.show_delay = 0.05
    r = run_cli("models", "--json")
    assert r.code == 0, r.stderr
    assert len(json.loads(r.stdout)) == 41
    shows = ollama.requests_to("/api/show")
    assert len(shows) == 41 and all(s.finished for s in shows)
    assert 2 <= max_in_flight(shows) <= MAX_WORKERS  # overlapping, from a bounded pool


def test_details_are_cached_for_the_run(ollama: FakeOllama) -> None:
    ollama.add_model("llama3.1:8b")
    client = OllamaClient(ollama.url)
    first = gather(client)
    second = gather(client)
    assert first == second
    assert len(ollama.requests_to("/api/show")) == 2  # once per model, not once per listing
    assert client.model_info("llama3.1:8b").context_length == 40960
    assert len(ollama.requests_to("/api/show")) == 2


def test_one_model_failing_does_not_hide_the_others(ollama: FakeOllama) -> None:
    ollama.show_errors.append(HttpError(500, "broken manifest"))
    rows = gather(OllamaClient(ollama.url), workers=1)
    assert len(rows) == 1 and rows[0].capabilities is None
    assert rows[0].problem and "broken manifest" in rows[0].problem


# -- model not found -------------------------------------------------------------------------


def test_not_found_lists_the_closest_names(ollama: FakeOllama) -> None:
    ollama.add_model("llama3.1:8b")
    ollama.add_model("llama3.1:70b")
    ollama.add_model("gemma3:4b")
    with pytest.raises(ModelNotFound) as info:
        OllamaClient(ollama.url).model_info("llama3.1")
    message = info.value.message
    assert "did you mean llama3.1:70b, llama3.1:8b?" in message
    assert "gemma3" not in message and "ollama pull llama3.1" in message
    assert "\n" not in message


def test_not_found_through_the_cli(run_cli: RunCli, server: FakeOllama) -> None:
    r = run_cli("run", "-m", "lama3.1:8b", "hi")
    assert r.code == 1
    assert "did you mean llama3.1:8b?" in r.stderr
    assert r.stderr.count("\n") == 1
    assert server.chat_bodies == []


def test_not_found_with_nothing_alike_says_how_to_pull(run_cli: RunCli, server: FakeOllama) -> None:
    r = run_cli("run", "-m", "zzz", "hi")
    assert r.code == 1 and "did you mean" not in r.stderr and "ollama pull zzz" in r.stderr


def test_chat_model_switch_suggests_too(make_chat: MakeChat, server: FakeOllama) -> None:
    chat = make_chat()
    chat.run("/model llama3\r")
    assert "model llama3 is not on the server; did you mean llama3.1:8b?" in chat.text
