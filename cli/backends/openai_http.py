"""The HTTP side of the OpenAI-compatible client (`openai.py`): one request sent with the
retries of `sending.py`, an error status worded as the fix it needs (a key, a model, a base
URL, tool calling switched on), and every answer read in bounded pieces.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import requests

from cli.backends.failures import BodyDropped, BodyTimeout, Wording, body_pieces
from cli.backends.messages import MAX_JSON_DEPTH, SERVER_CONTEXT_FLAGS, JSONTooDeep, loads_json
from cli.backends.openai_dialect import context_numbers, error_parts, is_context_error, one_line
from cli.backends.sending import BUSY_RETRIES, send
from cli.errors import BackendError, ContextTooLong, ModelNotFound, ModelUnsupported, ServerTimeout

CONNECT_TIMEOUT = 10.0
# A non-streamed answer or a model list: read in pieces, never more than this.
MAX_BODY_BYTES = 64 * 1024 * 1024
_MODEL_WORDS = re.compile(r"\bmodel\b|model_not_found", re.IGNORECASE)


class OpenAIConnection:
    """What OpenAIClient sends and reads over HTTP, and the words of its failures. The
    attributes below are set by OpenAIClient.__init__."""

    _base: str
    _session: requests.Session
    _timeout: float
    _api_key_env: str
    _has_key: bool
    _sleep: Callable[[float], None]
    _headers: dict[str, str]

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

    @property
    def _no_server(self) -> str:
        return f"no OpenAI-compatible server answers at {self._base}"

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
