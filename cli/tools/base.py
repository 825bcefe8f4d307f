"""What every tool is made of: its definition for the model and a function that does the work.

Tools return data (a dict with `success`, and `error` on failure) and never print. They get
the paths the policy already resolved and checked, and use exactly those.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from cli.config.settings import LimitsConfig
from cli.fs.deadline import NO_DEADLINE, Deadline
from cli.fs.fingerprint import Fingerprint
from cli.fs.paths import FileId, ResolvedPath, display_path, root_of
from cli.fs.reach import Target
from cli.tools.memory import EditFailures, FileMemory

if TYPE_CHECKING:
    from cli.journal.changes import ChangeStore
    from cli.safety.sandbox.spec import SandboxSpec

Result = dict[str, Any]


class Consent:
    """What a person agreed may be lost for good: the old content of a write, or an entry a
    delete cannot keep in the trash (cli/tools/preflight.py says why and asks). Granted by
    the agent after a person's yes, by path and the fingerprint of what was there when they
    were asked; taken (once) by the tool, and only that very file or entry, unchanged since,
    goes without a backup. Nothing the model sends reaches it."""

    def __init__(self) -> None:
        self._granted: dict[str, Fingerprint] = {}

    def grant(self, path: str, fingerprint: Fingerprint) -> None:
        self._granted[path] = fingerprint

    def take(self, path: str) -> Fingerprint | None:
        return self._granted.pop(path, None)


@dataclass(frozen=True)
class ToolContext:
    """What a tool may know about its surroundings, passed in rather than looked up."""

    cwd: str
    limits: LimitsConfig = field(default_factory=LimitsConfig)
    # True for paths a walk must not open (blocked dirs, secrets): the policy's `hides`.
    hides: Callable[[str], bool] = lambda _path: False
    # The same for an entry of a walk whose directory is not hidden (the policy's
    # `hides_entry`): cheaper per entry. None: `hides` is used.
    hides_entry: Callable[[str], bool] | None = None
    # The secret a file (device, inode) is under another name (a hard link to it), or None:
    # the policy's `secret_of`, for the read gate (cli/tools/gate.py).
    secret_of: Callable[[int, int], str | None] = lambda _device, _inode: None
    environ: Mapping[str, str] = field(default_factory=dict)
    clock: Callable[[], float] = time.monotonic
    # The allowed dirs, resolved (the policy's `allowed_dirs`): a file operation stays beneath
    # the one holding its path (cli/fs/reach.py). Empty: beneath "/", still never through a symlink.
    roots: tuple[str, ...] = ()
    # How run_command is sandboxed; None: the strictest default (auto, only cwd writable).
    sandbox: SandboxSpec | None = None
    # Where overwritten and deleted things go for `agent undo`; None: nowhere (deletes are
    # then permanent, as with policy.trash: false).
    changes: ChangeStore | None = None
    trash: bool = True  # policy.trash: delete_file moves to the trash
    # What the model saw of each file this session: writes over someone's edit conflict.
    memory: FileMemory = field(default_factory=FileMemory)
    # edit_file's failures per file in this turn (the agent clears it each turn).
    edits: EditFailures = field(default_factory=EditFailures)
    # What a person agreed may go without a backup (see Consent).
    consent: Consent = field(default_factory=Consent)
    # When the call under way must stop (see Deadline); set for each call by `started`.
    deadline: Deadline = NO_DEADLINE

    def started(self, tool: str) -> ToolContext:
        """This context for one call of `tool`, or the checks before it is decided: its
        deadline, policy.limits.tool_seconds, starts now. The rest is shared."""
        return dataclasses.replace(
            self, deadline=Deadline(self.clock, self.limits.tool_seconds, tool)
        )

    def walk_hides(self, top: str) -> Callable[[str], bool]:
        """What a walk below `top` asks of each entry: `hides_entry` when `top` itself is not
        hidden (which is what that shortcut needs), `hides` otherwise."""
        if self.hides_entry is None or self.hides(top):
            return self.hides
        return self.hides_entry

    def show(self, path: str) -> str:
        return display_path(path, self.cwd)

    def root_of(self, path: str) -> str | None:
        """The allowed dir holding `path`, or None (a read outside them, approved)."""
        return root_of(path, self.roots)

    def target(self, path: str, checked: FileId | None = None) -> Target:
        """The Target for a path the policy checked, anchored to the allowed dir holding it."""
        return Target(path, self.root_of(path) or "/", self.show(path), checked)


Runner = Callable[[ToolContext, Mapping[str, Any], Mapping[str, ResolvedPath]], Result]


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    parameters: Mapping[str, Any]
    run: Runner

    def definition(self) -> dict[str, Any]:
        """The tool as /api/chat's `tools` list takes it."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }


def failure(message: str, hint: str = "", **extra: Any) -> Result:
    return {"success": False, "error": message, **({"hint": hint} if hint else {}), **extra}


def params(required: list[str], **properties: Mapping[str, Any]) -> dict[str, Any]:
    return {"type": "object", "required": required, "properties": dict(properties)}


def string(description: str, **extra: Any) -> dict[str, Any]:
    return {"type": "string", "description": description, **extra}


def integer(description: str) -> dict[str, Any]:
    return {"type": "integer", "description": description}


def boolean(description: str) -> dict[str, Any]:
    return {"type": "boolean", "description": description}
