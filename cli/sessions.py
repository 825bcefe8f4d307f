"""Saved conversations: JSON files in `$XDG_DATA_HOME/metona-agent/sessions/`.

A session file holds the messages exactly as they are sent to Ollama, plus the model and
when it was saved, so `/load` and `agent chat --resume` continue where the user left off.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from cli.backends.messages import Message
from cli.errors import UsageError
from cli.tools.fsops import atomic_write

FORMAT_VERSION = 1
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


@dataclass(frozen=True)
class Session:
    name: str
    model: str
    messages: list[Message]
    saved: str  # ISO time, UTC


class SessionStore:
    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def path(self, name: str) -> Path:
        if not _NAME.fullmatch(name):
            raise UsageError(
                f"session name {name!r} is not usable: letters, digits, '.', '_' and '-' only"
            )
        return self.directory / f"{name}.json"

    def save(self, name: str, model: str, messages: list[Message]) -> Path:
        """Write the session atomically (a crash never leaves half a file)."""
        path = self.path(name)
        record = {
            "version": FORMAT_VERSION,
            "name": name,
            "model": model,
            "saved": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "messages": messages,
        }
        self.directory.mkdir(parents=True, exist_ok=True)
        data = json.dumps(record, ensure_ascii=False, indent=1).encode("utf-8")
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

    def latest(self) -> Session | None:
        names = self.names()
        return self.load(names[0]) if names else None

    def names(self) -> list[str]:
        """Saved sessions, the most recently saved first."""
        try:
            with os.scandir(self.directory) as it:
                entries = [e for e in it if e.name.endswith(".json")]
        except FileNotFoundError:
            return []
        entries.sort(key=lambda e: e.stat().st_mtime, reverse=True)
        return [e.name[: -len(".json")] for e in entries if _NAME.fullmatch(e.name[:-5])]


def _session(record: Any, path: Path) -> Session:
    messages = record.get("messages") if isinstance(record, dict) else None
    if not isinstance(messages, list) or not all(
        isinstance(m, dict) and isinstance(m.get("role"), str) for m in messages
    ):
        raise UsageError(f"session {path} holds no valid conversation")
    return Session(
        name=str(record.get("name") or path.stem),
        model=str(record.get("model") or ""),
        messages=messages,
        saved=str(record.get("saved") or ""),
    )


def timestamp_name(now: datetime | None = None) -> str:
    """A default session name: the local time, sortable and safe in a file name."""
    return (now or datetime.now()).strftime("%Y-%m-%d_%H-%M-%S")
