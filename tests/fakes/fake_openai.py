"""A fake OpenAI-compatible server: a real threaded HTTP server on 127.0.0.1 that speaks the
/v1/chat/completions dialect as LM Studio, llama.cpp's llama-server, vLLM and
llama-cpp-python do.

Each test scripts what the model answers, call by call (`enqueue`). A scripted `Answer` is
sent as server-sent events to a streaming request — thinking and content a few characters a
delta, tool-call arguments as JSON string fragments cut at awkward places, usage in the last
chunk, then `data: [DONE]` — and as one JSON body to a non-streaming one. Every request the
client made is recorded (`requests`, `chat_bodies`), and so is every argument fragment sent
(`fragments`).
"""

from __future__ import annotations

import itertools
import json
import re
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
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


def is_prewarm(body: Any) -> bool:
    """A prewarm (Agent.start_prewarm): llama-server's `n_predict: 0`, or one token asked for
    without streaming."""
    if not isinstance(body, dict):
        return False
    if body.get("n_predict") == 0:
        return True
    return body.get("stream") is False and body.get("max_tokens") == 1


# -- what a scripted chat call can do ------------------------------------------------------


@dataclass
class Call:
    """One tool call the model makes. `arguments` is an object, or raw text (bad JSON)."""

    name: str
    arguments: dict[str, Any] | str = field(default_factory=dict)
    id: str | None = None  # None: the fake makes one up (call_fake_<n>), unless ids=False


@dataclass
class Answer:
    """One model answer, streamed or not depending on what the client asked for."""

    content: str = ""
    thinking: str = ""
    tool_calls: Sequence[Call] = ()
    finish_reason: str | None = None  # default: "tool_calls" with calls, else "stop"
    prompt_tokens: int = 100
    completion_tokens: int = 20
    reasoning_field: str = "reasoning_content"  # or "reasoning" (Ollama, newer vLLM)
    token: int = 4  # characters per content or thinking delta
    ids: bool = True  # False: the server sends no call ids (the client makes them up)
    usage: bool = True  # a last chunk with usage (stream_options.include_usage)
    delay: float = 0.0  # seconds between events
    # Servers that cannot stream tool calls. stream_calls=False: the stream ends with
    # finish_reason "tool_calls" and no call deltas; empty_stream=True: a 200 event stream
    # with no event at all (llama-cpp-python when its model picks a tool). Either way the
    # answer stays queued for the non-streaming request the client should send next.
    stream_calls: bool = True
    empty_stream: bool = False
    pings: bool = False  # SSE comments (": ping") before the first event, as sse-starlette


@dataclass
class Events:
    """Raw SSE: each item is one `data:` payload (a dict) or a raw line (bytes, sent as is);
    `[DONE]` at the end unless `done` is False. `drop` closes the socket at the end, `stall`
    sleeps before ending, `endless` repeats the last item until the client goes away."""

    items: list[dict[str, Any] | bytes]
    done: bool = True
    delay: float = 0.0
    drop: bool = False
    stall: float = 0.0
    endless: bool = False
    header_delay: float = 0.0


@dataclass
class Json:
    """A 200 answer with this JSON body, whatever the request asked (a server that ignores
    `stream`)."""

    body: Any


@dataclass
class HttpError:
    status: int
    message: str | None = None
    code: str | None = None
    body: bytes | None = None  # sent as is instead of OpenAI's {"error": {...}}
    header_delay: float = 0.0


Scripted = Answer | Events | Json | HttpError


def awkward_fragments(text: str, size: int = 5) -> list[str]:
    """`text` cut where a naive client breaks: inside a string, inside a \\uXXXX escape,
    between a key and its colon; the rest in pieces of `size` characters."""
    cuts = set(range(size, len(text), size))
    first_quote = text.find('"')
    if first_quote >= 0:
        cuts.add(first_quote + 2)  # inside the first key
    for match in re.finditer(r": \"", text):
        cuts.add(match.end() + 1)  # inside a string value
    for match in re.finditer(r"\\u", text):
        cuts.add(match.start() + 3)  # \u0 | 0e9
    for match in re.finditer(r"\":", text):
        cuts.add(match.start() + 1)  # "path" | : "x"
    points = [0, *sorted(c for c in cuts if 0 < c < len(text)), len(text)]
    return [text[a:b] for a, b in itertools.pairwise(points) if b > a]


# -- the server ----------------------------------------------------------------------------


@dataclass
class FakeOpenAI:
    # id → extra fields of its /models entry (max_model_len, meta, capabilities…)
    models: dict[str, dict[str, Any]] = field(default_factory=dict)
    requests: list[Recorded] = field(default_factory=list)
    fragments: list[str] = field(default_factory=list)  # every argument fragment streamed
    api_key: str | None = None  # when set, requests without this bearer token get 401
    props: dict[str, Any] | None = None  # llama-server's /props (at the root, not /v1)
    models_endpoint: bool = True  # False: GET /v1/models is a 404
    models_body: bytes | None = None  # GET /v1/models answers this instead of the list
    strict_models: bool = True  # an unknown model is a 404 (vLLM); False serves any name
    # A kept-alive connection that served a chat answer is reset by the next request on it,
    # as uvicorn does to the connection whose stream failed (llama-cpp-python).
    reset_kept_alive: bool = False
    prefix: str = "/v1"
    # LM Studio's own API at the root: id → its entry there ({"state": "loaded",
    # "loaded_context_length": 4096, "max_context_length": 32768}), served as /api/v1/models
    # (LM Studio 0.4, `lm_studio_api` "v1") or /api/v0/models (0.3.6+, "v0"). Its /v1/models
    # then says `owned_by: organization_owner`, as LM Studio's does.
    lm_studio: dict[str, dict[str, Any]] | None = None
    lm_studio_api: str = "v1"
    # The context the server runs the model with: a prompt of more tokens (`tokenizer`, by
    # default 4 characters of the request's messages and tools a token) is refused, worded as
    # `context_style` words it: llama-cpp-python, llama.cpp (llama-server), vllm, lmstudio.
    # A `tokenizer`, when set, is also the prompt_tokens of every answer's usage.
    context: int | None = None
    context_style: str = "llama-cpp-python"
    tokenizer: Callable[[dict[str, Any]], int] | None = None
    # When set, every chat request the server answers (not one it refuses as too long) is
    # counted as a server with a KV cache evaluates it (tests/fakes/server_work.py).
    server_work: ServerWork | None = None

    def __post_init__(self) -> None:
        self._script: deque[Scripted] = deque()
        self._lock = threading.Lock()
        self._server: QuietServer | None = None
        self._ids = 0
        if not self.models:
            self.add_model("qwen3:8b")

    # scripting
    def add_model(self, name: str, **entry: Any) -> None:
        self.models[name] = entry

    def enqueue(self, *responses: Scripted) -> None:
        with self._lock:
            self._script.extend(responses)

    @property
    def chat_bodies(self) -> list[dict[str, Any]]:
        """The chat requests, prewarms left out (`prewarm_bodies`)."""
        path = f"{self.prefix}/chat/completions"
        return [r.body for r in self.requests if r.path == path and not is_prewarm(r.body)]

    @property
    def prewarm_bodies(self) -> list[dict[str, Any]]:
        """agent.prewarm's requests: answered at once, never from the script."""
        path = f"{self.prefix}/chat/completions"
        return [r.body for r in self.requests if r.path == path and is_prewarm(r.body)]

    @property
    def pending(self) -> int:
        return len(self._script)

    # lifecycle
    @property
    def root(self) -> str:
        return base_url(self._server)

    @property
    def url(self) -> str:
        """The base URL a client is given (…/v1)."""
        return self.root + self.prefix

    def start(self) -> FakeOpenAI:
        self._server = serve(type("Handler", (_Handler,), {"fake": self}))
        return self

    def stop(self) -> None:
        shut(self._server)

    def next_response(self) -> Scripted:
        with self._lock:
            if not self._script:
                return HttpError(500, "fake openai: no scripted reply left for this call")
            return self._script.popleft()

    def push_back(self, response: Scripted) -> None:
        with self._lock:
            self._script.appendleft(response)

    def call_id(self) -> str:
        with self._lock:
            self._ids += 1
            return f"call_fake_{self._ids}"

    # rendering an answer
    def completion(self, answer: Answer, model: str, prompt: int | None = None) -> dict[str, Any]:
        """The answer as one non-streamed body (content null beside tool calls, as
        llama-cpp-python sends it); `prompt`: the prompt's tokens as counted, for usage."""
        message: dict[str, Any] = {"role": "assistant", "content": answer.content or None}
        if answer.thinking:
            message[answer.reasoning_field] = answer.thinking
        if answer.tool_calls:
            message["tool_calls"] = [
                {
                    **({"id": self._id_of(call)} if answer.ids else {}),
                    "type": "function",
                    "function": {"name": call.name, "arguments": _arguments_text(call)},
                }
                for call in answer.tool_calls
            ]
        body: dict[str, Any] = {
            "id": "chatcmpl-fake",
            "object": "chat.completion",
            "created": 1_790_000_000,
            "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": _finish(answer)}],
        }
        if answer.usage:
            body["usage"] = _usage(answer, prompt)
        return body

    def stream(
        self, answer: Answer, model: str, prompt: int | None = None
    ) -> Iterator[dict[str, Any] | bytes]:
        """The answer as SSE payloads, in the order a server sends them."""

        def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            return {
                "id": "chatcmpl-fake",
                "object": "chat.completion.chunk",
                "created": 1_790_000_000,
                "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            }

        if answer.pings:
            yield b": ping - 2026-12-01 12:00:00\n\n"
        yield chunk({"role": "assistant", "content": ""})
        for i in range(0, len(answer.thinking), answer.token):
            yield chunk({answer.reasoning_field: answer.thinking[i : i + answer.token]})
        for i in range(0, len(answer.content), answer.token):
            yield chunk({"content": answer.content[i : i + answer.token]})
        if answer.stream_calls:
            for index, call in enumerate(answer.tool_calls):
                head: dict[str, Any] = {"index": index, "type": "function"}
                if answer.ids:
                    head["id"] = self._id_of(call)
                head["function"] = {"name": call.name, "arguments": ""}
                yield chunk({"tool_calls": [head]})
                for piece in awkward_fragments(_arguments_text(call)):
                    self.fragments.append(piece)
                    yield chunk(
                        {"tool_calls": [{"index": index, "function": {"arguments": piece}}]}
                    )
        yield chunk({}, _finish(answer))
        if answer.usage:
            yield {
                "id": "chatcmpl-fake",
                "object": "chat.completion.chunk",
                "model": model,
                "choices": [],
                "usage": _usage(answer, prompt),
            }

    def prompt_tokens_of(self, body: dict[str, Any]) -> int:
        """The request's prompt in this fake's tokens."""
        if self.tokenizer is not None:
            return self.tokenizer(body)
        text = json.dumps(body.get("messages")) + json.dumps(body.get("tools") or [])
        return (len(text) + 3) // 4

    def refusal(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]] | None:
        """The error a server running with `context` answers a prompt too long for it, in its
        own words, or None when it fits."""
        if self.context is None:
            return None
        n_ctx, prompt = self.context, self.prompt_tokens_of(body)
        max_tokens = body.get("max_tokens")
        wanted = max_tokens if isinstance(max_tokens, int) else 0
        if prompt + wanted <= n_ctx and prompt < n_ctx:
            return None
        if self.context_style == "llama.cpp":  # tools/server: exceed_context_size_error
            message = (
                f"request ({prompt} tokens) exceeds the available context size ({n_ctx} "
                "tokens), try increasing it"
            )
            error = {"code": 400, "message": message, "type": "exceed_context_size_error"}
            return 400, {"error": {**error, "n_prompt_tokens": prompt, "n_ctx": n_ctx}}
        if self.context_style == "vllm":
            message = (
                f"This model's maximum context length is {n_ctx} tokens. However, you requested "
                f"{wanted} output tokens and your prompt contains at least {prompt + 1} input "
                f"tokens, for a total of at least {prompt + 1 + wanted} tokens. Please reduce "
                "the length of the input prompt or the number of requested output tokens."
            )
            return 400, {"error": {"message": message, "type": "BadRequestError", "code": 400}}
        if self.context_style == "lmstudio":
            message = (
                f"Trying to keep the first {prompt} tokens when context the overflows. However, "
                f"the model is loaded with context length of only {n_ctx} tokens, which is not "
                "enough. Try to load the model with a larger context length, or provide a "
                "shorter input"
            )
            return 400, {"error": message}
        # llama-cpp-python (server/errors.py context_length_exceeded)
        message = (
            f"This model's maximum context length is {n_ctx} tokens. However, you requested "
            f"{prompt + wanted} tokens ({prompt} in the messages, {max_tokens} in the "
            "completion). Please reduce the length of the messages or completion."
        )
        error = {"message": message, "type": "invalid_request_error", "param": "messages"}
        return 400, {"error": {**error, "code": "context_length_exceeded"}}

    def lm_studio_models(self, api: str) -> dict[str, Any] | None:
        """LM Studio's own model list, as /api/v1/models or /api/v0/models answers it."""
        if self.lm_studio is None or api != self.lm_studio_api:
            return None
        if api == "v0":
            return {
                "object": "list",
                "data": [{"id": i, "object": "model", **e} for i, e in self.lm_studio.items()],
            }
        models = []
        for key, entry in self.lm_studio.items():
            loaded = entry.get("loaded_context_length")
            instances = [{"id": key, "config": {"context_length": loaded}}] if loaded else []
            models.append(
                {
                    "type": "llm",
                    "key": key,
                    "loaded_instances": instances,
                    "max_context_length": entry.get("max_context_length"),
                }
            )
        return {"models": models}

    def _id_of(self, call: Call) -> str:
        if call.id is None:
            call.id = self.call_id()  # the same id when the answer is sent twice
        return call.id


def _arguments_text(call: Call) -> str:
    if isinstance(call.arguments, str):
        return call.arguments
    return json.dumps(call.arguments)  # ASCII: "é" is sent as \u00e9, an escape to cut


def _finish(answer: Answer) -> str:
    return answer.finish_reason or ("tool_calls" if answer.tool_calls else "stop")


def _usage(answer: Answer, prompt: int | None = None) -> dict[str, int]:
    prompt = answer.prompt_tokens if prompt is None else prompt
    return {
        "prompt_tokens": prompt,
        "completion_tokens": answer.completion_tokens,
        "total_tokens": prompt + answer.completion_tokens,
    }


class _Handler(BaseHTTPRequestHandler):
    fake: FakeOpenAI
    protocol_version = "HTTP/1.1"
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
        return recorded.body

    def _send(self, status: int, payload: bytes, content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def _json(self, status: int, data: Any) -> None:
        self._send(status, json.dumps(data).encode())

    def _error(self, status: int, message: str, kind: str, code: Any = None) -> None:
        self._json(status, {"error": {"message": message, "type": kind, "code": code}})

    def _authorized(self) -> bool:
        if self.fake.api_key is None:
            return True
        if self.headers.get("Authorization") == f"Bearer {self.fake.api_key}":
            return True
        self._error(401, "Invalid API key", "invalid_request_error", "invalid_api_key")
        return False

    def do_GET(self) -> None:
        self._record()
        fake = self.fake
        if self.path == f"{fake.prefix}/models" and fake.models_endpoint:
            if not self._authorized():
                return
            if fake.models_body is not None:
                self._send(200, fake.models_body)
                return
            owner = "fake" if fake.lm_studio is None else "organization_owner"
            data = [
                {"id": name, "object": "model", "owned_by": owner, **entry}
                for name, entry in fake.models.items()
            ]
            self._json(200, {"object": "list", "data": data})
        elif self.path == "/props" and fake.props is not None:
            self._json(200, fake.props)
        elif self.path in ("/api/v1/models", "/api/v0/models") and (
            listed := fake.lm_studio_models(self.path.split("/")[2])
        ):
            self._json(200, listed)
        else:
            self._json(404, {"detail": "Not Found"})

    def do_POST(self) -> None:
        body = self._record()
        fake = self.fake
        if self.path != f"{fake.prefix}/chat/completions":
            self._json(404, {"detail": "Not Found"})
            return
        if not self._authorized():
            return
        model = str(body.get("model")) if isinstance(body, dict) else ""
        if fake.strict_models and model not in fake.models:
            self._error(404, f"The model `{model}` does not exist.", "NotFoundError", 404)
            return
        streaming = isinstance(body, dict) and body.get("stream") is True
        self.served_chat = True
        refused = fake.refusal(body) if isinstance(body, dict) else None
        if refused is not None:
            self._json(*refused)
            return
        if is_prewarm(body):
            if fake.server_work is not None:
                fake.server_work.observe(body)
            done = {"index": 0, "message": {"role": "assistant", "content": ""}}
            self._json(
                200, {"object": "chat.completion", "choices": [{**done, "finish_reason": "length"}]}
            )
            return
        response = fake.next_response()
        if fake.server_work is not None and not isinstance(response, HttpError):
            fake.server_work.observe(body)
        counted = fake.prompt_tokens_of(body) if fake.tokenizer is not None else None
        delay = getattr(response, "header_delay", 0.0)
        if delay:
            time.sleep(delay)
        if isinstance(response, HttpError):
            payload = response.body
            if payload is None:
                error = {"message": response.message, "type": "error", "code": response.code}
                payload = json.dumps({"error": error}).encode()
            self._send(response.status, payload)
        elif isinstance(response, Json):
            self._json(200, response.body)
        elif isinstance(response, Events):
            self._events(response)
        elif not streaming:
            self._json(200, fake.completion(response, model, counted))
        elif response.empty_stream and response.tool_calls:
            fake.push_back(response)
            self._events(Events([], done=False))
        else:
            if not response.stream_calls and response.tool_calls:
                fake.push_back(response)
            items = list(fake.stream(response, model, counted))
            self._events(Events(items, delay=response.delay))

    def _events(self, events: Events) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            items = list(events.items)
            index = 0
            while index < len(items) or (events.endless and items):
                item = items[min(index, len(items) - 1)]
                self._chunk(item if isinstance(item, bytes) else _sse(item))
                index += 1
                if events.delay:
                    time.sleep(events.delay)
                if events.endless and index >= len(items):
                    time.sleep(0.01)
            if events.drop:
                self.wfile.flush()
                self.connection.shutdown(socket.SHUT_RDWR)
                self.close_connection = True
                return
            if events.stall:
                time.sleep(events.stall)
            if events.done:
                self._chunk(b"data: [DONE]\n\n")
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, OSError):
            self.close_connection = True  # the client went away (Ctrl-C, timeout)

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()


def _sse(data: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(data).encode() + b"\n\n"
