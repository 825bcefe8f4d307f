"""Reading one key or one line from the terminal, for questions that must not wait for Enter.

While an answer streams, the terminal neither echoes nor waits for Enter (`TypeAhead`): an
echoed key (or the `^C` of Ctrl-C) would land inside the text being redrawn. What is typed
then is kept, and put in the next input line.

An answer is only ever a key pressed after its question was drawn. Keys typed earlier —
while the model was still streaming, say — would otherwise be read as the answer ("wait"
holds an `a`, yes to every write_file): so on a terminal, pending input is discarded when a
question appears, in the kernel's tty buffer (tcflush) and in what prompt_toolkit keeps for
the next application (type-ahead). Scripted input (a pipe) is read in order, as written.
"""

from __future__ import annotations

import contextlib
import os
import re
import select
import signal
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Protocol, TextIO

from cli.ui import _terminal

if TYPE_CHECKING:
    from prompt_toolkit.input import Input
    from prompt_toolkit.output import Output


class KeyReader(Protocol):
    def read_key(self, prompt: str, choices: str) -> str:
        """One key among `choices` (lower case), no Enter needed, pressed after the question
        is drawn; other keys are ignored; Ctrl-C, Esc and Ctrl-D answer the last of
        `choices` (callers put the answer that stops, or says no, last)."""
        ...

    def read_line(self, prompt: str) -> str:
        """A line of text ended by Enter; Ctrl-C and Ctrl-D answer ""."""
        ...


def terminal_fd(stream: object) -> int | None:
    """The file descriptor behind `stream` when it is a terminal, else None."""
    try:
        fd = stream.fileno()  # type: ignore[attr-defined]
    except (AttributeError, ValueError, OSError, NotImplementedError):
        return None
    return fd if isinstance(fd, int) and os.isatty(fd) else None


def discard_pending_input(fd: int) -> None:
    """Drop what was typed on terminal `fd` and not read yet (a half-typed line too)."""
    _terminal.flush_input(fd)  # not a terminal after all: nothing is pending


def read_fresh_line(stdin: TextIO) -> str:
    """A line typed after this call ("" at end of file). On a terminal, what was typed before
    is discarded first, and the line is read from the terminal itself, past the stream's
    buffer, in line mode with echo (whatever mode a stream had left it in); elsewhere (a
    pipe, a file) the next line as it comes."""
    fd = terminal_fd(stdin)
    if fd is None:
        return stdin.readline()
    before = _attributes(fd)
    if before is not None:
        _set(fd, _terminal.line_mode(before))
    try:
        discard_pending_input(fd)
        data = b""
        while not data.endswith(b"\n"):
            chunk = os.read(fd, 1024)  # the terminal is in line mode: one line at a time
            if not chunk:
                break  # Ctrl-D
            data += chunk
    finally:
        if before is not None:
            _set(fd, before)
    return data.decode(getattr(stdin, "encoding", None) or "utf-8", "replace")


# An escape sequence (an arrow key, a function key) or any other control character.
_KEY_SEQUENCE = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|O.|.)?|[\x00-\x08\x0b-\x1f]")


class TypeAhead:
    """The terminal while a turn streams: no echo, no line editing by the kernel, Ctrl-C
    still a signal but no longer one that throws away what was typed (NOFLSH). `stop`
    puts the terminal back as it was and returns what was typed meanwhile, as text for the
    next input line (Backspace applied, Enter a new line, other keys dropped).

    With `keep=False` (agent run, whose keys are nobody's input) only the echo goes.

    With `keep`, a watcher reads the keys as they come: Esc alone (not the start of an
    arrow key's sequence) stops the turn as Ctrl-C does (`on_escape`, by default SIGINT to
    the main thread, so a wait for the server is cut short too). A question asked meanwhile
    reads its own keys: `held()` stops the watcher while it waits.

    Only for a terminal of ours in the foreground: changing a terminal from the background
    would stop the process (SIGTTOU). Questions asked meanwhile (prompt_toolkit) set their
    own mode and restore this one; they discard what was typed before them, as always."""

    def __init__(
        self,
        *streams: object,
        keep: bool = True,
        on_escape: Callable[[], None] | None = None,
    ) -> None:
        """The first of `streams` that is a terminal is the one set; what is typed is read
        back (`keep`) only when that is the first stream, stdin."""
        self.fd = next((fd for fd in map(terminal_fd, streams) if fd is not None), None)
        self._saved: list[Any] | None = None
        self.keep = keep
        self.reads = keep and self.fd is not None and terminal_fd(streams[0]) == self.fd
        self.on_escape = on_escape or _interrupt_main
        self._typed = b""  # what the watcher read
        self._halt = threading.Event()
        # Held while an Esc is delivered and while the watch is halted: an Esc seen as the turn
        # ends is delivered before the halt or not at all, never into the wind-down.
        self._escape_lock = threading.Lock()
        self._watcher: threading.Thread | None = None
        self._wake: tuple[int, int] | None = None  # a pipe that ends the watcher's wait

    def start(self) -> None:
        if self.fd is None or self._saved is not None or not _terminal.foreground(self.fd):
            return
        saved = _attributes(self.fd)
        if saved is None:
            return
        if not self.keep:  # only the echo goes: what is typed stays for whoever reads next
            if _set(self.fd, _terminal.without_echo(saved)):
                self._saved = saved
            return
        quiet = _terminal.key_at_a_time(saved)  # a read returns at once
        if _set(self.fd, quiet):
            self._saved = saved
            self._watch()

    def stop(self) -> str:
        """The terminal as it was; what was typed since `start`."""
        if self.fd is None or self._saved is None:
            return ""
        try:
            self._unwatch()
            typed, self._typed = self._typed, b""
            if self.reads:
                try:
                    while chunk := os.read(self.fd, 4096):
                        typed += chunk
                except OSError:
                    pass
        finally:  # whatever happens (a Ctrl-C now), the terminal is as it was
            _set(self.fd, self._saved)
            self._saved = None
        return typed_text(typed.decode("utf-8", "replace"))

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """No watcher while a question reads the keys itself; what it read was typed before
        the question, and goes as the question discards what is pending."""
        watching = self._watcher is not None
        self._unwatch()
        self._typed = b""
        try:
            yield
        finally:
            if watching and self._saved is not None:
                self._watch()

    def _watch(self) -> None:
        if not self.reads or self._watcher is not None:
            return
        self._halt.clear()
        self._wake = os.pipe()
        self._watcher = threading.Thread(target=self._read_keys, name="keys", daemon=True)
        self._watcher.start()

    def _unwatch(self) -> None:
        watcher, self._watcher = self._watcher, None
        if watcher is None:
            return
        with self._escape_lock:
            self._halt.set()
        wake, self._wake = self._wake, None
        if wake is not None:
            os.write(wake[1], b"x")
        watcher.join()
        if wake is not None:
            os.close(wake[0])
            os.close(wake[1])

    def _read_keys(self) -> None:
        fd = self.fd
        assert fd is not None
        # Ctrl-C's SIGINT must reach the main thread: delivered here, it would leave a wait
        # for the server there uninterrupted.
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        wake = self._wake[0] if self._wake is not None else None
        while not self._halt.is_set():
            chunk = _read_ready(fd, 1.0, wake)
            # An Esc at the end may be the first byte of a sequence still on its way.
            while chunk.endswith(b"\x1b") and (more := _read_ready(fd, 0.05, wake)):
                chunk += more
            if not chunk:
                continue
            keys = chunk.decode("utf-8", "replace")
            if any(k in ("\x1b", "\x1b\x1b") for k in _KEY_SEQUENCE.findall(keys)):
                self._typed += chunk  # the Esc itself is dropped as the keys become text
                with self._escape_lock:
                    if not self._halt.is_set():
                        self.on_escape()
                return
            self._typed += chunk


def _read_ready(fd: int, wait: float, wake: int | None = None) -> bytes:
    """What is there to read on `fd` within `wait` seconds (b"" if nothing, or as soon as
    `wake` is readable)."""
    try:
        ready, _, _ = select.select([fd] if wake is None else [fd, wake], [], [], wait)
        return os.read(fd, 4096) if fd in ready else b""
    except (OSError, ValueError):
        return b""


def _interrupt_main() -> None:
    """What Ctrl-C does: SIGINT, to the main thread (a blocking read there is cut short)."""
    signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGINT)


def typed_text(keys: str) -> str:
    """Keys as the line they would have made: Backspace removes a character, Ctrl-U the
    line, Enter starts a new line; escape sequences and other control keys are dropped."""
    out: list[str] = []
    for part in re.split(r"(\x1b(?:\[[0-?]*[ -/]*[@-~]|O.|.)?|[\x00-\x1f\x7f])", keys):
        if part in ("\x7f", "\b"):
            if out and out[-1] != "\n":
                out.pop()
        elif part == "\x15":
            while out and out[-1] != "\n":
                out.pop()
        elif part in ("\r", "\n"):
            out.append("\n")
        elif part and not _KEY_SEQUENCE.fullmatch(part) and part != "\x7f":
            out.extend(part)
    return "".join(out).strip("\n")


def _attributes(fd: int) -> list[Any] | None:
    return _terminal.attributes(fd)


def _set(fd: int, attributes: list[Any]) -> bool:
    return _terminal.set_attributes(fd, attributes)  # TCSANOW: keep what was typed


class PromptKeys:
    """KeyReader on a terminal, with prompt_toolkit (input and output injectable for tests)."""

    def __init__(
        self,
        input: Input | None = None,
        output: Output | None = None,
        *,
        typeahead: TypeAhead | None = None,
    ) -> None:
        self.input = input
        self.output = output
        self.typeahead = typeahead  # its watcher stops while a question reads the keys

    def _held(self) -> contextlib.AbstractContextManager[None]:
        return self.typeahead.held() if self.typeahead is not None else contextlib.nullcontext()

    def read_key(self, prompt: str, choices: str) -> str:
        with self._held():
            return self._read_key(prompt, choices)

    def _read_key(self, prompt: str, choices: str) -> str:
        # Imported here: prompt_toolkit is slow to import and only needed once a question comes.
        from prompt_toolkit.application import Application
        from prompt_toolkit.input.typeahead import clear_typeahead
        from prompt_toolkit.key_binding import KeyBindings, KeyPressEvent
        from prompt_toolkit.keys import Keys
        from prompt_toolkit.layout import Layout, Window
        from prompt_toolkit.layout.controls import FormattedTextControl
        from prompt_toolkit.renderer import CPR_Support

        bindings = KeyBindings()

        def answer(key: str) -> None:
            @bindings.add(key)
            def _(event: KeyPressEvent) -> None:
                event.app.exit(result=key.lower())

        for key in dict.fromkeys(choices.lower() + choices.upper()):
            answer(key)

        # The terminal is in raw mode while the question waits, so Ctrl-C arrives as a key,
        # not as SIGINT; <sigint> covers a signal sent from elsewhere. They, Esc and Ctrl-D
        # answer the last choice: "q" (stop this turn) at a confirmation, "n" at a y/n.
        cancel = choices[-1:].lower() or "n"

        @bindings.add("c-c")
        @bindings.add("c-d")
        @bindings.add("escape")
        @bindings.add(Keys.SIGINT)
        def _cancel(event: KeyPressEvent) -> None:
            event.app.exit(result=cancel)

        @bindings.add(Keys.Any)
        def _ignore(event: KeyPressEvent) -> None:
            """Any other key: keep waiting (bindings for exact keys win over this one)."""

        app: Application[str] = Application(
            layout=Layout(Window(FormattedTextControl(prompt), dont_extend_height=True)),
            key_bindings=bindings,
            input=self.input,
            output=self.output,
        )
        fd = terminal_fd(app.input)
        drawn = False

        def before_drawing() -> None:
            if fd is None:
                return
            # Keys an earlier prompt read but did not use would be fed in before the draw.
            clear_typeahead(app.input)
            # A one-line question needs no cursor position report: none is asked for, so
            # the flush below cannot swallow the terminal's reply to one.
            app.renderer.cpr_support = CPR_Support.NOT_SUPPORTED

        def on_render(_app: object) -> None:
            # The first draw is done (and written) before any input is read: whatever is
            # pending now was typed before the question was on the screen.
            nonlocal drawn
            if drawn or fd is None:
                return
            drawn = True
            discard_pending_input(fd)
            app.input.flush_keys()  # a half-read escape sequence, say
            clear_typeahead(app.input)

        app.after_render += on_render
        try:
            return app.run(pre_run=before_drawing)
        except (KeyboardInterrupt, EOFError):
            return cancel

    def read_line(self, prompt: str) -> str:
        from prompt_toolkit import PromptSession

        session: PromptSession[str] = PromptSession(input=self.input, output=self.output)
        try:
            with self._held():
                return session.prompt(prompt)
        except (KeyboardInterrupt, EOFError):
            return ""
