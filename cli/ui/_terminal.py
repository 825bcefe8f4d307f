"""The terminal's modes (termios), the one UI module that touches them: POSIX only. On native
Windows termios is missing; then no attributes are read, none are set, nothing is flushed,
and callers behave as with a stream that is not a terminal."""

from __future__ import annotations

import os
from types import ModuleType
from typing import Any

termios: ModuleType | None
try:
    import termios
except ImportError:  # native Windows (and its simulation in tests)
    termios = None


def foreground(fd: int) -> bool:
    """Is this process in the foreground of terminal `fd`? A read from the background stops
    it on SIGTTIN (and a change of modes on SIGTTOU) until someone brings it back."""
    try:
        return os.tcgetpgrp(fd) == os.getpgrp()
    except (AttributeError, OSError):  # not a terminal; no job control (native Windows)
        return False


def flush_input(fd: int) -> None:
    """Drop what was typed on terminal `fd` and not read yet."""
    if termios is None:
        return
    try:
        termios.tcflush(fd, termios.TCIFLUSH)
    except termios.error:
        pass  # not a terminal after all: nothing is pending the way a tty holds it


def attributes(fd: int) -> list[Any] | None:
    """The terminal's attributes (tcgetattr), or None when `fd` is not one."""
    if termios is None:
        return None
    try:
        return list(termios.tcgetattr(fd))
    except termios.error:
        return None


def set_attributes(fd: int, attributes: list[Any]) -> bool:
    """Set them at once (TCSANOW: keep what was typed); False if it could not be done."""
    if termios is None:
        return False
    try:
        termios.tcsetattr(fd, termios.TCSANOW, attributes)
    except termios.error:
        return False
    return True


def line_mode(attributes: list[Any]) -> list[Any]:
    """A line at a time, echoed, Ctrl-C a signal."""
    assert termios is not None  # attributes were read: there is a terminal
    changed = list(attributes)
    changed[3] |= termios.ICANON | termios.ECHO | termios.ISIG
    return changed


def without_echo(attributes: list[Any]) -> list[Any]:
    """As they are, less the echo."""
    assert termios is not None  # attributes were read: there is a terminal
    changed = list(attributes)
    changed[3] &= ~termios.ECHO
    return changed


def key_at_a_time(attributes: list[Any]) -> list[Any]:
    """No echo, no line editing (a read returns at once, with what is there), Ctrl-C still a
    signal, and pending input kept when one comes (NOFLSH)."""
    assert termios is not None  # attributes were read: there is a terminal
    changed = list(attributes)
    changed[3] = (changed[3] & ~(termios.ECHO | termios.ICANON)) | termios.NOFLSH | termios.ISIG
    cc = list(changed[6])
    cc[termios.VMIN], cc[termios.VTIME] = 0, 0
    changed[6] = cc
    return changed
