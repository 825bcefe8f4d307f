"""`agent audit show`: audit records as aligned lines."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.cells import cell_len

from cli.loop.outcomes import BY_WORDS, spell
from cli.ui.layout import pack
from cli.ui.text import KEY_ARGUMENT, sanitize

NOT_A_RECORD = "not an audit record (see agent audit verify)"
SESSION_WIDTH = len("run-2026-12-01_23-36-05")


def audit_row(number: int, record: Mapping[str, Any] | None, width: int | None = None) -> str:
    """One record as a line. Every field is model-supplied or editable, so each is sanitised
    before it reaches the terminal. With `width` (a terminal narrower than the line), the
    fields after the tool fold onto indented continuation lines, so that every record starts
    at column 0 and no line wraps."""
    if record is None:
        return f"line {number}: {NOT_A_RECORD}"

    def column(value: object, width: int) -> str:
        """The value in `width` characters; cut, it ends in `…+N`, N being how many more."""
        text = sanitize(str(value))
        if len(text) <= width:
            return f"{text:<{width}}"
        cut = width - len(f"…+{len(text)}")
        return f"{text[:cut]}…+{len(text) - cut}"

    tool = str(record.get("tool"))
    arguments = record.get("arguments")
    key = arguments.get(KEY_ARGUMENT.get(tool, ""), "") if isinstance(arguments, dict) else ""
    if isinstance(key, dict):  # summarised: size and hash
        key = f"<{key.get('bytes')} bytes>"
    if record.get("hook"):  # a hook that ran (cli/loop/hooks.py): for which tool, its program
        command = record.get("command")
        program = command[0] if isinstance(command, list) and command else "?"
        key = f"{record.get('tool') or ''} {program}".strip()
        tool = f"hook {record.get('hook')}"
    by, rule = str(record.get("approved_by")), str(record.get("rule"))
    verdict = spell(str(record.get("outcome")), by=by, rule=rule)
    if verdict == "failed" and by in BY_WORDS:  # who let it run matters in an audit
        verdict = f"failed (allowed {BY_WORDS[by]})"
    duration = record.get("duration_ms")
    took = "-" if duration is None else f"{duration} ms"
    when = column(str(record.get("time", ""))[:19].replace("T", " "), 19)
    # the session's name as `agent sessions` lists it (logs from before: a 12-digit hex id)
    session = column(str(record.get("session", "")), SESSION_WIDTH)
    line = " ".join(
        (
            when,
            session,
            column(tool, 16),
            column(key, 48),
            column(verdict, 28),
            took,
        )
    )
    if width is None or cell_len(line) <= width:
        return line
    first = f"{when} {session} {sanitize(tool)}"
    rest = [sanitize(str(key)), sanitize(verdict), took]
    lines = [first[:width], *pack([r for r in rest if r], width, lead="    ")]
    return "\n".join(lines)
