"""The de facto `{"mcpServers": {...}}` JSON (Claude Desktop, Claude Code, ollmcp, Gemini CLI,
Cursor) as our `mcp.servers`: YAML for `agent mcp import`, servers for `--mcp-config`.

Fields read: `command`, `args`, `env`, `cwd` (stdio); `url`, `httpUrl`, `serverUrl`,
`headers` (streamable HTTP); `disabled`, `timeout` (Gemini CLI's, in milliseconds),
`includeTools`, `excludeTools`. The legacy HTTP+SSE transport (`"type": "sse"`) is not
spoken: such a server is left out, saying so.

`agent mcp import` writes no secret into the YAML: an `env` value under a name that says
credential (`GITHUB_TOKEN`, `API_KEY`…) and an `Authorization` header become `${NAME}`
references to the environment, with a comment naming the variables to set. `--mcp-config`
uses the file as it is: it is the user's own file, for one session.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from cli.backends.messages import MAX_JSON_DEPTH
from cli.config.loading import parse_config
from cli.config.settings import McpServerConfig
from cli.errors import ConfigError, UsageError
from cli.fs.stored import MAX_CONFIG_BYTES, Unreadable, parse_json, read_capped
from cli.safety import sensitive
from cli.safety.redaction import REDACTED, redact

_NAME = re.compile(r"[^A-Za-z0-9_-]+")
_BREAKS = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\ufeff]")
# What the runtime fills in from our environment (cli/mcp/servers.py's expand(), in command,
# args, env values, url and header values; not cwd): `${NAME}`, nothing else.
_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def read_json(path: str) -> dict[str, Any]:
    """The servers of a `{"mcpServers": …}` file, read as a config is: at most
    MAX_CONFIG_BYTES, JSON at most MAX_JSON_DEPTH deep (cli/fs/stored.py)."""
    try:
        text = read_capped(Path(path), MAX_CONFIG_BYTES).decode("utf-8")
    except OSError as exc:
        raise UsageError(f"{path}: {exc.strerror or exc}") from None
    except Unreadable as exc:
        raise UsageError(f"{path}: {exc}; an mcpServers file is a page of settings") from None
    except UnicodeDecodeError:
        raise UsageError(f"{path}: not UTF-8 text") from None
    try:
        data = parse_json(text, MAX_JSON_DEPTH)
    except Unreadable as exc:
        raise UsageError(f"{path}: not valid JSON ({exc})") from None
    servers = data.get("mcpServers") if isinstance(data, dict) else None
    if not isinstance(servers, dict):
        raise UsageError(f'{path}: expected a JSON object with "mcpServers": {{name: server}}')
    return servers


def server_name(name: str) -> str:
    """A name our config takes: letters, digits, - and _, no "__", at most 40 long."""
    cleaned = re.sub("_{2,}", "_", _NAME.sub("-", name))[:40].strip("-_")
    return cleaned or "server"


def convert(
    servers: dict[str, Any], *, keep_secrets: bool
) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """Our `mcp.servers` as plain data, and the notes to tell (left out, variables to set)."""
    out: dict[str, dict[str, Any]] = {}
    notes: list[str] = []
    for raw_name, entry in servers.items():
        name = server_name(str(raw_name))
        if not isinstance(entry, dict):
            notes.append(f"{raw_name}: left out (not an object)")
            continue
        kind = str(entry.get("type") or entry.get("transport") or "").lower()
        url = entry.get("httpUrl") or entry.get("url") or entry.get("serverUrl")
        if kind == "sse":
            notes.append(f"{raw_name}: left out (the legacy SSE transport is not supported)")
            continue
        server: dict[str, Any] = {}
        if entry.get("command"):
            server["command"] = str(entry["command"])
            if isinstance(entry.get("args"), list) and entry["args"]:
                args = [str(a) for a in entry["args"]]
                server["args"] = args if keep_secrets else _args(name, args, notes)
            if isinstance(entry.get("env"), dict) and entry["env"]:
                server["env"] = _values(name, entry["env"], keep_secrets, notes, header=False)
            if entry.get("cwd"):
                server["cwd"] = str(entry["cwd"])
        elif isinstance(url, str) and url:
            server["url"] = (
                url if keep_secrets else _hidden(name, url, _variable(name, "url"), notes)
            )
            if isinstance(entry.get("headers"), dict) and entry["headers"]:
                server["headers"] = _values(name, entry["headers"], keep_secrets, notes, True)
        else:
            notes.append(f"{raw_name}: left out (neither a command nor a URL)")
            continue
        if entry.get("disabled") is True:
            server["enabled"] = False
        timeout = entry.get("timeout")
        if isinstance(timeout, (int, float)) and not isinstance(timeout, bool) and timeout > 0:
            server["timeout"] = max(1.0, timeout / 1000)  # Gemini CLI's are milliseconds
        tools = {
            key: [str(t) for t in entry[field]]
            for key, field in (("include", "includeTools"), ("exclude", "excludeTools"))
            if isinstance(entry.get(field), list) and entry[field]
        }
        if tools:
            server["tools"] = tools
        if name in out:
            notes.append(f"{raw_name}: left out (its name is taken as {name})")
            continue
        out[name] = server
    return out, notes


def _variable(*parts: str) -> str:
    return re.sub(r"[^A-Z0-9_]", "_", "_".join(parts).upper())


def _unset(server: str, variable: str, notes: list[str]) -> str:
    notes.append(f"{server}: set ${variable} in the environment (its value is not copied)")
    return f"${{{variable}}}"


def _hidden(server: str, text: str, variable: str, notes: list[str]) -> str:
    """`text` with each secret in it (as the audit log's redaction finds them: tokens, keys,
    a URL's password, `--token=…`) replaced by a `${VARIABLE}` to set instead."""
    parts = redact(text).split(REDACTED)
    if len(parts) == 1:
        return text
    out = parts[0]
    for n, rest in enumerate(parts[1:], start=1):
        out += _unset(server, variable if n == 1 else f"{variable}_{n}", notes) + rest
    return out


def _args(server: str, args: list[str], notes: list[str]) -> list[str]:
    """Arguments with their secrets as `${…}`: a value after a flag that names one
    (`--api-key VALUE`), and whatever the redaction finds inside an argument."""
    out: list[str] = []
    for n, arg in enumerate(args):
        flag = args[n - 1].lstrip("-") if n and args[n - 1].startswith("-") else ""
        if "${" in arg:
            out.append(arg)
        elif flag and "=" not in flag and sensitive.names_secret(flag):
            out.append(_unset(server, _variable(server, flag), notes))
        else:
            out.append(_hidden(server, arg, _variable(server, f"arg{n + 1}"), notes))
    return out


def _values(
    server: str, values: dict[str, Any], keep: bool, notes: list[str], header: bool
) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in values.items():
        text = str(value)
        secret = sensitive.names_secret(str(key)) or (
            header and str(key).lower() in ("authorization", "proxy-authorization", "cookie")
        )
        if keep or "${" in text:
            out[str(key)] = text
        elif secret:
            variable = _variable(server, str(key)) if header else _variable(str(key))
            scheme = text.split(" ", 1)[0] + " " if header and " " in text else ""
            out[str(key)] = scheme + _unset(server, variable, notes)
        else:  # a name that says nothing, a value that may still hold one (a URL's password)
            out[str(key)] = _hidden(server, text, _variable(server, str(key)), notes)
    return out


@dataclass(frozen=True)
class EnvRead:
    """A `${VARIABLE}` an imported server will read from the user's environment when the
    agent starts it, and where the value goes."""

    server: str
    variable: str
    place: str  # "url", "header X-Trace", "env TOKEN", "args", "command"
    host: str = ""  # url and headers: the host the value is sent to

    def note(self) -> str:
        to = f"sent to {self.host}" if self.host else "given to the program it starts"
        into = f"into its {self.place}, {to}"
        return f"{self.server} reads ${self.variable} from your environment {into}"


def environment_reads(servers: dict[str, dict[str, Any]]) -> list[EnvRead]:
    """Every `${VARIABLE}` in the servers (as `imported` made them) that the runtime fills
    in from the environment, in order."""
    reads: list[EnvRead] = []
    for name, server in servers.items():
        url = server.get("url")
        host = _host(url) if isinstance(url, str) else ""
        places: list[tuple[str, Any, str]] = [
            ("command", server.get("command"), ""),
            *(("args", a, "") for a in server.get("args") or []),
            *((f"env {k}", v, "") for k, v in (server.get("env") or {}).items()),
            ("url", url, host),
            *((f"header {k}", v, host) for k, v in (server.get("headers") or {}).items()),
        ]
        for place, value, to in places:
            if isinstance(value, str):
                for variable in dict.fromkeys(_VARIABLE.findall(value)):
                    reads.append(EnvRead(name, variable, place, to))
    return reads


def sent_away(reads: list[EnvRead]) -> str:
    """The one-line refusal for `--into` when `reads` send values to a host (url, headers);
    "" when none do."""
    hosts: dict[tuple[str, str], list[str]] = {}
    for read in reads:
        if read.host:
            hosts.setdefault((read.server, read.host), []).append(
                f"${read.variable} (in its {read.place})"
            )
    if not hosts:
        return ""
    what = "; ".join(
        f"{server} would send {', '.join(values)} from your environment to {host}"
        for (server, host), values in hosts.items()
    )
    return (
        f"{what}; nothing was written (check that this is meant, then add --allow-env to "
        "import it anyway)"
    )


def _host(url: str) -> str:
    """Where a URL's requests go, as written (a `${…}` in the host stays one)."""
    try:
        netloc = urlsplit(url).netloc
    except ValueError:
        netloc = ""
    return netloc.rpartition("@")[2] or url


def imported(path: str) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """`agent mcp import FILE`: the servers as our config has them (no secret in them), and
    the comment lines to go before them (where they came from, the variables to set)."""
    servers, notes = convert(read_json(path), keep_secrets=False)
    lines = [f"# MCP servers imported from {_comment(path)}"]
    lines += [f"# {_comment(note)}" for note in notes]
    return servers, lines


def to_yaml(path: str) -> str:
    """`agent mcp import FILE`: the YAML to paste into the config, comments first."""
    servers, lines = imported(path)
    body = yaml.safe_dump({"mcp": {"servers": servers}}, sort_keys=False, allow_unicode=True)
    return "\n".join(lines) + "\n" + body


def _comment(text: str) -> str:
    """One comment line, whatever the JSON's names hold: a line break there would end the
    comment and make the rest config (YAML breaks lines at \\x85 and U+2028/9 too)."""
    return _BREAKS.sub("?", text)


def load_json_servers(path: str) -> dict[str, McpServerConfig]:
    """`--mcp-config FILE`: the servers, checked as the YAML's would be."""
    servers, notes = convert(read_json(path), keep_secrets=True)
    skipped = [n for n in notes if "left out" in n]
    if skipped:
        raise UsageError(f"--mcp-config {path}: {skipped[0]}")
    text = yaml.safe_dump({"mcp": {"servers": servers}}, sort_keys=False)
    try:
        return dict(parse_config(text, path).mcp.servers)
    except ConfigError as exc:
        raise UsageError(str(exc).replace("config ", "--mcp-config ", 1)) from None
