"""Argument repair (agent.aids: repair) against a corpus of malformed calls that local models
and their servers really produce, each with where it was seen, and the shapes that must not
be mended because they could mean something else. Then the repair as the loop applies it:
history shows the call as it ran, the model is told in one line, the trace and the JSON say
what was mended, and an MCP tool gets no aliases."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from cli.backends.messages import ToolCall, tool_call
from cli.tools import ALL_TOOLS, COMPACT_TOOLS
from cli.tools.repair import LenientNames, mended_line, repair_call
from tests.conftest import MakeAgent, RunCli
from tests.fakes.fake_ollama import FakeOllama, reply
from tests.fakes.fake_ollama import tool_call as wire_call

OFFERED = {name: tool.parameters for name, tool in ALL_TOOLS.items() if name != "run_command"}


@dataclass(frozen=True)
class Case:
    id: str
    tool: str
    arguments: Any  # an object, or the raw string a server sent
    expected: tuple[str, dict[str, Any]] | None  # None: left as it came
    source: str
    schemas: dict[str, Any] = field(default_factory=lambda: OFFERED)


# Each shape with where it comes from: a named tool or tracker thread where one was checked,
# else the reason a model would write it. Tool and parameter names are ours where the point
# is the shape.
CORPUS = [
    # -- a parameter under another name ----------------------------------------------------
    Case(
        "file_path",
        "read_file",
        {"file_path": "a.txt"},
        ("read_file", {"path": "a.txt"}),
        "Claude Code's Read/Edit/Write take file_path; models trained on its traces send it",
    ),
    Case(
        "filePath",
        "read_file",
        {"filePath": "a.txt"},
        ("read_file", {"path": "a.txt"}),
        "opencode's read/edit tools take filePath (sst/opencode)",
    ),
    Case(
        "absolute_path",
        "read_file",
        {"absolute_path": "/w/a.txt"},
        ("read_file", {"path": "/w/a.txt"}),
        "Gemini CLI's read_file took absolute_path (its ReadFileToolParams, 2025)",
    ),
    Case(
        "target_file",
        "edit_file",
        {"target_file": "a.txt", "old_string": "x", "new_string": "y"},
        ("edit_file", {"path": "a.txt", "old_string": "x", "new_string": "y"}),
        "Cursor's read_file, edit_file and delete_file take target_file "
        "(its published agent prompts)",
    ),
    Case(
        "filename",
        "write_file",
        {"filename": "a.txt", "content": "x"},
        ("write_file", {"path": "a.txt", "content": "x"}),
        "the plain English word for the thing the parameter holds",
    ),
    Case(
        "file",
        "read_file",
        {"file": "a.txt"},
        ("read_file", {"path": "a.txt"}),
        "the plain English word, as `file_path` is its longer form",
    ),
    Case(
        "directory",
        "list_directory",
        {"directory": "src"},
        ("list_directory", {"path": "src"}),
        "the word for what a listing takes; our list_directory names it path",
    ),
    Case(
        "dir_path",
        "create_directory",
        {"dir_path": "out"},
        ("create_directory", {"path": "out"}),
        "the dir form of `file_path`",
    ),
    Case(
        "old_str",
        "edit_file",
        {"path": "a.txt", "old_str": "x", "new_str": "y"},
        ("edit_file", {"path": "a.txt", "old_string": "x", "new_string": "y"}),
        "Anthropic's text editor tool (str_replace_based_edit_tool) takes old_str/new_str",
    ),
    Case(
        "oldString",
        "edit_file",
        {"path": "a.txt", "oldString": "x", "newString": "y"},
        ("edit_file", {"path": "a.txt", "old_string": "x", "new_string": "y"}),
        "opencode's edit tool takes oldString/newString",
    ),
    Case(
        "contents",
        "write_file",
        {"path": "a.txt", "contents": "x"},
        ("write_file", {"path": "a.txt", "content": "x"}),
        "the plural of content, as a file's `contents`",
    ),
    Case(
        "src-dst",
        "move_file",
        {"src": "a", "dst": "b"},
        ("move_file", {"source": "a", "destination": "b"}),
        "mv-style names",
    ),
    Case(
        "from-to",
        "move_file",
        {"from": "a", "to": "b"},
        ("move_file", {"source": "a", "destination": "b"}),
        "a rename's own words",
    ),
    Case(
        "move-path",
        "move_file",
        {"path": "a", "new_path": "b"},
        ("move_file", {"source": "a", "destination": "b"}),
        "a model's move with its read's name",
    ),
    Case(
        "pattern",
        "search_files",
        {"pattern": "TODO"},
        ("search_files", {"query": "TODO"}),
        "grep-style tools take `pattern` (Claude Code's Grep, Cursor's grep)",
    ),
    Case(
        "startLine",
        "read_file",
        {"path": "a.txt", "startLine": 3, "endLine": 4},
        ("read_file", {"path": "a.txt", "start_line": 3, "end_line": 4}),
        "camelCase, as tool schemas written in TypeScript name parameters",
    ),
    Case(
        "cached",
        "git_diff",
        {"cached": True},
        ("git_diff", {"staged": True}),
        "`git diff --cached`: the flag's own name",
    ),
    # -- a value of the wrong JSON type ----------------------------------------------------
    Case(
        "bool-string",
        "list_directory",
        {"path": ".", "recursive": "false"},
        ("list_directory", {"path": ".", "recursive": False}),
        'issue 28\'s report; self-hosted models send "true"/"false" '
        "(QwenLM/qwen-code#4618, vellum-ai#34577, ha-mcp#218)",
    ),
    Case(
        "bool-True",
        "delete_file",
        {"path": "b", "recursive": "True"},
        ("delete_file", {"path": "b", "recursive": True}),
        'Python\'s spelling (NVIDIA-NeMo/Nemotron#52: Nemotron-3-Nano sends "True"/"False")',
    ),
    Case(
        "int-string",
        "read_file",
        {"path": "a.txt", "start_line": "12"},
        ("read_file", {"path": "a.txt", "start_line": 12}),
        'a number as a string, as in Dave-London/Pare#782 ("number": "777")',
    ),
    Case(
        "int-for-string",
        "write_file",
        {"path": "n.txt", "content": 42},
        ("write_file", {"path": "n.txt", "content": "42"}),
        "a number's file written as a number",
    ),
    Case(
        "array-string",
        "search_files",
        {"query": "x", "file_extensions": '[".py", ".js"]'},
        ("search_files", {"query": "x", "file_extensions": [".py", ".js"]}),
        "a list sent as JSON text (MoonshotAI/kimi-cli#2513: nested values as JSON strings)",
    ),
    Case(
        "one-for-array",
        "search_files",
        {"query": "x", "file_extensions": ".py"},
        ("search_files", {"query": "x", "file_extensions": [".py"]}),
        "one value where a list is wanted",
    ),
    Case(
        "enum-case",
        "search_files",
        {"query": "x", "search_type": "Content"},
        ("search_files", {"query": "x", "search_type": "content"}),
        "an enum value in Title case",
    ),
    Case(
        "enum-utf8",
        "read_file",
        {"path": "a.txt", "encoding": "UTF8"},
        ("read_file", {"path": "a.txt", "encoding": "utf-8"}),
        "utf8 for utf-8",
    ),
    # -- the whole arguments in another shape -------------------------------------------------
    Case(
        "twice-encoded",
        "read_file",
        '"{\\"path\\": \\"a.txt\\"}"',
        ("read_file", {"path": "a.txt"}),
        "arguments as a JSON string holding a JSON string "
        "(vllm-project/vllm#54964: Granite 4 through the hermes parser)",
    ),
    Case(
        "wrapped-arguments",
        "read_file",
        {"arguments": {"path": "a.txt"}},
        ("read_file", {"path": "a.txt"}),
        "the call's own key repeated inside",
    ),
    Case(
        "wrapped-parameters",
        "read_file",
        {"parameters": {"path": "a.txt"}},
        ("read_file", {"path": "a.txt"}),
        'llama 3.x\'s {"name", "parameters"} shape, nested',
    ),
    Case(
        "wrapped-string",
        "read_file",
        {"arguments": '{"path": "a.txt"}'},
        ("read_file", {"path": "a.txt"}),
        "nested and encoded",
    ),
    Case(
        "whole-call",
        "read_file",
        {"name": "read_file", "arguments": {"path": "a.txt"}},
        ("read_file", {"path": "a.txt"}),
        "the whole call, name and all, as the arguments",
    ),
    # -- the tool's name ------------------------------------------------------------------
    Case(
        "Read_File",
        "Read_File",
        {"path": "a.txt"},
        ("read_file", {"path": "a.txt"}),
        "issue 28's report",
    ),
    Case("READ_FILE", "READ_FILE", {"path": "a.txt"}, ("read_file", {"path": "a.txt"}), "caps"),
    Case(
        "readFile",
        "readFile",
        {"path": "a.txt"},
        ("read_file", {"path": "a.txt"}),
        "camelCase tool names",
    ),
    Case(
        "read-file",
        "read-file",
        {"path": "a.txt"},
        ("read_file", {"path": "a.txt"}),
        "kebab-case, as MCP servers name tools",
    ),
    Case(
        "functions.",
        "functions.read_file",
        {"path": "a.txt"},
        ("read_file", {"path": "a.txt"}),
        "OpenAI's `functions.` namespace leaking from harmony (gpt-oss) and llama-cpp-python's "
        "chatml-function-calling prompt",
    ),
    Case(
        "default_api.",
        "default_api.list_directory",
        {"path": "."},
        ("list_directory", {"path": "."}),
        "the `default_api.` namespace of Gemini's Python-style calls",
    ),
    Case(
        "both",
        "ListDirectory",
        {"dir": "."},
        ("list_directory", {"path": "."}),
        "name and argument mended at once",
    ),
    # -- what must stay as it came: it could mean something else -------------------------
    Case(
        "alias-beside-name",
        "read_file",
        {"path": "a.txt", "file_path": "b.txt"},
        None,
        "two paths: which one is meant?",
    ),
    Case(
        "two-aliases",
        "read_file",
        {"file": "a.txt", "filename": "b.txt"},
        None,
        "two aliases of one parameter",
    ),
    Case(
        "yes-for-bool",
        "list_directory",
        {"path": ".", "recursive": "yes"},
        None,
        "'yes' is not JSON's true: not guessed",
    ),
    Case(
        "one-for-bool",
        "list_directory",
        {"path": ".", "recursive": 1},
        None,
        "1 for true: not guessed",
    ),
    Case(
        "float-for-int",
        "read_file",
        {"path": "a.txt", "start_line": "3.5"},
        None,
        "3.5 is no line number",
    ),
    Case(
        "list-of-two",
        "search_files",
        {"query": "x", "file_extensions": ".py, .js"},
        None,
        "a list in a string that is not JSON: split where?",
    ),
    Case("unknown-name", "read_everything", {"path": "."}, None, "matches no tool"),
    Case(
        "unknown-argument",
        "read_file",
        {"path": "a.txt", "lines": "1-5"},
        None,
        "an argument we have no meaning for",
    ),
    Case(
        "ambiguous-name",
        "readfile",
        {"path": "a"},
        None,
        "matches two offered tools",
        schemas={
            "read_file": {"properties": {"path": {}}},
            "readFile": {"properties": {"path": {}}},
        },
    ),
    Case("not-json", "read_file", "{path: a.txt", None, "arguments that are not JSON at all"),
    Case(
        "inf-for-number",
        "mcp_scale",
        {"factor": "1e999"},
        None,
        "a number no JSON request can carry (inf)",
        schemas={"mcp_scale": {"properties": {"factor": {"type": "number"}}}},
    ),
    Case(
        "wrapper-is-a-parameter",
        "mcp_tool",
        {"input": "hello"},
        None,
        "a tool whose parameter is named `input` keeps it",
        schemas={"mcp_tool": {"properties": {"input": {"type": "string"}}}},
    ),
]


def _call(case: Case) -> ToolCall:
    return tool_call(case.tool, case.arguments, "call_1")


@pytest.mark.parametrize("case", CORPUS, ids=lambda c: c.id)
def test_the_corpus(case: Case) -> None:
    call = _call(case)
    mended = repair_call(call, case.schemas, ALL_TOOLS)
    if case.expected is None:
        assert mended is call, f"{case.id}: mended what could mean something else"
        return
    name, arguments = case.expected
    assert (mended.name, dict(mended.arguments)) == (name, arguments)
    assert mended.repairs and mended.id == "call_1" and mended.arguments_error is None
    # What a repair makes passes the schema check that the decision makes next.
    from cli.tools.schema import validate_arguments

    validate_arguments(mended.arguments, case.schemas[name], strict=name in ALL_TOOLS)


def test_the_corpus_is_large_enough() -> None:
    mended = [c for c in CORPUS if c.expected is not None]
    kept = [c for c in CORPUS if c.expected is None]
    assert len(CORPUS) >= 30 and len(mended) >= 25 and len(kept) >= 6


def test_a_mended_call_says_what_was_mended_in_one_line() -> None:
    call = repair_call(tool_call("Read_File", {"file_path": "a.txt"}, None), OFFERED, ALL_TOOLS)
    assert call.repairs == ("tool 'Read_File' is read_file", "'file_path' is 'path'")
    assert mended_line(call) == (
        "mended before it ran: tool 'Read_File' is read_file; 'file_path' is 'path'"
    )
    typed = repair_call(
        tool_call("list_directory", {"path": ".", "recursive": "false"}, None), OFFERED, ALL_TOOLS
    )
    assert typed.repairs == ("'recursive' is false, not \"false\"",)


def test_an_mcp_tool_gets_no_aliases_but_its_types_and_name() -> None:
    schemas = {
        "mcp__fs__read": {"properties": {"file": {"type": "string"}, "n": {"type": "integer"}}}
    }
    aliased = tool_call("mcp__fs__read", {"file_path": "a"}, None)
    assert repair_call(aliased, schemas, ALL_TOOLS) is aliased
    typed = repair_call(
        tool_call("MCP__FS__READ", {"file": "a", "n": "3"}, None), schemas, ALL_TOOLS
    )
    assert (typed.name, dict(typed.arguments)) == ("mcp__fs__read", {"file": "a", "n": 3})


def test_the_compact_set_s_schemas_are_mended_by_its_own_parameters() -> None:
    compact = {name: tool.parameters for name, tool in COMPACT_TOOLS.items()}
    call = repair_call(
        tool_call("list_directory", {"dir": ".", "recursive": "true"}, None), compact, ALL_TOOLS
    )
    assert dict(call.arguments) == {"path": ".", "recursive": True}
    # include_hidden is no parameter of the compact listing: left for the schema to refuse
    kept = tool_call("list_directory", {"path": ".", "include_hidden": "true"}, None)
    assert repair_call(kept, compact, ALL_TOOLS) is kept


def test_lenient_names_read_a_text_call_by_a_near_name() -> None:
    names = LenientNames(["read_file", "write_file"])
    assert "read_file" in names and "Read_File" in names and "functions.write_file" in names
    assert "delete_file" not in names and 42 not in names
    assert list(names) == ["read_file", "write_file"] and len(names) == 2


# -- as the loop applies it ----------------------------------------------------------------


def test_the_loop_runs_the_mended_call_and_shows_it_as_it_ran(
    make_agent: MakeAgent, ollama: FakeOllama, workspace: Path
) -> None:
    (workspace / "notes.txt").write_text("buy milk\n")
    ollama.enqueue(reply(tool_calls=[wire_call("Read_File", {"file_path": "notes.txt"})]))
    ollama.enqueue(reply("It says buy milk."))
    events = make_agent().run("what is in notes.txt?")
    second = ollama.chat_bodies[1]["messages"]
    assert second[-2]["tool_calls"] == [
        {"function": {"name": "read_file", "arguments": {"path": "notes.txt"}}}
    ]
    result = json.loads(second[-1]["content"])
    assert second[-1]["tool_name"] == "read_file"
    assert result["success"] is True and result["content"] == "buy milk\n"
    assert result["repaired"] == (
        "mended before it ran: tool 'Read_File' is read_file; 'file_path' is 'path'"
    )
    assert events[-1].answer == "It says buy milk."


def test_a_mended_call_shows_in_the_trace_and_the_json(
    run_cli_in_process: RunCli, ollama: FakeOllama, workspace: Path
) -> None:
    (workspace / "notes.txt").write_text("buy milk\n")
    ollama.enqueue(reply(tool_calls=[wire_call("read_file", {"filename": "notes.txt"})]))
    ollama.enqueue(reply("milk"))
    r = run_cli_in_process("run", "read notes.txt")
    assert r.code == 0, r.stderr
    assert "mended: 'filename' is 'path'" in r.stderr
    ollama.enqueue(reply(tool_calls=[wire_call("read_file", {"filename": "notes.txt"})]))
    ollama.enqueue(reply("milk"))
    data = json.loads(run_cli_in_process("run", "--json", "read notes.txt").stdout)
    (call,) = data["tool_calls"]
    assert call["repairs"] == ["'filename' is 'path'"] and call["arguments"] == {
        "path": "notes.txt"
    }


def test_with_repair_off_the_slip_fails_as_before(
    make_agent: MakeAgent, ollama: FakeOllama, workspace: Path
) -> None:
    (workspace / "notes.txt").write_text("x\n")
    ollama.enqueue(reply(tool_calls=[wire_call("read_file", {"file_path": "notes.txt"})]))
    ollama.enqueue(reply("?"))
    make_agent("agent: {aids: [profiles, compact]}\n").run("read it")
    result = json.loads(ollama.chat_bodies[1]["messages"][-1]["content"])
    assert result["error"].startswith(
        "invalid arguments for read_file: unexpected argument 'file_path'"
    )
    assert "repaired" not in result
