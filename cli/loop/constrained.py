"""Constrained calls in prompt mode (agent.aids: constrained), where the server can (pure).

A model without native tool support writes its calls as text, and a small one often writes
them wrong: a name we did not offer, an argument of the wrong type, half a block. Servers
that sample under a grammar can hold the answer to a JSON schema instead (Ollama's `format`,
`response_format` on llama.cpp, llama-cpp-python, vLLM and LM Studio). The schema here lets
the model write exactly one of these, and nothing else:

    {"answer": "…"}                                   an answer to the user
    {"name": "read_file", "arguments": {"path": …}}  a call to an offered tool, its
                                                      arguments as that tool's schema wants

so every call it writes names an offered tool and has valid arguments. The system prompt
says so (cli/loop/toolprompt.py). A server that cannot hold to a schema is sent none and
the model writes free text, read as prompt mode reads it (cli/loop/textcalls.py); a reply
that is not one of the shapes above is read that way too.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from cli.backends.messages import ToolCall, loads_json, tool_call

ANSWER_KEY = "answer"


def reply_schema(definitions: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The JSON schema of one reply: an answer, or a call of one of `definitions` (as
    /api/chat's `tools` takes them), with that tool's arguments."""
    answer = {
        "type": "object",
        "properties": {ANSWER_KEY: {"type": "string"}},
        "required": [ANSWER_KEY],
        "additionalProperties": False,
    }
    calls = [_call_schema(definition) for definition in definitions]
    return {"anyOf": [answer, *calls]}


def _call_schema(definition: Mapping[str, Any]) -> dict[str, Any]:
    function = definition.get("function", definition)
    name = str(function["name"])
    parameters = function.get("parameters")
    arguments: dict[str, Any] = (
        copy.deepcopy(dict(parameters)) if isinstance(parameters, Mapping) else {}
    )
    arguments.setdefault("type", "object")
    arguments.setdefault("properties", {})
    # Our own schemas name every argument; an MCP server's may take more, and says so.
    arguments.setdefault("additionalProperties", False)
    for spec in arguments["properties"].values():
        if isinstance(spec, dict):
            spec.pop("default", None)  # a grammar has no use for it; it only lengthens
    return {
        "type": "object",
        "properties": {"name": {"type": "string", "enum": [name]}, "arguments": arguments},
        "required": ["name", "arguments"],
        "additionalProperties": False,
    }


def read_reply(text: str, known: Collection[str]) -> tuple[list[ToolCall], str] | None:
    """A reply in the schema's shape: ([the call], "") or ([], the answer); None when it is
    not one (a server that did not hold to the schema): the caller reads it as free text."""
    stripped = text.strip()
    if not stripped.startswith("{"):
        return None
    try:
        data = loads_json(stripped)
    except ValueError:
        cut = _cut_answer(stripped)
        return None if cut is None else ([], cut)
    if not isinstance(data, dict):
        return None
    if set(data) == {ANSWER_KEY} and isinstance(data[ANSWER_KEY], str):
        return [], data[ANSWER_KEY]
    if set(data) <= {"name", "arguments"} and isinstance(data.get("name"), str):
        name = data["name"]
        if name in known:
            return [tool_call(name, data.get("arguments"), None)], ""
    return None


_ANSWER_START = re.compile(r'\{\s*"answer"\s*:\s*"')


def _cut_answer(text: str) -> str | None:
    """The answer of a reply the server cut short (num_predict, a length stop) inside its
    `{"answer": "…` string: the text it holds so far, not the JSON around it."""
    start = _ANSWER_START.match(text)
    if start is None:
        return None
    try:
        answer, _ = json.decoder.scanstring(text, start.end())  # type: ignore[attr-defined]
    except ValueError:  # the string never closes: it was cut inside it
        rest = text[start.end() :]
        half = re.search(r"(\\+)(u[0-9a-fA-F]{0,3})?$", rest)
        if half is not None and len(half.group(1)) % 2:  # the cut fell inside an escape
            rest = rest[: half.start() + len(half.group(1)) - 1]
        try:
            answer = json.loads(f'"{rest}"')
        except ValueError:
            return None
    return answer if isinstance(answer, str) else None


def example_reply(name: str, arguments: Mapping[str, Any]) -> str:
    """One call written as the schema has it."""
    return json.dumps({"name": name, "arguments": dict(arguments)}, ensure_ascii=False)
