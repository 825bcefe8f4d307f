"""run_command: off by default, every run confirmed unless the YAML says
otherwise, and every run inside an OS sandbox (cli/safety/sandbox/launch.py) unless the YAML says
`policy.commands.sandbox: off`. Output is capped while it is read, a timeout kills the whole
process group, and CPU, memory and process limits hold."""

from __future__ import annotations

import os
import re
import selectors
import signal
import subprocess
from collections.abc import Collection, Mapping
from typing import Any

from cli.config.settings import LimitsConfig
from cli.errors import ToolError
from cli.fs.paths import ResolvedPath
from cli.safety import sensitive
from cli.safety.sandbox.launch import cleanup, prepare, setup_failure, spawn
from cli.safety.sandbox.spec import SandboxSpec, SandboxUnavailable
from cli.tools.base import Result, ToolContext

# The child gets these from our environment and nothing else: API tokens, cloud keys and
# the like stay with us (a command's output goes to the model).
ENV_ALLOWLIST = (
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LANGUAGE",
    "TERM",
    "TZ",
    "TMPDIR",
    "PWD",
)
_LOCALE = re.compile(r"LC_[A-Z]+")
# A second net under the allow list: a name that looks like a credential never passes, even
# if a later edit lets a whole family of names through.
# Cloud and server credentials travel in variables whose names say so only by prefix.
_SECRET_PREFIXES = ("AWS_", "OLLAMA_")


def child_environment(environ: Mapping[str, str], cwd: str) -> dict[str, str]:
    env = {k: v for k, v in environ.items() if k in ENV_ALLOWLIST or _LOCALE.fullmatch(k)}
    env = {
        k: v
        for k, v in env.items()
        if not sensitive.names_secret(k) and not k.upper().startswith(_SECRET_PREFIXES)
    }
    env.setdefault("PATH", os.defpath)
    env["PWD"] = cwd
    return env


def sandbox_of(ctx: ToolContext) -> SandboxSpec:
    """The sandbox the wiring configured; without one, the strictest useful default (the
    working dir writable, nothing else), never "off"."""
    spec = getattr(ctx, "sandbox", None)
    if isinstance(spec, SandboxSpec):
        return spec
    home = ctx.environ.get("HOME") or os.path.expanduser("~")
    return SandboxSpec("auto", (os.path.realpath(ctx.cwd),), (), home)


def run_command(
    ctx: ToolContext, args: Mapping[str, Any], paths: Mapping[str, ResolvedPath]
) -> Result:
    cwd = paths["cwd"].real if "cwd" in paths else None
    return run_command_in(
        sandbox_of(ctx), ctx, args["command"], cwd=cwd, timeout_ms=args.get("timeout")
    )


def run_command_in(
    spec: SandboxSpec,
    ctx: ToolContext,
    command: str,
    *,
    cwd: str | None = None,
    timeout_ms: int | None = None,
    available: Collection[str] | None = None,
) -> Result:
    """Run `command` with /bin/sh in the sandbox `spec` describes. `available` stands in for
    the machine's sandbox probes (tests)."""
    if not command.strip():
        raise ToolError("command is empty")
    cwd = cwd or ctx.cwd
    if not os.path.isdir(cwd):
        raise ToolError(f"cwd {ctx.show(cwd)} is not a directory")
    limits = ctx.limits
    timeout_ms = _timeout(limits, timeout_ms)
    try:
        launch = prepare(spec, command, cwd, child_environment(ctx.environ, cwd), limits, available)
    except SandboxUnavailable as exc:
        raise ToolError(str(exc)) from None
    try:
        started = ctx.clock()
        try:
            proc = spawn(launch)
        except OSError as exc:
            raise ToolError(f"could not start the command: {exc.strerror or exc}") from None
        try:
            out, err, timed_out = _collect(
                proc, started + timeout_ms / 1000, limits.max_command_output_bytes, ctx
            )
        finally:
            kill_group(proc)
            proc.wait()
        duration = int((ctx.clock() - started) * 1000)
    finally:
        cleanup(launch)
    result = _result(proc.returncode, out, err, duration, limits.max_command_output_bytes)
    result["sandbox"] = launch.kind
    if timed_out:
        result["success"] = False
        result["timedOut"] = True
        result["error"] = (
            f"timed out after {timeout_ms} ms; the command and its children were killed"
        )
    return result


def _timeout(limits: LimitsConfig, requested: int | None) -> int:
    requested = limits.command_timeout_ms if requested is None else requested
    if requested < 1:
        raise ToolError("timeout is in milliseconds and must be at least 1")
    return min(requested, limits.max_command_timeout_ms)


def _result(code: int, out: _Capped, err: _Capped, duration: int, cap: int) -> Result:
    result: Result = {
        "success": code == 0,
        "stdout": out.text,
        "stderr": err.text,
        "exitCode": code,
        "duration": duration,
    }
    if out.dropped or err.dropped:
        result["truncated"] = True
        result["note"] = (
            f"output capped at {cap} bytes per stream; {out.dropped + err.dropped} bytes dropped"
        )
    failure = setup_failure(code, err.text)
    if failure:
        result["error"] = f"the sandbox could not be set up, so nothing ran: {failure}"
    elif code != 0:
        result["error"] = f"command exited with status {code}"
    return result


class _Capped:
    """Keeps the first `limit` bytes of a stream and counts the rest."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.data = bytearray()
        self.dropped = 0

    def add(self, chunk: bytes) -> None:
        room = self.limit - len(self.data)
        self.data += chunk[:room]
        self.dropped += max(0, len(chunk) - room)

    @property
    def text(self) -> str:
        return self.data.decode("utf-8", "replace")


def _collect(
    proc: subprocess.Popen[bytes], deadline: float, limit: int, ctx: ToolContext
) -> tuple[_Capped, _Capped, bool]:
    out, err = _Capped(limit), _Capped(limit)
    assert proc.stdout is not None and proc.stderr is not None
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ, out)
        selector.register(proc.stderr, selectors.EVENT_READ, err)
        # Read until both pipes close (EOF), not until the shell exits: a background child
        # holding the pipe is still part of the command.
        while selector.get_map():
            remaining = deadline - ctx.clock()
            if remaining <= 0:
                return out, err, True
            for key, _ in selector.select(min(remaining, 0.5)):
                chunk = os.read(key.fd, 65536)
                if chunk:
                    key.data.add(chunk)
                else:
                    selector.unregister(key.fileobj)
    remaining = deadline - ctx.clock()
    try:
        proc.wait(timeout=max(remaining, 0.001))
    except subprocess.TimeoutExpired:
        return out, err, True
    return out, err, False


def kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the child's process group (a no-op when it is gone) and close its pipes."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass  # already gone
    for pipe in (proc.stdout, proc.stderr):
        if pipe:
            pipe.close()
