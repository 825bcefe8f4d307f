"""Checking a model's tool arguments against the JSON schema we sent it (pure).

Ollama drops schema keys it does not know and never validates arguments itself, so a model
can send anything: a wrong type, a bad enum, a missing or invented argument. Each error says
exactly what to fix, because the model reads it and tries again.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

_TYPES: Mapping[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list,),
    "object": (dict,),
}


class SchemaError(ValueError):
    """The arguments do not fit the tool's schema."""


def validate_arguments(
    arguments: Mapping[str, Any], schema: Mapping[str, Any], *, strict: bool = True
) -> dict[str, Any]:
    """Return the arguments, checked, with optional nulls dropped; raise SchemaError.
    `strict`: an argument the schema does not name is an error (our own tools); otherwise
    (an MCP server's schema, unless it says `additionalProperties: false`) it passes as it
    is. Keywords this checker does not know are ignored, except `default` in our own
    tools' schemas (`strict`): an argument left out takes it (search_files' path)."""
    own = strict
    properties = schema.get("properties", {})
    if not isinstance(properties, Mapping):
        properties = {}
    listed = schema.get("required")
    required = [r for r in listed if isinstance(r, str)] if isinstance(listed, list) else []
    strict = strict or schema.get("additionalProperties") is False
    cleaned: dict[str, Any] = {}
    for name, value in arguments.items():
        if name not in properties and not strict:
            cleaned[name] = value
            continue
        if name not in properties:
            raise SchemaError(
                f"unexpected argument '{name}'; this tool takes: {', '.join(properties)}"
            )
        if value is None and name not in required:
            continue  # some models send every optional argument as null: that means "absent"
        cleaned[name] = _check(value, properties[name], name)
    if own:
        for name, spec in properties.items():
            if name not in cleaned and isinstance(spec, Mapping) and "default" in spec:
                cleaned[name] = spec["default"]
    missing = [name for name in required if cleaned.get(name) is None]
    if missing:
        raise SchemaError(
            f"missing required argument{'s' if len(missing) > 1 else ''}: {', '.join(missing)}"
        )
    return cleaned


def _check(value: Any, schema: Any, name: str) -> Any:
    if not isinstance(schema, Mapping):
        return value  # `true` or something odd: anything goes
    expected = schema.get("type")
    if isinstance(expected, list):  # ["string", "null"]: any of them
        kinds = [k for k in expected if isinstance(k, str)]
        if kinds and not any(_is_type(_coerce_whole_float(value, k), k) for k in kinds):
            raise SchemaError(
                f"'{name}' must be one of types {', '.join(kinds)}, got {_describe(value)}"
            )
        expected = None
    if isinstance(expected, str) and expected:
        value = _coerce_whole_float(value, expected)
        if not _is_type(value, expected):
            raise SchemaError(f"'{name}' must be {_article(expected)}, got {_describe(value)}")
    enum = schema.get("enum")
    if isinstance(enum, list) and value not in enum:
        choices = ", ".join(repr(e) for e in enum)
        raise SchemaError(f"'{name}' must be one of {choices}, got {_describe(value)}")
    if expected == "array" and "items" in schema:
        value = [_check(item, schema["items"], f"{name}[{i}]") for i, item in enumerate(value)]
    return value


def _is_type(value: Any, expected: str) -> bool:
    if expected == "null":
        return value is None
    if isinstance(value, bool) and expected in ("integer", "number"):
        return False  # JSON true is not 1
    return isinstance(value, _TYPES.get(expected, (object,)))


def _coerce_whole_float(value: Any, expected: str) -> Any:
    # 5.0 for a line number is a model being sloppy about JSON numbers, not a wrong type.
    if expected == "integer" and isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _article(kind: str) -> str:
    return f"an {kind}" if kind[0] in "aeiou" else f"a {kind}"


def _describe(value: Any) -> str:
    if value is None:
        return "null"
    kind = {bool: "boolean", int: "integer", float: "number", str: "string", list: "array"}.get(
        type(value), "object"
    )
    text = repr(value)
    return f"{kind} {text[:60]}{'…' if len(text) > 60 else ''}"
