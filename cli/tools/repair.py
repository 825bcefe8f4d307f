"""Mending the unambiguous slips in a model's tool call before it is decided (pure).

A small model's usual slips each cost it a whole step: it reads an error, and often makes the
same call again. Where only one meaning is possible, the call is mended instead
(agent.aids: repair), and the model is told in one short line what was read how:

- a tool name that is one offered tool's but for case, `_`/`-`/spaces, camelCase or a
  `functions.` prefix (`Read_File`, `readFile`, `functions.read_file`);
- an argument name that is one parameter's but for case and separators (`startLine`), or one
  of its known aliases (`file_path`, `filename`, `file` → `path`; `src` → `source`,
  `dst` → `destination`; `old_str` → `old_string`…: ALIASES);
- a value of the wrong JSON type that says one thing only: "true"/"false" for a boolean,
  "12" for an integer, a list or object written as a JSON string, one string where a list
  of strings is wanted, an enum value in another case, a whole number for a string;
- arguments nested one level too deep (`{"arguments": {…}}`, the whole call as its
  arguments), or a JSON object encoded twice.

Nothing that could change what the call means is mended: an alias beside the name it stands
for, two aliases of one parameter, "yes" for a boolean, "3.5" for an integer, a name that
matches two tools. Such a call stays as it came and fails as it always did, with its error.
The aliases apply to the built-in tools only, whose parameters' meanings we know; an MCP
tool gets the name, case and type repairs, judged by its own schema.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Collection, Iterator, Mapping
from typing import Any

from cli.backends.messages import MAX_JSON_DEPTH, ToolCall, nests_deeper_than

# Other names models give our parameters, from the malformed calls of peers' trackers and
# other agents' schemas (tests/tools/test_repair.py holds the corpus). An alias is used only
# where the tool has that parameter, does not have the alias as a parameter of its own, and
# the call does not also give the parameter itself.
ALIASES: Mapping[str, tuple[str, ...]] = {
    "path": (
        "file_path",
        "filepath",
        "file",
        "filename",
        "file_name",
        "fname",
        "pathname",
        "path_name",
        "absolute_path",
        "relative_path",
        "target_file",
        "dir",
        "dir_path",
        "dirpath",
        "directory",
        "directory_path",
        "folder",
        "folder_path",
    ),
    "content": ("contents", "file_content", "file_contents", "text"),
    "old_string": ("old_str", "old_text", "old_content", "original_text", "search_text"),
    "new_string": ("new_str", "new_text", "new_content", "replacement", "replacement_text"),
    "source": (
        "src",
        "from",
        "from_path",
        "source_path",
        "src_path",
        "old_path",
        "path",
        "file_path",
    ),
    "destination": (
        "dst",
        "dest",
        "to",
        "to_path",
        "dest_path",
        "dst_path",
        "destination_path",
        "new_path",
        "target",
        "target_path",
    ),
    "query": ("pattern", "search", "search_query", "search_term", "term", "keyword", "q"),
    "file_extensions": ("extensions", "extension", "file_extension", "file_types"),
    "filter_extension": ("extension", "file_extension", "ext"),
    "max_results": ("limit", "max_matches", "num_results"),
    "start_line": ("line_start", "from_line", "first_line"),
    "end_line": ("line_end", "to_line", "last_line"),
    "staged": ("cached",),
    "max_depth": ("depth",),
    "include_hidden": ("show_hidden", "hidden"),
}
# Keys a model nests the real arguments under, when the tool has no parameter of that name.
_WRAPPERS = ("arguments", "parameters", "args", "input", "params")
# Prefixes a model puts before a tool's name (OpenAI's `functions.` namespace, Gemini's
# `default_api.`), and what separates the words of a name.
_NAME_PREFIX = re.compile(r"^(?:functions|function|tools|tool|default_api)[.:/]", re.IGNORECASE)
_SEPARATORS = re.compile(r"[\s_\-.]+")
_INTEGER = re.compile(r"[+-]?\d{1,18}")
_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
# One token, as an extension or a name is: a string a list of strings may be made of.
_TOKEN = re.compile(r"[^\s,;]{1,200}")
# The aliases as they are compared: case, separators and camelCase ignored (filePath).
_FOLDED_ALIASES = {
    name: frozenset(_SEPARATORS.sub("", a).casefold() for a in aliases)
    for name, aliases in ALIASES.items()
}


def repair_call(
    call: ToolCall, offered: Mapping[str, Mapping[str, Any]], own: Collection[str]
) -> ToolCall:
    """`call` mended where it is unambiguous, with what was mended in `repairs`; the very
    call when nothing was. `offered`: each offered tool's parameters schema, by name;
    `own`: the names of the built-in tools (the aliases are theirs)."""
    if not call.name and call.arguments_error:
        return call  # nothing names a tool: nothing to mend
    said: list[str] = []
    name = _tool_name(call.name, offered, said)
    schema = offered.get(name)
    if schema is None:
        return _mended(call, name, call.arguments, call.arguments_error, said)
    properties = schema.get("properties")
    if not isinstance(properties, Mapping):
        properties = {}
    arguments, error = _arguments(call, name, properties, said)
    if error is None and properties:
        renamed = _renamed(arguments, properties, name in own, said)
        arguments = {key: _typed(key, v, properties.get(key), said) for key, v in renamed.items()}
    return _mended(call, name, arguments, error, said)


def _mended(
    call: ToolCall, name: str, arguments: Mapping[str, Any], error: str | None, said: list[str]
) -> ToolCall:
    if not said:
        return call
    return dataclasses.replace(
        call, name=name, arguments=arguments, arguments_error=error, repairs=tuple(said)
    )


def _folded(name: str) -> str:
    """A name without case, separators or camelCase: `Read_File`, `readFile`, `read-file`."""
    return _SEPARATORS.sub("", name).casefold()


def _tool_name(name: str, offered: Mapping[str, Any], said: list[str]) -> str:
    if name in offered or not name:
        return name
    bare = _NAME_PREFIX.sub("", name.strip())
    matches = [tool for tool in offered if _folded(tool) == _folded(bare)]
    if len(matches) != 1:
        return name
    said.append(f"tool {_quoted(name)} is {matches[0]}")
    return matches[0]


def _arguments(
    call: ToolCall, name: str, properties: Mapping[str, Any], said: list[str]
) -> tuple[dict[str, Any], str | None]:
    """The arguments as an object: a JSON object encoded twice decoded, one nested under a
    wrapper key (or under the whole call) taken out."""
    arguments: dict[str, Any] = dict(call.arguments)
    if call.arguments_error is not None:
        decoded = _twice_encoded(call.raw_arguments)
        if decoded is None:
            return {}, call.arguments_error
        said.append("the arguments were a JSON object inside a string")
        arguments = decoded
    return _unwrapped(arguments, name, properties, said), None


def _twice_encoded(raw: Any) -> dict[str, Any] | None:
    """`"{\\"path\\": \\"a\\"}"`: a JSON object as a JSON string, once or twice."""
    for _ in range(2):
        if not isinstance(raw, str) or len(raw) > 1_000_000 or nests_deeper_than(raw):
            return None
        try:
            raw = json.loads(raw)
        except ValueError:
            return None
        if isinstance(raw, dict):
            return raw if _plain(raw) else None
    return None


def _plain(value: Any) -> bool:
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        return False
    return True


def _unwrapped(
    arguments: dict[str, Any], name: str, properties: Mapping[str, Any], said: list[str]
) -> dict[str, Any]:
    """Arguments nested under one key the tool does not have (`{"arguments": {…}}`), or the
    whole call given as its arguments (`{"name": "read_file", "arguments": {…}}`)."""
    if len(arguments) == 1:
        ((key, inner),) = arguments.items()
        if key in _WRAPPERS and key not in properties:
            inner = _decoded_object(inner)
            if inner is not None:
                said.append(f"the arguments were nested under {_quoted(key)}")
                return inner
    rest = set(arguments) - {"name"}
    whole_call = "name" in arguments and "name" not in properties
    if whole_call and rest in ({"arguments"}, {"parameters"}):
        named = _folded(_NAME_PREFIX.sub("", str(arguments["name"])))
        inner = _decoded_object(arguments[rest.pop()]) if named == _folded(name) else None
        if inner is not None:
            said.append("the arguments held the whole call")
            return inner
    return arguments


def _decoded_object(value: Any) -> dict[str, Any] | None:
    if isinstance(value, dict):
        return value
    if isinstance(value, str):
        return _twice_encoded(value) if value.strip().startswith(("{", '"')) else None
    return None


def _renamed(
    arguments: dict[str, Any], properties: Mapping[str, Any], own: bool, said: list[str]
) -> dict[str, Any]:
    """Each argument the schema does not name, under the one parameter it can only mean;
    nothing renamed when two arguments would land on one parameter, or on one given."""
    folds = [_folded(p) for p in properties]
    folded = {f: p for f, p in zip(folds, properties, strict=True) if folds.count(f) == 1}
    targets: dict[str, str] = {}
    for key in arguments:
        if key in properties:
            continue
        target = folded.get(_folded(key))
        if target is None and own:
            found = [p for p in properties if _folded(key) in _FOLDED_ALIASES.get(p, ())]
            target = found[0] if len(found) == 1 else None
        if target is not None:
            targets[key] = target
    wanted = list(targets.values())
    out: dict[str, Any] = {}
    for key, value in arguments.items():
        target = targets.get(key)
        if target is None or target in arguments or wanted.count(target) > 1:
            out[key] = value
            continue
        said.append(f"{_quoted(key)} is {_quoted(target)}")
        out[target] = value
    return out


def _typed(key: str, value: Any, spec: Any, said: list[str]) -> Any:
    """A value of the wrong JSON type that can mean one value of the right one."""
    if not isinstance(spec, Mapping) or value is None:
        return value
    kind = spec.get("type")
    fixed = _as_type(value, kind, spec)
    if fixed is _NO:
        return value
    said.append(f"{_quoted(key)} is {_shown(fixed)}, not {_shown(value)}")
    return fixed


class _No:
    """No repair (a sentinel: None is a value)."""


_NO: Any = _No()


def _as_type(value: Any, kind: Any, spec: Mapping[str, Any]) -> Any:
    enum = spec.get("enum")
    if isinstance(enum, list) and value not in enum and isinstance(value, str):
        same = [e for e in enum if isinstance(e, str) and _folded(e) == _folded(value)]
        return same[0] if len(same) == 1 else _NO
    if not isinstance(value, str):
        if kind == "string" and isinstance(value, int) and not isinstance(value, bool):
            return str(value)
        return _NO
    text = value.strip()
    if kind == "boolean" and text.lower() in ("true", "false"):
        return text.lower() == "true"
    if kind == "integer" and _INTEGER.fullmatch(text):
        return int(text)
    if kind == "number" and _NUMBER.fullmatch(text):
        number = int(text) if _INTEGER.fullmatch(text) else float(text)
        # "1e999" is inf, which no JSON request can carry: the call fails as it came
        return number if math.isfinite(number) else _NO
    if kind in ("array", "object"):
        return _as_container(text, kind, spec)
    return _NO


def _as_container(text: str, kind: str, spec: Mapping[str, Any]) -> Any:
    if text[:1] in ("[", "{") and not nests_deeper_than(text, MAX_JSON_DEPTH):
        try:
            decoded = json.loads(text)
        except ValueError:
            return _NO
        wanted = list if kind == "array" else dict
        return decoded if isinstance(decoded, wanted) and _plain(decoded) else _NO
    items = spec.get("items")
    strings = isinstance(items, Mapping) and items.get("type") == "string"
    if kind == "array" and strings and _TOKEN.fullmatch(text):
        return [text]  # one extension where a list of them is wanted: ".py" is [".py"]
    return _NO


def _quoted(text: str) -> str:
    shown = text if len(text) <= 40 else text[:39] + "…"
    return f"'{shown}'"


def _shown(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 40 else text[:39] + "…"


class LenientNames(Collection[str]):
    """The offered tools' names as a text-call reader looks them up (cli/loop/textcalls.py),
    with the names a repair would take for one of them: a call to `Read_File` written as
    text is then read as a call, and mended, rather than left as text."""

    def __init__(self, offered: Collection[str]) -> None:
        self._offered = list(offered)
        self._folded: dict[str, list[str]] = {}
        for name in self._offered:
            self._folded.setdefault(_folded(name), []).append(name)

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str):
            return False
        if name in self._offered:
            return True
        return len(self._folded.get(_folded(_NAME_PREFIX.sub("", name.strip())), ())) == 1

    def __iter__(self) -> Iterator[str]:
        return iter(self._offered)

    def __len__(self) -> int:
        return len(self._offered)


def mended_line(call: ToolCall) -> str:
    """What the model is told of a mended call, in its result: one short line."""
    return f"mended before it ran: {'; '.join(call.repairs)}"
