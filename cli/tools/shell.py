"""run_command (seed §5.1.7): off by default, every run confirmed unless the YAML says
otherwise. Output is capped while it is read, and a timeout kills the whole process group."""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
from collections.abc import Mapping
from typing import Any

from cli.paths import ResolvedPath
from cli.tools.base import Result, Tool, ToolContext, ToolError, integer, params, string

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


def child_environment(environ: Mapping[str, str], cwd: str) -> dict[str, str]:
    env = {k: environ[k] for k in ENV_ALLOWLIST if k in environ}
    env.update({k: v for k, v in environ.items() if k.startswith("LC_")})
    env.setdefault("PATH", os.defpath)
    env["PWD"] = cwd
    return env


def run_command(
    ctx: ToolContext, args: Mapping[str, Any], paths: Mapping[str, ResolvedPath]
) -> Result:
    command: str = args["command"]
    if not command.strip():
        raise ToolError("command is empty")
    cwd = paths["cwd"].real
    if not os.path.isdir(cwd):
        raise ToolError(f"cwd {ctx.show(cwd)} is not a directory")
    limits = ctx.limits
    timeout_ms = args.get("timeout", limits.command_timeout_ms)
    if timeout_ms < 1:
        raise ToolError("timeout is in milliseconds and must be at least 1")
    timeout_ms = min(timeout_ms, limits.max_command_timeout_ms)
    started = ctx.clock()
    try:
        proc = subprocess.Popen(
            ["/bin/sh", "-c", command],
            cwd=cwd,
            env=child_environment(ctx.environ, cwd),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,  # its own process group, so a timeout kills all of it
        )
    except OSError as exc:
        raise ToolError(f"could not start the command: {exc.strerror or exc}") from None
    try:
        out, err, timed_out = _collect(
            proc, started + timeout_ms / 1000, limits.max_command_output_bytes, ctx
        )
    finally:
        _kill_group(proc)
        proc.wait()
    duration = int((ctx.clock() - started) * 1000)
    result: Result = {
        "success": proc.returncode == 0 and not timed_out,
        "stdout": out.text,
        "stderr": err.text,
        "exitCode": proc.returncode,
        "duration": duration,
    }
    if out.dropped or err.dropped:
        result["truncated"] = True
        result["note"] = (
            f"output capped at {limits.max_command_output_bytes} bytes per stream; "
            f"{out.dropped + err.dropped} bytes dropped"
        )
    if timed_out:
        result["timedOut"] = True
        result["error"] = (
            f"timed out after {timeout_ms} ms; the command and its children were killed"
        )
    elif proc.returncode != 0:
        result["error"] = f"command exited with status {proc.returncode}"
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


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass  # already gone
    for pipe in (proc.stdout, proc.stderr):
        if pipe:
            pipe.close()


RUN_COMMAND = Tool(
    "run_command",
    "Run a shell command (/bin/sh -c) and return its stdout, stderr, exit code and duration. "
    "The user confirms every run. Never run destructive commands.",
    params(
        ["command"],
        command=string("The shell command to run."),
        cwd=string("Working directory for the command. Default: the agent's working directory."),
        timeout=integer("Timeout in milliseconds. Default: 30000. Max: 120000."),
    ),
    run_command,
)
