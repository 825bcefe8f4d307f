"""Hooks around tool calls: the user's own programs, named in their own config (hooks.pre_tool,
hooks.post_tool, hooks.stop), run with the call, its result or the turn's end as JSON on stdin.

- A hook runs outside the sandbox, as the user's program, with the user's environment (and
  METONA_HOOK set to its kind), in the working directory. Its argv is the config's, exactly:
  nothing the model wrote is ever in it, only on its stdin.
- pre_tool: exit 0 goes on; exit 2 refuses the call, with the hook's stderr as the reason the
  model reads; any other ending (another status, a crash, a timeout, a program that cannot
  start, stdout that is not empty or a JSON object as below) is a hook error: it is shown, and
  the call is put to a person (never allowed silently, not by --yes either). A pre_tool hook
  may also write `{"decision": "deny" | "ask", "reason": "…"}` on stdout: it can make a call
  stricter, never let one run that would not.
- post_tool: runs after a call ran; exit 2 hands its stderr to the model with the result; any
  other failure is shown.
- stop: runs when a turn ends with an answer (or at the step limit); a failure is shown.
- Each is bounded by its timeout_seconds (hooks.timeout_seconds, default 10): then its whole
  process group is killed. At most MAX_OUTPUT bytes of its stdout and stderr are kept.
"""

from __future__ import annotations

import fnmatch
import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import IO, Any, Literal

from cli.config.settings import HookConfig, HooksConfig

Kind = Literal["pre_tool", "post_tool", "stop"]
# "ok": went on; "denied": exit 2 (or a deny on stdout); "ask": its stdout asked for a person;
# "error": anything else (another exit status, a timeout, a program that would not start).
HookOutcome = Literal["ok", "denied", "ask", "error"]

DENY_EXIT = 2
MAX_OUTPUT = 64 * 1024  # bytes of a hook's stdout and of its stderr kept
MAX_REASON = 1000  # characters of a hook's stderr the model reads


@dataclass(frozen=True)
class HookRun:
    """One hook that ran, as the audit log keeps it and the loop acts on it."""

    kind: Kind
    tool: str  # the call's tool ("" for stop)
    argv: tuple[str, ...]
    outcome: HookOutcome
    exit_code: int | None  # None: it timed out or could not start
    message: str  # denied: its stderr (the reason); error: what went wrong, in one line
    seconds: float

    @property
    def name(self) -> str:
        """How a line names the hook: its first two words, each without its directory
        (`guard`, `python3 check.py`, `sh -c`)."""
        return " ".join(os.path.basename(word) for word in self.argv[:2])[:80] or "?"


class Hooks:
    """The configured hooks of one session."""

    def __init__(self, config: HooksConfig, cwd: str, environ: Mapping[str, str]) -> None:
        self.config = config
        self.cwd = cwd
        self.environ = dict(environ)

    def __bool__(self) -> bool:
        return bool(self.config.pre_tool or self.config.post_tool or self.config.stop)

    def matching(self, kind: Kind, tool: str = "", listed: str = "") -> list[HookConfig]:
        """The hooks of `kind` whose match takes the tool by the name the model was offered
        or (an MCP tool) by the name its server listed it by, as the policy's rules do."""
        hooks: Sequence[HookConfig] = getattr(self.config, kind)
        if kind == "stop":
            return list(hooks)
        names = {tool, listed or tool}
        return [
            h for h in hooks if any(fnmatch.fnmatchcase(name, h.match or "*") for name in names)
        ]

    def run(
        self, kind: Kind, payload: Mapping[str, Any], tool: str = "", listed: str = ""
    ) -> list[HookRun]:
        """Run each hook of `kind` matching `tool` (or `listed`, its server's name for it),
        in order; a pre_tool one that refuses (or asks, or fails) ends the list: the hooks
        after it are not run."""
        runs: list[HookRun] = []
        data = json.dumps({"hook": kind, **payload}, default=str).encode("utf-8", "replace")
        for hook in self.matching(kind, tool, listed):
            ran = self._run_one(kind, hook, data, tool)
            runs.append(ran)
            if kind == "pre_tool" and ran.outcome != "ok":
                break
        return runs

    def _run_one(self, kind: Kind, hook: HookConfig, data: bytes, tool: str) -> HookRun:
        argv = tuple(hook.command)
        if argv and argv[0].startswith("~/"):  # `~/bin/check` names the user's own program
            argv = (os.path.join(self.environ.get("HOME", "~"), argv[0][2:]), *argv[1:])
        timeout = hook.timeout_seconds or self.config.timeout_seconds
        started = time.monotonic()

        def ended(outcome: HookOutcome, code: int | None, message: str) -> HookRun:
            return HookRun(kind, tool, argv, outcome, code, message, time.monotonic() - started)

        env = {**self.environ, "METONA_HOOK": kind}
        try:
            process = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=self.cwd,
                env=env,
                start_new_session=True,  # its own process group: a timeout kills all of it
                close_fds=True,
            )
        except (OSError, ValueError) as exc:
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            return ended("error", None, f"could not start: {why}")
        out, err = _Capped(process.stdout), _Capped(process.stderr)
        feeder = threading.Thread(target=_feed, args=(process.stdin, data), daemon=True)
        for thread in (feeder, out.thread, err.thread):
            thread.start()
        deadline = started + timeout
        try:
            code = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(process)
            process.wait()
            out.thread.join(1)
            err.thread.join(1)
            return ended("error", None, f"timed out after {timeout:g} s (timeout_seconds)")
        _kill_group(process)  # what it left running in its group goes with it
        for thread in (out.thread, err.thread):  # what is left of the same timeout, no more
            thread.join(max(0.0, deadline - time.monotonic()))
        if out.thread.is_alive() or err.thread.is_alive():
            # A process it left outside its group (setsid) holds its stdout or stderr open:
            # what it said is not all there, so it decides nothing.
            return ended(
                "error",
                code,
                f"it exited, but a process it started still holds its output open after "
                f"{timeout:g} s (timeout_seconds)",
            )
        stderr = err.text().strip()
        if code == DENY_EXIT and kind != "stop":  # pre_tool refuses, post_tool tells the model
            return ended("denied", code, stderr[:MAX_REASON])
        if code != 0:
            why = f"exit status {code}" if code > 0 else f"killed by signal {-code}"
            first = stderr.splitlines()[0][:200] if stderr else ""
            return ended("error", code, f"{why}{': ' + first if first else ''}")
        said = _stdout_word(out.text(), kind)
        if isinstance(said, str):
            return ended("error", code, said)
        if said is not None:
            return ended(said[0], code, said[1])
        return ended("ok", code, "")


def _stdout_word(stdout: str, kind: Kind) -> tuple[HookOutcome, str] | str | None:
    """What a hook's stdout says: None (nothing: go on), (outcome, reason) for a pre_tool
    hook's decision, or a str: why the stdout is malformed."""
    text = stdout.strip()
    if not text:
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return "its stdout is not empty and not a JSON object (write messages to stderr)"
    if not isinstance(data, dict):
        return "its stdout is JSON but not an object"
    decision = data.get("decision")
    reason = data.get("reason", "")
    if decision is None:
        return None
    if kind != "pre_tool" or decision not in ("deny", "ask") or not isinstance(reason, str):
        return 'its stdout\'s "decision" is not "deny" or "ask" (with a string "reason")'
    return ("denied" if decision == "deny" else "ask"), reason[:MAX_REASON]


def _feed(stream: IO[bytes] | None, data: bytes) -> None:
    """Write the payload and close stdin; a hook that does not read it is no error."""
    if stream is None:
        return
    try:
        stream.write(data)
    except (BrokenPipeError, OSError, ValueError):
        pass
    finally:
        try:
            stream.close()
        except (BrokenPipeError, OSError):
            pass


class _Capped:
    """A reader thread keeping the first MAX_OUTPUT bytes of a stream and draining the rest."""

    def __init__(self, stream: IO[bytes] | None) -> None:
        self.stream = stream
        self.kept = bytearray()
        self.thread = threading.Thread(target=self._read, daemon=True)

    def _read(self) -> None:
        if self.stream is None:
            return
        try:
            while chunk := self.stream.read(65536):
                room = MAX_OUTPUT - len(self.kept)
                if room > 0:
                    self.kept += chunk[:room]
        except (OSError, ValueError):
            pass
        finally:
            try:
                self.stream.close()
            except OSError:
                pass

    def text(self) -> str:
        return bytes(self.kept).decode("utf-8", "replace")


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError, OSError):
        pass


def pre_tool_payload(
    tool: str, arguments: Mapping[str, Any], action: str, rule: str, reason: str, cwd: str
) -> dict[str, Any]:
    """What a pre_tool hook reads on stdin."""
    return {
        "tool": tool,
        "arguments": dict(arguments),
        "decision": {"action": action, "rule": rule, "reason": reason},
        "cwd": cwd,
    }
