"""What run_command's sandbox is built from (`SandboxSpec`: the policy's mode, dirs and classes
of path), the error for a sandbox that cannot be had, and the platform the choice is made for."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

from cli.config.settings import SANDBOX_MODES
from cli.safety import path_classes


def _platform() -> str:
    return sys.platform


class SandboxUnavailable(Exception):
    """The configured sandbox cannot run here; the message says how to fix that."""


@dataclass(frozen=True)
class SandboxSpec:
    """What the sandbox is built from: `policy.commands.sandbox`, the policy's dirs and its
    classes of path (Policy.classes: the same lists the file tools obey)."""

    mode: str = "auto"  # auto | bwrap | landlock | seatbelt | off
    writable: tuple[str, ...] = ()  # Policy.allowed_dirs: absolute, symlinks resolved
    blocked: tuple[str, ...] = ()  # Policy.blocked_dirs
    home: str = ""  # whose secrets to hide; "" means ours
    classes: path_classes.Classes | None = None  # None: the built-in lists for `home`
    scan_entries: int = 200_000  # policy.limits.sandbox_scan_entries
    read_only: tuple[str, ...] = ()  # policy.commands.read_only, as written (~ allowed)
    programs: tuple[str, ...] = ()  # an MCP server's program: it and its prefix are shown

    def __post_init__(self) -> None:
        if self.mode not in SANDBOX_MODES:
            raise ValueError(f"sandbox mode must be one of {', '.join(SANDBOX_MODES)}")

    @property
    def lists(self) -> path_classes.Classes:
        if self.classes is not None:
            return self.classes
        return path_classes.build(self.home or os.path.expanduser("~"))
