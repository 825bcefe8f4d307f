"""What a tool call becomes in the audit log: the loop's events turned into records (the
call's arguments summarised and redacted, its decision and outcome), appended to the
hash-chained log (cli/records/audit.py) by an AuditLog, one per session.
"""

from __future__ import annotations

import hashlib
import math
import secrets
import time
from collections.abc import Callable, Generator, Iterable, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from cli.backends.messages import ToolCall
from cli.config.settings import MCP_PREFIX
from cli.loop import outcomes
from cli.loop.events import Event, Notice, ToolCallProposed, ToolDecided, ToolResult
from cli.loop.hooks import HookRun
from cli.loop.outcomes import Outcome
from cli.records.audit import append_record, canonical, default_path
from cli.safety.redaction import REDACTED, header_name, redact
from cli.safety.sensitive import names_secret

MAX_STRING = 200  # longer strings are summarised by size and hash
MAX_KEPT = 2000  # paths and commands are kept whole up to this length
MAX_ARGUMENTS = 8192  # bytes of summarised arguments; beyond, the whole set is summarised
MAX_ERROR = 200

# Kept in the record however long they are (up to MAX_KEPT): what a reader of the log needs
# to know what was touched or run. Secrets inside them are still redacted.
_KEPT = frozenset({"path", "cwd", "command"})
# File contents in our tools' arguments, kept as size and sha256 only, however short (the docs
# promise contents stay out of the log): what write_file writes, and the text edit_file
# finds and puts in its place. A search's query is not content: it is kept as a command is.
_SUMMARISED = frozenset({"content", "old_string", "new_string"})


def digest(data: str | bytes) -> dict[str, Any]:
    """Size and sha256: enough to tell what was written without keeping it."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    return {"bytes": len(raw), "sha256": hashlib.sha256(raw).hexdigest()}


def summarise_arguments(arguments: Mapping[str, Any]) -> dict[str, Any]:
    """The arguments as the log keeps them: contents and long strings as size and hash,
    secrets redacted."""
    summary = {redact(str(k)): _summarise(str(k), v) for k, v in arguments.items()}
    if len(canonical(summary)) > MAX_ARGUMENTS:
        return {"summarised": digest(canonical(summary))}
    return summary


def _summarise(key: str, value: Any) -> Any:
    if names_secret(key) or header_name(key):
        return REDACTED
    if key in _SUMMARISED:
        # The hash is of the real content, so it can be compared with the file on disk.
        return digest(value if isinstance(value, str) else canonical(value))
    if isinstance(value, str):
        text = redact(value)
        limit = MAX_KEPT if key in _KEPT else MAX_STRING
        if len(text) <= limit:
            return text
        return {**digest(text), "start": text[:MAX_STRING]} if key in _KEPT else digest(text)
    if isinstance(value, Mapping):
        return {redact(str(k)): _summarise(str(k), v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        # An argv-style list: the item after a secret-named flag ("--password", "X") is one.
        flags = [
            isinstance(v, str) and v[:1] == "-" and "=" not in v and names_secret(v) for v in value
        ]
        return [
            REDACTED if i and flags[i - 1] else _summarise("", item) for i, item in enumerate(value)
        ]
    if value is None or isinstance(value, (bool, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    return _summarise(key, str(value))


def new_session_id() -> str:
    return secrets.token_hex(6)


def session_log(environ: Mapping[str, str], cwd: str, name: str | None = None) -> AuditLog:
    """The log for one `agent run` or one `agent chat`, under the session's name as `agent
    sessions` lists it (a chat's time, `run-<time>`), or a fresh id without one. Logs written
    before carry the 12-hex-digit ids: the name is just another string in the chain."""
    return AuditLog(default_path(environ), name or new_session_id(), cwd=cwd)


class AuditLog:
    """Appends one record per tool call to `path`. Never raises: a record that cannot be
    written leaves `error` set, and `warning()` says so once."""

    def __init__(
        self,
        path: Path,
        session_id: str,
        clock: Callable[[], float] = time.time,
        cwd: str | None = None,
    ) -> None:
        self.path = path
        self.session_id = session_id
        self.clock = clock
        self.cwd = cwd
        self.seq = 0
        self.error: str | None = None
        self._warned = False

    def record(self, event: ToolResult) -> bool:
        """Log a call that was decided and, if allowed, run; False if it could not be."""
        decided = event.decision
        happened = outcomes.outcome(decided, event.result)  # cli/loop/outcomes.py's words
        if happened == "allowed":
            error = None
        elif happened == "failed":
            error = str(event.result.get("error") or "failed")
        else:
            error = decided.reason
        fields = self._fields(event.call, decided, happened, error, event.duration)
        fields["result_bytes"] = len(canonical(dict(event.result)))
        exit_code = event.result.get("exitCode")
        if isinstance(exit_code, int) and not isinstance(exit_code, bool):
            fields["exit_code"] = exit_code
        return self._append(fields)

    def record_hook(self, ran: HookRun) -> bool:
        """Log a hook that ran (cli/loop/hooks.py): which, for which tool, its argv (the
        user's config, redacted as a command is), how it ended."""
        self.seq += 1
        return self._append(
            {
                "time": _iso(self.clock()),
                "session": self.session_id,
                "seq": self.seq,
                "cwd": self.cwd,
                "hook": ran.kind,
                "tool": redact(ran.tool)[:100] or None,
                "command": _summarise("", list(ran.argv)),
                "outcome": f"hook_{ran.outcome}",
                "exit_code": ran.exit_code,
                "error": redact(ran.message)[:MAX_ERROR] or None,
                "duration_ms": round(ran.seconds * 1000),
            }
        )

    def record_interrupted(self, event: ToolCallProposed | ToolDecided) -> bool:
        """Log a call that Ctrl-C cut short: before it was decided, or while it ran."""
        decided = event if isinstance(event, ToolDecided) else None
        error = "interrupted before it finished" if decided else "interrupted before a decision"
        return self._append(self._fields(event.call, decided, "interrupted", error, None))

    def warning(self) -> str | None:
        """The line to show the first time a record could not be written; then None."""
        if self.error is None or self._warned:
            return None
        self._warned = True
        return f"the audit log could not be written ({self.error}); tool calls go unrecorded"

    def _fields(
        self,
        call: ToolCall,
        decided: ToolDecided | None,
        outcome: Outcome,
        error: str | None,
        duration: float | None,
    ) -> dict[str, Any]:
        self.seq += 1
        decision = None if decided is None else "allow" if decided.allowed else "deny"
        server = {}
        if call.name.startswith(MCP_PREFIX):  # mcp__<server>__<tool>: which server it went to
            server = {"server": redact(call.name[len(MCP_PREFIX) :].split("__", 1)[0])[:100]}
        return {
            "time": _iso(self.clock()),
            "session": self.session_id,
            "seq": self.seq,
            "cwd": self.cwd,
            "tool": redact(call.name)[:100],
            "arguments": summarise_arguments(call.arguments),
            "decision": decision,
            "rule": outcomes.rule(decided) if decided else None,
            "approved_by": (decided.approved_by or None) if decided else None,
            "outcome": outcome,
            "error": redact(error)[:MAX_ERROR] if error else None,
            "duration_ms": None if duration is None else round(duration * 1000),
            **server,
            # How the model's call was mended before it ran (agent.aids: repair), if it was.
            **({"repairs": [redact(r)[:200] for r in call.repairs[:8]]} if call.repairs else {}),
        }

    def _append(self, fields: dict[str, Any]) -> bool:
        try:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            append_record(self.path, fields)
        except Exception as exc:  # the audit must never end a session: warn instead
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            self.error = f"{self.path}: {reason}"
            return False
        return True


def _iso(timestamp: float) -> str:
    moment = datetime.fromtimestamp(timestamp, tz=timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def audited(events: Iterable[Event], log: AuditLog) -> Generator[Event, None, None]:
    """Pass `events` through unchanged, recording each tool call in `log` as its result goes
    by; a call cut short by Ctrl-C is recorded as interrupted. Closing this closes `events`,
    so the loop still tidies the conversation up. The first failed write adds a Notice."""
    iterator = iter(events)
    pending: ToolCallProposed | ToolDecided | None = None
    try:
        for event in iterator:
            if isinstance(event, (ToolCallProposed, ToolDecided)):
                pending = event
            elif isinstance(event, ToolResult):
                pending = None
                log.record(event)  # before the yield: a consumer's Ctrl-C cannot skip it
            elif isinstance(event, HookRun):
                log.record_hook(event)
            yield event
            # After every event, not only a result: others record too (chat's @file).
            warning = log.warning()
            if warning:
                yield Notice(warning)
    finally:
        close = getattr(iterator, "close", None)
        if close is not None:
            close()
        if pending is not None:
            log.record_interrupted(pending)
