"""What the fake servers share: a threaded HTTP server on 127.0.0.1, quiet about clients that
hang up mid-answer, and the record of every request it was sent."""

from __future__ import annotations

import json
import select
import socket
import struct
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Recorded:
    method: str
    path: str
    body: Any  # the parsed JSON, or the raw bytes when it was not JSON (None: no body)
    headers: dict[str, str]
    started: float = 0.0  # time.monotonic() when the request arrived
    finished: float = 0.0  # … and when its answer was written (0: not yet)
    client: Any = None  # the client's address and port: one per TCP connection


class QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def get_request(self) -> tuple[socket.socket, Any]:
        """TCP_NODELAY on every connection, as Ollama's own server sets it: without it each
        small write waits for the client's delayed ACK (~40 ms a request, Nagle's rule)."""
        sock, address = super().get_request()
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock, address

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that hangs up mid-stream (Ctrl-C, timeout) is part of the tests


def reset_on_next_request(handler: BaseHTTPRequestHandler) -> None:
    """A kept-alive connection the server drops: once the next request has arrived, RST,
    not FIN, so the client cannot tell the connection is gone before it sends; it reads
    "connection reset by peer" (uvicorn after a failed stream; any server's idle close
    racing a request)."""
    select.select([handler.connection], [], [], 5)
    handler.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    handler.close_connection = True


def serve(handler: type[BaseHTTPRequestHandler]) -> QuietServer:
    """A server for `handler` on a free port of 127.0.0.1, answering in a thread."""
    server = QuietServer(("127.0.0.1", 0), handler)
    threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
    ).start()
    return server


def shut(server: QuietServer | None) -> None:
    if server:
        server.shutdown()
        server.server_close()


def base_url(server: QuietServer | None) -> str:
    assert server is not None, "the fake server is not started"
    host, port = server.server_address[:2]
    return f"http://{host!s}:{port}"


def read_request(handler: BaseHTTPRequestHandler) -> Recorded:
    """The request `handler` is answering, its body read and parsed."""
    length = int(handler.headers.get("Content-Length") or 0)
    raw = handler.rfile.read(length) if length else b""
    try:
        body = json.loads(raw) if raw else None
    except ValueError:
        body = raw
    return Recorded(
        handler.command,
        handler.path,
        body,
        dict(handler.headers),
        time.monotonic(),
        client=handler.client_address,
    )
