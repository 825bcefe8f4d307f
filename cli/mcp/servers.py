"""The MCP servers of one `agent run` or `agent chat`: started in parallel, their tools
offered as `mcp__<server>__<tool>`, each call sent to its server (which is restarted once if
it crashed), all of them stopped at the end.

A server that fails to start is reported in one line and its tools are left out; the rest
works. Path-like arguments are not interpreted here: what a server touches is its own
business (and its sandbox's, with `sandbox:`); the policy decides per tool name.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import hashlib
import json
import os
import re
import shlex
import shutil
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from cli.config.settings import MCP_PREFIX, McpServerConfig
from cli.mcp import protocol
from cli.mcp.client import Client
from cli.mcp.protocol import McpError
from cli.mcp.transport import Http, Stdio, Transport, new_session
from cli.safety.sandbox.spec import SandboxSpec
from cli.tools.base import Runner, Tool

MAX_NAME = 64  # what Ollama and OpenAI-compatible servers accept as a tool name
MAX_TOOLS = 128  # tools offered from one server (every request carries their schemas)
MAX_SCHEMA = 32_768  # characters of one tool's input schema, as JSON; a larger one is left out
_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9_-]")
_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
# What a server's process gets from our environment (then its own `env` on top): enough to
# find programs and run them, no tokens of ours.
ENV_ALLOWLIST = ("PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TERM", "TZ", "TMPDIR")


@dataclass(frozen=True)
class McpTool:
    """One server's tool: as the loop offers and runs it (a Tool like our own, named
    mcp__server__tool, at most 64 characters, unique), and where it goes."""

    offered: Tool
    server: str
    tool: str  # the server's own name for it

    @property
    def listed(self) -> str:
        """`mcp__<server>__<tool>` with the tool as its server listed it, unchanged: what the
        policy's rules are matched against, whatever name the model was offered."""
        return f"{MCP_PREFIX}{self.server}__{self.tool}"


@dataclass
class Server:
    name: str
    config: McpServerConfig
    status: str = "starting"  # starting | ready | failed | disabled
    error: str = ""
    version: str = ""
    tools: list[dict[str, Any]] = field(default_factory=list)
    client: Client | None = None
    restarted: bool = False
    thread: threading.Thread | None = None
    filled: list[str] = field(default_factory=list)  # values `${…}` put in: never shown
    started_at: float = 0.0


def expand(value: str, environ: Mapping[str, str], filled: list[str] | None = None) -> str:
    """`${NAME}` from our environment; a variable that is not set is an error (a missing
    token should say so, not send an empty header). `filled` collects the values put in,
    which no message may show."""

    def one(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in environ:
            raise McpError(f"${{{name}}} is not set in the environment")
        if filled is not None and environ[name]:
            filled.append(environ[name])
        return environ[name]

    return _VARIABLE.sub(one, value)


def server_environment(
    config: McpServerConfig, environ: Mapping[str, str], filled: list[str] | None = None
) -> dict[str, str]:
    env = {k: v for k, v in environ.items() if k in ENV_ALLOWLIST or k.startswith("LC_")}
    env.setdefault("PATH", os.defpath)
    env.update({k: expand(v, environ, filled) for k, v in config.env.items()})
    return env


def tool_names(server: str, tools: list[str], taken: set[str]) -> dict[str, str]:
    """The server's tool names → ours: `mcp__server__tool` with characters the servers of
    models refuse replaced by `_`, cut to 64 and kept unique (a cut name ends in a short
    hash of the whole)."""
    names: dict[str, str] = {}
    for tool in tools:
        name = _UNSAFE_NAME.sub("_", f"{MCP_PREFIX}{server}__{tool}")
        if len(name) > MAX_NAME or name in taken:
            digest = hashlib.sha256(f"{server}\0{tool}".encode()).hexdigest()[:8]
            name = f"{name[: MAX_NAME - 9]}_{digest}"
        taken.add(name)
        names[tool] = name
    return names


def _schema_size(tool: Mapping[str, Any]) -> int:
    try:
        return len(json.dumps(tool.get("inputSchema"), default=str))
    except (ValueError, RecursionError):
        return MAX_SCHEMA + 1


def _clean_schema(schema: Any) -> dict[str, Any]:
    """An input schema the model can be sent and our checker can read: an object, with
    `properties` a mapping and `required` a list of names (what is odd in them dropped)."""
    if not isinstance(schema, dict) or schema.get("type") != "object":
        return {"type": "object", "properties": {}}
    clean: dict[str, Any] = dict(schema)
    if not isinstance(clean.get("properties", {}), dict):
        clean["properties"] = {}
    required = clean.get("required")
    if required is not None:
        clean["required"] = (
            [r for r in required if isinstance(r, str)] if isinstance(required, list) else []
        )
    return clean


def wanted(config: McpServerConfig, tool: str) -> bool:
    include, exclude = config.tools.include, config.tools.exclude
    if include and not any(fnmatch.fnmatchcase(tool, p) for p in include):
        return False
    return not any(fnmatch.fnmatchcase(tool, p) for p in exclude)


def confined(
    config: McpServerConfig, argv: list[str], env: dict[str, str], cwd: str, spec: SandboxSpec
) -> tuple[list[str], tuple[int, ...], dict[str, str]]:
    """The argv that starts a stdio server as its `sandbox` says, and the descriptors it
    needs: bubblewrap as for run_command (the root read-only, the allowed dirs writable,
    secrets hidden, private /tmp; no network unless `network: true`), Landlock (writes
    only beneath the allowed dirs; no sockets but AF_UNIX, so no `network`), or Seatbelt on
    macOS (run_command's profile; the network as `network` says)."""
    kind = config.sandbox
    if kind == "off":
        return argv, (), env
    from cli.safety.sandbox import launch as sandbox
    from cli.safety.sandbox.bwrap import bwrap_argv
    from cli.safety.sandbox.landlock_rules import landlock_rules

    program = shutil.which(argv[0], path=env.get("PATH")) or argv[0]
    # The server's own program (and the tree it belongs to, a venv or a toolchain) is what
    # it needs to see above all: shown read-only, as the dirs on PATH are.
    spec = dataclasses.replace(spec, mode=kind, programs=(program,))
    if kind == "bwrap":
        problem = sandbox.bwrap_problem()
        if problem:
            raise McpError(f"sandbox: bwrap cannot run here ({problem})")
        inner = {**env, "TMPDIR": "/tmp"}
        bwrap = bwrap_argv(sandbox.bwrap_path() or "bwrap", spec, cwd, inner, 1 << 30)
        if config.network:
            bwrap.insert(bwrap.index("--unshare-all") + 1, "--share-net")
        # The environment goes to bwrap itself (which passes it on), not as --setenv
        # arguments: a command line is readable by every user of the machine. bwrap starts
        # under cli/safety/sandbox/landlock.py's memory filter, as a command's does.
        plan: dict[str, Any] = {"env": inner, "parent": os.getpid(), "rlimits": {}}
        plan["landlock"] = None
        plan["seccomp"] = "memory"
        return _through_launcher(plan, [*_without_setenv(bwrap), program, *argv[1:]], inner)
    if kind == "seatbelt":
        return _seatbelt(config, [program, *argv[1:]], env, spec)
    if config.network:
        raise McpError(
            "network: true needs sandbox: bwrap or seatbelt (Landlock's filter allows no sockets)"
        )
    problem = sandbox.landlock_problem()
    if problem:
        raise McpError(f"sandbox: landlock cannot run here ({problem})")
    scratch = sandbox.scratch_dir("metona-agent-mcp-")
    inner = {**env, "TMPDIR": scratch}
    plan = {
        "env": inner,
        "parent": os.getpid(),
        "rlimits": {},
        "landlock": {"rules": landlock_rules(spec, scratch, env.get("PATH", ""))},
    }
    return _through_launcher(plan, [program, *argv[1:]], inner)


def _seatbelt(
    config: McpServerConfig, argv: list[str], env: dict[str, str], spec: SandboxSpec
) -> tuple[list[str], tuple[int, ...], dict[str, str]]:
    """sandbox-exec with run_command's profile (macOS), the network as `network` says."""
    from cli.safety.sandbox import launch as sandbox
    from cli.safety.sandbox.seatbelt_grants import seatbelt_argv
    from cli.safety.sandbox.spec import SandboxUnavailable

    problem = sandbox.seatbelt_problem()
    if problem:
        raise McpError(f"sandbox: seatbelt cannot run here ({problem})")
    scratch = os.path.realpath(sandbox.scratch_dir("metona-agent-mcp-"))
    inner = {**env, "TMPDIR": scratch}
    try:
        confined = seatbelt_argv(spec, argv, env.get("PATH", ""), scratch, config.network)
    except SandboxUnavailable as exc:
        sandbox.cleanup(sandbox.Launch("seatbelt", [], {}, "/", "{}", scratch))
        raise McpError(f"sandbox: seatbelt: {exc}") from None
    return confined, (), inner


def _through_launcher(
    plan: dict[str, Any], argv: list[str], env: dict[str, str]
) -> tuple[list[str], tuple[int, ...], dict[str, str]]:
    """`argv` started by sandbox/landlock.py, which applies `plan` first (it reads it from a
    descriptor the server inherits), and the descriptors to pass."""
    from cli.safety.sandbox import launch as sandbox

    fd = sandbox.plan_fd(json.dumps(plan).encode())
    os.set_inheritable(fd, True)
    return [sys.executable, "-I", "-S", sandbox.CHILD_SCRIPT, str(fd), "--", *argv], (fd,), env


def _without_setenv(argv: list[str]) -> list[str]:
    out, skip = [], 0
    for arg in argv:
        if skip:
            skip -= 1
        elif arg == "--setenv":
            skip = 2
        elif arg != "--clearenv":
            out.append(arg)
    return out


class McpServers:
    """Every configured server; thread-safe enough for one loop plus the start-up threads."""

    def __init__(
        self,
        configs: Mapping[str, McpServerConfig],
        *,
        environ: Mapping[str, str],
        cwd: str,
        log_dir: Path,
        http_session: Callable[[], Any] | None = None,
        sandbox: SandboxSpec | None = None,
        echo: Callable[[str, bytes], None] | None = None,
    ) -> None:
        """`sandbox`: what a server with `sandbox: bwrap | landlock | seatbelt` is confined
        by — the same spec as run_command's (writable: the allowed dirs; secrets hidden)."""
        self.environ = dict(environ)
        self.cwd = cwd
        self.log_dir = log_dir
        self.servers = {name: Server(name, cfg) for name, cfg in configs.items()}
        for server in self.servers.values():
            if not server.config.enabled:
                server.status = "disabled"
        self._http_session = http_session
        self._sandbox = sandbox
        self._echo = echo  # (server, bytes): its stderr, for `agent run -v`
        self._logs: list[IO[bytes]] = []
        self._lock = threading.Lock()
        self._tools: dict[str, McpTool] = {}
        self._opened: list[Client] = []
        self._notices: list[str] = []  # to tell the user, once each (`notices`)
        self._said: set[str] = set()
        self._failed_said: set[str] = set()  # servers `failures` named already

    # -- start and stop ---------------------------------------------------------------------

    def start(self) -> None:
        """Start every enabled server, each in its own thread: a slow one delays no other."""
        for server in self.servers.values():
            if server.status == "disabled":
                continue
            server.started_at = time.monotonic()
            server.thread = threading.Thread(
                target=self._connect, args=(server,), daemon=True, name=f"mcp-{server.name}"
            )
            server.thread.start()

    def wait(self) -> list[str]:
        """Wait for the servers still starting, each at most its startup_timeout since it
        started; returns one line per server that could not be used (said once)."""
        for server in self.servers.values():
            if server.thread is None:
                continue
            left = server.started_at + server.config.startup_timeout - time.monotonic()
            server.thread.join(timeout=max(left, 0))
            if server.thread.is_alive() and server.status == "starting":
                server.status, server.error = (
                    "failed",
                    (f"did not start within {server.config.startup_timeout:g} s (startup_timeout)"),
                )
            server.thread = None
        self._rebuild()
        return self.failures()

    def failures(self) -> list[str]:
        """One line per server known by now not to have started (its start-up thread has
        ended, or `wait` gave up on it) that no earlier call named: a chat says them as soon
        as they are known, and `wait` then names only the others."""
        with self._lock:
            failed = [
                s
                for s in self.servers.values()
                if s.status == "failed"
                and s.name not in self._failed_said
                and (s.thread is None or not s.thread.is_alive())
            ]
            self._failed_said.update(s.name for s in failed)
        return [f"MCP server {s.name}: {s.error}; its tools are left out" for s in failed]

    def starting(self) -> list[threading.Thread]:
        """The start-up threads still running (to wait for without giving up on them)."""
        return [s.thread for s in self.servers.values() if s.thread and s.thread.is_alive()]

    def _connect(self, server: Server) -> None:
        client: Client | None = None
        try:
            client = self._open(server)
            version = client.initialize(server.config.startup_timeout)
            tools = client.list_tools()
        except Exception as exc:  # a server's odd answer must not end the session
            if client is not None:
                client.close()  # a server that failed to start is stopped, not left running
            if isinstance(exc, TimeoutError):
                why = "did not answer in time"
            elif isinstance(exc, McpError):
                why = str(exc)
            else:
                why = f"{type(exc).__name__}: {exc}"
            self._fail(server, why)
            return
        if server.status != "starting":  # given up on meanwhile: do not keep it
            client.close()
            return
        server.client, server.version, server.tools = client, version, tools
        server.status, server.error = "ready", ""

    def _fail(self, server: Server, why: str) -> None:
        client, server.client = server.client, None
        if client is not None:
            client.close()
        server.status, server.error = "failed", self._unseen(server, why).split("\n")[0][:300]

    def _open(self, server: Server) -> Client:
        config = server.config
        transport: Transport
        if config.url:
            session = self._http_session() if self._http_session else new_session()
            session.trust_env = False  # no proxy of ours in between
            filled = server.filled
            headers = {k: expand(v, self.environ, filled) for k, v in config.headers.items()}
            # Messages name the URL as the config wrote it: a token filled in stays unseen.
            url = expand(config.url, self.environ, filled)
            transport = Http(url, headers, session, config.url)
        else:
            env = server_environment(config, self.environ, server.filled)
            cwd = os.path.join(self.cwd, os.path.expanduser(config.cwd)) if config.cwd else self.cwd
            command = [
                expand(a, self.environ, server.filled) for a in (config.command, *config.args)
            ]
            argv, fds, env = confined(config, command, env, cwd, self._sandbox or SandboxSpec())
            self.log_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
            log = open(self.log_dir / f"{server.name}.log", "ab")  # noqa: SIM115
            written = shlex.join([config.command, *config.args])  # before ${…}: no token logged
            log.write(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} {written}\n".encode())
            self._logs.append(log)
            echo = self._echo
            shown = None if echo is None else (lambda data, n=server.name: echo(n, data))
            transport = Stdio(argv, env=env, cwd=cwd, log=log, pass_fds=fds, echo=shown)
        client = Client(transport, config.timeout)
        with self._lock:
            self._opened.append(client)  # whatever happens to it, close() stops it
        return client

    def close(self) -> None:
        """Stop every server (stdin closed, SIGTERM, SIGKILL after 2 s), in parallel."""
        closing = []
        for server in self.servers.values():
            server.client = None
        with self._lock:
            opened, self._opened = self._opened, []
        for client in opened:  # ready ones, and those still starting or given up on
            thread = threading.Thread(target=client.close, daemon=True)
            thread.start()
            closing.append(thread)
        for thread in closing:
            thread.join(timeout=10)
        for log in self._logs:
            try:
                log.close()
            except OSError:
                pass

    # -- tools -------------------------------------------------------------------------------

    def _rebuild(self) -> None:
        taken: set[str] = set()
        tools: dict[str, McpTool] = {}
        for server in self.servers.values():
            if server.status != "ready":
                continue
            listed = [t for t in server.tools if isinstance(t.get("name"), str)]
            listed = self._once_each(server, listed)
            listed = [t for t in listed if wanted(server.config, t["name"])][:MAX_TOOLS]
            listed = [t for t in listed if _schema_size(t) <= MAX_SCHEMA]  # the rest: too big
            names = tool_names(server.name, [t["name"] for t in listed], taken)
            for tool in listed:
                schema = _clean_schema(tool.get("inputSchema"))
                description = str(tool.get("description") or tool.get("title") or "")
                description = f"[MCP server {server.name}] {description}".strip()
                name = names[tool["name"]]
                offered = Tool(name, description[:2000], schema, self._runner(name))
                tools[name] = McpTool(offered, server.name, tool["name"])
        with self._lock:
            self._tools = tools

    def _once_each(self, server: Server, listed: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The first tool of each name the server lists; a later one of the same name is left
        out, and the user told. Offered too, it would need a name of ours the server never
        gave it, and a rule the user wrote for the name would not reach it."""
        seen: set[str] = set()
        first = []
        for tool in listed:
            name = tool["name"]
            if name in seen:
                self._notice(
                    f"MCP server {server.name}: it lists the tool {name[:100]!r} more than "
                    "once; only the first is offered"
                )
                continue
            seen.add(name)
            first.append(tool)
        return first

    def _notice(self, text: str) -> None:
        with self._lock:
            if text not in self._said:
                self._said.add(text)
                self._notices.append(text)

    def notices(self) -> list[str]:
        """What the user should hear about the servers' tools since last asked (each once a
        session): where the other start-up lines are shown."""
        with self._lock:
            said, self._notices = self._notices, []
        return said

    def _runner(self, name: str) -> Runner:
        return lambda _ctx, arguments, _paths: self.call(name, arguments)

    @property
    def tools(self) -> dict[str, McpTool]:
        with self._lock:
            return dict(self._tools)

    @property
    def offered(self) -> dict[str, Tool]:
        """The tools to offer beside ours, by name."""
        return {name: tool.offered for name, tool in self.tools.items()}

    def refresh(self) -> None:
        """Before a model step: list again the tools of servers that said they changed."""
        changed = False
        for server in self.servers.values():
            client = server.client
            if server.status == "ready" and client and client.tools_changed.is_set():
                try:
                    server.tools = client.list_tools()
                except Exception as exc:  # a failure of this server, never of the session
                    self._fail(
                        server, f"could not list its tools again: {exc or type(exc).__name__}"
                    )
                changed = True
        if changed:
            self._rebuild()

    def call(self, name: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """Run one of our names on its server; always a result, never an exception but
        KeyboardInterrupt (after the server was told to cancel)."""
        tool = self.tools.get(name)
        if tool is None:
            return {"success": False, "error": f"{name} is no longer offered by its server"}
        server = self.servers[tool.server]
        transport = server.client.transport if server.client else None
        if isinstance(transport, Http) and transport.broken:
            server.restarted = False  # an HTTP session that expired is opened again, always
        if server.client is None or not server.client.transport.alive:
            if server.restarted:
                why = server.error or "it stopped"
                return {"success": False, "error": f"MCP server {server.name} is down ({why})"}
            server.restarted = True  # once per session: a server that keeps dying stays down
            self._fail(server, "it stopped")
            server.status = "starting"
            self._connect(server)
            if server.status != "ready":
                return {
                    "success": False,
                    "error": f"MCP server {server.name} stopped and could not be restarted: "
                    f"{server.error}",
                }
        client = server.client
        assert client is not None
        try:
            result = client.call_tool(tool.tool, dict(arguments), server.config.timeout)
        except TimeoutError:
            return {
                "success": False,
                "error": f"{tool.tool} on MCP server {server.name} did not answer within "
                f"{server.config.timeout:g} s (it was told to cancel)",
            }
        except McpError as exc:  # a JSON-RPC error too: a failure the model can read
            return {
                "success": False,
                "error": self._unseen(server, f"MCP server {server.name}: {exc}"),
            }
        except Exception as exc:  # what a library raised on an odd answer: a failure, no traceback
            why = f"MCP server {server.name}: {type(exc).__name__}: {exc}"
            return {"success": False, "error": self._unseen(server, why)}
        return protocol.tool_result(result)

    @staticmethod
    def _unseen(server: Server, text: str) -> str:
        for value in server.filled:  # a token put in from the environment stays unseen
            text = text.replace(value, "${…}")
        return text

    def status(self) -> list[dict[str, Any]]:
        """For `agent mcp list` and `/mcp`."""
        rows = []
        for server in self.servers.values():
            mine = [name for name, t in self.tools.items() if t.server == server.name]
            rows.append(
                {
                    "name": server.name,
                    "transport": "http" if server.config.url else "stdio",
                    "status": server.status,
                    "protocol_version": server.version or None,
                    "error": server.error or None,
                    "tools": mine,
                }
            )
        return rows
