"""The y/n question `agent run` asks on the terminal when the policy says "ask"."""

from __future__ import annotations

from typing import TextIO

from cli.approval import Approval, ApprovalRequest
from cli.ui.text import sanitize

PREVIEW_LINES = 10


def describe_request(request: ApprovalRequest) -> list[str]:
    """Every argument of the call, sanitised; long text as its first lines, with a count of
    what is not shown (never hidden silently)."""
    lines = [f"{request.call.name} wants to run ({sanitize(request.decision.reason)}):"]
    for name, value in request.arguments.items():
        if isinstance(value, str) and ("\n" in value or len(value) > 200):
            body = value.split("\n")
            size = len(value.encode("utf-8", "replace"))
            lines.append(f"  {name}: {size} bytes, {len(body)} lines")
            lines += [f"  │ {sanitize(line)}" for line in body[:PREVIEW_LINES]]
            if len(body) > PREVIEW_LINES:
                lines.append(f"  │ … {len(body) - PREVIEW_LINES} more lines not shown")
        else:
            lines.append(
                f"  {name}: {sanitize(repr(value) if not isinstance(value, str) else value)}"
            )
    return lines


class LineApprover:
    """Asks on stderr, reads one line from stdin: `y` or `yes` approves, anything else
    (Enter, EOF) declines."""

    def __init__(self, stdin: TextIO, stderr: TextIO) -> None:
        self.stdin = stdin
        self.stderr = stderr

    def __call__(self, request: ApprovalRequest) -> Approval:
        self.stderr.write("\n".join(describe_request(request)) + "\nAllow? [y/N] ")
        self.stderr.flush()
        answer = self.stdin.readline().strip().lower()
        if answer in ("y", "yes"):
            return Approval(True, by="user")
        return Approval(False, by="user", reason="the user declined")
