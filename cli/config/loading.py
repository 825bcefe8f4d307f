"""The config from its file: the YAML read, every key checked against the dataclasses of
`settings.py` (its type, its bounds, its choices, the names it may take), and the frozen
`Config` built, each error naming the file, the line and the key.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, get_origin, get_type_hints

from cli.config.settings import (
    THINK_LEVELS,
    TOOL_MODES,
    Config,
    HookConfig,
    ModelProfileConfig,
    is_mcp_name,
    kind_of,
    read_yaml,
)
from cli.errors import ConfigError
from cli.fs import globs

# No "__" inside, no "_" or "-" at either end: mcp__<server>__<tool> then names its server
# unambiguously (a server "e_" would make mcp__e___t, which mcp__e__* would match).
_SERVER_NAME = re.compile(r"(?!.*__)[A-Za-z0-9](?:[A-Za-z0-9_-]{0,38}[A-Za-z0-9])?")


def load_config(path: Path | None) -> Config:
    """Read and check the YAML at `path` (built-in defaults when None)."""
    if path is None:
        return Config()
    from cli.fs.stored import MAX_CONFIG_BYTES, Unreadable, read_capped

    try:
        text = read_capped(path, MAX_CONFIG_BYTES).decode("utf-8")
    except Unreadable as exc:
        raise ConfigError(
            f"cannot read config {path}: {exc} (a config is a page of settings): check that "
            "-c names the config file"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read config {path}: {exc}") from None
    return parse_config(text, str(path))


def parse_config(text: str, source: str) -> Config:
    data, lines = read_yaml(text, source)
    if data is None:
        return dataclasses.replace(Config(), source=source)
    builder = _Builder(source, lines)
    config: Config = builder.build(Config, data, ())
    return dataclasses.replace(config, source=source, lines=lines)


def build_section(
    cls: type[Any],
    data: Any,
    source: str,
    path: tuple[str, ...],
    lines: Mapping[tuple[str, ...], int],
    what: str = "config",
) -> Any:
    """One section of the config (PolicyConfig, say) from plain data, checked as the config's
    own is: a key left out is its default; errors name `source`, the line and the key."""
    return _Builder(source, lines, what).build(cls, {} if data is None else data, path)


class _Builder:
    """Checks plain YAML data against the dataclasses and builds them, naming file, line and
    key in every error."""

    def __init__(
        self, source: str, lines: Mapping[tuple[str, ...], int], what: str = "config"
    ) -> None:
        self.source = source
        self.lines = lines
        self.what = what

    def fail(self, path: tuple[str, ...], message: str) -> ConfigError:
        line = self.lines.get(path)
        where = f", line {line}" if line else ""
        key = ".".join(path) or "(top level)"
        return ConfigError(f"{self.what} {self.source}{where}: {key}: {message}")

    def build(self, cls: type[Any], data: Any, path: tuple[str, ...]) -> Any:
        if not isinstance(data, dict):
            raise self.fail(path, f"expected a mapping of keys, got {kind_of(data)}")
        hints = get_type_hints(cls)
        known = [f.name for f in dataclasses.fields(cls) if f.name not in ("source", "lines")]
        values: dict[str, Any] = {}
        for key, value in data.items():
            if key not in known:
                raise self.fail(
                    (*path, str(key)), f"unknown key; known keys here: {', '.join(known)}"
                )
            values[key] = self.value(hints[key], cls, key, value, (*path, key))
        return cls(**values)

    def value(self, hint: Any, cls: type[Any], name: str, value: Any, path: tuple[str, ...]) -> Any:
        meta = next(f.metadata for f in dataclasses.fields(cls) if f.name == name)
        if meta.get("aid_names"):
            return self.aids(value, path, meta["aid_names"])
        if meta.get("profiles"):
            return self.profiles(value, path)
        if meta.get("hooks"):
            return self.hooks(value, path)
        if dataclasses.is_dataclass(hint):
            return self.build(hint, {} if value is None else value, path)  # type: ignore[arg-type]
        origin = get_origin(hint)
        if origin is list:
            return self.string_list(value, path, meta)
        if origin is dict:
            return self.mapping(value, path, meta, cls, name)
        return self.scalar(hint, value, path, meta)

    def scalar(self, hint: Any, value: Any, path: tuple[str, ...], meta: Mapping[str, Any]) -> Any:
        if hint is bool:
            if not isinstance(value, bool):
                raise self.fail(path, f"expected true or false, got {kind_of(value)}")
        elif hint is int:
            if not isinstance(value, int) or isinstance(value, bool):
                raise self.fail(path, f"expected a whole number, got {kind_of(value)}")
        elif hint is float:
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                raise self.fail(path, f"expected a number, got {kind_of(value)}")
            value = float(value)
        elif meta.get("allow_int") and isinstance(value, int) and not isinstance(value, bool):
            pass  # keep_alive: a number is seconds, a string a duration ("5m"), as Ollama reads it
        elif meta.get("allow_bool") and isinstance(value, bool):
            return value  # think: true or false, else one of its levels
        elif meta.get("allow_bool") and not isinstance(value, str):
            levels = ", ".join(meta.get("choices", ()))
            raise self.fail(
                path, f"expected true or false, or one of {levels}; got {kind_of(value)}"
            )
        elif (hint is str or meta.get("allow_int")) and not isinstance(value, str):
            raise self.fail(path, f"expected a string, got {kind_of(value)}")
        minimum = meta.get("minimum")
        if minimum is not None and value < minimum:
            raise self.fail(path, f"must be at least {minimum}, got {value}")
        maximum = meta.get("maximum")
        if maximum is not None and value > maximum:
            raise self.fail(path, f"must be at most {maximum}, got {value}")
        choices = meta.get("choices")
        if choices and value not in choices:
            raise self.fail(path, f"expected one of {', '.join(choices)}; got {value!r}")
        return value

    def aids(self, value: Any, path: tuple[str, ...], names: tuple[str, ...]) -> bool | list[str]:
        """agent.aids: on or off (YAML reads both as booleans; "on"/"off" quoted are taken
        too), or a list of aid names."""
        if isinstance(value, bool):
            return value
        if value in ("on", "off"):
            return bool(value == "on")
        if isinstance(value, list):
            for item in value:
                if item not in names:
                    raise self.fail(path, f"unknown aid {item!r}; the aids are: {', '.join(names)}")
            return [str(item) for item in dict.fromkeys(value)]
        raise self.fail(
            path, f"expected on, off or a list of aids ({', '.join(names)}); got {kind_of(value)}"
        )

    def profiles(self, value: Any, path: tuple[str, ...]) -> list[ModelProfileConfig]:
        """`models:`: a list of entries, each a mapping with `match` and the keys it sets."""
        if value is None:
            return []
        if not isinstance(value, list):
            raise self.fail(path, f"expected a list of model entries, got {kind_of(value)}")
        entries = []
        for index, item in enumerate(value):
            where = (*path, str(index))
            if not isinstance(item, dict):
                raise self.fail(path, f"entry {index + 1}: expected a mapping, got {kind_of(item)}")
            entries.append(self.profile(item, where, index + 1))
        return entries

    def hooks(self, value: Any, path: tuple[str, ...]) -> list[HookConfig]:
        """hooks.pre_tool and the others: a list of {match, command, timeout_seconds}; the
        command an argv (a list of strings) or a string, split as a shell would split it
        (no shell runs it)."""
        if value is None:
            return []
        if not isinstance(value, list):
            raise self.fail(
                path, f"expected a list of hooks ({{match, command}} each), got {kind_of(value)}"
            )
        out = []
        for index, item in enumerate(value):
            entry = f"hook {index + 1}"
            if not isinstance(item, dict):
                raise self.fail(path, f"{entry}: expected a mapping, got {kind_of(item)}")
            command = item.get("command")
            if isinstance(command, str):
                import shlex

                try:
                    item = {**item, "command": shlex.split(command)}
                except ValueError as exc:
                    raise self.fail(path, f"{entry}: command: {exc}") from None
            hook: HookConfig = self.build(HookConfig, item, path)
            if not hook.command:
                raise self.fail(
                    path, f"{entry}: `command` (the program and its arguments) is required"
                )
            out.append(hook)
        return out

    def profile(self, item: dict[Any, Any], path: tuple[str, ...], number: int) -> Any:
        from cli.config.profiles import size_bound

        known = [f.name for f in dataclasses.fields(ModelProfileConfig)]
        entry = f"entry {number}"
        values: dict[str, Any] = {}
        for key, value in item.items():
            if key not in known:
                raise self.fail(
                    path[:-1], f"{entry}: unknown key {key!r}; known: {', '.join(known)}"
                )
            values[key] = self.profile_value(str(key), value, path[:-1], entry)
        if not values.get("match"):
            raise self.fail(path[:-1], f"{entry}: `match` (a glob of model names) is required")
        if values.get("size") and size_bound(values["size"]) is None:
            raise self.fail(
                path[:-1],
                f"{entry}: size {values['size']!r}: expected <N, <=N, >N or >=N with N in M or "
                "B parameters, e.g. <4B",
            )
        return ModelProfileConfig(**values)

    def profile_value(self, key: str, value: Any, path: tuple[str, ...], entry: str) -> Any:
        expected = {
            "match": "a string",
            "size": "a string",
            "tool_mode": f"one of {', '.join(TOOL_MODES)}",
            "temperature": "a number from 0 to 2",
            "think": f"true, false or one of {', '.join(THINK_LEVELS)}",
            "tool_set": "full or compact",
            "num_ctx": "a whole number of at least 1024",
        }[key]
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        ok = {
            "match": isinstance(value, str),
            "size": isinstance(value, str),
            "tool_mode": value in TOOL_MODES,
            "temperature": number and 0 <= value <= 2,
            "think": isinstance(value, bool) or value in THINK_LEVELS,
            "tool_set": value in ("full", "compact"),
            "num_ctx": isinstance(value, int) and not isinstance(value, bool) and value >= 1024,
        }[key]
        if not ok:
            raise self.fail(path, f"{entry}: {key}: expected {expected}, got {kind_of(value)}")
        return float(value) if key == "temperature" else value

    def server(self, cls: type[Any], data: Any, path: tuple[str, ...]) -> Any:
        if not _SERVER_NAME.fullmatch(path[-1]):
            raise self.fail(
                path,
                "a server name is letters, digits, '-' and '_' (no '__', and a letter or digit "
                "at each end), at most 40 characters",
            )
        server = self.build(cls, data, path)
        if bool(server.command) == bool(server.url):
            raise self.fail(path, "give either `command` (stdio) or `url` (streamable HTTP)")
        if server.url and not server.url.startswith(("http://", "https://")):
            raise self.fail(
                (*path, "url"), f"expected an http:// or https:// URL, got {server.url!r}"
            )
        return server

    def string_list(self, value: Any, path: tuple[str, ...], meta: Mapping[str, Any]) -> list[str]:
        if value is None:
            return []
        if not isinstance(value, list):
            raise self.fail(path, f"expected a list of strings, got {kind_of(value)}")
        out = []
        for index, item in enumerate(value):
            if not isinstance(item, str):
                raise self.fail(path, f"item {index + 1}: expected a string, got {kind_of(item)}")
            mcp = meta.get("mcp_names") and is_mcp_name(item)
            if meta.get("choices") and item not in meta["choices"] and not mcp:
                raise self.fail(path, f"item {item!r} is not one of {', '.join(meta['choices'])}")
            if meta.get("glob"):
                why = globs.invalid([item])
                if why:
                    raise self.fail(path, f"item {item!r} {why[1]}")
            if meta.get("absolute") and not (item.startswith(("/", "~/")) or item == "~"):
                raise self.fail(path, f"item {item!r} must be an absolute path or start with ~/")
            if meta.get("name_glob") and globs.invalid_name(item):
                raise self.fail(path, f"item {item!r} {globs.invalid_name(item)}")
            if meta.get("regex"):
                try:
                    re.compile(item)
                except re.error as exc:
                    raise self.fail(path, f"item {item!r} is not a valid regex: {exc}") from None
            out.append(item)
        return out

    def mapping(
        self,
        value: Any,
        path: tuple[str, ...],
        meta: Mapping[str, Any],
        cls: type[Any],
        name: str,
    ) -> dict[str, Any]:
        if value is None:
            value = {}
        if not isinstance(value, dict):
            raise self.fail(path, f"expected a mapping, got {kind_of(value)}")
        keys, choices = meta.get("keys"), meta.get("choices")
        if meta.get("of") is not None:  # mcp.servers: name → a server's settings
            return {
                str(k): self.server(meta["of"], item, (*path, str(k))) for k, item in value.items()
            }
        for key, item in value.items():
            if meta.get("strings") and not isinstance(item, str):
                raise self.fail((*path, str(key)), f"expected a string, got {kind_of(item)}")
            if keys and key not in keys and not (meta.get("mcp_names") and is_mcp_name(str(key))):
                raise self.fail(
                    (*path, str(key)),
                    f"unknown tool; known: {', '.join(keys)}, or an MCP tool (mcp__SERVER__TOOL, "
                    "* allowed)",
                )
            if choices and item not in choices:
                raise self.fail(
                    (*path, str(key)), f"expected one of {', '.join(choices)}; got {item!r}"
                )
        default = next(f for f in dataclasses.fields(cls) if f.name == name)
        if meta.get("merge") and default.default_factory is not dataclasses.MISSING:
            return {**default.default_factory(), **value}  # options: the user's on top of ours
        return dict(value)
