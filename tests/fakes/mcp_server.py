"""A tiny MCP server for the tests, scripted per test: over stdio (run as a program) or over
streamable HTTP on 127.0.0.1 (`HttpMcp`, in the test's process).

    python tests/fakes/mcp_server.py SCRIPT.json      # stdio

The script (JSON) says: `version` (what initialize answers; "echo" = the client's), `banner`
(lines printed on stdout before anything, as some servers do), `page_size` (tools/list
pagination), `tools` (extra names), `ping` (the server pings the client after initialize),
`record` (a file each message received is appended to), `hang` (never answer initialize).
Tools (each name in `tools` is listed as often as it appears there, and answers "ran NAME"):

    echo {text}        → text
    add {a, b}         → the sum, also as structuredContent
    slow {seconds}     → sleeps, then "done" (a notifications/cancelled is recorded)
    crash              → the process exits 3 without answering
    huge {bytes}       → that many "x"
    fail               → isError: true
    rpc_error          → a JSON-RPC error -32000
    image              → an image item and a text item
    grow               → adds tool "grown" and sends notifications/tools/list_changed
    env {name}         → the server's environment variable `name` (or "<unset>")
    cwd                → its working dir
    pid                → its process id
    write {path}       → writes a file there ("wrote", or "refused: …")
    connect {port}     → connects to 127.0.0.1:port ("connected", or "refused: …")
    badid              → first a response whose id is a list, and a line of JSON nested
                         100,000 deep, then its answer
    flood {bytes}      → that many bytes on stderr
Script key `odd_schema`: every tool's schema says `"required": 5`; `pidfile`: a file this
process writes its pid to when it starts.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

BASE_TOOLS = [
    "echo", "add", "slow", "crash", "huge", "fail", "rpc_error", "image", "grow", "env", "cwd",
    "pid", "write", "connect", "badid", "flood",
]  # fmt: skip


def schema(name: str) -> dict[str, Any]:
    props: dict[str, Any] = {
        "echo": {"text": {"type": "string"}},
        "add": {"a": {"type": "number"}, "b": {"type": "number"}},
        "slow": {"seconds": {"type": "number"}},
        "huge": {"bytes": {"type": "integer"}},
        "env": {"name": {"type": "string"}},
        "write": {"path": {"type": "string"}},
        "connect": {"port": {"type": "integer"}},
        "flood": {"bytes": {"type": "integer"}},
    }.get(name, {})
    out: dict[str, Any] = {"type": "object", "properties": props, "$schema": "ignored"}
    if props:
        out["required"] = list(props)
    return out


class Script:
    def __init__(self, data: dict[str, Any]) -> None:
        self.data = data
        self.tools = [*BASE_TOOLS, *data.get("tools", [])]
        self.record = data.get("record")
        self.lock = threading.Lock()

    def log(self, message: Any) -> None:
        if self.record:
            with self.lock, open(self.record, "a") as f:
                f.write(json.dumps(message) + "\n")

    def handle(
        self, message: dict[str, Any], send: Any, send_line: Any = None
    ) -> dict[str, Any] | None:
        """The response to `message` (None for a notification); `send` sends anything else."""
        self.log(message)
        method, mid = message.get("method"), message.get("id")
        params = message.get("params") or {}
        if method is None or mid is None:
            return None
        if method == "initialize" and self.data.get("hang"):
            time.sleep(3600)
        if method == "initialize":
            version = self.data.get("version", "echo")
            if version == "echo":
                version = params.get("protocolVersion")
            return ok(mid, {
                "protocolVersion": version,
                "capabilities": {"tools": {"listChanged": True}},
                "serverInfo": {"name": "scripted", "version": "1"},
            })  # fmt: skip
        if method == "ping":
            return ok(mid, {})
        if method == "tools/list":
            size = int(self.data.get("page_size", 1000))
            start = int(params.get("cursor") or 0)
            names = self.tools[start : start + size]
            result: dict[str, Any] = {
                "tools": [
                    {"name": n, "description": f"the {n} tool", "inputSchema": schema(n)}
                    for n in names
                ]
            }
            if self.data.get("odd_schema"):  # what some servers send: "required" not a list
                for tool in result["tools"]:
                    tool["inputSchema"]["required"] = 5
            if start + size < len(self.tools):
                result["nextCursor"] = str(start + size)
            return ok(mid, result)
        if method == "tools/call":
            args = params.get("arguments") or {}
            return self.call(mid, params.get("name"), args, send, send_line or (lambda _: None))
        return {"jsonrpc": "2.0", "id": mid, "error": {"code": -32601, "message": "no such method"}}

    def call(
        self, mid: Any, name: str, args: dict[str, Any], send: Any, send_line: Any
    ) -> dict[str, Any]:
        if name == "echo":
            return text(mid, str(args.get("text", "")))
        if name == "add":
            total = args["a"] + args["b"]
            return ok(mid, {"content": [{"type": "text", "text": str(total)}],
                            "structuredContent": {"sum": total}})  # fmt: skip
        if name == "slow":
            time.sleep(float(args.get("seconds", 5)))
            return text(mid, "done")
        if name == "crash":
            os._exit(3)
        if name == "huge":
            return text(mid, "x" * int(args.get("bytes", 1_000_000)))
        if name == "fail":
            return ok(mid, {"content": [{"type": "text", "text": "it broke"}], "isError": True})
        if name == "rpc_error":
            return {"jsonrpc": "2.0", "id": mid, "error": {"code": -32000, "message": "nope"}}
        if name == "image":
            return ok(mid, {"content": [
                {"type": "image", "data": "iVBORw0KGgo=" * 10, "mimeType": "image/png"},
                {"type": "text", "text": "a picture"},
            ]})  # fmt: skip
        if name == "grow":
            if "grown" not in self.tools:
                self.tools.append("grown")
            send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
            return text(mid, "grew")
        if name == "grown":
            return text(mid, "I am new")
        if name == "env":
            return text(mid, os.environ.get(str(args.get("name")), "<unset>"))
        if name == "cwd":
            return text(mid, os.getcwd())
        if name == "pid":
            return text(mid, str(os.getpid()))
        if name == "write":
            try:
                with open(str(args["path"]), "w") as f:
                    f.write("written by the server\n")
            except OSError as exc:
                return text(mid, f"refused: {exc.strerror}")
            return text(mid, "wrote")
        if name == "badid":  # an answer no request has, and a line nested too deep first
            send({"jsonrpc": "2.0", "id": [mid], "result": {}})
            send_line("[" * 100_000 + "]" * 100_000)
            return text(mid, "after the odd ones")
        if name == "flood":
            sys.stderr.write("e" * int(args.get("bytes", 1000)))
            sys.stderr.flush()
            return text(mid, "flooded")
        if name == "connect":
            import socket

            try:
                socket.create_connection(("127.0.0.1", int(args["port"])), timeout=2).close()
            except OSError as exc:
                return text(mid, f"refused: {exc.strerror or exc}")
            return text(mid, "connected")
        if name in self.data.get("tools", []):
            return text(mid, f"ran {name}")
        return {"jsonrpc": "2.0", "id": mid, "error": {"code": -32602, "message": "unknown tool"}}


def ok(mid: Any, result: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": mid, "result": result}


def text(mid: Any, value: str) -> dict[str, Any]:
    return ok(mid, {"content": [{"type": "text", "text": value}]})


# -- stdio ----------------------------------------------------------------------------------


def serve_stdio(script: Script) -> None:
    out_lock = threading.Lock()

    def send(message: dict[str, Any]) -> None:
        with out_lock:
            sys.stdout.write(json.dumps(message) + "\n")
            sys.stdout.flush()

    for line in script.data.get("banner", []):
        send_raw = line + "\n"
        with out_lock:
            sys.stdout.write(send_raw)
            sys.stdout.flush()
    if script.data.get("pidfile"):  # where the test can find this process
        with open(script.data["pidfile"], "w") as f:
            f.write(str(os.getpid()))
    sys.stderr.write("scripted server started\n")
    sys.stderr.flush()
    for raw in sys.stdin:
        try:
            message = json.loads(raw)
        except ValueError:
            continue
        if message.get("method") == "notifications/initialized" and script.data.get("ping"):
            send({"jsonrpc": "2.0", "id": "srv-1", "method": "ping"})

        def line(text: str) -> None:
            with out_lock:
                sys.stdout.write(text + "\n")
                sys.stdout.flush()

        def work(message: dict[str, Any] = message) -> None:
            reply = script.handle(message, send, line)
            if reply is not None:
                send(reply)

        threading.Thread(target=work, daemon=True).start()  # slow calls do not block pings


# -- streamable HTTP ---------------------------------------------------------------------------


class HttpMcp:
    """The scripted server over streamable HTTP at `url` (…/mcp). `sse`: answer requests
    as an event stream; `auth`: every request gets 401 (an OAuth server)."""

    def __init__(self, data: dict[str, Any], *, sse: bool = False, auth: bool = False) -> None:
        self.script = Script(data)
        self.sse, self.auth = sse, auth
        self.requests: list[tuple[dict[str, str], dict[str, Any] | None]] = []
        self.session_id = "session-42"
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_DELETE(self) -> None:
                owner.requests.append((dict(self.headers), {"DELETE": True}))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                message = json.loads(self.rfile.read(length))
                owner.requests.append((dict(self.headers), message))
                if owner.auth:
                    self.send_response(401)
                    self.send_header("WWW-Authenticate", 'Bearer resource_metadata="x"')
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                extra: list[dict[str, Any]] = []
                reply = owner.script.handle(message, extra.append)
                if reply is None:
                    self.send_response(202)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if owner.sse:
                    body = "".join(
                        f"event: message\ndata: {json.dumps(m)}\n\n" for m in [*extra, reply]
                    ).encode()
                    kind = "text/event-stream"
                else:
                    body, kind = json.dumps(reply).encode(), "application/json"
                self.send_response(200)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                if message.get("method") == "initialize":
                    self.send_header("Mcp-Session-Id", owner.session_id)
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/mcp"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def start(self) -> HttpMcp:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


if __name__ == "__main__":
    with open(sys.argv[1]) as f:
        serve_stdio(Script(json.load(f)))
