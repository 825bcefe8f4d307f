"""OpenAI-compatible chat servers (LM Studio, llama.cpp's llama-server, llama-cpp-python,
vLLM, Ollama's /v1) over `requests`: POST {base}/chat/completions, GET {base}/models.

The chat lives here: the request's body, the answer's JSON schema in the style the server
takes, the stream read into one answer, and an id for every tool call. `openai_http.py` sends
and words the failures, `openai_models.py` holds the model catalogue, `openai_dialect.py` the
wire shapes; the loop only sees `messages.ChatChunk`. How this dialect differs from Ollama's
native API: server-sent events instead of NDJSON, tool-call arguments as JSON *string
fragments* per `index`, results answered by `tool_call_id`, and no way to set the context
size per request (it is the server's: LM Studio's load settings, llama.cpp `-c`, vLLM
`--max-model-len`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

import requests

from cli.backends.failures import BodyDropped
from cli.backends.messages import (
    MAX_JSON_DEPTH,
    MAX_LINE_BYTES,
    ChatChunk,
    ChatRequest,
    JSONTooDeep,
    Overflow,
    ToolCall,
    loads_json,
    split_lines,
)
from cli.backends.openai_dialect import (
    Answer,
    done_reason_of,
    error_parts,
    is_context_error,
    one_line,
    parse_arguments,
    sse_field,
    wire_messages,
)
from cli.backends.openai_http import context_too_long
from cli.backends.openai_models import OpenAIModels
from cli.errors import (
    BackendError,
    ContextTooLong,
    FormatRefused,
    StreamError,
)

T = TypeVar("T")

DEFAULT_API_KEY_ENV = "OPENAI_API_KEY"
# One SSE line holds one token's delta; nothing real comes near MAX_LINE_BYTES.
# Keep-alive comments or garbage forever would never trip the read timeout.
MAX_STREAM_BYTES = 256 * 1024 * 1024

# What `think` becomes on this API: only a level has a field servers read (`reasoning_effort`,
# taken by vLLM, llama.cpp, Ollama's /v1 and OpenAI for gpt-oss-style models). true/false has
# no common field: reasoning models reason anyway, and what they send is shown with --think.
REASONING_EFFORT = {"low": "low", "medium": "medium", "high": "high", "max": "high"}
# The loop's options (Ollama's names) that have a meaning here. num_ctx has none (the context
# size is the server's), nor keep_alive; top_k, min_p and repeat_penalty are not OpenAI's but
# every local server named above takes them.
_OPTIONS = (
    "temperature",
    "top_p",
    "seed",
    "stop",
    "presence_penalty",
    "frequency_penalty",
    "top_k",
    "min_p",
    "repeat_penalty",
)


class OpenAIClient(OpenAIModels):
    """A synchronous client for one OpenAI-compatible server. Implements
    `messages.ChatBackend`; `base_url` is what the server's docs call the base URL, usually
    ending in /v1."""

    def __init__(
        self,
        base_url: str,
        *,
        session: requests.Session | None = None,
        timeout: float = 300.0,
        api_key: str | None = None,
        api_key_env: str = DEFAULT_API_KEY_ENV,
        stream: bool = True,
        max_answer_chars: int = 200_000,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        max_stream_bytes: int = MAX_STREAM_BYTES,
    ) -> None:
        self._base = base_url.rstrip("/")
        self._session = session or requests.Session()
        self._timeout = timeout
        self._api_key_env = api_key_env
        self._has_key = bool(api_key)
        self._stream = stream
        self._max_answer_chars = max_answer_chars
        self._sleep = sleep
        self._clock = clock
        self.max_stream_bytes = max_stream_bytes
        self._next_call_id = 0
        self._models_cache: tuple[float, list[dict[str, Any]] | None] | None = None
        self._lm_studio_cache: tuple[float, dict[str, tuple[int | None, int | None]]] | None = None
        # identity: the body is read with read1(), which does not undo a gzip'd answer.
        self._headers = {"Accept-Encoding": "identity"}
        # How this server takes an answer's JSON schema, the likeliest first: OpenAI's
        # `json_schema` (llama-server, vLLM, LM Studio, Ollama's /v1), then `json_object` with
        # a `schema` (llama-cpp-python's server, which refuses the other with HTTP 422).
        self._format_styles = ["json_schema", "json_object"]
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"

    @property
    def host(self) -> str:
        return self._base

    # -- public API ---------------------------------------------------------------------

    def chat(self, request: ChatRequest) -> Iterator[ChatChunk]:
        """One model call; yields normalised chunks, the `done` one last (with the calls)."""
        messages, free = wire_messages(request.messages)
        self._next_call_id = max(self._next_call_id, free)
        body = self._body(request, messages)
        started = self._clock()
        if not self._stream:
            answer = self._formatted(request, lambda b: self._complete(b, request.model), body)
            answer.started = started
            answer.ended = self._clock()
            yield from answer.chunks(self._finish(answer))
            return
        turn = Answer(started=started)
        streamed = {**body, "stream": True, "stream_options": {"include_usage": True}}

        def post(sent: dict[str, Any]) -> requests.Response:
            nonlocal body
            body = {k: v for k, v in sent.items() if k not in ("stream", "stream_options")}
            return self._request("POST", "/chat/completions", sent, model=request.model)

        response = self._formatted(request, post, streamed)
        with response:
            if _is_json(response):  # a server that ignores `stream` answers in one piece
                turn = self._parse_completion(self._read_json(response, "/chat/completions"))
                turn.started, turn.ended = started, self._clock()
                yield from turn.chunks(self._finish(turn))
                return
            yield from self._read_stream(response, turn)
        turn.ended = self._clock()
        if turn.needs_redo:
            self._session.close()  # its connection may be dead (the server's stream failed)
            # The server could not stream this answer's tool calls: llama-cpp-python ends the
            # stream without a byte when the model picks a tool ("Automatic streaming tool
            # choice is not supported"), others say finish_reason "tool_calls" and send no
            # calls. Ask again without streaming, once, and take the calls from that answer.
            redo = self._complete(body, request.model)
            redo.ended = self._clock()
            yield from redo.chunks(self._finish(redo, streamed=turn), text=not turn.shown)
            return
        yield ChatChunk(
            tool_calls=self._finish(turn),
            done=True,
            done_reason=done_reason_of(turn.finish_reason),
            stats=turn.stats(),
        )

    def prewarm(self, request: ChatRequest) -> None:
        """The request's prompt evaluated and cached (implements `messages.Prewarms`):
        llama-server evaluates it and generates nothing with `n_predict: 0` and
        `cache_prompt`; any other server (llama-cpp-python, where 0 means no limit, LM
        Studio, vLLM with prefix caching) is asked for one token."""
        messages, _ = wire_messages(request.messages)
        body = {**self._body(request, messages), "stream": False}
        if self._is_llama_server(request.model):
            body.pop("max_tokens", None)
            body.update(n_predict=0, cache_prompt=True)
        else:
            body["max_tokens"] = 1
        response = self._request("POST", "/chat/completions", body, model=request.model)
        response.close()

    def constrains_replies(self) -> bool:
        """Whether to send `response_format` with a JSON schema (implements
        `messages.ConstrainsReplies`): yes until the server refused both ways of writing it
        (the OpenAI way, then llama-cpp-python's `json_object` with a `schema`)."""
        return bool(self._format_styles)

    def _formatted(
        self, request: ChatRequest, send: Callable[[dict[str, Any]], T], body: dict[str, Any]
    ) -> T:
        """`send(body)`, with the answer's JSON schema (request.format) as `response_format`
        in the first style this server takes: a refusal of one style tries the next, and a
        refusal of the last is FormatRefused (the loop asks again in free text)."""
        if request.format is None or not self._format_styles:
            return send(body)
        while True:
            style = self._format_styles[0]
            try:
                return send({**body, "response_format": _response_format(style, request.format)})
            except ContextTooLong:
                raise
            except BackendError as exc:
                if not _refuses_format(exc.message):
                    raise
                self._format_styles.pop(0)
                if not self._format_styles:
                    raise FormatRefused(
                        f"the server at {self._base} takes no JSON schema for the answer "
                        f"({exc.message})"
                    ) from None

    # -- the request ------------------------------------------------------------------

    def _body(self, request: ChatRequest, messages: list[dict[str, Any]]) -> dict[str, Any]:
        body: dict[str, Any] = {"model": request.model, "messages": messages}
        if request.tools:
            # llama-cpp-python's server never calls a tool without it; the others default to it.
            body["tools"] = request.tools
            body["tool_choice"] = request.tool_choice or "auto"
        options = request.options
        for name in _OPTIONS:
            if options.get(name) is not None:
                body[name] = options[name]
        num_predict = options.get("num_predict")
        if isinstance(num_predict, int) and not isinstance(num_predict, bool) and num_predict > 0:
            body["max_tokens"] = num_predict  # Ollama's -1 (no limit) and -2 (fill) have none
        if isinstance(request.think, str) and request.think in REASONING_EFFORT:
            body["reasoning_effort"] = REASONING_EFFORT[request.think]
        return body

    def _complete(self, body: Mapping[str, Any], model: str) -> Answer:
        """The same request without streaming: the whole answer in one JSON body."""
        response = self._request("POST", "/chat/completions", {**body, "stream": False}, model)
        with response:
            return self._parse_completion(self._read_json(response, "/chat/completions"))

    def _parse_completion(self, data: Any) -> Answer:
        answer = Answer.from_completion(data)
        answer.check_size(self._max_answer_chars)
        return answer

    def _finish(self, answer: Answer, streamed: Answer | None = None) -> tuple[ToolCall, ...]:
        """The accumulated calls, parsed, with an id each: the server's, or a made-up
        `call_<n>` that the loop stores in history for both the call and its result."""
        if streamed is not None:
            answer.merge_stats(streamed)
        calls = []
        for partial in answer.calls:
            call_id = partial.id
            if not call_id:
                call_id = f"call_{self._next_call_id}"
                self._next_call_id += 1
            calls.append(parse_arguments(partial.name, "".join(partial.arguments), call_id))
        return tuple(calls)

    # -- streaming ----------------------------------------------------------------------

    def _read_stream(self, response: requests.Response, turn: Answer) -> Iterator[ChatChunk]:
        event = b""  # the SSE event type: only `error` means anything here
        try:
            for line in self._lines(response):
                name, value = sse_field(line)
                if not name:
                    event = b""  # a blank line ends an event
                elif name == b"event":
                    event = value.strip()
                if name != b"data" or not value.strip():
                    continue
                if value.strip() == b"[DONE]":
                    turn.done = True
                    return
                data = self._event(value)
                if event == b"error":
                    data = {"error": data}
                chunk = turn.add_event(self._error_check(data), self._clock)
                turn.check_size(self._max_answer_chars)
                if chunk is not None:
                    yield chunk
        except BodyDropped:
            if not turn.events:
                return  # nothing arrived: `needs_redo` asks again without streaming
            raise StreamError(
                f"the connection to {self._base} dropped mid-stream; try again"
            ) from None
        if turn.events and turn.finish_reason is None:
            raise StreamError(
                f"the stream from {self._base} ended before the answer was complete; try again"
            )

    def _event(self, payload: bytes) -> dict[str, Any]:
        """One `data:` payload: every server here sends one JSON object per line."""
        try:
            data = loads_json(payload)
        except JSONTooDeep:
            raise StreamError(
                f"the server sent an event nested deeper than {MAX_JSON_DEPTH} levels; "
                f"is {self._base} an OpenAI-compatible server?"
            ) from None
        except ValueError:
            preview = payload[:80].decode("utf-8", "replace")
            raise StreamError(
                f"the server sent an event that is not JSON: {preview!r}; "
                f"is {self._base} an OpenAI-compatible server?"
            ) from None
        if not isinstance(data, dict):
            raise StreamError(f"the server sent an event that is not a JSON object: {data!r:.80}")
        return data

    def _error_check(self, data: dict[str, Any]) -> dict[str, Any]:
        if data.get("error") or data.get("object") == "error":
            # After streaming started the status stays 200 and the error comes as an event.
            message, code = error_parts(json.dumps(data))
            detail = one_line(message or json.dumps(data))[:200]
            if is_context_error(detail, code):
                raise context_too_long(self._base, detail, json.dumps(data))
            raise StreamError(f"the server reported an error mid-stream: {detail}")
        return data

    def _lines(self, response: requests.Response) -> Iterator[bytes]:
        """SSE lines as they arrive, `\\r` dropped."""
        try:
            for line in split_lines(self._pieces(response), self.max_stream_bytes):
                yield line.rstrip(b"\r")
        except Overflow as exc:
            if exc.what == "stream":
                raise StreamError(
                    f"the stream from {self._base} passed {self.max_stream_bytes} bytes "
                    "without ending; stopped"
                ) from None
            raise StreamError(
                f"the server sent a line longer than {MAX_LINE_BYTES} bytes; "
                f"is {self._base} an OpenAI-compatible server?"
            ) from None


def _response_format(style: str, schema: Mapping[str, Any]) -> dict[str, Any]:
    if style == "json_object":
        return {"type": "json_object", "schema": dict(schema)}
    return {"type": "json_schema", "json_schema": {"name": "reply", "schema": dict(schema)}}


def _refuses_format(message: str) -> bool:
    """An HTTP error about `response_format` (not about the prompt or the tools)."""
    low = message.lower()
    return any(word in low for word in ("response_format", "json_schema", "json_object", "schema"))


def _is_json(response: requests.Response) -> bool:
    return response.headers.get("Content-Type", "").startswith("application/json")
