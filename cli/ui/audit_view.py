"""`agent audit show`: audit records as aligned lines."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cli.ui.text import KEY_ARGUMENT, sanitize

NOT_A_RECORD = "not an audit record (see agent audit verify)"


def audit_row(number: int, record: Mapping[str, Any] | None) -> str:
    """One record as a line. Every field is model-supplied or editable, so each is sanitised
    before it reaches the terminal."""
    if record is None:
        return f"line {number}: {NOT_A_RECORD}"

    def column(value: object, width: int) -> str:
        text = sanitize(str(value))
        return f"{text[: width - 1]}…" if len(text) > width else f"{text:<{width}}"

    tool = str(record.get("tool"))
    arguments = record.get("arguments")
    key = arguments.get(KEY_ARGUMENT.get(tool, ""), "") if isinstance(arguments, dict) else ""
    if isinstance(key, dict):  # summarised: size and hash
        key = f"<{key.get('bytes')} bytes>"
    if record.get("decision") == "allow":
        verdict = f"allow ({record.get('approved_by')})"
    elif record.get("decision") == "deny":
        verdict = f"deny ({record.get('rule')})"
    else:
        verdict = "undecided"
    duration = record.get("duration_ms")
    return " ".join(
        (
            column(str(record.get("time", ""))[:19].replace("T", " "), 19),
            column(str(record.get("session", ""))[:8], 8),
            column(tool, 16),
            column(key, 48),
            column(verdict, 22),
            column(record.get("outcome"), 11),
            "-" if duration is None else f"{duration} ms",
        )
    )
