"""OpenAI-compatible chat servers (LM Studio, llama.cpp's llama-server, llama-cpp-python,
vLLM, Ollama's /v1) over `requests`: POST {base}/chat/completions, GET {base}/models.

Everything wire-specific lives here; the loop only sees `messages.ChatChunk`. How this
dialect differs from Ollama's native API: server-sent events instead of NDJSON, tool-call
arguments as JSON *string fragments* per `index`, results answered by `tool_call_id`,
and no way to set the context size per request (it is the server's: LM Studio's load
settings, llama.cpp `-c`, vLLM `--max-model-len`).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar
from urllib.parse import quote

import requests

from cli.backends.failures import (
    BodyDropped,
    BodyTimeout,
    Wording,
    body_pieces,
)
from cli.backends.messages import (
    MAX_JSON_DEPTH,
    MAX_LINE_BYTES,
    SERVER_CONTEXT_FLAGS,
    ChatChunk,
    ChatRequest,
    JSONTooDeep,
    ModelInfo,
    Overflow,
    ToolCall,
    closest_models,
    loads_json,
    split_lines,
)
from cli.backends.openai_dialect import (
    Answer,
    as_dict,
    as_list,
    capabilities_of,
    context_numbers,
    done_reason_of,
    error_parts,
    is_context_error,
    one_line,
    parse_arguments,
    positive,
    sse_field,
    wire_messages,
)
from cli.backends.sending import BUSY_RETRIES, send
from cli.errors import (
    BackendError,
    ContextTooLong,
    FormatRefused,
    ModelNotFound,
    ModelUnsupported,
    ServerTimeout,
    StreamError,
    WrongURL,
)

T = TypeVar("T")

DEFAULT_API_KEY_ENV = "OPENAI_API_KEY"
CONNECT_TIMEOUT = 10.0
# One SSE line holds one token's delta; nothing real comes near MAX_LINE_BYTES.
# Keep-alive comments or garbage forever would never trip the read timeout.
MAX_STREAM_BYTES = 256 * 1024 * 1024
# A non-streamed answer or a model list: read in pieces, never more than this.
MAX_BODY_BYTES = 64 * 1024 * 1024
MODELS_TTL = 5.0  # seconds a /models answer is reused (the model check, then each model)
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
# Assumed when the server does not say what a model can do (most do not): tool calls are
# offered (tool_choice "auto" costs nothing when the model ignores it), thinking is not
# requested — there is no switch for it on this API.
ASSUMED_CAPABILITIES = frozenset({"completion", "tools"})
# Where servers say how long a context they serve, in their /models entries, best first: what
# is loaded now (vLLM's max_model_len is that), then what the model was trained for (LM
# Studio's max_context_length: only a bound on what it serves).
_SERVED_KEYS = ("loaded_context_length", "max_model_len", "context_length", "context_window")
_TRAINED_KEYS = ("max_context_length",)
# What LM Studio's /v1/models says of every model; its own API (/api/v1/models since 0.4.0,
# /api/v0/models since 0.3.6) says the context a loaded model runs with.
_LM_STUDIO_OWNER = "organization_owner"
_MODEL_WORDS = re.compile(r"\bmodel\b|model_not_found", re.IGNORECASE)


class OpenAIClient:
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

    def _is_llama_server(self, model: str) -> bool:
        """llama.cpp's own server: its /models entry for the model says so."""
        try:
            entries = self._model_entries() or []
        except BackendError:
            return False
        entry = next((e for e in entries if e.get("id") == model), None)
        return entry is not None and _llama_server_entry(entry)

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

    def list_models(self) -> list[str]:
        entries = self._model_entries()
        if entries is None:
            raise BackendError(
                f"{self._base}/models does not exist: the server cannot list its models; "
                "give the model's name with -m"
            )
        return sorted(str(e["id"]) for e in entries)

    def only_model(self) -> str | None:
        """The model of a server whose GET /models lists exactly one, else None."""
        entries = self._model_entries()
        return str(entries[0]["id"]) if entries and len(entries) == 1 else None

    def model_info(self, model: str) -> ModelInfo:
        """The model check: GET /models, and only what the server says. A model the server
        does not list is ModelNotFound (naming the ones it has), except on a server that
        lists one model: llama-server and llama-cpp-python serve theirs whatever the request
        names (their id is often the .gguf path), and one that does not answers 404 to the
        chat. A server without /models, or with an empty list, cannot be checked: trusted."""
        entries = self._model_entries()
        entry = next((e for e in entries or () if e["id"] == model), None)
        notes = []
        if entry is None and entries and len(entries) == 1:
            entry = entries[0]
            notes.append(
                f"'{model}' is not in the list of {self._base}, which serves only "
                f"'{entry['id']}': asking for '{model}', the server answers with its own"
            )
        if entry is None and entries:
            ids = sorted(str(e["id"]) for e in entries)
            near = closest_models(model, ids)
            names = ", ".join(near) if near else ", ".join(ids[:10])
            raise ModelNotFound(
                f"model '{model}' is not served by {self._base}: "
                f"{'did you mean' if near else 'it serves'} {names}? "
                "Pick one with -m or ollama.model"
            )
        entry = entry or {"id": model}
        capabilities = capabilities_of(entry.get("capabilities"))
        assumed = capabilities is None
        if capabilities is None:
            capabilities = ASSUMED_CAPABILITIES
            notes.append(
                f"{self._base} does not say what '{model}' can do: assuming it takes tools; "
                "thinking cannot be switched on here (what a reasoning model sends anyway is "
                "shown with --think)"
            )
        meta = as_dict(entry.get("meta"))
        context, served = self._context_length(entry)
        return ModelInfo(
            model,
            capabilities,
            context,
            context_served=served,
            fixed_context=True,
            size=int(meta["size"]) if positive(meta.get("size")) else None,
            parameter_size=_parameter_size(meta.get("n_params")),
            note="; ".join(notes),
            capabilities_assumed=assumed,
        )

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

    # -- HTTP ---------------------------------------------------------------------------

    def _request(
        self, method: str, path: str, body: Mapping[str, Any] | None, model: str = ""
    ) -> requests.Response:
        response = send(
            self._session,
            method,
            self._base,
            path,
            body,
            headers=self._headers,
            stream=True,  # every body is read in bounded pieces
            timeouts=(self._connect_timeout, self._timeout),
            says=self._says,
            busy=(429, 503),  # a rate limit, or the server busy or loading the model
            sleep=self._sleep,
        )
        if response.status_code >= 400:
            raise self._http_error(response, path, model)
        return response

    @property
    def _connect_timeout(self) -> float:
        return min(CONNECT_TIMEOUT, self._timeout)

    @property
    def _says(self) -> Wording:
        return Wording("--host / ollama.host", self._unreachable, self._timeout_message)

    def _http_error(self, response: requests.Response, path: str, model: str) -> BackendError:
        try:
            raw = self._read_body(response, limit=64 * 1024, cut=True)
        except BackendError:
            raw = b""
        finally:
            response.close()
        text = raw.decode("utf-8", "replace")
        message, code = error_parts(text)
        detail = one_line(message or text)[:200] or response.reason or ""
        status = response.status_code
        where = f"the server at {self._base}"
        if status in (401, 403):
            if self._has_key:
                fix = f"check the key in ${self._api_key_env}"
            else:
                fix = f"set ${self._api_key_env} to the server's API key (ollama.api_key_env)"
            return BackendError(f"{where} refused the request (HTTP {status}: {detail}): {fix}")
        if status in (400, 413, 422) and is_context_error(detail, code):
            return context_too_long(self._base, detail, text)
        if status == 404 and model and (_MODEL_WORDS.search(detail) or "model_not_found" in code):
            return ModelNotFound(
                f"model '{model}' not found on {self._base} ({detail}): pick one it serves "
                "with -m (GET /models lists them)"
            )
        if status in (404, 405):
            fix = "check the base URL"
            if not self._base.endswith("/v1"):
                fix += ": it usually ends in /v1, e.g. http://localhost:1234/v1"
            return _NoSuchPath(
                f"{self._no_server}: {self._base}{path} does not exist (HTTP {status}); {fix}"
            )
        low = detail.lower()
        if status == 400 and ("tool choice" in low or "tool_choice" in low or "tools" in low):
            # vLLM without --enable-auto-tool-choice, a llama-server without --jinja.
            return ModelUnsupported(
                f"{where} cannot call tools for '{model}' ({detail}): enable tool calling on "
                "the server (vLLM: --enable-auto-tool-choice --tool-call-parser …; "
                "llama-server: --jinja)"
            )
        if status in (429, 503):
            return BackendError(
                f"{where} is busy (HTTP {status}: {detail}); tried {BUSY_RETRIES + 1} times, "
                "try again in a moment"
            )
        return BackendError(f"{where} answered HTTP {status}: {detail}")

    def _model_entries(self) -> list[dict[str, Any]] | None:
        """GET /models: its entries that have an id, or None when a …/v1 server has no such
        endpoint (the model then cannot be checked). Reused for MODELS_TTL seconds, since
        `agent models` asks for each model in turn."""
        now = self._clock()
        if self._models_cache is not None and now - self._models_cache[0] < MODELS_TTL:
            return self._models_cache[1]
        try:
            response = self._request("GET", "/models", None)
        except _NoSuchPath:
            if not self._base.endswith("/v1"):
                raise  # more likely a base URL without its /v1 than a server without /models
            if not self._serves_chat():
                raise WrongURL(
                    f"{self._no_server}: GET /models and POST /chat/completions are both "
                    "HTTP 404; check the base URL"
                ) from None
            entries = None
        else:
            with response:
                data = self._read_json(response, "/models")
            listed = data.get("data") if isinstance(data, dict) else None
            if not isinstance(listed, list):
                raise BackendError(
                    f"unexpected answer from {self._base}/models: no model list; "
                    "is it an OpenAI-compatible server?"
                )
            entries = [e for e in listed if isinstance(e, dict) and isinstance(e.get("id"), str)]
        self._models_cache = (now, entries)
        return entries

    @property
    def _no_server(self) -> str:
        return f"no OpenAI-compatible server answers at {self._base}"

    def _serves_chat(self) -> bool:
        """Whether {base}/chat/completions exists, for a server whose /models is a 404: an
        empty request gets the server's own error (400, 422, 401, or a 404 that names the
        model), a path it does not have gets a bare 404 or 405. Nothing is generated. A
        probe that cannot tell says yes: the chat request itself will say what is wrong."""
        try:
            response = self._session.post(
                self._base + "/chat/completions",
                json={},
                headers=self._headers,
                stream=True,
                timeout=(self._connect_timeout, self._timeout),
            )
        except requests.exceptions.RequestException:
            return True
        with response:
            if response.status_code not in (404, 405):
                return True
            try:
                raw = self._read_body(response, limit=64 * 1024, cut=True)
            except BackendError:
                return True
        message, code = error_parts(raw.decode("utf-8", "replace"))
        return bool(_MODEL_WORDS.search(message) or "model_not_found" in code)

    def _context_length(self, entry: Mapping[str, Any]) -> tuple[int | None, bool]:
        """The context the server gives this model, where it says, and whether that is what
        it serves (True) or only what the model was trained for: its /models entry (vLLM's
        max_model_len), else llama-server's /props (the n_ctx it runs with, probed only when
        the entry looks like llama.cpp's), else LM Studio's own API (the loaded context,
        probed only when the entry looks like LM Studio's), else the trained length
        (llama.cpp's meta.n_ctx_train, LM Studio's max_context_length). llama-cpp-python says
        nothing: (None, False) until a context error says it."""
        for key in _SERVED_KEYS:
            if positive(entry.get(key)):
                return int(entry[key]), True
        model = str(entry.get("id"))
        trained: Any = next((entry[k] for k in _TRAINED_KEYS if positive(entry.get(k))), None)
        if _llama_server_entry(entry):
            served = self._llama_server_n_ctx(model)
            trained = as_dict(entry.get("meta")).get("n_ctx_train")
        elif entry.get("owned_by") == _LM_STUDIO_OWNER:
            served, trained = self._lm_studio_contexts().get(model, (None, trained))
        else:
            served = None
        if served:
            return served, True
        return (int(trained), False) if positive(trained) else (None, False)

    def _llama_server_n_ctx(self, model: str) -> int | None:
        """llama-server's /props: the context each slot runs with. In router mode (several
        models) it wants the model named."""
        data = self._root_json("/props")
        if data is None:
            data = self._root_json(f"/props?model={quote(model, safe='')}")
        settings = as_dict(data).get("default_generation_settings")
        n_ctx = settings.get("n_ctx") if isinstance(settings, dict) else None
        n_ctx = n_ctx if positive(n_ctx) else as_dict(data).get("n_ctx")
        return int(n_ctx) if positive(n_ctx) else None

    def _lm_studio_contexts(self) -> dict[str, tuple[int | None, int | None]]:
        """LM Studio's own model list, by id: the context each loaded model runs with (None
        when it is not loaded: it will be loaded with its default) and its most. Reused for
        MODELS_TTL seconds, as the /models answer is."""
        now = self._clock()
        if self._lm_studio_cache is not None and now - self._lm_studio_cache[0] < MODELS_TTL:
            return self._lm_studio_cache[1]
        listed = as_dict(self._root_json("/api/v1/models")).get("models")
        if isinstance(listed, list):  # LM Studio 0.4.0 and later
            contexts = dict(_lm_studio_v1(as_dict(e)) for e in listed)
        else:  # LM Studio 0.3.6 to 0.3.x
            data = as_dict(self._root_json("/api/v0/models")).get("data")
            contexts = dict(_lm_studio_v0(as_dict(e)) for e in as_list(data))
        self._lm_studio_cache = (now, contexts)
        return contexts

    def _root_json(self, path: str) -> Any:
        """GET a path of the server's own API, at the root of the base URL (not under /v1):
        its JSON, or None when there is no such answer (404, not JSON, unreachable)."""
        root = self._base[: -len("/v1")] if self._base.endswith("/v1") else self._base
        try:
            response = self._session.get(
                root + path, headers=self._headers, stream=True, timeout=(CONNECT_TIMEOUT, 10)
            )
        except requests.exceptions.RequestException:
            return None
        with response:
            if response.status_code != 200:
                return None
            try:
                return loads_json(self._read_body(response, limit=4 * 1024 * 1024))
            except (BackendError, ValueError):
                return None

    def _read_json(self, response: requests.Response, path: str) -> Any:
        raw = self._read_body(response, limit=MAX_BODY_BYTES)
        try:
            return loads_json(raw)
        except JSONTooDeep:
            raise BackendError(
                f"{self._base}{path} answered with JSON nested deeper than {MAX_JSON_DEPTH} "
                "levels; is it an OpenAI-compatible server?"
            ) from None
        except ValueError:
            raise BackendError(
                f"{self._base}{path} answered with something that is not JSON; "
                "is it an OpenAI-compatible server?"
            ) from None

    def _read_body(self, response: requests.Response, *, limit: int, cut: bool = False) -> bytes:
        parts: list[bytes] = []
        size = 0
        try:
            for data in self._pieces(response):
                parts.append(data)
                size += len(data)
                if size > limit:
                    if cut:
                        break
                    raise BackendError(f"{self._base} sent an answer of more than {limit} bytes")
        except BodyDropped:
            raise BackendError(
                f"the connection to {self._base} dropped while the answer was read; try again"
            ) from None
        return b"".join(parts)

    def _pieces(self, response: requests.Response) -> Iterator[bytes]:
        """The body as it arrives; BodyDropped goes on to the caller, which words it."""
        try:
            yield from body_pieces(response)
        except BodyTimeout as exc:
            raise ServerTimeout(self._timeout_message()) from exc.__cause__

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

    def _unreachable(self, why: str) -> str:
        return (
            f"cannot reach the server at {self._base} ({why}): start it (LM Studio, "
            "llama-server, vllm serve…) or fix --host / ollama.host"
        )

    def _timeout_message(self) -> str:
        return (
            f"the server at {self._base} sent nothing for {self._timeout:g} s "
            "(ollama.timeout); the model may still be loading: try again or raise ollama.timeout"
        )


def _llama_server_entry(entry: Mapping[str, Any]) -> bool:
    """A /models entry as llama.cpp's own server writes it (its `meta`, or owned_by)."""
    return isinstance(entry.get("meta"), dict) or entry.get("owned_by") == "llamacpp"


def _response_format(style: str, schema: Mapping[str, Any]) -> dict[str, Any]:
    if style == "json_object":
        return {"type": "json_object", "schema": dict(schema)}
    return {"type": "json_schema", "json_schema": {"name": "reply", "schema": dict(schema)}}


def _refuses_format(message: str) -> bool:
    """An HTTP error about `response_format` (not about the prompt or the tools)."""
    low = message.lower()
    return any(word in low for word in ("response_format", "json_schema", "json_object", "schema"))


class _NoSuchPath(BackendError):
    """HTTP 404/405 for the path itself (not for a model): the server has no such endpoint."""


def context_too_long(base: str, detail: str, body: str = "") -> ContextTooLong:
    """The server refused a prompt longer than the context it runs with, and said how long
    that is where it did: the loop learns it, trims history harder and sends once more."""
    context, prompt = context_numbers(body or detail)
    return ContextTooLong(
        f"the prompt is longer than the context {base} serves ({detail}): send less, or load "
        f"the model with a larger context ({SERVER_CONTEXT_FLAGS})",
        context=context,
        prompt_tokens=prompt,
    )


# -- small helpers ----------------------------------------------------------------------------


def _lm_studio_v1(entry: Mapping[str, Any]) -> tuple[str, tuple[int | None, int | None]]:
    """One model of LM Studio's /api/v1/models: its key, the smallest context its loaded
    instances run with (None: not loaded) and its most."""
    configs = [as_dict(as_dict(i).get("config")) for i in as_list(entry.get("loaded_instances"))]
    sizes = [int(c["context_length"]) for c in configs if positive(c.get("context_length"))]
    most = entry.get("max_context_length")
    return str(entry.get("key")), (min(sizes) if sizes else None, most if positive(most) else None)


def _lm_studio_v0(entry: Mapping[str, Any]) -> tuple[str, tuple[int | None, int | None]]:
    """One model of LM Studio's /api/v0/models: its id, the context it is loaded with (None:
    not loaded) and its most."""
    loaded, most = entry.get("loaded_context_length"), entry.get("max_context_length")
    served = loaded if positive(loaded) and entry.get("state") == "loaded" else None
    return str(entry.get("id")), (served, most if positive(most) else None)


def _is_json(response: requests.Response) -> bool:
    return response.headers.get("Content-Type", "").startswith("application/json")


def _parameter_size(value: Any) -> str | None:
    """llama.cpp's meta.n_params as Ollama writes a parameter size: "8.2B", "135M"."""
    if not positive(value):
        return None
    return f"{value / 1e9:.1f}B" if value >= 1e9 else f"{value / 1e6:.0f}M"
