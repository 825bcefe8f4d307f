"""Reading one key or one line from the terminal, for questions that must not wait for Enter."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from prompt_toolkit.input import Input
    from prompt_toolkit.output import Output


class KeyReader(Protocol):
    def read_key(self, prompt: str, choices: str) -> str:
        """One key among `choices` (lower case), no Enter needed; other keys are ignored;
        Ctrl-C and Ctrl-D answer "n"."""
        ...

    def read_line(self, prompt: str) -> str:
        """A line of text ended by Enter; Ctrl-C and Ctrl-D answer ""."""
        ...


class PromptKeys:
    """KeyReader on a terminal, with prompt_toolkit (input and output injectable for tests)."""

    def __init__(self, input: Input | None = None, output: Output | None = None) -> None:
        self.input = input
        self.output = output

    def read_key(self, prompt: str, choices: str) -> str:
        # Imported here: prompt_toolkit is slow to import and only needed once a question comes.
        from prompt_toolkit.application import Application
        from prompt_toolkit.key_binding import KeyBindings, KeyPressEvent
        from prompt_toolkit.keys import Keys
        from prompt_toolkit.layout import Layout, Window
        from prompt_toolkit.layout.controls import FormattedTextControl

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
        try:
            return app.run()
        except (KeyboardInterrupt, EOFError):
            return "n"

    def read_line(self, prompt: str) -> str:
        from prompt_toolkit import PromptSession

        session: PromptSession[str] = PromptSession(input=self.input, output=self.output)
        try:
            return session.prompt(prompt)
        except (KeyboardInterrupt, EOFError):
            return ""
