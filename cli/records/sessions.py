"""Saved conversations: JSON files in `$XDG_DATA_HOME/metona-agent/sessions/`.

A session file holds the messages exactly as they are sent to the model, plus the model, the
working dir, its kind and when it was saved, so `/load` and `agent chat --resume` continue
where the user left off. Two kinds: `chat` (every chat session autosaves after each turn) and
`run` (an `agent run` that was interrupted or failed keeps its work as `run-<time>`). Kept
apart: `agent chat --resume` without a name reopens the latest chat of the current working dir,
never a run, nor another directory's chat; those are resumed by their name. Autosaves are
bounded (`agent.max_sessions`): the oldest go first.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from cli.backends.messages import Message, loads_json
from cli.errors import UsageError
from cli.fs.stored import MAX_SESSION_BYTES, Unreadable, parse_json, read_capped, size_text
from cli.fs.writing import atomic_write
from cli.loop.outcomes import INTERRUPTED_ERROR

FORMAT_VERSION = 1
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


KINDS = ("chat", "run")
ROLES = ("system", "user", "assistant", "tool")


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


@dataclass(frozen=True)
class UnreadableSession:
    """A file in the sessions dir that is not a session the agent can use, and why."""

    name: str
    reason: str


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
        data = json.dumps(record, ensure_ascii=True, indent=1).encode("utf-8")
        if len(data) > MAX_SESSION_BYTES:  # saved, it could never be loaded again
            raise UsageError(
                f"the session is {len(data) // (1024 * 1024)} MB, more than the "
                f"{size_text(MAX_SESSION_BYTES)} a session file may hold, so it is not saved: "
                "/clear, or a new agent chat, starts afresh"
            )
        self.directory.mkdir(parents=True, exist_ok=True)
        atomic_write(str(path), data)
        return path

    def load(self, name: str) -> Session:
        path = self.path(name)
        try:
            return self._read(path)
        except FileNotFoundError:
            known = ", ".join(self.names()[:10]) or "none saved yet"
            raise UsageError(f"no saved session '{name}' (saved: {known})") from None
        except (OSError, Unreadable) as exc:
            why = (exc.strerror or exc) if isinstance(exc, OSError) else exc
            raise UsageError(
                f"session {path} cannot be read: {why}; resume another, or remove it with "
                f"agent sessions rm {name}"
            ) from None

    @staticmethod
    def _read(path: Path) -> Session:
        """The session in `path`: a file of ours, but anyone may have rewritten it, so it is
        read as untrusted (cli/fs/stored.py: size and depth caps) and checked whole before it
        is used: Unreadable says what is wrong."""
        return _session(parse_json(read_capped(path, MAX_SESSION_BYTES)), path)

    def exists(self, name: str) -> bool:
        return self.path(name).is_file()

    def latest(self, kind: str = "chat", cwd: str | None = None) -> Session | None:
        """The most recently saved session of this kind (a broken file is passed over);
        with `cwd`, the latest one saved in that working dir (one saved before the working
        dir was recorded is in none)."""
        for name in self.names():
            try:
                session = self.load(name)
            except UsageError:
                continue
            if session.kind == kind and (cwd is None or session.cwd == cwd):
                return session
        return None

    def names(self) -> list[str]:
        """Saved sessions, the most recently saved first."""
        try:
            with os.scandir(self.directory) as it:
                entries = [(e.name, _saved_at(e)) for e in it if e.name.endswith(".json")]
        except FileNotFoundError:
            return []
        entries.sort(key=lambda entry: entry[1], reverse=True)
        return [name[: -len(".json")] for name, _ in entries if _NAME.fullmatch(name[:-5])]

    def listing(self) -> list[Session | UnreadableSession]:
        """Every saved session, the most recently saved first; one that cannot be read is
        listed as such, with why (`agent sessions rm` removes it by name)."""
        found: list[Session | UnreadableSession] = []
        for name in self.names():
            try:
                found.append(self._read(self.path(name)))
            except OSError as exc:
                found.append(UnreadableSession(name, str(exc.strerror or exc)))
            except Unreadable as exc:
                found.append(UnreadableSession(name, str(exc)))
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


def _saved_at(entry: os.DirEntry[str]) -> float:
    try:
        return entry.stat().st_mtime
    except OSError:  # gone meanwhile, or a link to nothing: listed last, and said unreadable
        return 0.0


def _session(record: Any, path: Path) -> Session:
    """The session a file's JSON holds, checked whole: every field the agent reads of it is
    of the type it writes (Unreadable otherwise), so nothing later trips over a shape."""
    if not isinstance(record, dict):
        raise Unreadable("not a session (a JSON object with messages)")
    messages = record.get("messages")
    if not isinstance(messages, list):
        raise Unreadable("holds no valid conversation (no list of messages)")
    for number, message in enumerate(messages, 1):
        problem = _message_problem(message)
        if problem:
            raise Unreadable(f"holds no valid conversation (message {number}: {problem})")
    for key in ("model", "saved", "cwd", "kind"):
        if record.get(key) is not None and not isinstance(record[key], str):
            raise Unreadable(f"its {key} is not text")
    # Named by its file, whatever it says inside: a session is saved back under its name.
    name = path.stem
    kind = record.get("kind")
    if kind not in KINDS:  # saved before kinds were recorded: runs were named run-…
        kind = "run" if name.startswith("run-") else "chat"
    return Session(
        name=name,
        model=record.get("model") or "",
        messages=messages,
        saved=record.get("saved") or "",
        kind=kind,
        cwd=record.get("cwd") or "",
    )


def _message_problem(message: Any) -> str | None:
    """What is wrong with one saved message, as the agent would send it back; None if
    nothing."""
    if not isinstance(message, dict):
        return "not an object"
    if message.get("role") not in ROLES:
        return f"its role is not one of {', '.join(ROLES)}"
    for key in ("content", "thinking", "tool_name", "tool_call_id"):
        if message.get(key) is not None and not isinstance(message[key], str):
            return f"its {key} is not text"
    calls = message.get("tool_calls")
    if calls is None:
        return None
    if not isinstance(calls, list):
        return "its tool_calls are not a list"
    for call in calls:
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            return "a tool call without a function name"
        if not isinstance(function.get("arguments", {}), (dict, str)):
            return "a tool call whose arguments are neither an object nor text"
    return None


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
    # The calls still waiting for their result: (call id, name, key argument), in order.
    pending: list[tuple[str, str, str]] = []
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
                pending.append((str(call.get("id") or ""), name, _key_argument(function)))
            if content.strip():
                turns[-1].answer = content
        elif role == "tool":
            name, argument = _answered(pending, message)
            ok, unchanged, word = _outcome(content)
            line = f"{'✓' if ok else '✗'} {name} {argument}".rstrip()
            turns[-1].calls.append(line if ok else f"{line} · {word}")
            if ok and not unchanged and name in _CHANGES_FILES and argument:
                turns[-1].changed.append(argument)
    return turns


def _answered(pending: list[tuple[str, str, str]], message: Message) -> tuple[str, str]:
    """(name, key argument) of the call a tool message answers, taken from `pending`: the
    call with its `tool_call_id` when it carries one (OpenAI-compatible servers), else the
    first waiting call to the tool it names (Ollama answers in order, by name), else the
    first waiting call. Two calls to one tool in one answer are two entries, each paired
    with its own result."""
    call_id = str(message.get("tool_call_id") or "")
    tool = str(message.get("tool_name") or "")
    for matches in (
        lambda entry: bool(call_id) and entry[0] == call_id,
        lambda entry: bool(tool) and entry[1] == tool,
        lambda _entry: True,
    ):
        for index, entry in enumerate(pending):
            if matches(entry):
                del pending[index]
                return entry[1], entry[2]
    return tool, ""


def _key_argument(function: dict[str, Any]) -> str:
    arguments = function.get("arguments")
    if isinstance(arguments, str):
        try:
            arguments = loads_json(arguments)  # as the model sent it: held to its depth
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
    a call that did not succeed, its outcome as cli/loop/outcomes.py words it). A saved session
    keeps what the model was told, so the word is read back from how the agent tells it:
    `denied: …`, `not run: the user …`, an invalid call's own reason."""
    try:
        result = loads_json(content)  # the agent wrote it, but it came back from a file
    except ValueError:
        return False, False, "failed"
    if not isinstance(result, dict):
        return False, False, "failed"
    error = str(result.get("error") or "")
    if error == INTERRUPTED_ERROR:
        word = "interrupted"  # Ctrl-C came before the call ran (cli/loop/agent.py)
    elif error.startswith("not run: the user") or error.startswith("cancelled: the user"):
        word = "declined"
    elif error.startswith(("denied: ", "not run: ")):
        word = "denied"
    elif error.startswith(("invalid arguments for ", "unknown tool '", "tool call: ")):
        word = "invalid"
    else:
        word = "failed"
    return result.get("success") is True, result.get("unchanged") is True, word
