"""The model catalogue of an OpenAI-compatible server, for OpenAIClient (`openai.py`):
GET /models (its list, each model's capabilities, size and parameters), and the context a
model is served with where the server says it: its /models entry, llama-server's /props, or
LM Studio's own API.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import quote

import requests

from cli.backends.messages import ModelInfo, closest_models, loads_json
from cli.backends.openai_dialect import as_dict, as_list, capabilities_of, error_parts, positive
from cli.backends.openai_http import (
    _MODEL_WORDS,
    CONNECT_TIMEOUT,
    OpenAIConnection,
    _NoSuchPath,
)
from cli.errors import BackendError, ModelNotFound, WrongURL

MODELS_TTL = 5.0  # seconds a /models answer is reused (the model check, then each model)
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


class OpenAIModels(OpenAIConnection):
    """What OpenAIClient knows of the server's models. The attributes below are set by
    OpenAIClient.__init__."""

    _clock: Callable[[], float]
    _models_cache: tuple[float, list[dict[str, Any]] | None] | None
    _lm_studio_cache: tuple[float, dict[str, tuple[int | None, int | None]]] | None

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
        assumed_note = ""
        if capabilities is None:
            capabilities = ASSUMED_CAPABILITIES
            assumed_note = (
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
            assumed_note=assumed_note,
            capabilities_assumed=assumed,
        )

    def _is_llama_server(self, model: str) -> bool:
        """llama.cpp's own server: its /models entry for the model says so."""
        try:
            entries = self._model_entries() or []
        except BackendError:
            return False
        entry = next((e for e in entries if e.get("id") == model), None)
        return entry is not None and _llama_server_entry(entry)

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


def _llama_server_entry(entry: Mapping[str, Any]) -> bool:
    """A /models entry as llama.cpp's own server writes it (its `meta`, or owned_by)."""
    return isinstance(entry.get("meta"), dict) or entry.get("owned_by") == "llamacpp"


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


def _parameter_size(value: Any) -> str | None:
    """llama.cpp's meta.n_params as Ollama writes a parameter size: "8.2B", "135M"."""
    if not positive(value):
        return None
    return f"{value / 1e9:.1f}B" if value >= 1e9 else f"{value / 1e6:.0f}M"
