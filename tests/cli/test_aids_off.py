"""With the aids off (`agent.aids: off`), a run sends exactly the requests and gives exactly
the results it gave before the aids existed.

The golden files in tests/golden/aids_off/ were recorded by this very module on commit
ed4573d, the last one before the aids (argument repair, model profiles, the compact tool set,
constrained calls), with `METONA_UPDATE_GOLDEN=1` and the config line that turns the aids off
left out, since that key did not exist yet. Each scenario is a small model's usual slips
(aliased argument names, a tool name in the wrong case, strings for booleans and numbers, JSON
in a string), in native and in prompt mode, against both fake servers. The test runs each
again under `agent.aids: off` and compares every request the server received (method, path,
body) and the run's `--json` result, byte for byte once the temporary paths and the date
are written as placeholders, and once the golden's system prompt is laid out as the agent lays
it out since (where and when it runs moved to the context block that leads the first user
message: `_with_the_context_block`); and runs it with the aids on to show that they do change
it.
"""

from __future__ import annotations

import json
import os
import platform
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import RunCli
from tests.fakes.fake_ollama import FakeOllama, reply, tool_call
from tests.fakes.fake_openai import Answer, Call, FakeOpenAI

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "aids_off"
UPDATE = os.environ.get("METONA_UPDATE_GOLDEN") == "1"
# The config line under test. (Empty when the goldens were recorded: see the docstring.)
AIDS_OFF = "  aids: off\n"


@pytest.fixture
def run_cli(run_cli_in_process: RunCli) -> RunCli:
    return run_cli_in_process


@dataclass
class Scenario:
    name: str
    api: str  # native | openai
    model: str
    prompt: str
    answers: list[Any]  # what the fake answers, in order
    files: dict[str, str] = field(default_factory=dict)
    config: str = ""  # more of the config's `agent:` section
    model_setup: Callable[[Any], None] | None = None


def _ollama_calls(*calls: tuple[str, Any]) -> Any:
    return reply(
        tool_calls=[tool_call(name, args, index=i) for i, (name, args) in enumerate(calls)]
    )


def _tagged(call: str) -> str:
    return f"<tool_call>\n{call}\n</tool_call>"


def _gemma(fake: FakeOllama) -> None:
    fake.add_model("gemma3:4b", ["completion", "vision"], family="gemma3", parameter_size="4.3B")


def _smollm(fake: FakeOllama) -> None:
    fake.add_model(
        "smollm2:135m", ["completion", "tools"], 8192, family="llama", parameter_size="134.52M"
    )


SCENARIOS = [
    Scenario(
        "native-slips",
        "native",
        "qwen3:8b",
        "look at notes.txt and the python files, then write out.txt",
        [
            _ollama_calls(("read_file", {"file_path": "notes.txt"})),
            _ollama_calls(("Read_File", {"path": "notes.txt"})),
            _ollama_calls(("list_directory", {"path": ".", "recursive": "false"})),
            _ollama_calls(("search_files", {"query": "def", "file_extensions": '[".py"]'})),
            _ollama_calls(("read_file", {"path": "notes.txt", "start_line": "2"})),
            _ollama_calls(("write_file", {"path": "out.txt", "content": "done\n"})),
            reply("finished"),
        ],
        files={"notes.txt": "buy milk\ncall Bob\n", "src/a.py": "def main():\n    pass\n"},
    ),
    Scenario(
        "native-move-edit",
        "native",
        "qwen3:8b",
        "rename a.txt to b.txt and fix the typo in c.txt",
        [
            _ollama_calls(("move_file", {"src": "a.txt", "dst": "b.txt"})),
            _ollama_calls(("read_file", {"path": "c.txt"})),
            _ollama_calls(("edit_file", {"path": "c.txt", "old_str": "teh", "new_str": "the"})),
            _ollama_calls(
                ("edit_file", '{"path": "c.txt", "old_string": "teh", "new_string": "the"}')
            ),
            reply("done"),
        ],
        files={"a.txt": "a\n", "c.txt": "teh cat\n"},
    ),
    Scenario(
        "prompt-mode",
        "native",
        "gemma3:4b",
        "what is in notes.txt?",
        [
            reply(_tagged('{"name": "read_file", "arguments": {"filename": "notes.txt"}}')),
            reply(_tagged('{"name": "read_file", "arguments": {"path": "notes.txt"}}')),
            reply("It says buy milk."),
        ],
        files={"notes.txt": "buy milk\n"},
        model_setup=_gemma,
    ),
    Scenario(
        "small-native",
        "native",
        "smollm2:135m",
        "list the files here",
        [
            _ollama_calls(("list_directory", {"path": ".", "recursive": "true"})),
            reply("There is notes.txt."),
        ],
        files={"notes.txt": "x\n"},
        model_setup=_smollm,
    ),
    Scenario(
        "openai-native",
        "openai",
        "qwen2.5-coder:7b",
        "what is in notes.txt?",
        [
            Answer(tool_calls=[Call("read_file", {"file_path": "notes.txt"})]),
            Answer(tool_calls=[Call("READ_FILE", {"path": "notes.txt", "end_line": "1"})]),
            Answer("It says buy milk."),
        ],
        files={"notes.txt": "buy milk\n"},
    ),
    Scenario(
        "openai-prompt",
        "openai",
        "smollm2-135m",
        "what is in notes.txt?",
        [
            Answer('{"name": "read_file", "arguments": {"file": "notes.txt"}}'),
            Answer('{"name": "read_file", "arguments": {"path": "notes.txt"}}'),
            Answer("buy milk"),
        ],
        files={"notes.txt": "buy milk\n"},
        config="  tool_mode: prompt\n",
    ),
]


def _run(
    scenario: Scenario,
    run_cli: RunCli,
    workspace: Path,
    ollama: FakeOllama,
    openai: FakeOpenAI,
    aids: str,
) -> dict[str, Any]:
    for rel, text in scenario.files.items():
        path = workspace / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    fake: FakeOllama | FakeOpenAI = ollama if scenario.api == "native" else openai
    if scenario.model_setup is not None:
        scenario.model_setup(fake)
    elif isinstance(fake, FakeOpenAI):
        fake.add_model(scenario.model)
    fake.requests.clear()
    fake.enqueue(*scenario.answers)
    config = workspace.parent / f"{workspace.name}-config.yaml"
    stream = "  stream: false\n" if scenario.api == "openai" else ""
    config.write_text(
        f"ollama:\n  model: {scenario.model}\n{stream}agent:\n{aids}{scenario.config}",
        encoding="utf-8",
    )
    args = ["run", "--json", "--yes", "-c", str(config), "--host", fake.url]
    if scenario.api == "openai":
        args += ["--api", "openai"]
    done = run_cli(*args, scenario.prompt)
    result = json.loads(done.stdout) if done.stdout.strip() else None
    if isinstance(result, dict):
        # Wall time, and the durations the OpenAI client measures by the clock itself.
        timed = ("wall_time",) if scenario.api == "native" else _CLOCKED
        result["stats"] = {k: v for k, v in result["stats"].items() if k not in timed}
    requests = [{"method": r.method, "path": r.path, "body": r.body} for r in fake.requests]
    return _placeholders(
        {"code": done.code, "result": result, "requests": requests}, workspace, config
    )


_CLOCKED = ("wall_time", "eval_duration", "total_duration", "tokens_per_second")


def _placeholders(data: dict[str, Any], workspace: Path, config: Path) -> dict[str, Any]:
    """The run as text that does not depend on where and when it ran."""
    text = json.dumps(data, indent=1, ensure_ascii=False, sort_keys=True)
    for path, word in ((str(config), "<config>"), (str(workspace), "<workspace>")):
        text = text.replace(json.dumps(path)[1:-1], word)
    text = text.replace(date.today().isoformat(), "<today>")
    text = text.replace(f"{platform.system()} {platform.release()}", "<os>")
    text = re.sub(r"run-\d{8}-\d{6}(-\d+)?", "run-<time>", text)
    loaded: dict[str, Any] = json.loads(text)
    return loaded


# Where the agent stands, as the system prompt ended before the context block took it.
_WHERE = re.compile(
    r"\n\n(Working directory: [^\n]*\nAllowed directories [^\n]*\n"
    r"Operating system: [^\n]*\nToday's date: [^\n]*)"
)


def _with_the_context_block(recorded: dict[str, Any]) -> dict[str, Any]:
    """A golden's requests as the agent lays the same prompt out now: what the system prompt
    said of where and when moved to a context block that leads the first user message, so
    that the system prompt and the tools are the same in every directory and on every day.
    Nothing else of a request changed since the goldens were recorded."""
    laid_out = json.loads(json.dumps(recorded))
    for request in laid_out["requests"]:
        messages = (request.get("body") or {}).get("messages")
        if not messages or messages[0].get("role") != "system":
            continue
        where = _WHERE.search(messages[0]["content"])
        assert where is not None, "a golden's system prompt says where it ran"
        messages[0]["content"] = _WHERE.sub("", messages[0]["content"], count=1)
        block = f"<context>\n{where.group(1)}\n</context>\n\n"
        first_user = next(m for m in messages if m.get("role") == "user")
        if isinstance(first_user.get("content"), list):  # OpenAI's content parts
            first_user["content"][0]["text"] = block + first_user["content"][0]["text"]
        else:
            first_user["content"] = block + first_user["content"]
    return laid_out


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
def test_with_the_aids_off_a_run_is_what_it_was_before_them(
    scenario: Scenario,
    run_cli: RunCli,
    workspace: Path,
    ollama: FakeOllama,
    openai: FakeOpenAI,
) -> None:
    golden = GOLDEN / f"{scenario.name}.json"
    seen = _run(scenario, run_cli, workspace, ollama, openai, "" if UPDATE else AIDS_OFF)
    if UPDATE:
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(json.dumps(seen, indent=1, ensure_ascii=False, sort_keys=True) + "\n")
        pytest.skip(f"recorded {golden.name}")
    assert seen == _with_the_context_block(json.loads(golden.read_text(encoding="utf-8")))


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
def test_with_the_aids_on_the_same_run_goes_otherwise(
    scenario: Scenario,
    run_cli: RunCli,
    workspace: Path,
    ollama: FakeOllama,
    openai: FakeOpenAI,
) -> None:
    """The proof that the goldens above test something: with the aids on (the default), each
    scenario's slips are mended, and what is sent and what comes back differ."""
    seen = _run(scenario, run_cli, workspace, ollama, openai, "")
    before = json.loads((GOLDEN / f"{scenario.name}.json").read_text(encoding="utf-8"))
    assert seen != before
    assert seen["code"] == 0
    mended = [c for c in seen["result"]["tool_calls"] if c.get("repairs")]
    assert mended, "no call was mended"
    for call in mended:
        assert call["result"]["repaired"].startswith("mended before it ran: ")
