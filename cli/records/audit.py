"""The audit log: one JSON line per tool call, chained by hashes so that edits show.

Append-only at `$XDG_STATE_HOME/metona-agent/audit.jsonl`. Each record carries the sha256 of
the line before it, so an edited, deleted or reordered line breaks the chain that
`agent audit verify` checks. That makes the log tamper-evident, not tamper-proof: nothing
here holds a key, so someone who rewrites the whole file can rebuild a valid chain, and
lines cut from the end leave no trace.

What a call carried is summarised before it reaches the disk: file contents and long strings
by size and sha256, anything that looks like a secret replaced by "[redacted]". What a tool
returned (file contents, command output) is never written, only its size and success. That
is cli/records/audit_events.py's part; this module keeps the chain: appending, verifying,
reading back.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cli.backends.messages import JSONTooDeep, loads_json
from cli.config.settings import state_dir
from cli.fs import _platform, stored

GENESIS = "0" * 64  # the `prev` of the first record


def canonical(data: Any) -> str:
    """The one JSON spelling that is hashed: sorted keys, no spaces, ASCII only."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# -- writing ---------------------------------------------------------------------------------


def default_path(environ: Mapping[str, str]) -> Path:
    return state_dir(environ) / "audit.jsonl"


def recent_sessions(path: Path, window: int = 65536) -> set[str]:
    """The session names of the records in the log's last `window` bytes (none if it cannot
    be read): a run's name must not be one of them, even when nothing was saved under it."""
    try:
        with open(path, "rb") as file:
            size = file.seek(0, os.SEEK_END)
            file.seek(max(0, size - window))
            chunk = file.read(window)
    except OSError:
        return set()
    names = set()
    for raw in chunk.split(b"\n"):
        try:
            record = loads_json(raw)
        except ValueError:  # the cut first line, a broken one: verify says which
            continue
        if isinstance(record, dict) and isinstance(record.get("session"), str):
            names.add(record["session"])
    return names


def append_record(path: Path, fields: Mapping[str, Any]) -> dict[str, Any]:
    """Chain `fields` to the last line of `path` and append it as one line; returns the
    record written. The lock makes "read the last line, append" one step, so agents
    running at once still build a single chain."""
    flags = os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags, 0o600)
    try:
        _platform.lock_exclusive(fd)  # released when fd is closed
        last, complete = _last_line(fd)
        record = {**fields, "prev": GENESIS if last is None else last}
        record["hash"] = _sha256(canonical(record).encode("ascii"))
        line = json.dumps(record, separators=(",", ":"), ensure_ascii=True) + "\n"
        # A line cut short by a crash stays broken (verify reports it); ours starts afresh.
        data = line.encode("ascii") if complete else b"\n" + line.encode("ascii")
        while data:
            data = data[os.write(fd, data) :]
        return record
    finally:
        os.close(fd)


def _last_line(fd: int) -> tuple[str | None, bool]:
    """The sha256 of the last line without its newline (None for an empty file), and whether
    the file ends with a newline. The line is found from the end and hashed in pieces, never
    held whole: a log someone gave a last line of a gigabyte costs time, not memory."""
    size = os.fstat(fd).st_size
    if size == 0:
        return None, True
    complete = os.pread(fd, 1, size - 1) == b"\n"
    end = size - 1 if complete else size
    start = end
    while start > 0:
        step = min(65536, start)
        newline = os.pread(fd, step, start - step).rfind(b"\n")
        if newline >= 0:
            start -= step - newline - 1
            break
        start -= step
    digest = hashlib.sha256()
    while start < end:
        piece = os.pread(fd, min(1 << 20, end - start), start)
        if not piece:
            break
        digest.update(piece)
        start += len(piece)
    return digest.hexdigest(), complete


# -- reading ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class ChainCheck:
    """What `verify` found: how many records are intact, and the first break if any."""

    records: int
    line: int | None = None
    problem: str | None = None
    exists: bool = True  # False: no log yet (nothing was recorded), which is not a break

    @property
    def intact(self) -> bool:
        return self.problem is None


def verify(path: Path) -> ChainCheck:
    """Recompute every record's hash and every link; stops at the first break. A log that
    does not exist holds no records (it is created by the first tool call); raises OSError
    if it exists and cannot be read."""
    previous: bytes | None = None
    number = 0
    try:
        with open(path, "rb") as file:
            for number, raw in enumerate(stored.lines(file), 1):
                if raw is None:
                    cap = stored.size_text(stored.MAX_RECORD_BYTES)
                    return ChainCheck(number - 1, number, f"longer than {cap}: not a record")
                if not raw.endswith(b"\n"):
                    return ChainCheck(number - 1, number, "the last line is cut short (truncated?)")
                line = raw[:-1]
                problem = _check(line, previous, number)
                if problem:
                    return ChainCheck(number - 1, number, problem)
                previous = line
    except FileNotFoundError:
        return ChainCheck(0, exists=False)
    return ChainCheck(number)


def _check(line: bytes, previous: bytes | None, number: int) -> str | None:
    try:
        record = loads_json(line, stored.MAX_STORED_DEPTH)
    except JSONTooDeep:
        return f"nested deeper than {stored.MAX_STORED_DEPTH} levels: not a record (edited?)"
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
    with open(path, "rb") as file:
        for number, raw in enumerate(stored.lines(file), 1):
            try:
                record = None if raw is None else stored.parse_json(raw)
            except stored.Unreadable:  # too deep, or not JSON: verify says which
                record = None
            last.append((number, record if isinstance(record, dict) else None))
    return list(last)
