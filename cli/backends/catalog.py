"""The server's models, for `agent models`: the list, each model's details, what is loaded.

Details take one request per model (Ollama's /api/show), so they are asked for from a small
pool of threads: a server with 40 models answers in a few round trips' time, not 40 in a row.
Any backend works: what it cannot say (sizes, what is loaded) stays None.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

from cli.backends.messages import ChatBackend, ModelInfo, ReportsLoadedModels
from cli.errors import AgentError

MAX_WORKERS = 8  # parallel /api/show requests; Ollama answers them from its model files


@dataclass(frozen=True)
class ModelRow:
    """One model as `agent models` shows it. None: the server did not say."""

    name: str
    size: int | None = None  # bytes
    parameter_size: str | None = None
    quantization: str | None = None
    context_length: int | None = None  # trained context
    capabilities: tuple[str, ...] | None = None  # None: unknown (not said by the server)
    loaded: bool | None = None
    loaded_context: int | None = None  # the context it is loaded with
    problem: str | None = None  # why its details are missing
    # How the agent gives it tools, under agent.tool_mode and the policy: native | prompt |
    # none (None: unknown, its details are missing).
    tools: str | None = None
    # The model's profile (cli/config/profiles.py) as the agent would apply it: its name and
    # what it sets; None when none matches or the aids use none.
    profile: Mapping[str, Any] | None = None

    @property
    def supports_tools(self) -> bool | None:
        return None if self.capabilities is None else "tools" in self.capabilities

    def to_json(self) -> dict[str, Any]:
        """The `--json` object: exactly these fields."""
        return {
            "name": self.name,
            "size": self.size,
            "parameter_size": self.parameter_size,
            "quantization": self.quantization,
            "context_length": self.context_length,
            "capabilities": None if self.capabilities is None else list(self.capabilities),
            "loaded": self.loaded,
            "tools": self.tools,
            "profile": None if self.profile is None else dict(self.profile),
        }


def gather(
    backend: ChatBackend,
    workers: int = MAX_WORKERS,
    tools: Callable[[ModelInfo], str] | None = None,
    profile: Callable[[ModelInfo], Mapping[str, Any] | None] | None = None,
) -> list[ModelRow]:
    """Every model the server has, sorted by name, with its details and load state;
    `tools` says how the agent would give each its tools (native, prompt or none), and
    `profile` which profile it gets."""
    names = backend.list_models()
    loaded = _loaded(backend)
    if not names:
        return []
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(names)))) as pool:
        details = list(pool.map(lambda name: _details(backend, name), names))
    rows = [_row(name, info, loaded) for name, info in zip(names, details, strict=True)]
    out = []
    for row, info in zip(rows, details, strict=True):
        if isinstance(info, ModelInfo):
            if tools is not None:
                row = replace(row, tools=tools(info))
            if profile is not None:
                row = replace(row, profile=profile(info))
        out.append(row)
    return out


def _details(backend: ChatBackend, name: str) -> ModelInfo | str:
    try:
        return backend.model_info(name)
    except AgentError as exc:  # one model's details missing must not hide the others
        return exc.message


def _loaded(backend: ChatBackend) -> Mapping[str, int | None] | None:
    if not isinstance(backend, ReportsLoadedModels):
        return None
    try:
        return backend.loaded_models()
    except AgentError:
        return None  # a server without /api/ps: "loaded" stays unknown


def _row(name: str, info: ModelInfo | str, loaded: Mapping[str, int | None] | None) -> ModelRow:
    is_loaded, context = None, None
    if loaded is not None:
        key = next((k for k in (name, name.removesuffix(":latest")) if k in loaded), None)
        is_loaded, context = key is not None, loaded.get(key) if key else None
    if isinstance(info, str):
        return ModelRow(name, loaded=is_loaded, loaded_context=context, problem=info)
    problem = "not said by the server; tools assumed" if info.capabilities_assumed else None
    return ModelRow(
        name,
        size=info.size,
        parameter_size=info.parameter_size,
        quantization=info.quantization,
        context_length=info.context_length,
        # What a backend assumes is not what the server said: unknown, in the table as "?".
        capabilities=None if info.capabilities_assumed else tuple(sorted(info.capabilities)),
        loaded=is_loaded,
        loaded_context=context,
        problem=problem,
    )
