"""The audit log: one JSON line per tool call, chained by hashes so that edits show.

Append-only at `$XDG_STATE_HOME/metona-agent/audit.jsonl`. Each record carries the sha256 of
the line before it, so an edited, deleted or reordered line breaks the chain that
`agent audit verify` checks. That makes the log tamper-evident, not tamper-proof: nothing
here holds a key, so someone who rewrites the whole file can rebuild a valid chain, and
lines cut from the end leave no trace.

What a call carried is summarised before it reaches the disk: file contents and long strings
by size and sha256, anything that looks like a secret replaced by "[redacted]". What a tool
returned (file contents, command output) is never written, only its size and success.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import math
import os
import re
import secrets
import time
from collections import deque
from collections.abc import Callable, Generator, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

from cli.config import state_dir
from cli.events import Event, Notice, ToolCallProposed, ToolDecided, ToolResult
from cli.messages import ToolCall

Outcome = Literal["ok", "error", "denied", "declined", "interrupted"]

GENESIS = "0" * 64  # the `prev` of the first record
REDACTED = "[redacted]"
MAX_STRING = 200  # longer strings are summarised by size and hash
MAX_KEPT = 2000  # paths and commands are kept whole up to this length
MAX_ARGUMENTS = 8192  # bytes of summarised arguments; beyond, the whole set is summarised
MAX_ERROR = 200

# Kept in the record however long they are (up to MAX_KEPT): what a reader of the log needs
# to know what was touched or run. Secrets inside them are still redacted.
_KEPT = frozenset({"path", "cwd", "command"})
_SUMMARISED = frozenset({"content"})

# Argument names whose whole value is a secret, whatever it looks like.
_SECRET_KEY = re.compile(
    r"passw(?:or)?d|passphrase|secret|token|api[_-]?key|access[_-]?key|private[_-]?key"
    r"|credential|authorization|cookie",
    re.IGNORECASE,
)
_SECRET_WORD = (
    r"(?:passw(?:or)?d|passphrase|secret|token|api[_-]?key|apikey|access[_-]?key"
    r"|private[_-]?key|credentials?)"
)
_VALUE = r"(\"[^\"]*\"|'[^']*'|[^\s\"'&;|,]+)"

# Secrets inside strings: each pattern is replaced by its first group (what to keep, such as
# `--password=`) followed by "[redacted]". Known token shapes go whole.
_SECRETS: tuple[re.Pattern[str], ...] = (
    re.compile(
        r"()-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----.*?(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|\Z)",
        re.DOTALL,
    ),
    re.compile(r"(\bauthorization\s*[:=]\s*(?:(?:bearer|basic|token|digest)\s+)?)" + _VALUE, re.I),
    re.compile(r"(\bbearer\s+)[A-Za-z0-9._~+/=-]{8,}", re.I),
    re.compile(r"()\bsk-[A-Za-z0-9_-]{16,}"),  # OpenAI, Anthropic
    re.compile(r"()\b[rsp]k_(?:live|test)_[A-Za-z0-9]{16,}"),  # Stripe
    re.compile(r"()\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})"),  # GitHub
    re.compile(r"()\bglpat-[A-Za-z0-9_-]{20,}"),  # GitLab
    re.compile(r"()\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),  # AWS access key ids
    re.compile(r"()\bxox[abposr]-[A-Za-z0-9-]{10,}"),  # Slack
    re.compile(r"()\bAIza[0-9A-Za-z_-]{35}"),  # Google API keys
    re.compile(r"()\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"),  # JWT
    re.compile(r"(\b[a-z][a-z0-9+.-]*://[^/\s:@]+:)[^@\s/]+(?=@)", re.I),  # user:pass@host
    # token=…, PASSWORD=…, "api_key": "…", --password=…
    re.compile(r"(\b[\w.-]*" + _SECRET_WORD + r"[\w.-]*[\"']?\s*[:=]\s*)" + _VALUE, re.I),
    # --password X, --api-key X
    re.compile(r"((?<![\w-])--?[\w-]*" + _SECRET_WORD + r"[\w-]*\s+)" + _VALUE, re.I),
    # `-p X` is a password only for these programs (for mkdir, ssh or cp it is not; and
    # mysql's -P is the port, hence no IGNORECASE).
    re.compile(r"(\b(?:mysql|mysqldump|mysqladmin|mariadb|sshpass)\b[^|;&\n]*?\s-p\s*)" + _VALUE),
    re.compile(r"(\bredis-cli\b[^|;&\n]*?\s-a\s+)" + _VALUE),
    re.compile(r"(\s(?:-u|--user)[\s=]+[^\s:\"']+:)([^\s\"']+)"),  # curl -u user:password
)


def redact(text: str) -> str:
    """`text` with everything that looks like a secret replaced by "[redacted]"."""
    for pattern in _SECRETS:
        text = pattern.sub(lambda m: m.group(1) + REDACTED, text)
    return text


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
    if _SECRET_KEY.search(key):
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
        return [_summarise("", item) for item in value]
    if value is None or isinstance(value, (bool, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    return _summarise(key, str(value))


def canonical(data: Any) -> str:
    """The one JSON spelling that is hashed: sorted keys, no spaces, ASCII only."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# -- writing ---------------------------------------------------------------------------------


def default_path(environ: Mapping[str, str]) -> Path:
    return state_dir(environ) / "audit.jsonl"


def new_session_id() -> str:
    return secrets.token_hex(6)


def session_log(environ: Mapping[str, str], cwd: str) -> AuditLog:
    """The log for one `agent run` or one `agent chat`, under a fresh session id."""
    return AuditLog(default_path(environ), new_session_id(), cwd=cwd)


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
        if decided.allowed:
            ok = bool(event.result.get("success"))
            outcome: Outcome = "ok" if ok else "error"
            error = None if ok else str(event.result.get("error") or "failed")
        else:
            outcome = "denied" if decided.decision.action == "deny" else "declined"
            error = decided.reason
        fields = self._fields(event.call, decided, outcome, error, event.duration)
        fields["result_bytes"] = len(canonical(dict(event.result)))
        exit_code = event.result.get("exitCode")
        if isinstance(exit_code, int) and not isinstance(exit_code, bool):
            fields["exit_code"] = exit_code
        return self._append(fields)

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
        return {
            "time": _iso(self.clock()),
            "session": self.session_id,
            "seq": self.seq,
            "cwd": self.cwd,
            "tool": redact(call.name)[:100],
            "arguments": summarise_arguments(call.arguments),
            "decision": decision,
            "rule": decided.decision.rule if decided else None,
            "approved_by": (decided.approved_by or None) if decided else None,
            "outcome": outcome,
            "error": redact(error)[:MAX_ERROR] if error else None,
            "duration_ms": None if duration is None else round(duration * 1000),
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


def append_record(path: Path, fields: Mapping[str, Any]) -> dict[str, Any]:
    """Chain `fields` to the last line of `path` and append it as one line; returns the
    record written. The lock makes "read the last line, append" one step, so agents
    running at once still build a single chain."""
    flags = os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # released when fd is closed
        last, complete = _last_line(fd)
        record = {**fields, "prev": GENESIS if last is None else _sha256(last)}
        record["hash"] = _sha256(canonical(record).encode("ascii"))
        line = json.dumps(record, separators=(",", ":"), ensure_ascii=True) + "\n"
        # A line cut short by a crash stays broken (verify reports it); ours starts afresh.
        data = line.encode("ascii") if complete else b"\n" + line.encode("ascii")
        while data:
            data = data[os.write(fd, data) :]
        return record
    finally:
        os.close(fd)


def _last_line(fd: int) -> tuple[bytes | None, bool]:
    """The last line's bytes without its newline (None for an empty file), and whether the
    file ends with a newline."""
    size = os.fstat(fd).st_size
    if size == 0:
        return None, True
    complete = os.pread(fd, 1, size - 1) == b"\n"
    pieces: list[bytes] = []
    position = size - 1 if complete else size
    while position > 0:
        step = min(65536, position)
        position -= step
        block = os.pread(fd, step, position)
        newline = block.rfind(b"\n")
        if newline >= 0:
            pieces.append(block[newline + 1 :])
            break
        pieces.append(block)
    return b"".join(reversed(pieces)), complete


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
            yield event
            warning = log.warning()
            if warning:
                yield Notice(warning)
    finally:
        close = getattr(iterator, "close", None)
        if close is not None:
            close()
        if pending is not None:
            log.record_interrupted(pending)


# -- reading ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class ChainCheck:
    """What `verify` found: how many records are intact, and the first break if any."""

    records: int
    line: int | None = None
    problem: str | None = None

    @property
    def intact(self) -> bool:
        return self.problem is None


def verify(path: Path) -> ChainCheck:
    """Recompute every record's hash and every link; stops at the first break. Raises
    OSError if the file cannot be read."""
    previous: bytes | None = None
    number = 0
    with open(path, "rb") as lines:
        for number, raw in enumerate(lines, 1):
            if not raw.endswith(b"\n"):
                return ChainCheck(number - 1, number, "the last line is cut short (truncated?)")
            line = raw[:-1]
            problem = _check(line, previous, number)
            if problem:
                return ChainCheck(number - 1, number, problem)
            previous = line
    return ChainCheck(number)


def _check(line: bytes, previous: bytes | None, number: int) -> str | None:
    try:
        record = json.loads(line)
    except ValueError:
        return "not a JSON record (edited or cut short?)"
    if not isinstance(record, dict) or not all(
        isinstance(record.get(k), str) for k in ("hash", "prev")
    ):
        return "not an audit record: no hash or prev (edited?)"
    claimed = record.pop("hash")
    if _sha256(canonical(record).encode("ascii")) != claimed:
        return "hash does not match its content (edited?)"
    if previous is None and record["prev"] != GENESIS:
        return "prev is not the start of a chain (lines deleted from the top?)"
    if previous is not None and record["prev"] != _sha256(previous):
        return f"prev does not match line {number - 1} (deleted or reordered?)"
    return None


def tail(path: Path, count: int) -> list[tuple[int, dict[str, Any] | None]]:
    """The last `count` lines as (line number, record), None for a line that is not one.
    Raises OSError if the file cannot be read."""
    last: deque[tuple[int, dict[str, Any] | None]] = deque(maxlen=count)
    with open(path, "rb") as lines:
        for number, raw in enumerate(lines, 1):
            try:
                record = json.loads(raw)
            except ValueError:
                record = None
            last.append((number, record if isinstance(record, dict) else None))
    return list(last)
