"""MCP's wire format as a tools-only client needs it (pure): JSON-RPC 2.0 messages, the
protocol versions we speak, and a `tools/call` result turned into one of our results.

Spec: modelcontextprotocol.io/specification/2025-11-25 (basic/lifecycle, basic/transports,
server/tools). Resources, prompts, sampling, elicitation and roots are not used: we declare
no client capabilities, so a server must not ask for them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from cli import __version__

LATEST = "2025-11-25"
SUPPORTED = (LATEST, "2025-06-18", "2025-03-26", "2024-11-05")
CLIENT_INFO = {"name": "metona-agent", "version": __version__}
MAX_TEXT = 200_000  # characters of a result's text kept (the loop shrinks it further)


class McpError(Exception):
    """A server that cannot be used, or a call that failed at the protocol level; the
    message is one line that says which server and what to do."""


class RpcError(McpError):
    """The server answered a request with a JSON-RPC error."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(f"{message} (JSON-RPC error {code})")
        self.code = code
        self.data = data


def request(id_: int, method: str, params: Mapping[str, Any] | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": id_, "method": method}
    if params is not None:
        message["params"] = dict(params)
    return message


def notification(method: str, params: Mapping[str, Any] | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        message["params"] = dict(params)
    return message


def response(id_: Any, result: Mapping[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id_, "result": dict(result)}


def error_response(id_: Any, code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id_, "error": {"code": code, "message": message}}


def encode(message: Mapping[str, Any]) -> bytes:
    """One message as one line (stdio's framing: JSON has no raw newline in it)."""
    return json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"


def initialize_params(version: str = LATEST) -> dict[str, Any]:
    return {"protocolVersion": version, "capabilities": {}, "clientInfo": CLIENT_INFO}


def check_initialized(result: Mapping[str, Any]) -> str:
    """The version the server chose, if we speak it; McpError otherwise."""
    version = result.get("protocolVersion")
    if not isinstance(version, str) or version not in SUPPORTED:
        raise McpError(
            f"it answered with protocol version {version!r}, which this agent does not speak "
            f"(it speaks {', '.join(SUPPORTED)})"
        )
    if not isinstance(result.get("capabilities", {}), dict):
        raise McpError("its initialize answer has no capabilities object")
    return version


def outcome(message: Mapping[str, Any]) -> dict[str, Any]:
    """A response's result, or RpcError for its error; McpError for neither."""
    if "error" in message:
        error = message["error"] if isinstance(message["error"], dict) else {}
        code = error.get("code")
        number = code if isinstance(code, int) else -32603
        raise RpcError(number, str(error.get("message") or "error"), error.get("data"))
    result = message.get("result")
    if not isinstance(result, dict):
        raise McpError("a response without a result object")
    return result


def tool_result(result: Mapping[str, Any]) -> dict[str, Any]:
    """A `tools/call` result as one of our results: text items joined; images and audio by
    type and size (not passed on: the model gets text); resources as their text or URI;
    structuredContent as JSON; isError → success false."""
    parts: list[str] = []
    content = result.get("content")
    for item in content if isinstance(content, list) else []:
        if not isinstance(item, dict):
            continue
        kind = item.get("type")
        if kind == "text":
            parts.append(str(item.get("text", "")))
        elif kind in ("image", "audio"):
            data = item.get("data")
            size = len(data) * 3 // 4 if isinstance(data, str) else 0
            parts.append(f"[{kind} {item.get('mimeType', '?')}, about {size} bytes, not shown]")
        elif kind == "resource":
            found = item.get("resource")
            res: dict[str, Any] = found if isinstance(found, dict) else {}
            if isinstance(res.get("text"), str):
                parts.append(str(res["text"]))
            else:
                parts.append(f"[resource {res.get('uri', '?')} ({res.get('mimeType', '?')})]")
        elif kind == "resource_link":
            parts.append(f"[resource link {item.get('uri', '?')}: {item.get('name', '')}]")
        else:
            parts.append(f"[{kind} content, not shown]")
    text = "\n".join(parts)
    out: dict[str, Any] = {"success": not bool(result.get("isError"))}
    if len(text) > MAX_TEXT:
        out["truncated"] = True
        text = text[:MAX_TEXT]
    if out["success"]:
        out["content"] = text
    else:
        out["error"] = text or "the tool reported an error"
    structured = result.get("structuredContent")
    if structured is not None:
        try:
            size = len(json.dumps(structured, default=str))
        except (ValueError, RecursionError):
            size = MAX_TEXT + 1
        if size <= MAX_TEXT:
            out["structuredContent"] = structured
        else:  # the loop cuts text, not a structure: too big, it is left out and said so
            out["structuredContent_left_out"] = f"{size} characters of JSON"
    return out
