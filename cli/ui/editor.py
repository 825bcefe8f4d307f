"""The chat input line: prompt-toolkit with persistent history, multi-line input and Tab
completion of slash commands and `@paths`."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from prompt_toolkit import PromptSession
from prompt_toolkit.completion import CompleteEvent, Completer, Completion, PathCompleter
from prompt_toolkit.document import Document
from prompt_toolkit.history import FileHistory, History, InMemoryHistory
from prompt_toolkit.input import Input
from prompt_toolkit.key_binding import KeyBindings, KeyPressEvent
from prompt_toolkit.output import Output

BLOCK = '"""'


def open_block(text: str) -> bool:
    """True while a `\"\"\"` block (as in `ollama run`) is still open: Enter adds a line."""
    return text.lstrip().startswith(BLOCK) and text.count(BLOCK) % 2 == 1


def strip_block(text: str) -> str:
    """The text of a `\"\"\"` … `\"\"\"` block without its delimiters."""
    stripped = text.strip()
    if stripped.startswith(BLOCK) and stripped.endswith(BLOCK) and len(stripped) >= 6:
        return stripped[3:-3].strip("\n")
    return text


# `@path` mentions: their grammar is cli/loop/mentions.py's.
_ESCAPED = re.compile(r"\\(.)")  # a backslash keeps the next character in the name
# The `@path` being typed, up to the cursor: what Tab completes.
_TYPING = re.compile(r'(?:(?<=\s)|^)@(?P<token>"[^"\n]*|(?:\\.|[^\s\\@"])(?:\\.|[^\s\\])*\\?|)$')


def escape_path(path: str) -> str:
    """`path` as a bare `@path` names it: a backslash before each space and backslash."""
    return re.sub(r"([\s\\])", r"\\\1", path)


class ChatCompleter(Completer):
    """Slash commands at the start of the line, their arguments (models, sessions), and
    paths after `@` anywhere, except those `hides` (the policy's: secrets, blocked dirs)."""

    def __init__(
        self,
        commands: Iterable[str],
        cwd: str,
        arguments: Callable[[str], Iterable[str]] = lambda _command: (),
        hides: Callable[[str], bool] = lambda _path: False,
    ) -> None:
        self.commands = sorted(commands)
        self.arguments = arguments
        self.hides = hides
        self.paths = PathCompleter(
            expanduser=True, get_paths=lambda: [cwd], file_filter=self._offered
        )

    def _offered(self, path: str) -> bool:
        """A name the chat would refuse to attach is not offered either: a completion menu
        that lists `.env` or `id_rsa` shows the secret's existence, and invites a refusal.
        Both the path as typed and where its links lead are checked, as the policy does."""
        typed = os.path.normpath(path)
        try:
            real = os.path.realpath(typed)
        except (OSError, ValueError):
            return False
        return not (self.hides(typed) or self.hides(real))

    def get_completions(
        self, document: Document, complete_event: CompleteEvent
    ) -> Iterator[Completion]:
        text = document.text_before_cursor
        if text.startswith("/"):
            command, space, argument = text.partition(" ")
            if not space:
                for name in self.commands:
                    if name.startswith(command):
                        yield Completion(name, start_position=-len(command))
                return
            for choice in self.arguments(command):
                if choice.startswith(argument):
                    yield Completion(choice, start_position=-len(argument))
            return
        typing = _TYPING.search(text)
        if typing is None:
            return
        token = typing.group("token")
        quoted = token.startswith('"')
        if quoted:
            typed = token[1:]
        else:
            body = token
            # An odd number of backslashes at the end: the last escapes what comes next (a
            # space, as in `@my\` on the way to `@my\ notes.txt`).
            pending = (len(body) - len(body.rstrip("\\"))) % 2 == 1
            typed = _ESCAPED.sub(r"\1", body[:-1] if pending else body) + (" " if pending else "")
        inner = Document(typed, len(typed))
        for completion in self.paths.get_completions(inner, complete_event):
            name = typed[: len(typed) + completion.start_position] + completion.text
            if quoted:  # a folder stays open: more may follow
                folder = completion.display_text.endswith("/")
                replacement = f'"{name}' if folder else f'"{name}"'
            else:
                replacement = escape_path(name)
            # The whole `@…` is written again, in a form that attaches as it stands.
            yield Completion(
                replacement,
                start_position=-len(token),
                display=completion.display,
            )


def key_bindings() -> KeyBindings:
    bindings = KeyBindings()

    @bindings.add("escape", "enter")  # Esc-Enter; terminals send Alt-Enter as the same keys
    def _newline(event: KeyPressEvent) -> None:
        event.current_buffer.insert_text("\n")

    @bindings.add("enter")
    def _enter(event: KeyPressEvent) -> None:
        buffer = event.current_buffer
        if open_block(buffer.text):
            buffer.insert_text("\n")
        else:
            buffer.validate_and_handle()

    return bindings


def history_at(path: Path | None) -> History:
    """A history file that survives sessions; in memory when it cannot be written."""
    if path is None:
        return InMemoryHistory()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch(exist_ok=True)
        os.chmod(path, 0o600)  # what people type may be private
    except OSError:
        return InMemoryHistory()
    return FileHistory(str(path))


def make_prompt(
    completer: Completer,
    history: History,
    *,
    input: Input | None = None,
    output: Output | None = None,
) -> PromptSession[str]:
    return PromptSession(
        history=history,
        completer=completer,
        key_bindings=key_bindings(),
        complete_while_typing=False,  # Tab completes; typing never pops menus up
        input=input,
        output=output,
        enable_history_search=False,
    )
