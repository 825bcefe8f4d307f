"""Reading back the files the agent keeps and is configured by — sessions, the change journal
and its index, the audit log, the config — as the untrusted input they are: anyone, or a
command a sandbox could not keep out, may have rewritten them.

Every read is capped in size, and JSON in depth with the guard that server input gets
(cli/backends/messages.py): Python's json, and everything that walks its result, recurses
once per level. What fails raises `Unreadable`, whose text says why in a few words; the
caller names the file and says what to do, in one line.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from cli.backends.messages import MAX_JSON_DEPTH, JSONTooDeep, loads_json

MB = 1024 * 1024
# What we store wraps what a model or server sent (tool-call arguments, at most
# MAX_JSON_DEPTH deep) in a few levels of our own (a session, a message, a call, its
# function): twice that leaves room, and a file nested deeper is not one we wrote.
MAX_STORED_DEPTH = 2 * MAX_JSON_DEPTH
# A session is sent to the model whole (cut to fit num_ctx): 64 MB is some 16 million
# tokens, far past any model's context. `agent sessions` reads every session it lists.
MAX_SESSION_BYTES = 64 * MB
# The journal only grows (a change is some 400 bytes: 64 MB is over 100,000 changes), and
# `agent history` holds all of it in memory.
MAX_JOURNAL_BYTES = 64 * MB
# One line of the journal or the audit log: a record is a few KB (arguments are cut to
# 8 KB in the audit log; paths are at most 4 KB).
MAX_RECORD_BYTES = MB
# A config is a page of settings (config.example.yaml, every key with its comment, is
# some 30 KB).
MAX_CONFIG_BYTES = MB
# journal.index and a pending write's marker: a few numbers and names.
MAX_NOTE_BYTES = 64 * 1024


class Unreadable(ValueError):
    """A file is not what the agent writes there: too large, nested too deep, not JSON, not a
    regular file, or not of the expected shape. Its text says which, in a few words."""


def size_text(limit: int) -> str:
    """A cap as people read it: 64 MB, 64 KB."""
    return f"{limit // MB} MB" if limit >= MB else f"{limit // 1024} KB"


def read_capped(path: str | Path, limit: int) -> bytes:
    """The file's bytes: Unreadable if it holds more than `limit` (no more than that is read)
    or is not a regular file (a FIFO would block, a device never end); OSError as opening
    and reading raise it."""
    # Each flag where the OS has it: native Windows has none of the two (nor FIFOs), and
    # wants O_BINARY for bytes as they are.
    extra = getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
    fd = os.open(path, os.O_RDONLY | extra)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise Unreadable("not a regular file")
        chunks, left = [], limit + 1
        while left > 0:
            chunk = os.read(fd, min(left, MB))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    finally:
        os.close(fd)
    if left <= 0:
        raise Unreadable(f"larger than {size_text(limit)}")
    return b"".join(chunks)


def parse_json(text: str | bytes, depth: int = MAX_STORED_DEPTH) -> Any:
    """JSON as the server guard reads it: Unreadable when it nests deeper than `depth`
    (checked before parsing) or is not JSON."""
    try:
        return loads_json(text, depth)
    except JSONTooDeep:
        raise Unreadable(f"nested deeper than {depth} levels") from None
    except ValueError as exc:
        raise Unreadable(f"not JSON ({exc})") from None


def lines(file: IO[bytes], limit: int = MAX_RECORD_BYTES) -> Iterator[bytes | None]:
    """Each line of `file`, with its newline (the last may have none); None for a line longer
    than `limit`, which is read past in pieces, never held whole."""
    while True:
        line = file.readline(limit + 1)
        if not line:
            return
        if len(line) <= limit or line.endswith(b"\n"):
            yield line
            continue
        while line and not line.endswith(b"\n"):
            line = file.readline(MB)
        yield None
