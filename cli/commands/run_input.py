"""What `agent run` reads: the prompt (the argument, piped stdin appended, or `-` for stdin
alone), and where a person types the answer to a question (stdin, or the controlling terminal
when stdin is a pipe)."""

from __future__ import annotations

import os
import stat
from typing import TextIO

from cli.commands.frame import Terminal, isatty
from cli.errors import UsageError


def controlling_terminal(terminal: Terminal) -> TextIO | None:
    """The controlling terminal (/dev/tty), opened for reading, when the question would be
    shown on a terminal (stderr) but stdin is not one; None when there is none, and when
    this run is not in the terminal's foreground (`cmd | agent run … &`): reading it from
    the background would stop the run (SIGTTIN) until someone brings it back, so no one is
    asked, as with no terminal."""
    if not isatty(terminal.stderr):
        return None
    try:
        tty = open("/dev/tty", encoding="utf-8", errors="replace")  # noqa: SIM115 (returned)
    except OSError:
        return None
    if not in_foreground(tty):
        tty.close()
        return None
    return tty


def in_foreground(stream: TextIO) -> bool:
    """Is this process in the foreground of the terminal `stream` is (`agent run … &` is
    not: a read there would stop it on SIGTTIN until someone brings it back)?"""
    from cli.ui import _terminal

    try:
        fd = stream.fileno()
    except (AttributeError, ValueError, OSError):
        return False
    return _terminal.foreground(fd)


def read_prompt(prompt: str, stdin: TextIO, max_bytes: int, *, dash: bool = True) -> str:
    """The prompt, with piped stdin appended; `-` reads the whole prompt from stdin (unless
    `dash` is False: a command's text that is `-` is that text)."""
    if prompt == "-" and dash:
        text = _read_stdin(stdin, max_bytes)
        if not text.strip():
            raise UsageError("the prompt '-' means read stdin, and stdin was empty: pipe it in")
        return text.strip()
    if not prompt.strip():
        raise UsageError("the prompt is empty: say what the agent should do")
    if _is_piped(stdin):
        piped = _read_stdin(stdin, max_bytes)
        if piped.strip():
            return f"{prompt}\n\n{piped.rstrip()}"
    return prompt


def _is_piped(stdin: TextIO) -> bool:
    """A pipe or a redirected file: not a terminal, not /dev/null, not a closed stdin (which
    would block or read nothing useful)."""
    try:
        mode = os.fstat(stdin.fileno()).st_mode
    except (AttributeError, ValueError, OSError):
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISREG(mode)


def _read_stdin(stdin: TextIO, max_bytes: int) -> str:
    try:
        text = stdin.read(max_bytes + 1)
    except UnicodeDecodeError:
        raise UsageError("stdin is not UTF-8 text: pipe text into agent run") from None
    if len(text.encode("utf-8", "replace")) > max_bytes:
        raise UsageError(
            f"stdin holds more than {max_bytes} bytes (policy.limits.max_read_bytes): pipe "
            "less, or let the agent read the file itself"
        )
    return text
