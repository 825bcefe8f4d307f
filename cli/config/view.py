"""`agent config`: the effective configuration as YAML, each key saying where its value came
from — a flag, the environment, a line of the config file, or the default (pure)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import yaml

from cli.config.settings import Config

# "default", "--host", "environment OLLAMA_HOST", "FILE, line N", "default, also in FILE, line N"
Origin = str


def effective(
    config: Config,
    environ: Mapping[str, str],
    flags: Mapping[tuple[str, ...], tuple[str, Any]] | None = None,
) -> list[tuple[tuple[str, ...], Any, Origin]]:
    """Every leaf key with the value in force and where it came from, in schema order.
    `flags`: key → (the flag's name, its value), for the flags given on the command line."""
    flags = flags or {}
    defaults = dict(_leaves(Config(), ()))
    out: list[tuple[tuple[str, ...], Any, Origin]] = []
    for path, value in _leaves(config, ()):
        origin: Origin = "default"
        where = set_at(config, path)
        if where:
            origin = where
            if path in defaults and value == defaults[path]:  # as `agent init` writes them
                origin = f"default, also in {origin}"
        if path == ("ollama", "host"):
            api = flags.get(("ollama", "api"), ("", config.ollama.api))[1]
            if api == "native" and environ.get("OLLAMA_HOST", "").strip():
                value, origin = environ["OLLAMA_HOST"], "environment OLLAMA_HOST"
        if path in flags:
            origin, value = flags[path][0], flags[path][1]
        out.append((path, value, origin))
    return out


def set_at(
    config: Config,
    path: tuple[str, ...],
    index: int | None = None,
    items: Mapping[tuple[str, ...], int] | None = None,
) -> Origin | None:
    """ "FILE, line N" where the config file sets the key `path` (any depth: a key of
    policy.tools too), or None when the file does not (the key is at its default). With
    `index` and `items` (the lines of every list item, settings.read_yaml(items=True)), the
    line of that item of the list."""
    if not config.source or path not in config.lines:
        return None
    line = config.lines[path]
    if index is not None and items is not None:
        line = items.get((*path, str(index)), line)
    return f"{config.source}, line {line}"


def render(rows: list[tuple[tuple[str, ...], Any, Origin]]) -> str:
    """The rows as YAML that `-c` would read back, with the origin as a comment per key."""
    lines = ["# metona-agent's configuration in force; after each key, where it came from."]
    shown: tuple[str, ...] = ()
    for path, value, origin in rows:
        *parents, key = path
        for depth, name in enumerate(parents):
            if tuple(parents[: depth + 1]) != shown[: depth + 1]:
                lines.append(f"{'  ' * depth}{name}:")
        shown = tuple(parents)
        text = yaml.safe_dump(value, default_flow_style=True, width=10_000, allow_unicode=True)
        text = text.strip().removesuffix("...").strip()
        lines.append(f"{'  ' * len(parents)}{key}: {text}  # {origin}")
    return "\n".join(lines) + "\n"


def _leaves(node: Any, path: tuple[str, ...]) -> list[tuple[tuple[str, ...], Any]]:
    out: list[tuple[tuple[str, ...], Any]] = []
    for field in dataclasses.fields(node):
        if field.name in ("source", "lines"):
            continue
        value = getattr(node, field.name)
        if dataclasses.is_dataclass(value):
            out += _leaves(value, (*path, field.name))
        elif isinstance(value, list) and any(dataclasses.is_dataclass(v) for v in value):
            # models: each entry with the keys it sets
            entries = [
                dataclasses.asdict(v)
                for v in value
                if dataclasses.is_dataclass(v) and not isinstance(v, type)
            ]
            plain_list = [{k: v for k, v in e.items() if v not in ("", None)} for e in entries]
            out.append(((*path, field.name), plain_list))
        elif isinstance(value, dict) and any(dataclasses.is_dataclass(v) for v in value.values()):
            # mcp.servers: each server's settings as the YAML would write them
            plain = {k: dataclasses.asdict(v) for k, v in value.items()}
            out.append(((*path, field.name), plain))
        else:
            out.append(((*path, field.name), value))
    return out
