"""The prompt's prefix across runs: the system prompt and the tool definitions are the same
bytes in every run with one config and model, whatever the directory, the project or the day,
so that a server which keeps the previous prompt's cache (llama.cpp, Ollama, LM Studio, vLLM)
evaluates only what follows them: the context block (cli/loop/prompt.py) and the messages.

Each case runs the real `agent` twice against one fake server that counts, for every request,
the tokens after the longest common prefix with the previous one (tests/fakes/server_work.py:
the system message, the tools, then the other messages, as ChatML and Qwen render them), and
checks what the second run's request cost: no more than its context block, the user's message
and a few tokens of markup (and the definitions of the tools a new MCP server adds).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import RunCli
from tests.fakes.context import AHEAD, BEHIND, block_of, first_user_text, typed
from tests.fakes.fake_ollama import FakeOllama, reply
from tests.fakes.fake_openai import Answer, FakeOpenAI
from tests.fakes.server_work import ServerWork, render_tools, tokenize

MCP_SERVER = Path(__file__).resolve().parents[1] / "fakes" / "mcp_server.py"
# The markup around a user message the fake renders (role, field and end markers), and one
# token of slack where the common prefix ends inside a word.
MARKUP = 4


@dataclass
class Served:
    fake: FakeOllama | FakeOpenAI
    args: list[str]

    def answer(self, text: str) -> None:
        if isinstance(self.fake, FakeOllama):
            self.fake.enqueue(reply(text))
        else:
            self.fake.enqueue(Answer(text))


@pytest.fixture(params=["native", "openai"])
def served(request: pytest.FixtureRequest, ollama: FakeOllama, openai: FakeOpenAI) -> Served:
    if request.param == "native":
        fake: FakeOllama | FakeOpenAI = ollama
        args = ["--host", ollama.url]
    else:
        fake, args = openai, ["--api", "openai", "--host", openai.url]
    fake.server_work = ServerWork()
    return Served(fake, args)


def _config(path: Path, mcp: bool = False, tool_mode: str = "auto") -> Path:
    data: dict[str, Any] = {"agent": {"tool_mode": tool_mode}}
    if mcp:
        server = {"command": sys.executable, "args": [str(MCP_SERVER), str(_script(path))]}
        data["mcp"] = {"servers": {"notes": server}}
    path.write_text(yaml.safe_dump(data))
    return path


def _script(config: Path) -> Path:
    script = config.with_suffix(".mcp.json")
    script.write_text(json.dumps({}))
    return script


def _run(
    run_cli: RunCli, served: Served, cwd: Path, config: Path, prompt: str, tz: str = BEHIND
) -> None:
    served.answer("ok")
    r = run_cli("run", "-c", str(config), *served.args, prompt, cwd=cwd, env={"TZ": tz})
    assert r.code == 0, r.stderr


def _project(tmp_path: Path, name: str, agents_md: str = "") -> Path:
    path = tmp_path / name
    (path / ".git").mkdir(parents=True)
    if agents_md:
        (path / "AGENTS.md").write_text(agents_md)
    return path


def _bound(served: Served, prompt: str, more_tools: list[dict[str, Any]] = ()) -> int:  # type: ignore[assignment]
    """What the last request may cost: its context block, the user's words, the markup."""
    text = first_user_text(served.fake.chat_bodies[-1])
    assert typed(text) == prompt
    extra = len(render_tools(more_tools)) if more_tools else 0
    return len(tokenize(block_of(text))) + len(tokenize(prompt)) + MARKUP + extra


def _fixed(served: Served) -> int:
    """The tokens of the system message and the tool definitions of the last request."""
    body = served.fake.chat_bodies[-1]
    system = body["messages"][0]
    assert system["role"] == "system"
    return len(tokenize(system["content"])) + len(render_tools(body.get("tools")))


@pytest.mark.parametrize("tool_mode", ["auto", "prompt"])
def test_a_run_in_another_directory_evaluates_only_its_context_and_message(
    run_cli: RunCli, served: Served, tmp_path: Path, tool_mode: str
) -> None:
    config = _config(tmp_path / "agent.yaml", tool_mode=tool_mode)
    _run(run_cli, served, _project(tmp_path, "one"), config, "list the files")
    _run(run_cli, served, _project(tmp_path, "two"), config, "what is here?")
    work = served.fake.server_work
    assert work is not None and work.requests == 2
    second = work.rows[-1]
    assert second.lcp >= _fixed(served)  # the system prompt and the tools were reused
    assert second.evaluated <= _bound(served, "what is here?")


def test_a_project_with_agents_md_evaluates_only_its_context_and_message(
    run_cli: RunCli, served: Served, tmp_path: Path
) -> None:
    config = _config(tmp_path / "agent.yaml")
    _run(run_cli, served, _project(tmp_path, "plain"), config, "list the files")
    rules = "Run the tests with `make check`.\nNever touch vendor/.\n"
    _run(run_cli, served, _project(tmp_path, "ruled", rules), config, "run the tests")
    work = served.fake.server_work
    assert work is not None
    body = served.fake.chat_bodies[-1]
    assert "make check" in json.dumps(body["messages"][1])  # in the context block
    assert "make check" not in body["messages"][0]["content"]
    assert work.rows[-1].lcp >= _fixed(served)
    assert work.rows[-1].evaluated <= _bound(served, "run the tests")


def test_a_run_on_another_day_evaluates_only_its_context_and_message(
    run_cli: RunCli, served: Served, tmp_path: Path
) -> None:
    config = _config(tmp_path / "agent.yaml")
    project = _project(tmp_path, "same")
    _run(run_cli, served, project, config, "list the files", tz=BEHIND)
    _run(run_cli, served, project, config, "list the files", tz=AHEAD)
    first, second = (json.dumps(b["messages"]) for b in served.fake.chat_bodies)
    dates = [text.split("Today's date: ", 1)[1][:10] for text in (first, second)]
    assert dates[0] != dates[1]  # another day indeed
    work = served.fake.server_work
    assert work is not None
    assert work.rows[-1].lcp >= _fixed(served)
    assert work.rows[-1].evaluated <= _bound(served, "list the files")


def test_an_mcp_server_added_costs_its_tools_and_the_context_not_ours(
    run_cli: RunCli, served: Served, tmp_path: Path
) -> None:
    project = _project(tmp_path, "same")
    _run(run_cli, served, project, _config(tmp_path / "plain.yaml"), "list the files")
    ours = served.fake.chat_bodies[-1].get("tools") or []
    _run(run_cli, served, project, _config(tmp_path / "mcp.yaml", mcp=True), "list the files")
    tools = served.fake.chat_bodies[-1].get("tools") or []
    # Ours first, as they were; the server's after them.
    assert tools[: len(ours)] == ours and len(tools) > len(ours)
    work = served.fake.server_work
    assert work is not None
    second = work.rows[-1]
    system = served.fake.chat_bodies[-1]["messages"][0]
    assert second.lcp >= len(tokenize(system["content"])) + len(render_tools(ours)) - 2
    assert second.evaluated <= _bound(served, "list the files", tools[len(ours) :])
