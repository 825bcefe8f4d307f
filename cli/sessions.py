"""Saved conversations: JSON files in `$XDG_DATA_HOME/metona-agent/sessions/`.

A session file holds the messages exactly as they are sent to the model, plus the model, the
working dir, its kind and when it was saved, so `/load` and `agent chat --resume` continue
where the user left off. Two kinds: `chat` (every chat session autosaves after each turn) and
`run` (an `agent run` that was interrupted or failed keeps its work as `run-<time>`). Kept
apart: `agent chat --resume` without a name reopens the latest chat, never a run; a run is
resumed by its name. Autosaves are bounded (`agent.max_sessions`): the oldest go first.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from cli.backends.messages import Message
from cli.errors import UsageError
from cli.tools.fsops import atomic_write

FORMAT_VERSION = 1
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


KINDS = ("chat", "run")


@dataclass(frozen=True)
class Session:
    name: str
    model: str
    messages: list[Message]
    saved: str  # ISO time, UTC
    kind: str = "chat"  # chat | run
    cwd: str = ""  # the working dir it was saved in

    @property
    def turns(self) -> int:
        return sum(1 for m in self.messages if m.get("role") == "user")


class SessionStore:
    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def path(self, name: str) -> Path:
        if not _NAME.fullmatch(name):
            raise UsageError(
                f"session name {name!r} is not usable: letters, digits, '.', '_' and '-' only"
            )
        return self.directory / f"{name}.json"

    def save(
        self,
        name: str,
        model: str,
        messages: list[Message],
        *,
        kind: str = "chat",
        cwd: str = "",
    ) -> Path:
        """Write the session atomically (a crash never leaves half a file)."""
        path = self.path(name)
        record = {
            "version": FORMAT_VERSION,
            "name": name,
            "kind": kind,
            "model": model,
            "cwd": cwd,
            "saved": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "messages": messages,
        }
        self.directory.mkdir(parents=True, exist_ok=True)
        data = json.dumps(record, ensure_ascii=True, indent=1).encode("utf-8")
        atomic_write(str(path), data)
        return path

    def load(self, name: str) -> Session:
        path = self.path(name)
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            known = ", ".join(self.names()[:10]) or "none saved yet"
            raise UsageError(f"no saved session '{name}' (saved: {known})") from None
        except (OSError, ValueError) as exc:
            raise UsageError(f"session {path} cannot be read: {exc}") from None
        return _session(record, path)

    def exists(self, name: str) -> bool:
        return self.path(name).is_file()

    def latest(self, kind: str = "chat") -> Session | None:
        """The most recently saved session of this kind (a broken file is passed over)."""
        for name in self.names():
            try:
                session = self.load(name)
            except UsageError:
                continue
            if session.kind == kind:
                return session
        return None

    def names(self) -> list[str]:
        """Saved sessions, the most recently saved first."""
        try:
            with os.scandir(self.directory) as it:
                entries = [e for e in it if e.name.endswith(".json")]
        except FileNotFoundError:
            return []
        entries.sort(key=lambda e: e.stat().st_mtime, reverse=True)
        return [e.name[: -len(".json")] for e in entries if _NAME.fullmatch(e.name[:-5])]

    def sessions(self) -> list[Session]:
        """Every readable session, the most recently saved first."""
        found = []
        for name in self.names():
            try:
                found.append(self.load(name))
            except UsageError:
                continue  # not ours, or broken: `agent sessions rm` still removes it by name
        return found

    def remove(self, name: str) -> Path:
        path = self.path(name)
        try:
            path.unlink()
        except FileNotFoundError:
            known = ", ".join(self.names()[:10]) or "none saved yet"
            raise UsageError(f"no saved session '{name}' (saved: {known})") from None
        return path

    def prune(self, keep: int, spare: str = "") -> list[str]:
        """Remove the oldest sessions beyond `keep` (never `spare`, the one in use)."""
        names = [n for n in self.names() if n != spare]
        room = max(0, keep - (1 if spare else 0))
        removed = []
        for name in names[room:]:
            try:
                self.path(name).unlink()
                removed.append(name)
            except OSError:
                continue
        return removed


def _session(record: Any, path: Path) -> Session:
    messages = record.get("messages") if isinstance(record, dict) else None
    if not isinstance(messages, list) or not all(
        isinstance(m, dict) and isinstance(m.get("role"), str) for m in messages
    ):
        raise UsageError(f"session {path} holds no valid conversation")
    name = str(record.get("name") or path.stem)
    kind = record.get("kind")
    if kind not in KINDS:  # saved before kinds were recorded: runs were named run-…
        kind = "run" if name.startswith("run-") else "chat"
    return Session(
        name=name,
        model=str(record.get("model") or ""),
        messages=messages,
        saved=str(record.get("saved") or ""),
        kind=kind,
        cwd=str(record.get("cwd") or ""),
    )


def timestamp_name(now: datetime | None = None) -> str:
    """A default session name: the local time, sortable and safe in a file name."""
    return (now or datetime.now()).strftime("%Y-%m-%d_%H-%M-%S")


# -- a conversation, turn by turn ------------------------------------------------------------

_CHANGES_FILES = {"write_file", "edit_file", "create_directory", "move_file", "delete_file"}


@dataclass
class Turn:
    """One turn of a conversation, as `/turns` and a resumed session show it."""

    prompt: str
    # one line a tool call: "✓ read_file notes.txt", "✗ write_file x · declined"
    calls: list[str]
    answer: str = ""
    changed: list[str] = field(default_factory=list)  # what the turn's calls changed


def conversation_turns(messages: list[Message]) -> list[Turn]:
    turns: list[Turn] = []
    pending: dict[str, tuple[str, str]] = {}  # call id or name → (name, key argument)
    for message in messages:
        role = message.get("role")
        content = str(message.get("content") or "")
        if role == "user":
            turns.append(Turn(content, []))
        elif not turns:
            continue
        elif role == "assistant":
            for call in message.get("tool_calls") or []:
                function = call.get("function") if isinstance(call, dict) else None
                if not isinstance(function, dict):
                    continue
                name = str(function.get("name", ""))
                pending[str(call.get("id") or name)] = (name, _key_argument(function))
            if content.strip():
                turns[-1].answer = content
        elif role == "tool":
            key = str(message.get("tool_call_id") or message.get("tool_name") or "")
            name, argument = pending.pop(key, (str(message.get("tool_name", "")), ""))
            ok, unchanged, word = _outcome(content)
            line = f"{'✓' if ok else '✗'} {name} {argument}".rstrip()
            turns[-1].calls.append(line if ok else f"{line} · {word}")
            if ok and not unchanged and name in _CHANGES_FILES and argument:
                turns[-1].changed.append(argument)
    return turns


def _key_argument(function: dict[str, Any]) -> str:
    arguments = function.get("arguments")
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return ""
    if not isinstance(arguments, dict):
        return ""
    for key in ("path", "destination", "query", "command"):
        if isinstance(arguments.get(key), str):
            return str(arguments[key])
    return ""


def _outcome(content: str) -> tuple[bool, bool, str]:
    """(it succeeded, it changed nothing — a write of what the file already held —, and for
    a call that did not succeed, its outcome as cli/outcomes.py words it). A saved session
    keeps what the model was told, so the word is read back from how the agent tells it:
    `denied: …`, `not run: the user …`, an invalid call's own reason."""
    try:
        result = json.loads(content)
    except ValueError:
        return False, False, "failed"
    if not isinstance(result, dict):
        return False, False, "failed"
    error = str(result.get("error") or "")
    if error.startswith("not run: the user") or error.startswith("cancelled: the user"):
        word = "declined"
    elif error.startswith(("denied: ", "not run: ")):
        word = "denied"
    elif error.startswith(("invalid arguments for ", "unknown tool '", "tool call: ")):
        word = "invalid"
    else:
        word = "failed"
    return result.get("success") is True, result.get("unchanged") is True, word
