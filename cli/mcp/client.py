"""One MCP server's session (spec basic/lifecycle, server/tools): initialize, the tool list
(paged, re-listed after `notifications/tools/list_changed`), calls with a timeout that
cancel on the server's side too, and answers to its pings."""

from __future__ import annotations

import itertools
import threading
from typing import Any

from cli.mcp import protocol
from cli.mcp.protocol import McpError
from cli.mcp.transport import Transport

MAX_PAGES = 100  # tools/list pages followed before the list is taken as it is


class Client:
    def __init__(self, transport: Transport, timeout: float = 60.0) -> None:
        self.transport = transport
        self.timeout = timeout
        self.version: str | None = None
        self.server_info: dict[str, Any] = {}
        self.instructions = ""
        self.tools_changed = threading.Event()  # a list_changed arrived: list again
        self._ids = itertools.count(1)
        transport.on_message = self._on_message

    def _on_message(self, message: dict[str, Any]) -> dict[str, Any] | None:
        method = message.get("method")
        if method == "notifications/tools/list_changed":
            self.tools_changed.set()
            return None
        if "id" not in message:
            return None  # other notifications (progress, logging) are not used
        if method == "ping":
            return protocol.response(message["id"], {})
        # We declared no capabilities: sampling, roots, elicitation are not ours to answer.
        return protocol.error_response(message["id"], -32601, f"method not supported: {method}")

    def request(self, method: str, params: dict[str, Any] | None, timeout: float) -> dict[str, Any]:
        """The result of one request; McpError (RpcError for the server's own error);
        TimeoutError after `timeout` seconds, when the server is told to cancel it."""
        message = protocol.request(next(self._ids), method, params)
        try:
            answer = self.transport.call(message, timeout)
        except (TimeoutError, KeyboardInterrupt) as exc:
            self.cancel(message["id"], "timed out" if isinstance(exc, TimeoutError) else "user")
            raise
        return protocol.outcome(answer)

    def cancel(self, request_id: int, why: str) -> None:
        params = {"requestId": request_id, "reason": why}
        try:
            self.transport.notify(protocol.notification("notifications/cancelled", params))
        except (McpError, TimeoutError, OSError):
            pass

    def initialize(self, timeout: float) -> str:
        result = self.request("initialize", protocol.initialize_params(), timeout)
        self.version = protocol.check_initialized(result)
        info = result.get("serverInfo")
        self.server_info = info if isinstance(info, dict) else {}
        self.instructions = str(result.get("instructions") or "")
        if hasattr(self.transport, "version"):
            self.transport.version = self.version  # HTTP: sent with every later request
        self.transport.notify(protocol.notification("notifications/initialized"))
        return self.version

    def list_tools(self) -> list[dict[str, Any]]:
        """Every tool, page by page (`cursor` / `nextCursor`)."""
        self.tools_changed.clear()
        tools: list[dict[str, Any]] = []
        cursor: str | None = None
        for _ in range(MAX_PAGES):
            result = self.request(
                "tools/list", {"cursor": cursor} if cursor else None, self.timeout
            )
            page = result.get("tools")
            tools += [t for t in page if isinstance(t, dict)] if isinstance(page, list) else []
            cursor = result.get("nextCursor")
            if not isinstance(cursor, str) or not cursor:
                break
        return tools

    def call_tool(self, name: str, arguments: dict[str, Any], timeout: float) -> dict[str, Any]:
        return self.request("tools/call", {"name": name, "arguments": arguments}, timeout)

    def close(self) -> None:
        self.transport.close()
