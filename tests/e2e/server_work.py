"""The real server's prompt evaluation over a task, against the tokens that were new.

    with Recorder(base_url) as recorder:     # a proxy on 127.0.0.1 that keeps every chat body
        ... run a task against recorder.url ...
    work = measure(task, recorder.take(), server_log_text_of_the_task)

What the server evaluated is what it says in its own log: llama-cpp-python (verbose, its
default) resets llama.cpp's performance counters before each completion and prints them
after it (llama.py, _create_completion), "prompt eval time = … ms / N tokens": N is the
prompt tokens that completion evaluated (llama.cpp prints at least 1; a single remaining
token is counted there too). The cached prefix is not in it: llama-cpp-python evaluates only
what follows the longest prefix its context still holds ("Llama.generate: P prefix-match
hit, remaining M prompt tokens to eval"), and that context holds what the model generated
too, and what the previous task left. The server's own extra completions for one request
(the chatml-function-calling format asks the model first whether it calls a function, then
for the arguments) are in N too: they are what the server did.

What was new is counted in the model's own tokens by tests/e2e/prompt_tokens.py, run by the
e2e venv's Python: every request rendered as the server renders it, and each message's share
of the prompt; what a request appends after everything the task sent before is new, as the
fakes count it (tests/fakes/server_work.py, `Novelty`).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import setup_env

HERE = Path(__file__).resolve().parent
if str(HERE.parents[1]) not in sys.path:  # the repository: tests.fakes.server_work
    sys.path.insert(0, str(HERE.parents[1]))

from tests.fakes.server_work import Novelty  # noqa: E402

TARGET = 1.5  # evaluated / new over the longest task
_PROMPT_EVAL = re.compile(r"prompt eval time =\s*[\d.]+ ms /\s*(\d+) tokens")
_FORWARDED = ("Content-Type", "Authorization", "Accept")


class Recorder:
    """A plain HTTP proxy in front of the server that records every chat request's body.
    Answers are read whole and passed on (e2e runs without streaming)."""

    def __init__(self, upstream: str, timeout: float = 900.0) -> None:
        self.upstream = upstream.rstrip("/")
        self.root = re.sub(r"/v1$", "", self.upstream)
        self.timeout = timeout
        self._bodies: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                recorder._forward(self, None)

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                recorder._forward(self, self.rfile.read(length) if length else b"")

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        host, port = self._server.server_address[:2]
        self.url = f"http://{host!s}:{port}/v1"

    def __enter__(self) -> Recorder:
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def take(self) -> list[dict[str, Any]]:
        """The chat bodies recorded since the last take."""
        with self._lock:
            bodies, self._bodies = self._bodies, []
        return bodies

    def _forward(self, handler: BaseHTTPRequestHandler, data: bytes | None) -> None:
        if data is not None and handler.path.endswith("/chat/completions"):
            try:
                with self._lock:
                    self._bodies.append(json.loads(data))
            except ValueError:
                pass
        headers = {k: v for k in _FORWARDED if (v := handler.headers.get(k))}
        request = urllib.request.Request(
            self.root + handler.path, data=data, headers=headers, method=handler.command
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as answer:
                status, kind, payload = (
                    answer.status,
                    answer.headers.get("Content-Type"),
                    answer.read(),
                )
        except urllib.error.HTTPError as error:
            status, kind, payload = error.code, error.headers.get("Content-Type"), error.read()
        except OSError as error:
            status, kind, payload = 502, "text/plain", f"proxy: {error}".encode()
        try:
            handler.send_response(status)
            handler.send_header("Content-Type", kind or "application/json")
            handler.send_header("Content-Length", str(len(payload)))
            handler.end_headers()
            handler.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up waiting (its timeout on a loaded machine): nothing to tell


def prompt_evaluated(log: str) -> list[int]:
    """The prompt tokens each completion evaluated, as the server printed them, in order."""
    return [int(n) for n in _PROMPT_EVAL.findall(log)]


def evaluated_in(log: str, start: int, end: int) -> int:
    """Prompt tokens the server evaluated between offsets `start` and `end` of its log."""
    return sum(prompt_evaluated(log[start:end]))


@dataclass
class Work:
    task: str
    requests: int
    evaluated: int  # what the server's log says it evaluated, every completion
    new: int  # tokens of the messages the task sent for the first time, as rendered
    by_prefix: int  # what a server that kept only the previous prompt would evaluate
    prompt_tokens: list[int] = field(default_factory=list)

    @property
    def ratio(self) -> float:
        return self.evaluated / self.new if self.new else 0.0

    def line(self) -> str:
        return (
            f"{self.task}: {self.requests} chat requests, {self.evaluated:,} prompt tokens "
            f"evaluated (server log), {self.new:,} new: {self.ratio:.2f}x "
            f"(prefix-only cache: {self.by_prefix:,}; prompts {self.prompt_tokens})"
        )


def count(bodies: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """tests/e2e/prompt_tokens.py's count of each body, in the e2e venv."""
    given = json.dumps({"model": str(setup_env.model_path()), "bodies": bodies})
    proc = subprocess.run(
        [str(setup_env.venv_python()), str(HERE / "prompt_tokens.py")],
        input=given,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"prompt_tokens.py exited {proc.returncode}: {proc.stderr[-800:]}")
    counted: list[dict[str, Any]] = json.loads(proc.stdout)
    return counted


def measure(task: str, bodies: list[dict[str, Any]], log: str, start: int, end: int) -> Work:
    counted = count(bodies) if bodies else []
    novelty = Novelty()
    new = 0
    for request in counted:
        new += novelty.observe([(key, tokens) for key, tokens in request["blocks"]])[0]
    return Work(
        task,
        len(bodies),
        evaluated_in(log, start, end),
        new,
        sum(r["evaluated_by_prefix"] for r in counted),
        [r["tokens"] for r in counted],
    )


def report(works: list[Work]) -> list[str]:
    """Lines to print: every task's count, then the figure, over the longest task (the most
    chat requests; then the most evaluated)."""
    lines = [f"server work: {w.line()}" for w in works if w.requests]
    measured = [w for w in works if w.requests and w.new]
    if not measured:
        return [*lines, "server work: nothing measured"]
    longest = max(measured, key=lambda w: (w.requests, w.evaluated))
    met = "met" if longest.ratio <= TARGET else "NOT met"
    lines.append(
        f"server work figure ({longest.task}, the longest task): the server evaluated "
        f"{longest.ratio:.2f}x the new tokens (target ≤ {TARGET:g}x: {met})"
    )
    return lines
