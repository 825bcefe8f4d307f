"""Ollama's native REST API (/api/chat, /api/tags, /api/show, /api/ps, /api/version) over
`requests`.

The client lives here: the requests, their errors worded, the stream read; the body and the
chunks' shapes are `ollama_dialect.py`'s. The loop only sees `messages.ChatChunk`.
docs/context-and-servers.md says which servers and behaviours are covered.
"""

from __future__ import annotations

import contextlib
import dataclasses
import ipaddress
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any
from urllib.parse import urlsplit

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
    ChatChunk,
    ChatRequest,
    JSONTooDeep,
    ModelInfo,
    Overflow,
    closest_models,
    loads_json,
    split_lines,
)
from cli.backends.ollama_dialect import (
    _chat_body,
    _context_length,
    _error_text,
    _int,
    _refuses_format,
    _str,
    _version_at_least,
    one_line,
    parse_chunk,
)
from cli.backends.sending import BUSY_RETRIES, send
from cli.errors import (
    AgentError,
    BackendError,
    ContextTooLong,
    FormatRefused,
    ModelNotFound,
    ModelUnsupported,
    ServerTimeout,
    StreamError,
    WrongURL,
)

DEFAULT_HOST = "http://localhost:11434"
DEFAULT_PORT = 11434
CONNECT_TIMEOUT = 10.0
# One NDJSON line holds one token or one whole tool call; a longer line than MAX_LINE_BYTES
# is garbage from something that is not Ollama, and would otherwise grow without bound.
# Garbage or keep-alive blank lines forever would never trip the read timeout; no real
# answer comes near this.
MAX_STREAM_BYTES = 256 * 1024 * 1024
# What servers say when a prompt is longer than the context and `truncate: false` forbids
# cutting it: "the prompt is longer than the context length currently available to the
# model; …" (llm/llama_server.go, v0.30.9+), "the input length exceeds the context length"
# (the runners, v0.12.6+), and llama.cpp's own "the request exceeds the available context
# size" (exceed_context_size_error), which the llama-server runner passes on.
_CONTEXT_ERROR = re.compile(
    r"longer than the context length|exceeds the context length"
    r"|exceeds? the available context|exceed_context_size",
    re.IGNORECASE,
)
# Models whose `think` takes only a level and ignores booleans (server/routes.go
# shouldUseHarmony: the gpt-oss family).
_LEVEL_THINKERS = frozenset({"gptoss", "gpt-oss"})
# Endpoints every Ollama has had since its first releases: a 404 there means that whatever
# answers at the URL is not Ollama (a wrong path in OLLAMA_HOST, another program on the port).
_ALWAYS_SERVED = ("/api/tags", "/api/version")


def normalize_host(raw: str) -> str:
    """Turn any form Ollama's own OLLAMA_HOST accepts into a base URL.

    `1.2.3.4` → http://1.2.3.4:11434, `host:1234`, `:1234` (localhost), `http://h` → port 80,
    `https://h` → 443, a path is kept; surrounding spaces and quotes are dropped; `0.0.0.0`
    is a bind address, so we connect to 127.0.0.1 instead (as Ollama's CLI does).
    """
    text = raw.strip().strip("\"'").strip()
    if not text:
        return DEFAULT_HOST.replace("localhost", "127.0.0.1")
    scheme, sep, rest = text.partition("://")
    if not sep:
        scheme, rest, default_port = "http", text, DEFAULT_PORT
    elif scheme in ("http", "https"):
        default_port = 80 if scheme == "http" else 443
    else:
        raise ValueError(f"unsupported scheme {scheme!r} in host {raw!r}; use http:// or https://")
    hostport, _, path = rest.partition("/")
    host, port = _split_host_port(hostport, default_port, raw)
    if host in ("", "0.0.0.0"):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    if ":" in host:
        host = f"[{host}]"
    url = f"{scheme}://{host}:{port}"
    return f"{url}/{path.rstrip('/')}" if path.strip("/") else url


def _split_host_port(hostport: str, default_port: int, raw: str) -> tuple[str, int]:
    if hostport.startswith("["):  # [::1]:port or [::1]
        inner, _, tail = hostport[1:].partition("]")
        port_text = tail[1:] if tail.startswith(":") else ""
        return inner, _parse_port(port_text, default_port, raw)
    if hostport.count(":") == 1:
        host, port_text = hostport.split(":")
        return host, _parse_port(port_text, default_port, raw)
    try:  # a bare IPv6 address
        return str(ipaddress.IPv6Address(hostport)), default_port
    except ValueError:
        return hostport, default_port


def _parse_port(text: str, default_port: int, raw: str) -> int:
    if not text:
        return default_port
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise ValueError(f"invalid port {text!r} in host {raw!r}")
    return int(text)


class OllamaClient:
    """A synchronous client for one Ollama server. Implements `messages.ChatBackend`."""

    def __init__(
        self,
        host: str,
        *,
        session: requests.Session | None = None,
        timeout: float = 300.0,
        api_key: str | None = None,
        sleep: Callable[[float], None] = time.sleep,
        max_stream_bytes: int = MAX_STREAM_BYTES,
    ) -> None:
        self._base = host.rstrip("/")
        self.max_stream_bytes = max_stream_bytes
        self._session = session or requests.Session()
        self._timeout = timeout
        self._sleep = sleep
        self._headers = {"Accept": "application/json"}
        # /api/show answers, kept for the run (`agent models` asks for many at once, from
        # threads), and /api/tags entries by name (sizes, which /api/show does not give).
        self._shown: dict[str, ModelInfo] = {}
        self._tags: dict[str, Mapping[str, Any]] = {}
        self._lock = threading.Lock()
        self._constrains: bool | None = None  # takes `format` as a JSON schema: not asked yet
        if api_key:  # as ollama-python does, for servers behind an auth proxy
            self._headers["Authorization"] = f"Bearer {api_key}"

    @property
    def host(self) -> str:
        return self._base

    # -- public API ---------------------------------------------------------------------

    def prewarm(self, request: ChatRequest) -> None:
        """The request's prompt evaluated and cached, with the session's keep_alive
        (implements `messages.Prewarms`). Ollama cannot evaluate without generating: its
        runners stop at num_predict only when it is above 0 (0 is no limit), so one token is
        the least it can be asked for."""
        body = _chat_body(request, stream=False)
        body["options"]["num_predict"] = 1
        response = self._request("POST", "/api/chat", body, stream=False, model=request.model)
        response.close()

    def chat(self, request: ChatRequest) -> Iterator[ChatChunk]:
        """Stream one model call; yields normalised chunks, the `done` one last."""
        body = _chat_body(request, stream=True)
        if request.format is not None and self.constrains_replies():
            body["format"] = dict(request.format)  # a JSON schema (Ollama 0.5+)
        try:
            response = self._request("POST", "/api/chat", body, stream=True, model=request.model)
        except BackendError as exc:
            if "format" in body and _refuses_format(exc.message):
                self._constrains = False
                raise FormatRefused(
                    f"Ollama at {self._base} refused the answer's JSON schema ({exc.message})"
                ) from None
            raise
        with response:
            yield from self._read_stream(response, request.model)
            keep_connection(response)

    def list_models(self) -> list[str]:
        data = self._json("GET", "/api/tags")
        models = data.get("models") if isinstance(data, dict) else None
        if not isinstance(models, list):
            raise BackendError(f"unexpected answer from {self._base}/api/tags: no model list")
        entries: dict[str, Mapping[str, Any]] = {
            str(m.get("name") or m.get("model")): m for m in models if isinstance(m, dict)
        }
        with self._lock:
            self._tags = entries
        return sorted(entries)

    def model_info(self, model: str) -> ModelInfo:
        """/api/show, once per model for the life of the client (safe from threads)."""
        with self._lock:
            info = self._shown.get(model)
        if info is None:
            info = self._show(model)
            with self._lock:
                self._shown[model] = info
        size = _int(self._tags.get(model, {}).get("size")) or None
        return dataclasses.replace(info, size=size) if info.size is None and size else info

    def loaded_models(self) -> dict[str, int | None]:
        """/api/ps: the models loaded now, by name, and the context each runs with (None
        from servers that do not say). Implements `messages.ReportsLoadedModels`."""
        data = self._json("GET", "/api/ps")
        models = data.get("models") if isinstance(data, dict) else None
        loaded: dict[str, int | None] = {}
        for entry in models if isinstance(models, list) else ():
            if not isinstance(entry, dict):
                continue
            for key in ("name", "model"):
                if isinstance(entry.get(key), str):
                    loaded[entry[key]] = _int(entry.get("context_length")) or None
        return loaded

    def _show(self, model: str) -> ModelInfo:
        data = self._json("POST", "/api/show", {"model": model}, model=model)
        if not isinstance(data, dict):
            raise BackendError(f"unexpected answer from {self._base}/api/show for {model!r}")
        caps = data.get("capabilities")
        if isinstance(caps, list):
            capabilities = frozenset(str(c) for c in caps)
        else:
            # Servers older than v0.6.4 do not report capabilities; assume tools work and let
            # a 400 "does not support tools" say otherwise.
            capabilities = frozenset({"completion", "tools"})
        details = data.get("details")
        if not isinstance(details, dict):
            details = {}
        model_info = data.get("model_info")
        arch = model_info.get("general.architecture") if isinstance(model_info, dict) else None
        return ModelInfo(
            model,
            capabilities,
            _context_length(model_info),
            parameter_size=_str(details.get("parameter_size")) or None,
            quantization=_str(details.get("quantization_level")) or None,
            thinks_in_levels=bool({_str(details.get("family")), _str(arch)} & _LEVEL_THINKERS),
        )

    def constrains_replies(self) -> bool:
        """Whether this server takes a JSON schema as `format` (Ollama 0.5.0 and later;
        implements `messages.ConstrainsReplies`). Asked once: GET /api/version."""
        if self._constrains is None:
            try:
                self._constrains = _version_at_least(self.version(), (0, 5, 0))
            except AgentError:
                self._constrains = False
        return self._constrains

    def version(self) -> str:
        data = self._json("GET", "/api/version")
        return str(data.get("version", "unknown")) if isinstance(data, dict) else "unknown"

    # -- HTTP ---------------------------------------------------------------------------

    def _json(
        self, method: str, path: str, body: Mapping[str, Any] | None = None, model: str = ""
    ) -> Any:
        response = self._request(method, path, body, stream=False, model=model)
        try:
            return loads_json(response.content)
        except JSONTooDeep:
            raise BackendError(
                f"{self._base}{path} answered with JSON nested deeper than {MAX_JSON_DEPTH} "
                "levels; is OLLAMA_HOST pointing at an Ollama server?"
            ) from None
        except ValueError as exc:
            raise BackendError(
                f"{self._base}{path} answered with something that is not JSON; "
                "is OLLAMA_HOST pointing at an Ollama server?"
            ) from exc

    def _request(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | None,
        *,
        stream: bool,
        model: str = "",
    ) -> requests.Response:
        response = send(
            self._session,
            method,
            self._base,
            path,
            body,
            headers=self._headers,
            stream=stream,
            timeouts=(self._connect_timeout, self._timeout),
            says=self._says,
            busy=(503,),  # "server busy": Ollama's queue is full
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
        return Wording("OLLAMA_HOST / --host", self._unreachable, self._timeout_message)

    def _http_error(self, response: requests.Response, path: str, model: str) -> BackendError:
        try:
            text = response.text
        finally:
            response.close()
        detail = one_line(_error_text(text) or text)[:200] or response.reason or ""
        status = response.status_code
        if status == 404 and path in _ALWAYS_SERVED:
            return self._not_ollama(path)
        # Match on status first: older servers word the 404 differently ("try pulling it first").
        if status == 404 and model:
            try:  # also tells a missing model from a URL where no Ollama answers at all
                names = self.list_models()
            except WrongURL as exc:
                return exc
            except AgentError:
                names = []
            near = closest_models(model, names)
            hint = f"did you mean {', '.join(near)}? " if near else ""
            return ModelNotFound(
                f"model '{model}' not found on {self._base}: {hint}run `ollama pull {model}`, "
                "or see `agent models` for the ones it has"
            )
        if status in (400, 500) and _CONTEXT_ERROR.search(detail):
            return self._too_long(model, detail)
        low = detail.lower()
        if status == 400 and "does not support tools" in low:
            return ModelUnsupported(
                f"model '{model}' does not support tools: pick a model with tool support "
                "(e.g. qwen3, llama3.1) with -m"
            )
        if status == 400 and "does not support thinking" in low:
            return ModelUnsupported(
                f"model '{model}' does not support thinking: run without --think"
            )
        if status == 400 and "does not support chat" in low:
            return ModelUnsupported(
                f"model '{model}' cannot chat (an embedding model?): pick another with -m"
            )
        if status == 503:
            return BackendError(
                f"Ollama at {self._base} is busy ({detail}); tried {BUSY_RETRIES + 1} times, "
                "try again in a moment"
            )
        return BackendError(f"Ollama at {self._base} answered HTTP {status}: {detail}")

    def _not_ollama(self, path: str) -> WrongURL:
        if urlsplit(self._base).path:
            why = "Ollama's own URL has no path unless a proxy adds one: http://HOST:11434"
        else:
            why = "is another program on that port?"
        return WrongURL(
            f"no Ollama answers at {self._base} (GET {path}: HTTP 404): check OLLAMA_HOST / "
            f"--host; {why}"
        )

    def _too_long(self, model: str, detail: str) -> ContextTooLong:
        return ContextTooLong(
            f"Ollama at {self._base} refused the prompt as longer than the context of "
            f"'{model}' ({detail})"
        )

    # -- streaming ----------------------------------------------------------------------

    def _read_stream(self, response: requests.Response, model: str) -> Iterator[ChatChunk]:
        saw_done = False
        for line in self._lines(response):
            if not line.strip():
                continue
            try:
                data = loads_json(line)
            except JSONTooDeep:
                raise StreamError(
                    f"Ollama sent a line nested deeper than {MAX_JSON_DEPTH} levels; "
                    "is the server an Ollama server?"
                ) from None
            except ValueError:
                preview = line[:80].decode("utf-8", "replace")
                raise StreamError(
                    f"Ollama sent a line that is not JSON: {preview!r}; "
                    "is the server an Ollama server?"
                ) from None
            if not isinstance(data, dict):
                raise StreamError(f"Ollama sent a line that is not a JSON object: {line[:80]!r}")
            if "error" in data:
                # After streaming started the status stays 200 and the error comes as a line.
                error = one_line(str(data["error"]))
                if _CONTEXT_ERROR.search(error):
                    raise self._too_long(model, error[:200])
                raise StreamError(f"Ollama reported an error mid-stream: {error}")
            chunk = parse_chunk(data)
            yield chunk
            if chunk.done:
                saw_done = True
                break
        if not saw_done:
            raise StreamError(
                f"the stream from {self._base} ended before the answer was complete; try again"
            )

    def _lines(self, response: requests.Response) -> Iterator[bytes]:
        """NDJSON lines as they arrive: `read1` returns what the socket has, so each token
        reaches the user as soon as Ollama flushes it."""
        try:
            yield from split_lines(self._pieces(response), self.max_stream_bytes)
        except Overflow as exc:
            if exc.what == "stream":
                raise StreamError(
                    f"the stream from {self._base} passed {self.max_stream_bytes} bytes "
                    "without ending; stopped"
                ) from None
            raise StreamError(
                f"Ollama sent a line longer than {MAX_LINE_BYTES} bytes; "
                "is the server an Ollama server?"
            ) from None

    def _pieces(self, response: requests.Response) -> Iterator[bytes]:
        try:
            yield from body_pieces(response)
        except BodyTimeout as exc:
            raise ServerTimeout(self._timeout_message()) from exc.__cause__
        except BodyDropped as exc:
            raise StreamError(
                f"the connection to {self._base} dropped mid-stream; try again"
            ) from exc.__cause__

    def _unreachable(self, why: str) -> str:
        return (
            f"cannot reach Ollama at {self._base} ({why}): start it with `ollama serve` "
            "or set OLLAMA_HOST"
        )

    def _timeout_message(self) -> str:
        return (
            f"Ollama at {self._base} sent nothing for {self._timeout:g} s (ollama.timeout); "
            "the model may still be loading: try again or raise ollama.timeout"
        )


KEEP_WAIT = 0.2  # seconds keep_connection waits for a body's end after its last chunk


def keep_connection(response: requests.Response, budget: int = 65536) -> None:
    """After the last chunk: read the little that is left of the body (the chunked stream's
    end, sent with it), so that the connection goes back to the pool and the next step does
    not open a new one. At most KEEP_WAIT seconds in all, whatever the server sends (a
    watchdog shuts the socket, which ends any read, trailers without end included); then
    the connection is closed as it was before: this only ever saves a connection."""
    raw = response.raw
    sock = getattr(getattr(raw, "connection", None), "sock", None)
    if sock is None:
        return
    lock = threading.Lock()
    state = {"done": False}

    def cut() -> None:
        with lock:
            if not state["done"]:
                state["done"] = True
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    # From before the first read: the socket's timeout bounds each recv, not a read, and
    # one read of a chunked body takes any number of lines (trailers, a size line).
    watchdog = threading.Timer(KEEP_WAIT, cut)
    watchdog.daemon = True
    watchdog.start()
    try:
        before = sock.gettimeout()
        sock.settimeout(KEEP_WAIT)
        while budget > 0:
            data = raw.read1(budget)
            if not data:
                with lock:
                    if state["done"]:
                        return  # the watchdog cut it: closed as before
                    state["done"] = True
                sock.settimeout(before)
                raw.release_conn()  # wholly read, in time: the pool may use it again
                return
            budget -= len(data)
    except Exception:  # whatever went wrong, the connection is closed as before
        return
    finally:
        watchdog.cancel()
