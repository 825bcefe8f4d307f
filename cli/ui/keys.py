"""Reading one key or one line from the terminal, for questions that must not wait for Enter.

An answer is only ever a key pressed after its question was drawn. Keys typed earlier —
while the model was still streaming, say — would otherwise be read as the answer ("wait"
holds an `a`, yes to every write_file): so on a terminal, pending input is discarded when a
question appears, in the kernel's tty buffer (tcflush) and in what prompt_toolkit keeps for
the next application (type-ahead). Scripted input (a pipe) is read in order, as written.
"""

from __future__ import annotations

import os
import termios
from typing import TYPE_CHECKING, Protocol, TextIO

if TYPE_CHECKING:
    from prompt_toolkit.input import Input
    from prompt_toolkit.output import Output


class KeyReader(Protocol):
    def read_key(self, prompt: str, choices: str) -> str:
        """One key among `choices` (lower case), no Enter needed, pressed after the question
        is drawn; other keys are ignored; Ctrl-C and Ctrl-D answer "n"."""
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
    try:
        termios.tcflush(fd, termios.TCIFLUSH)
    except termios.error:
        pass  # not a terminal after all: nothing is pending the way a tty holds it


def read_fresh_line(stdin: TextIO) -> str:
    """A line typed after this call ("" at end of file). On a terminal, what was typed before
    is discarded first, and the line is read from the terminal itself, past the stream's
    buffer; elsewhere (a pipe, a file) the next line as it comes."""
    fd = terminal_fd(stdin)
    if fd is None:
        return stdin.readline()
    discard_pending_input(fd)
    data = b""
    while not data.endswith(b"\n"):
        chunk = os.read(fd, 1024)  # the terminal is in line mode: one line at a time
        if not chunk:
            break  # Ctrl-D
        data += chunk
    return data.decode(getattr(stdin, "encoding", None) or "utf-8", "replace")


class PromptKeys:
    """KeyReader on a terminal, with prompt_toolkit (input and output injectable for tests)."""

    def __init__(self, input: Input | None = None, output: Output | None = None) -> None:
        self.input = input
        self.output = output

    def read_key(self, prompt: str, choices: str) -> str:
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
        # not as SIGINT; <sigint> covers a signal sent from elsewhere.
        @bindings.add("c-c")
        @bindings.add("c-d")
        @bindings.add(Keys.SIGINT)
        def _no(event: KeyPressEvent) -> None:
            event.app.exit(result="n")

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
            return "n"

    def read_line(self, prompt: str) -> str:
        from prompt_toolkit import PromptSession

        session: PromptSession[str] = PromptSession(input=self.input, output=self.output)
        try:
            return session.prompt(prompt)
        except (KeyboardInterrupt, EOFError):
            return ""
