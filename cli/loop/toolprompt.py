"""The tools described in the system prompt, for a model that takes no `tools` field (pure).

In prompt mode the request carries no tool definitions; the system prompt lists each tool
(its name, the first sentence of its description, its parameters' JSON schema) and shows the
one format to call it in. cli/loop/textcalls.py reads the calls back, with the same tags
(CALL_OPEN, CALL_CLOSE), so the two cannot drift apart. Small models (135M–8B) follow short
instructions better than long ones: the section says each rule once.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from cli.loop.textcalls import CALL_CLOSE, CALL_OPEN

__all__ = ["CALL_CLOSE", "CALL_OPEN", "HEADING", "describe_tools", "format_call"]

HEADING = "[Tools]"

# Small models copy the example call as it stands: it shows a tool that only reads.
_EXAMPLE_TOOLS = ("read_file", "list_directory")

# A sentence ends at ".", "!" or "?" before a space ("1.5 MB" does not end one), or with the
# description's first line.
_SENTENCE_END = re.compile(r"[.!?](?=\s)")


def describe_tools(definitions: Sequence[Mapping[str, Any]], *, constrained: bool = False) -> str:
    """The system prompt's section on tools, for definitions as /api/chat's `tools` takes
    them (`{"type": "function", "function": {"name", "description", "parameters"}}`); ""
    when there are none. `constrained`: the server holds each reply to the schema of
    cli/loop/constrained.py, and the section says how to write one."""
    functions = [_function(definition) for definition in definitions]
    if not functions:
        return ""
    lines = [HEADING, "You can call these tools:"]
    for function in functions:
        schema = json.dumps(function.get("parameters") or {}, separators=(",", ":"))
        summary = _first_sentence(str(function.get("description") or ""))
        lines.append(
            " ".join(filter(None, [f"- {function['name']}:", summary, "Parameters:", schema]))
        )
    shown = next((f for f in functions if f["name"] in _EXAMPLE_TOOLS), functions[0])
    name, arguments = _example_call(shown)
    if constrained:
        from cli.loop.constrained import ANSWER_KEY, example_reply

        lines += [
            "",
            "Reply with one JSON object and nothing else. To call a tool:",
            example_reply(name, arguments),
            "To answer the user, when no tool is needed or the work is done:",
            json.dumps({ANSWER_KEY: "your answer"}),
            "After a call, its result comes back to you; then call the next tool or answer.",
        ]
        return "\n".join(lines)
    lines += [
        "",
        "To call a tool, write a block like this, with the tool's name and its arguments:",
        format_call(name, arguments),
        "Rules:",
        f"- One {CALL_OPEN} block per call; write several blocks for several calls.",
        "- Put nothing but the JSON object inside a block; use double quotes.",
        "- Then stop and wait: each result comes back to you as a tool message.",
        "- When no tool is needed, answer normally, without a block.",
    ]
    return "\n".join(lines)


def format_call(name: str, arguments: Mapping[str, Any]) -> str:
    """One call written the way prompt mode asks for it, and as qwen/hermes-style models
    were trained to write it."""
    call = json.dumps({"name": name, "arguments": dict(arguments)}, ensure_ascii=False)
    return f"{CALL_OPEN}\n{call}\n{CALL_CLOSE}"


def _first_sentence(description: str) -> str:
    """The first sentence of a description, on one line."""
    lines = description.strip().splitlines()
    line = " ".join(lines[0].split()) if lines else ""
    end = _SENTENCE_END.search(line)
    return line[: end.end()] if end else line


def _example_call(function: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """A call of `function` with a plausible value for each required parameter."""
    parameters = function.get("parameters") or {}
    properties = parameters.get("properties") or {}
    required = [key for key in parameters.get("required") or [] if key in properties]
    return str(function["name"]), {key: _example(key, properties[key]) for key in required}


def _function(definition: Mapping[str, Any]) -> Mapping[str, Any]:
    function = definition.get("function", definition)
    if not isinstance(function, Mapping) or not isinstance(function.get("name"), str):
        raise ValueError(f"not a tool definition: {definition!r}")
    return function


def _example(key: str, schema: Any) -> Any:
    kind = schema.get("type") if isinstance(schema, Mapping) else None
    if isinstance(schema, Mapping) and schema.get("enum"):
        return schema["enum"][0]
    if kind == "string":
        return "README.md" if "path" in key or key in ("source", "destination") else "text"
    return {"integer": 1, "number": 1, "boolean": True, "array": [], "object": {}}.get(
        str(kind), "text"
    )
