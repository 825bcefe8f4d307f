"""Tool calls a model wrote as text instead of `tool_calls` (pure).

Ollama's parsers miss these for several popular models (qwen2.5-coder bare JSON, ollama#12174;
qwen3 `<tool_call>` in content, #11185; qwen3-coder `<function=…>` XML, #18530; mistral's
`[TOOL_CALLS]`). We accept them only in strict shapes, so that a model showing JSON to the
user is not mistaken for a call: a bare object must name one of our tools.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection
from typing import Any

from cli.backends.messages import MAX_JSON_DEPTH, JSONTooDeep, ToolCall, loads_json
from cli.backends.ollama import parse_tool_call

_TAGGED = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|\Z)", re.DOTALL)
_FUNCTION_XML = re.compile(r"<function=([\w.-]+)>(.*?)</function>", re.DOTALL)
_PARAMETER_XML = re.compile(r"<parameter=([\w.-]+)>\n?(.*?)\n?</parameter>", re.DOTALL)
_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.DOTALL)
_MISTRAL = "[TOOL_CALLS]"
_TOO_DEEP = f"the tool call nests deeper than {MAX_JSON_DEPTH} levels; send a flat object"


def extract_tool_calls(content: str, known: Collection[str]) -> tuple[list[ToolCall], str]:
    """Return (calls, the content left once the calls are taken out); ([], content) when the
    content holds no call in a shape we accept."""
    text = content.strip()
    if "<function=" in text:
        calls = [_xml_call(m) for m in _FUNCTION_XML.finditer(text)]
        if calls:
            rest = _TAGGED.sub("", _FUNCTION_XML.sub("", text)).strip()
            return calls, rest
    if "<tool_call>" in text:
        calls = []
        for match in _TAGGED.finditer(text):
            call = _json_call(match.group(1))
            if call is None:
                return [], content
            calls.append(call)
        return calls, _TAGGED.sub("", text).strip()
    marked = text.startswith(_MISTRAL)
    if marked:
        text = text[len(_MISTRAL) :].strip()
    fenced = _FENCE.match(text)
    if fenced:
        text = fenced.group(1)
    if text[:1] not in ("{", "["):
        return [], content
    try:
        data = loads_json(text)
    except JSONTooDeep:
        # Marked as calls, it is a call we cannot read: refused, and the model told why. Bare
        # JSON that deep cannot be told from an answer without parsing it: it stays one.
        return ([ToolCall("", {}, arguments_error=_TOO_DEEP)], "") if marked else ([], content)
    except ValueError:
        return [], content
    items = data if isinstance(data, list) else [data]
    parsed = [_object_call(item) for item in items]
    if parsed and all(c is not None and c.name in known for c in parsed):
        return [c for c in parsed if c is not None], ""
    return [], content


def _json_call(text: str) -> ToolCall | None:
    try:
        data = loads_json(text)
    except JSONTooDeep:
        return ToolCall("", {}, arguments_error=_TOO_DEEP)
    except ValueError:
        return None
    return _object_call(data)


def _object_call(data: Any) -> ToolCall | None:
    """`{"name": ..., "arguments"|"parameters": {...}}`, or the same under "function"."""
    if not isinstance(data, dict):
        return None
    if isinstance(data.get("function"), dict):
        data = data["function"]
    if not isinstance(data.get("name"), str):
        return None
    args = data.get("arguments", data.get("parameters", {}))
    if not isinstance(args, (dict, str)):
        return None
    return parse_tool_call({"function": {"name": data["name"], "arguments": args}})


def _xml_call(match: re.Match[str]) -> ToolCall:
    arguments: dict[str, Any] = {}
    for name, raw in _PARAMETER_XML.findall(match.group(2)):
        try:
            arguments[name] = _xml_value(raw)
        except JSONTooDeep:
            return ToolCall(match.group(1), {}, arguments_error=f"'{name}': {_TOO_DEEP}")
    return ToolCall(match.group(1), arguments)


def _xml_value(raw: str) -> Any:
    """qwen3-coder writes every value as text; numbers and booleans are JSON inside. A value
    nested too deep raises JSONTooDeep."""
    stripped = raw.strip()
    if stripped in ("true", "false", "null") or re.fullmatch(r"-?\d+(\.\d+)?", stripped):
        return json.loads(stripped)
    if stripped[:1] in ("[", "{"):
        try:
            return loads_json(stripped)
        except JSONTooDeep:
            raise
        except ValueError:
            pass
    return raw
