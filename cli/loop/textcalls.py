"""Tool calls a model wrote as text instead of `tool_calls` (pure).

Ollama's parsers miss these for several popular models, and a model without tool support
writes them because the system prompt asks it to (prompt mode, cli/loop/toolprompt.py):

- `<tool_call>{"name": …, "arguments": {…}}</tool_call>`, one block or several, holding JSON
  or qwen3-coder's XML (qwen2.5/qwen3 and hermes-style models; in content, ollama#11185);
- `<function=NAME><parameter=KEY>value</parameter></function>` (qwen3-coder, #18530);
- `<|python_tag|>{"name": …, "parameters": {…}}`, several split by `;` (llama 3.1/3.2);
- `[TOOL_CALLS][{…}]`, and `[TOOL_CALLS]NAME[ARGS]{…}` from newer tokenizers (mistral);
- a fenced block (```json) holding a call or a list of calls, wherever it is in the answer,
  and gemma's ```tool_code block holding `name(key="value")`;
- an answer that is nothing but a JSON call or calls (qwen2.5-coder, #12174), llama 3.x's
  `{"type": "function", "name": …, "parameters": …}` included.

We accept them only in strict shapes, so that a model showing JSON to the user is not
mistaken for a call. Every call must name a tool offered in this request: a call to any other
name is text, left where it stands. JSON that carries no marker (a fence, a bare answer) must
be calls and nothing else. Every scan here is linear in the answer: tags are found once, each
block is read once, and no regular expression can backtrack across a block.
"""

from __future__ import annotations

import ast
import bisect
import json
import re
from collections.abc import Callable, Collection, Sequence
from typing import Any

from cli.backends.messages import (
    MAX_JSON_DEPTH,
    JSONTooDeep,
    ToolCall,
    nests_deeper_than,
    tool_call,
)

# The format prompt mode teaches (cli/loop/toolprompt.py builds its example from these).
CALL_OPEN = "<tool_call>"
CALL_CLOSE = "</tool_call>"

_TAGS = re.compile(f"{re.escape(CALL_OPEN)}|{re.escape(CALL_CLOSE)}")
_NAME = r"[\w.-]{1,64}"
_FUNCTION_OPEN = re.compile(f"<function=({_NAME})>")
_FUNCTION_CLOSE = "</function>"
_PARAMETER_OPEN = re.compile(f"<parameter=({_NAME})>")
_PARAMETER_CLOSE = "</parameter>"
_PYTHON_TAG = "<|python_tag|>"
_LLAMA_END = re.compile(r"<\|eom_id\|>|<\|eot_id\|>")
_MISTRAL = "[TOOL_CALLS]"
_MISTRAL_NAMED = re.compile(rf"\s*({_NAME})(?:\[CALL_ID\][\w-]{{0,64}})?\[ARGS\]")
# A fence line: up to 3 spaces, 3 or more backticks, an info string without backticks.
_FENCE_LINE = re.compile(r"^[ \t]{0,3}(`{3,})([^`\n]*)$", re.MULTILINE)
_CLOSING_FENCE = re.compile(r"[ \t]{0,3}(`{3,})[ \t\r]*")
_JSON_FENCES = frozenset({"", "json", "tool_call"})
_SPACE = re.compile(r"\s*")
_SEPARATORS = re.compile(r"[\s;,]*")
# The name of a call whose JSON cannot be read, to tell the model what went wrong with it.
_NAMED = re.compile(rf'"name"\s*:\s*"({_NAME})"')
_NUMBER = re.compile(r"-?\d+(\.\d+)?")
# Models write raw newlines and tabs inside strings (a file's content): not JSON, but nothing
# else could be meant by them.
_DECODER = json.JSONDecoder(strict=False)
# The keys a call object may have when no marker says it is one: a tool definition (with
# "description") or any other JSON that happens to hold a "name" is not a call.
_CALL_KEYS = frozenset({"name", "arguments", "parameters", "type", "id", "index", "function"})
_FUNCTION_KEYS = frozenset({"name", "arguments", "parameters"})

_TOO_DEEP = f"the tool call nests deeper than {MAX_JSON_DEPTH} levels; send a flat object"
_NOT_JSON = (
    f'the tool call is not valid JSON; write {CALL_OPEN}{{"name": "…", "arguments": {{…}}}}'
    f"{CALL_CLOSE} with double quotes"
)
_NOT_PLAIN = "arguments must be plain values (strings, numbers, booleans, lists, objects)"


class _Kept(str):
    """Text a format has decided stays text: no later format reads it again (a block naming a
    tool we did not offer keeps what is inside it, too)."""


# An answer is cut into parts: text still to read, text kept, and the calls taken out.
_Part = str | list[ToolCall]
_Stage = Callable[[str, Collection[str]], list[_Part]]


def extract_tool_calls(content: str, known: Collection[str]) -> tuple[list[ToolCall], str]:
    """Return (calls, the content left once the calls are taken out); ([], content) when the
    content holds no call to a tool in `known` (the tools offered) in a shape we accept."""
    # A whole answer that is JSON calls is read first: its strings may hold anything, tags too.
    whole = _json_run(content, known, marked=False)
    if whole:
        return _calls_of(whole), ""
    parts: list[_Part] = [content]
    for stage in (_tagged, _xml, _python_tagged, _mistral):
        parts = _apply(stage, parts, known)
    parts = _apply(_fenced, _unwrap_fences(parts), known)
    calls = _calls_of(parts)
    if not calls:
        return [], content
    return calls, _join(parts)


def _apply(stage: _Stage, parts: list[_Part], known: Collection[str]) -> list[_Part]:
    out: list[_Part] = []
    for part in parts:
        if isinstance(part, str) and not isinstance(part, _Kept):
            out.extend(p for p in stage(part, known) if p != "")
        else:
            out.append(part)
    return out


def _calls_of(parts: Sequence[_Part]) -> list[ToolCall]:
    return [call for part in parts if isinstance(part, list) for call in part]


def _join(parts: Sequence[_Part]) -> str:
    """The text around the calls, one paragraph where each run of calls stood."""
    pieces: list[list[str]] = [[]]
    for part in parts:
        if isinstance(part, list):
            pieces.append([])
        else:
            pieces[-1].append(part)
    texts = ("".join(piece).strip() for piece in pieces)
    return "\n\n".join(text for text in texts if text)


# -- <tool_call> blocks -----------------------------------------------------------------


def _tagged(text: str, known: Collection[str]) -> list[_Part]:
    """Each `<tool_call>` block decides for itself. A block runs to its `</tool_call>`, or to
    the next `<tool_call>` (a closer left out), or to the end (the last one cut by a stop
    token). A block that is a call to an offered tool is taken; one whose JSON cannot be read
    but names an offered tool becomes a refused call (arguments_error), so that the model
    learns what was wrong; any other block stays text, tags and all."""
    if CALL_OPEN not in text:
        return [text]
    tags = [(m.start(), m.end(), m.group() == CALL_OPEN) for m in _TAGS.finditer(text)]
    closers = [i for i, (_, _, is_open) in enumerate(tags) if not is_open]
    retried = -1  # the closer a retry (below) already ran to: each is tried once, so linear
    parts: list[_Part] = []
    done = i = 0
    while i < len(tags):
        start, body_start, is_open = tags[i]
        if not is_open:  # a closer with no block: text
            i += 1
            continue
        following = i + 1
        body_end = tags[following][0] if following < len(tags) else len(text)
        closed = following < len(tags) and not tags[following][2]
        end, i = (tags[following][1], following + 1) if closed else (body_end, following)
        calls = None
        if following < len(tags) and not closed:
            # The next `<tool_call>` may sit inside a value (a file about this very format):
            # read on to the next closer first, once each, and take that if it reads whole.
            k = bisect.bisect_right(closers, following)
            if k < len(closers) and closers[k] != retried:
                retried = closers[k]
                calls = _block_calls(text[body_start : tags[retried][0]], known, strict=True)
                if calls is not None:
                    end, i = tags[retried][1], retried + 1
        if calls is None:
            calls = _block_calls(text[body_start:body_end], known, strict=False)
        parts.append(text[done:start])
        parts.append(calls if calls is not None else _Kept(text[start:end]))
        done = end
    parts.append(text[done:])
    return parts


def _skip(pattern: re.Pattern[str], text: str, pos: int) -> int:
    match = pattern.match(text, pos)
    return match.end() if match else pos


def _block_calls(body: str, known: Collection[str], strict: bool) -> list[ToolCall] | None:
    """The calls in one block; None: it stays text. Strict, only calls read whole count."""
    body = body.strip()
    if body.startswith("<function="):
        return _xml_calls(body, known, strict)
    if body[:1] not in ("{", "["):
        return None
    try:
        data = _loads(body)
    except JSONTooDeep:
        return None if strict else _unreadable(body, known, _TOO_DEEP)
    except ValueError:
        return None if strict else _unreadable(body, known, _NOT_JSON)
    return _calls(data, known, marked=True)


def _unreadable(text: str, known: Collection[str], why: str) -> list[ToolCall] | None:
    """A marked call we cannot read: refused, the model told why, when it names an offered
    tool. JSON too deep to read is refused even when no name shows (the depth guard stops
    before the name is read, and a megabyte of brackets is no answer to show either); the
    loop refuses such a nameless call itself."""
    named = _NAMED.search(text)
    if named is None:
        return [ToolCall("", {}, arguments_error=why)] if why == _TOO_DEEP else None
    name = named.group(1)
    return [ToolCall(name, {}, arguments_error=why)] if name in known else None


# -- JSON ---------------------------------------------------------------------------------


def _loads(text: str) -> Any:
    if nests_deeper_than(text):
        raise JSONTooDeep(f"JSON nested deeper than {MAX_JSON_DEPTH} levels")
    return _DECODER.decode(text)


def _calls(data: Any, known: Collection[str], marked: bool) -> list[ToolCall] | None:
    """A call object or a non-empty list of them, every one to an offered tool; else None."""
    items = data if isinstance(data, list) else [data]
    calls = [_object_call(item, known, marked) for item in items]
    if not calls or any(call is None for call in calls):
        return None
    return [call for call in calls if call is not None]


def _object_call(data: Any, known: Collection[str], marked: bool) -> ToolCall | None:
    """`{"name", "arguments"|"parameters"}`, optionally with `"type": "function"`, or the
    same under "function" (the wire shape). After a marker, other keys (a model's "reason")
    are let pass."""
    if not isinstance(data, dict) or not (marked or data.keys() <= _CALL_KEYS):
        return None
    if data.get("type", "function") != "function":
        return None
    if "function" in data:
        data = data["function"]
        if not isinstance(data, dict) or not (marked or data.keys() <= _FUNCTION_KEYS):
            return None
    name = data.get("name")
    if not isinstance(name, str) or not name or name not in known:
        return None
    arguments = data["arguments"] if "arguments" in data else data.get("parameters")
    return tool_call(name, arguments, None)


def _json_run(text: str, known: Collection[str], marked: bool) -> list[_Part] | None:
    """JSON values one after another (`;`, `,` or space between), each a call or a list of
    calls. Unmarked (a fence, a whole answer), every value must be one and nothing may
    follow. After a marker, a value that is not a call stays text, and so does what follows
    the last value. None when no call is found."""
    pos = _skip(_SPACE, text, 0)
    if text[pos : pos + 1] not in ("{", "["):
        return None
    if nests_deeper_than(text):
        # After a marker, a call we cannot read. Unmarked, it cannot be told from an answer
        # without parsing it: it stays one.
        refused = _unreadable(text, known, _TOO_DEEP) if marked else None
        return [refused] if refused else None
    parts: list[_Part] = []
    while text[pos : pos + 1] in ("{", "["):
        try:
            value, end = _DECODER.raw_decode(text, pos)
        except ValueError:
            if not marked:
                return None
            refused = _unreadable(text[pos:], known, _NOT_JSON)
            return _found(parts, refused if refused is not None else _Kept(text[pos:]))
        calls = _calls(value, known, marked)
        if calls is None and not marked:
            return None
        parts.append(calls if calls is not None else _Kept(text[pos:end]))
        pos = _skip(_SEPARATORS, text, end)
    rest = text[pos:]
    if rest.strip() and not marked:
        return None
    return _found(parts, rest)


def _found(parts: list[_Part], last: _Part) -> list[_Part] | None:
    parts.append(last)
    return parts if _calls_of(parts) else None


# -- qwen3-coder XML ------------------------------------------------------------------------


def _xml(text: str, known: Collection[str]) -> list[_Part]:
    """`<function=NAME>…</function>` outside a `<tool_call>` block: closed ones only."""
    if "<function=" not in text:
        return [text]
    parts: list[_Part] = []
    done = 0
    while (match := _FUNCTION_OPEN.search(text, done)) is not None:
        close = text.find(_FUNCTION_CLOSE, match.end())
        if close == -1:
            break
        end = close + len(_FUNCTION_CLOSE)
        parts.append(text[done : match.start()])
        name = match.group(1)
        call = _xml_call(name, text[match.end() : close]) if name in known else None
        parts.append([call] if call else _Kept(text[match.start() : end]))
        done = end
    parts.append(text[done:])
    return parts


def _xml_calls(body: str, known: Collection[str], strict: bool) -> list[ToolCall] | None:
    """A block of `<function=…>` elements and nothing else, each to an offered tool. The
    block's end closes the last element if `</function>` was left out; strict, it must not,
    and only elements read whole count."""
    calls: list[ToolCall] = []
    pos = 0
    while pos < len(body):
        match = _FUNCTION_OPEN.match(body, pos)
        if match is None or match.group(1) not in known:
            return None
        close = body.find(_FUNCTION_CLOSE, match.end())
        if close == -1 and strict:
            return None
        inner_end = close if close != -1 else len(body)
        call = _xml_call(match.group(1), body[match.end() : inner_end], strict)
        if call is None:
            return None
        calls.append(call)
        pos = _skip(_SPACE, body, inner_end + len(_FUNCTION_CLOSE)) if close != -1 else len(body)
    return calls or None


def _xml_call(name: str, inner: str, strict: bool = False) -> ToolCall | None:
    """One element's parameters. Strict, only whitespace may stand between them, and a
    parameter left open makes it no call (None) rather than a refused one."""
    arguments: dict[str, Any] = {}
    pos = 0
    while (match := _PARAMETER_OPEN.search(inner, pos)) is not None:
        key = match.group(1)
        if strict and inner[pos : match.start()].strip():
            return None
        close = inner.find(_PARAMETER_CLOSE, match.end())
        if close == -1:
            # Cut off (num_predict, context): a value that may be cut is never used, since a
            # write would save half a file.
            why = f"parameter '{key}' has no {_PARAMETER_CLOSE}; close every parameter"
            return None if strict else ToolCall(name, {}, arguments_error=why)
        raw = inner[match.end() : close]
        raw = raw[1:] if raw.startswith("\n") else raw
        raw = raw[:-1] if raw.endswith("\n") else raw
        try:
            arguments[key] = _xml_value(raw)
        except JSONTooDeep:
            return ToolCall(name, {}, arguments_error=f"'{key}': {_TOO_DEEP}")
        pos = close + len(_PARAMETER_CLOSE)
    if strict and inner[pos:].strip():
        return None
    return tool_call(name, arguments, None)


def _xml_value(raw: str) -> Any:
    """qwen3-coder writes every value as text; numbers and booleans are JSON inside. A value
    nested too deep raises JSONTooDeep."""
    stripped = raw.strip()
    if stripped[:1] in ("[", "{") or stripped in ("true", "false", "null"):
        pass
    elif not _NUMBER.fullmatch(stripped):
        return raw
    try:
        return _loads(stripped)
    except JSONTooDeep:
        raise
    except ValueError:  # not JSON after all, or an integer longer than Python converts
        return raw


# -- llama 3.x and mistral markers --------------------------------------------------------


def _python_tagged(text: str, known: Collection[str]) -> list[_Part]:
    """`<|python_tag|>` then JSON calls, up to `<|eom_id|>`/`<|eot_id|>` or the next tag.
    The tag goes with its calls; with none, the whole segment stays text."""
    if _PYTHON_TAG not in text:
        return [text]
    first, *segments = text.split(_PYTHON_TAG)
    parts: list[_Part] = [first]
    for segment in segments:
        end = _LLAMA_END.search(segment)
        body, rest = (segment[: end.start()], segment[end.end() :]) if end else (segment, "")
        taken = _json_run(body, known, marked=True)
        parts.extend([*taken, rest] if taken else [_Kept(_PYTHON_TAG + segment)])
    return parts


def _mistral(text: str, known: Collection[str]) -> list[_Part]:
    """`[TOOL_CALLS]` then a JSON list (or object), or `NAME[ARGS]{…}` (one call a marker)."""
    if _MISTRAL not in text:
        return [text]
    first, *segments = text.split(_MISTRAL)
    parts: list[_Part] = [first]
    for segment in segments:
        taken = _mistral_segment(segment, known)
        parts.extend(taken if taken else [_Kept(_MISTRAL + segment)])
    return parts


def _mistral_segment(segment: str, known: Collection[str]) -> list[_Part] | None:
    named = _MISTRAL_NAMED.match(segment)
    if named is None:
        return _json_run(segment, known, marked=True)
    name = named.group(1)
    if name not in known:
        return None
    pos = _skip(_SPACE, segment, named.end())
    if nests_deeper_than(segment):
        return [[ToolCall(name, {}, arguments_error=_TOO_DEEP)]]
    try:
        arguments, end = _DECODER.raw_decode(segment, pos)
    except ValueError:
        return [[ToolCall(name, {}, arguments_error=_NOT_JSON)]]
    return [[tool_call(name, arguments, None)], segment[end:]]


# -- fenced blocks ------------------------------------------------------------------------


def _fenced(text: str, known: Collection[str]) -> list[_Part]:
    """Fenced blocks anywhere in the text: one holding nothing but calls to offered tools is
    taken (prompt mode asks for that format, and small models like to fence it); any other
    stays text, and so does everything inside it. Fences pair as in CommonMark: the closer
    is the next bare fence with at least as many backticks, or the end."""
    if "```" not in text:
        return [text]
    lines = list(_FENCE_LINE.finditer(text))
    parts: list[_Part] = []
    done = i = 0
    while i < len(lines):
        opener = lines[i]
        ticks = len(opener.group(1))
        j = i + 1
        while j < len(lines) and (len(lines[j].group(1)) < ticks or lines[j].group(2).strip()):
            j += 1
        if j < len(lines):
            body_end, end = lines[j].start(), lines[j].end()
        else:
            body_end = end = len(text)
        info = opener.group(2).split()
        calls = _fence_calls(info[0].lower() if info else "", text[opener.end() : body_end], known)
        parts.append(text[done : opener.start()])
        parts.append(calls if calls is not None else _Kept(text[opener.start() : end]))
        done, i = end, j + 1
    parts.append(text[done:])
    return parts


def _fence_calls(info: str, body: str, known: Collection[str]) -> list[ToolCall] | None:
    if info in _JSON_FENCES:
        taken = _json_run(body, known, marked=False)
        return _calls_of(taken) if taken else None
    if info == "tool_code":
        return _pythonic_calls(body, known)
    return None


def _unwrap_fences(parts: list[_Part]) -> list[_Part]:
    """A fence left holding nothing but the calls taken out of it (a model that puts its
    `<tool_call>` blocks in ```) goes with them, rather than stay behind empty."""
    out = list(parts)
    i = 0
    while i < len(out):
        if not isinstance(out[i], list):
            i += 1
            continue
        last = i  # the run of calls from i, blank text between them allowed
        for j in range(i + 1, len(out)):
            part = out[j]
            if isinstance(part, list):
                last = j
            elif part.strip():
                break
        before, after = out[i - 1] if i else None, out[last + 1] if last + 1 < len(out) else None
        if isinstance(before, str) and isinstance(after, str):
            opener = _dangling_fence(before)
            trimmed = after.lstrip()
            line_end = trimmed.find("\n")
            closer = _CLOSING_FENCE.fullmatch(trimmed[: line_end if line_end != -1 else None])
            if opener and closer and len(closer.group(1)) >= len(opener.group(1)):
                tail = trimmed[line_end:] if line_end != -1 else ""
                out[i - 1] = _like(before, before[: opener.start()])
                out[last + 1] = _like(after, tail)
        i = last + 1
    return out


def _dangling_fence(text: str) -> re.Match[str] | None:
    """The opener of a fence still open where `text` ends, when nothing follows it."""
    opener = None
    for line in _FENCE_LINE.finditer(text):
        if opener is None:
            opener = line
        elif len(line.group(1)) >= len(opener.group(1)) and not line.group(2).strip():
            opener = None
    return opener if opener is not None and not text[opener.end() :].strip() else None


def _like(original: str, text: str) -> str:
    return _Kept(text) if isinstance(original, _Kept) else text


# -- gemma's tool_code --------------------------------------------------------------------


def _pythonic_calls(code: str, known: Collection[str]) -> list[ToolCall] | None:
    """`name(key=value, …)`, one a line, in a list, or inside print(): keyword arguments with
    literal values only. The code is parsed, never run."""
    if nests_deeper_than(code):
        return None
    try:
        tree = ast.parse(code.strip(), mode="exec")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None  # MemoryError: CPython's parser stack on hostile nesting, not the heap
    nodes: list[ast.expr] = []
    for statement in tree.body:
        if not isinstance(statement, ast.Expr):
            return None
        value = statement.value
        if (
            isinstance(value, ast.Call)
            and isinstance(value.func, ast.Name)
            and value.func.id == "print"
            and len(value.args) == 1
            and not value.keywords
        ):
            value = value.args[0]
        nodes.extend(value.elts if isinstance(value, ast.List) else [value])
    calls = [_pythonic_call(node, known) for node in nodes]
    if not calls or any(call is None for call in calls):
        return None
    return [call for call in calls if call is not None]


def _pythonic_call(node: ast.expr, known: Collection[str]) -> ToolCall | None:
    if not isinstance(node, ast.Call) or node.args or not isinstance(node.func, ast.Name):
        return None
    name = node.func.id
    if name not in known or any(keyword.arg is None for keyword in node.keywords):
        return None
    try:
        arguments = {keyword.arg: ast.literal_eval(keyword.value) for keyword in node.keywords}
        # Tuples become lists; sets, bytes and complex numbers are refused.
        plain = json.loads(json.dumps(arguments, allow_nan=False))
    except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
        return ToolCall(name, {}, arguments_error=_NOT_PLAIN)
    return tool_call(name, plain, None)
