"""The MCP servers' status as `agent mcp list` and chat's `/mcp` show it."""

from __future__ import annotations

from typing import Any


def status_lines(rows: list[dict[str, Any]]) -> list[str]:
    """`/mcp` and `agent mcp list`: one line a server, then its tools, indented."""
    from cli.ui.text import sanitize

    lines = []
    for row in rows:
        version = f" · protocol {row['protocol_version']}" if row["protocol_version"] else ""
        count = len(row["tools"])
        what = f"{count} tool{'s' if count != 1 else ''}" if row["status"] == "ready" else ""
        error = f": {row['error']}" if row["error"] else ""
        parts = [f"{row['name']} ({row['transport']})", f"{row['status']}{error}"]
        lines.append(sanitize(" · ".join(p for p in (*parts, what) if p) + version))
        lines += [f"    {sanitize(name)}" for name in row["tools"]]
    return lines
