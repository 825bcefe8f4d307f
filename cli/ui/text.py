"""Making model-supplied text safe to show, and short summaries of calls and results.

A `\\r` or an ANSI sequence in a path or command can make a dangerous call look harmless in
a confirmation, and one in an answer can retitle the window, write the clipboard (OSC 52)
or erase lines already on the screen; so control characters are shown escaped, never
interpreted, and nothing is shortened without saying so. `sanitize` is the one function
that does it, for everything the model (or the server) wrote that reaches a terminal.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from cli.backends.messages import ToolCall
from cli.units import human_size

# Never shown as they are: C0 controls (ESC included, so no escape sequence can start),
# DEL, C1 controls (0x9b is an 8-bit CSI), zero-width characters, line and paragraph
# separators, and bidi marks, embeddings, overrides and isolates (text that reads
# differently from what it is). Tab and newline are kept in multi-line text.
_UNSAFE = (
    "\x00-\x08\x0b-\x1f\x7f-\x9f\xad\u034f\u061c\u115f\u1160\u180e\u200b-\u200f"
    "\u2028\u2029\u202a-\u202e\u2060-\u206f\u3164\ufeff\uffa0\U000e0000-\U000e007f"
)
_CONTROL = re.compile(f"[{_UNSAFE}]")
_CONTROL_ANY = re.compile(f"[\t\n{_UNSAFE}]")


def sanitize(text: str, *, multiline: bool = False, json: bool = False) -> str:
    """Control characters (and bidi overrides) as visible escapes; newlines and tabs kept
    only when `multiline`. With `json`, for JSON text: the escapes are JSON's own
    (`\\u009b`), so the text still parses to the same value (`json.dumps` escapes C0 itself,
    but leaves DEL, C1 and the rest raw)."""
    if json:
        return _CONTROL.sub(lambda m: _json_escape(m.group()), text)
    pattern = _CONTROL if multiline else _CONTROL_ANY
    return pattern.sub(lambda m: _escape(m.group()), text)


def _escape(char: str) -> str:
    code = ord(char)
    if code > 0xFFFF:
        return f"\\U{code:08x}"
    return {"\n": "\\n", "\t": "\\t", "\r": "\\r"}.get(
        char, f"\\x{code:02x}" if code < 256 else f"\\u{code:04x}"
    )


def _json_escape(char: str) -> str:
    """JSON's escape: a character past U+FFFF as its UTF-16 surrogate pair."""
    code = ord(char)
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    code -= 0x10000
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


def plural(count: Any, word: str, many: str | None = None) -> str:
    """`1 file`, `2 files`; `many` where adding an s is wrong (`entry`, `entries`)."""
    return f"{count} {word if count == 1 else many or word + 's'}"


def shorten_text(text: str, limit: int) -> str:
    """A message on one line: its first line, at most `limit` characters, sanitised, saying
    how many characters of the whole message were left out."""
    whole = text.strip()
    first = whole.split("\n", 1)[0]
    shown = first[:limit]
    rest = len(whole) - len(shown)
    return sanitize(shown) + (f"… (+{rest} chars)" if rest > 0 else "")


def shorten(text: str, limit: int) -> str:
    """At most `limit` characters, saying how many were left out."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… (+{len(text) - limit} chars)"


KEY_ARGUMENT = {
    "read_file": "path",
    "write_file": "path",
    "edit_file": "path",
    "list_directory": "path",
    "search_files": "query",
    "create_directory": "path",
    "delete_file": "path",
    "run_command": "command",
    "git_status": "path",
    "git_diff": "path",
}


# Arguments a title never repeats: shown whole elsewhere (the card's diff, the size), or
# said by the summary itself.
_NOT_IN_TITLE = frozenset({"content", "old_string", "new_string", "source", "destination"})
# Defaults of the built-in tools' arguments that are not false, 0 or absent: not shown.
_DEFAULTS: Mapping[str, Any] = {"encoding": "utf-8", "search_type": "both"}


def call_summary(call: ToolCall, limit: int = 80) -> str:
    """The call's key argument, sanitised: `notes.txt`, `"TODO" in src`, `ls -la`; then
    every other argument given a value that is not its default, so that two calls that
    differ only there do not look the same: `src (recursive, max_depth=2)`."""
    args = call.arguments
    key = KEY_ARGUMENT.get(call.name)
    extras = _other_arguments(args, key) if key else []
    if call.name == "search_files":
        where = args.get("path", ".")
        text = f"{args.get('query', '')!r} in {where}"
        extras = [e for e in extras if not e.startswith("path=")]
        return sanitize(shorten(text + _listed(extras), limit))
    if call.name == "move_file":
        text = f"{args.get('source', '')} → {args.get('destination', '')}"
        return sanitize(shorten(text + _listed(extras), limit))
    if key and key in args:
        value = str(args[key])
        if call.name == "write_file" and isinstance(args.get("content"), str):
            extras.insert(0, human_size(len(args["content"].encode("utf-8", "replace"))))
        return sanitize(shorten(value, limit)) + sanitize(shorten(_listed(extras), limit))
    return sanitize(shorten(", ".join(f"{k}={v!r}" for k, v in args.items()), limit))


def _other_arguments(args: Mapping[str, Any], key: str) -> list[str]:
    """`recursive` for a true flag, `max_depth=2` for a value; defaults left out."""
    shown: list[str] = []
    for name, value in args.items():
        if name == key or name in _NOT_IN_TITLE or value is None or value is False:
            continue
        if _DEFAULTS.get(name) == value:
            continue
        shown.append(name if value is True else f"{name}={value!r}")
    return shown


def _listed(extras: list[str]) -> str:
    return f" ({', '.join(extras)})" if extras else ""


def result_summary(name: str, result: Mapping[str, Any]) -> str:
    """One short phrase for a result: `12 lines, 340 B`, `3 matches in 2 files`, `exit 0`."""
    if not result.get("success"):
        return sanitize(shorten(str(result.get("error", "failed")), 160))
    if name == "read_file":
        if result.get("lines") is None:
            return f"{human_size(int(result.get('size', 0)))} as base64"
        a, b = result.get("line_range") or (0, 0)
        part = f" (lines {a}-{b})" if result.get("truncated") else ""
        lines = result.get("lines")
        return f"{plural(lines, 'line')}, {human_size(int(result.get('size', 0)))}{part}"
    if name == "write_file":
        verb = "created" if result.get("created") else "overwrote"
        return f"{verb}, {human_size(int(result.get('bytesWritten', 0)))}"
    if name == "edit_file":
        n = int(result.get("replacements") or 0)
        first, last = result.get("line_range") or (0, 0)
        return f"{plural(n, 'replacement')}, lines {first}-{last}"
    if name == "move_file":
        return "moved, replacing what was there" if result.get("replaced") else "moved"
    if name == "list_directory":
        more = " (truncated)" if result.get("truncated") else ""
        return f"{plural(result.get('total', 0), 'entry', 'entries')}{more}"
    if name == "search_files":
        more = " (truncated)" if result.get("truncated") else ""
        matches, files = result.get("total_matches", 0), result.get("total_files", 0)
        return f"{plural(matches, 'match', 'matches')} in {plural(files, 'file')}{more}"
    if name == "create_directory":
        return "created" if result.get("created") else "already existed"
    if name == "delete_file":
        removed = result.get("removed")
        if isinstance(removed, Mapping):
            files, dirs = removed.get("files", 0), removed.get("directories", 0)
            return f"deleted ({plural(files, 'file')}, {plural(dirs, 'dir')})"
        return "deleted"
    if name == "git_status":
        if result.get("clean"):
            return f"clean, on {result.get('branch') or 'a detached HEAD'}"
        counts = [
            plural(len(result.get(k) or []), f"{k} file")
            for k in ("staged", "unstaged", "untracked")
            if result.get(k)
        ]
        return ", ".join(counts) or "no changes here"
    if name == "git_diff":
        more = " (truncated)" if result.get("truncated") else ""
        files = plural(len(result.get("files") or []), "file")
        return f"{files}, {human_size(int(result.get('bytes') or 0))}{more}"
    if name == "run_command":
        return f"exit {result.get('exitCode')} in {result.get('duration', 0)} ms"
    return "ok"


def mended(repairs: Sequence[str]) -> str:
    """`mended: 'file_path' is 'path'`: how a call was mended before it ran (agent.aids:
    repair), for the trace and the card, made safe (it quotes the model's own names)."""
    return shorten_text(sanitize("mended: " + "; ".join(repairs)), 160)
