"""A fake Ollama: a real threaded HTTP server on 127.0.0.1 that speaks Ollama's protocol.

Each test scripts what `/api/chat` answers, call by call (`enqueue`), and reads back every
request the client made (`requests`, `chat_bodies`), each with the times it arrived and was
answered. Streams are NDJSON over chunked transfer encoding, one line per chunk, as Ollama
sends them. `/api/ps` lists `loaded`; `/api/show` can be slowed (`show_delay`) to see that
requests overlap.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.fakes.fake_http import (
    QuietServer,
    Recorded,
    base_url,
    read_request,
    reset_on_next_request,
    serve,
    shut,
)
from tests.fakes.server_work import ServerWork

# -- what a scripted chat call can do ------------------------------------------------------


@dataclass
class Stream:
    """Send these NDJSON objects (or raw byte lines), one chunk each, then end the stream
    (or not: `drop` closes the socket mid-stream, `stall` sleeps before the end)."""

    lines: list[dict[str, Any] | bytes]
    delay: float = 0.0
    drop: bool = False
    stall: float = 0.0
    endless: bool = False  # keep sending the last line until the client goes away
    header_delay: float = 0.0  # wait this long before even the status line
    # Wait for `gate` (set by the test) before sending line `gate_at` (negative: from the
    # end): a stall that lasts exactly as long as the test needs, on no clock.
    gate: threading.Event | None = None
    gate_at: int = -1


@dataclass
class HttpError:
    status: int
    error: str | None = None
    body: bytes | None = None
    header_delay: float = 0.0


# Ollama's answer to a prompt longer than the context when `truncate: false` (v0.30.9+,
# llm/llama_server.go).
CONTEXT_ERROR = (
    "the prompt is longer than the context length currently available to the model; shorten "
    "the prompt, adjust the context length in settings, or use a model with a longer context "
    "length"
)


def is_prewarm(body: Any) -> bool:
    """A prewarm (Agent.start_prewarm): not streamed, at most one token asked for. The
    agent's own chat requests always stream."""
    if not isinstance(body, dict) or body.get("stream") is not False:
        return False
    options = body.get("options")
    return isinstance(options, dict) and options.get("num_predict") == 1


def context_error() -> HttpError:
    """The server refusing the prompt as longer than num_ctx, as Ollama does (HTTP 400)."""
    return HttpError(400, CONTEXT_ERROR)


def tool_call(
    name: str, arguments: Any = None, *, call_id: str | None = None, index: int = 0
) -> dict[str, Any]:
    call: dict[str, Any] = {
        "function": {
            "index": index,
            "name": name,
            "arguments": arguments if arguments is not None else {},
        }
    }
    if call_id:
        call["id"] = call_id
    return call


def reply(
    content: str = "",
    *,
    thinking: str = "",
    tool_calls: Sequence[dict[str, Any]] = (),
    calls_in_final: bool = False,
    done_reason: str = "stop",
    model: str = "qwen3:8b",
    eval_count: int = 20,
    prompt_eval_count: int = 100,
    delay: float = 0.0,
    token: int = 4,
) -> Stream:
    """An answer as Ollama streams it: thinking tokens, content tokens, a chunk with the
    tool calls (or the calls in the final `done` chunk), then the final chunk with stats."""
    lines: list[dict[str, Any] | bytes] = []

    def chunk(message: dict[str, Any]) -> dict[str, Any]:
        return {
            "model": model,
            "created_at": "2026-11-29T12:00:00Z",
            "message": {"role": "assistant", "content": "", **message},
            "done": False,
        }

    for i in range(0, len(thinking), token):
        lines.append(chunk({"thinking": thinking[i : i + token]}))
    for i in range(0, len(content), token):
        lines.append(chunk({"content": content[i : i + token]}))
    if tool_calls and not calls_in_final:
        lines.append(chunk({"tool_calls": list(tool_calls)}))
    final = chunk({"tool_calls": list(tool_calls)} if tool_calls and calls_in_final else {})
    final.update(
        done=True,
        done_reason=done_reason,
        total_duration=1_500_000_000,
        load_duration=10_000_000,
        prompt_eval_count=prompt_eval_count,
        prompt_eval_duration=200_000_000,
        eval_count=eval_count,
        eval_duration=1_000_000_000,
    )
    lines.append(final)
    return Stream(lines, delay=delay)


# -- the server ----------------------------------------------------------------------------


@dataclass
class FakeOllama:
    models: dict[str, dict[str, Any]] = field(default_factory=dict)
    requests: list[Recorded] = field(default_factory=list)
    version: str = "0.33.0"
    loaded: dict[str, int] = field(default_factory=dict)  # /api/ps: name → context_length
    has_ps: bool = True  # False: /api/ps is a 404, as on servers before it existed
    show_delay: float = 0.0  # seconds each /api/show takes
    # A connection that answered a chat is reset when its next request arrives.
    reset_kept_alive: bool = False
    # A tokenizer: when set, the final chunk's prompt_eval_count is this function of the
    # request body, as a real server counts the prompt it was sent.
    prompt_tokens: Callable[[dict[str, Any]], int] | None = None
    # Loads as Ollama does them: a chat with another num_ctx than the model is loaded with
    # (re)loads it with that one (`loads` lists each load's num_ctx), and /api/ps says so.
    follow_loads: bool = False
    loads: list[int] = field(default_factory=list)
    # When set, every chat request answered with a stream is counted as a server with a KV
    # cache evaluates it (tests/fakes/server_work.py).
    server_work: ServerWork | None = None
    # When set, a prewarm is answered with this error (it is still recorded).
    prewarm_error: HttpError | None = None
    prewarm_delay: float = 0.0  # seconds a prewarm waits before it is answered

    def __post_init__(self) -> None:
        self._script: deque[Stream | HttpError] = deque()
        self.show_errors: deque[HttpError] = deque()  # answered by /api/show before models
        self._lock = threading.Lock()
        self._server: QuietServer | None = None
        self.add_model("qwen3:8b", ["completion", "tools", "thinking"])

    # scripting
    def add_model(
        self,
        name: str,
        capabilities: Iterable[str] = ("completion", "tools"),
        context_length: int = 40960,
        *,
        report_capabilities: bool = True,
        family: str = "qwen3",
        size: int = 1,
        parameter_size: str = "8.2B",
        quantization: str = "Q4_K_M",
    ) -> None:
        """`report_capabilities=False` answers /api/show like servers before v0.6.4."""
        self.models[name] = {
            "capabilities": list(capabilities) if report_capabilities else None,
            "context_length": context_length,
            "family": family,
            "size": size,
            "parameter_size": parameter_size,
            "quantization": quantization,
        }

    def requests_to(self, path: str) -> list[Recorded]:
        return [r for r in self.requests if r.path == path]

    def enqueue(self, *responses: Stream | HttpError) -> None:
        with self._lock:
            self._script.extend(responses)

    @property
    def chat_bodies(self) -> list[dict[str, Any]]:
        """The chat requests, prewarms left out (`prewarm_bodies`)."""
        return [r.body for r in self.requests if r.path == "/api/chat" and not is_prewarm(r.body)]

    @property
    def prewarm_bodies(self) -> list[dict[str, Any]]:
        """agent.prewarm's requests: answered at once, never from the script."""
        return [r.body for r in self.requests if r.path == "/api/chat" and is_prewarm(r.body)]

    @property
    def pending(self) -> int:
        return len(self._script)

    def forget(self) -> None:
        """Drop what is still scripted (a run killed mid-way leaves its later replies)."""
        with self._lock:
            self._script.clear()

    # lifecycle
    @property
    def url(self) -> str:
        return base_url(self._server)

    def start(self) -> FakeOllama:
        self._server = serve(type("Handler", (_Handler,), {"fake": self}))
        return self

    def stop(self) -> None:
        shut(self._server)

    def load(self, model: str, num_ctx: Any) -> None:
        """A chat asked for `num_ctx`: Ollama reloads the model unless it runs with that."""
        with self._lock:
            if isinstance(num_ctx, int) and self.loaded.get(model) != num_ctx:
                self.loads.append(num_ctx)
                self.loaded[model] = num_ctx

    def next_response(self) -> Stream | HttpError:
        with self._lock:
            if not self._script:
                return HttpError(500, "fake ollama: no scripted reply left for this call")
            return self._script.popleft()


class _Handler(BaseHTTPRequestHandler):
    fake: FakeOllama
    protocol_version = "HTTP/1.1"
    _recorded: Recorded
    served_chat = False  # this connection answered a chat request already

    def handle_one_request(self) -> None:
        if self.served_chat and self.fake.reset_kept_alive:
            reset_on_next_request(self)
            return
        super().handle_one_request()

    def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
        pass

    def _record(self) -> Any:
        recorded = read_request(self)
        self.fake.requests.append(recorded)
        self._recorded = recorded
        return recorded.body

    def _json(self, status: int, data: Any) -> None:
        payload = json.dumps(data).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)
        self.wfile.flush()
        self._recorded.finished = time.monotonic()

    def do_GET(self) -> None:
        self._record()
        if self.path == "/api/tags":
            models = [
                {
                    "name": n,
                    "model": n,
                    "size": info.get("size", 1),
                    "details": {
                        "family": info.get("family"),
                        "parameter_size": info.get("parameter_size"),
                        "quantization_level": info.get("quantization"),
                    },
                }
                for n, info in self.fake.models.items()
            ]
            self._json(200, {"models": models})
        elif self.path == "/api/ps" and self.fake.has_ps:
            running = [
                {"name": n, "model": n, "size": 1, "size_vram": 1, "context_length": ctx}
                for n, ctx in self.fake.loaded.items()
            ]
            self._json(200, {"models": running})
        elif self.path == "/api/version":
            self._json(200, {"version": self.fake.version})
        elif self.path == "/":
            self._json(200, "Ollama is running")
        else:
            self._json(404, {"error": "not found"})

    def do_POST(self) -> None:
        body = self._record()
        model = body.get("model") if isinstance(body, dict) else None
        if self.path == "/api/show":
            if self.fake.show_errors:
                error = self.fake.show_errors.popleft()
                self._json(error.status, {"error": error.error})
                return
            if self.fake.show_delay:
                time.sleep(self.fake.show_delay)
            info = self.fake.models.get(str(model))
            if info is None:
                self._json(404, {"error": f"model '{model}' not found"})
                return
            arch = info.get("family", "qwen3")
            shown: dict[str, Any] = {
                "model_info": {
                    "general.architecture": arch,
                    f"{arch}.context_length": info["context_length"],
                },
                "details": {
                    "family": arch,
                    "parameter_size": info.get("parameter_size"),
                    "quantization_level": info.get("quantization"),
                },
            }
            if info["capabilities"] is not None:
                shown["capabilities"] = info["capabilities"]
            self._json(200, shown)
        elif self.path == "/api/chat":
            if model not in self.fake.models:
                self._json(404, {"error": f"model '{model}' not found"})
                return
            self.served_chat = True
            if self.fake.follow_loads:
                self.fake.load(str(model), body.get("options", {}).get("num_ctx"))
            if is_prewarm(body):
                self._prewarm(body, model)
                return
            response = self.fake.next_response()
            if self.fake.server_work is not None and isinstance(response, Stream):
                self.fake.server_work.observe(body)
            self._chat(response, body)
        else:
            self._json(404, {"error": "not found"})

    def _prewarm(self, body: Any, model: object) -> None:
        """A prewarm: answered at once (after `prewarm_delay`), never from the script."""
        time.sleep(self.fake.prewarm_delay)
        error = self.fake.prewarm_error
        if error is not None:
            self._json(error.status, {"error": error.error})
            return
        if self.fake.server_work is not None:
            self.fake.server_work.observe(body)
        done = {"role": "assistant", "content": ""}
        self._json(200, {"model": model, "message": done, "done": True})

    def _chat(self, response: Stream | HttpError, body: Any = None) -> None:
        if response.header_delay:
            time.sleep(response.header_delay)
        if isinstance(response, HttpError):
            payload = (
                response.body
                if response.body is not None
                else json.dumps({"error": response.error}).encode()
            )
            self.send_response(response.status)
            self.send_header("Content-Type", "application/json; charset=utf-8")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
            self._recorded.finished = time.monotonic()
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/x-ndjson")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            lines = list(response.lines)
            index = 0
            gate_at = response.gate_at % len(lines) if lines else 0
            while index < len(lines) or response.endless:
                if response.gate is not None and index == gate_at:
                    response.gate.wait(120)
                line = lines[min(index, len(lines) - 1)]
                if isinstance(line, dict) and line.get("done") and self.fake.prompt_tokens:
                    line = {**line, "prompt_eval_count": self.fake.prompt_tokens(body)}
                data = line if isinstance(line, bytes) else json.dumps(line).encode() + b"\n"
                self._chunk(data)
                index += 1
                if response.delay:
                    time.sleep(response.delay)
                if response.endless and index >= len(lines):
                    time.sleep(0.01)
            if response.drop:
                self.wfile.flush()
                self.connection.shutdown(socket.SHUT_RDWR)
                self.close_connection = True
                return
            if response.stall:
                time.sleep(response.stall)
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
            self._recorded.finished = time.monotonic()
        except (BrokenPipeError, ConnectionResetError, OSError):
            self.close_connection = True  # the client went away (Ctrl-C, timeout)

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()
