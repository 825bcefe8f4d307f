"""The one terminal driver of the suite: `agent` (chat, run, any command) started in a
pseudo-terminal, its output played on tests/fakes/vt.py's emulator, and the test waiting for
*states* of that terminal, never for a character in a byte stream.

A state is read from two things a person at the terminal would have: the emulated screen
(what the row under the cursor shows) and the terminal's mode (tcgetattr on the pty). The
product prints nothing for the tests.

- the prompt is ready (`Chat.ready`): the cursor row is the prompt (`› `, `plan › `; `? ` on
  a terminal that cannot show `›`), holding nothing (or the text named), and the terminal is
  in prompt_toolkit's raw mode — no line discipline, no signal keys. Between two prompts the
  terminal is in cooked mode, and while a turn streams in the type-ahead mode (ISIG kept): in
  neither does the row alone count. prompt_toolkit takes the terminal before it draws, so
  once both hold, a key typed is read by the prompt.
- a question waits for a key (`Chat.asking`): the cursor row offers keys (`[y] yes`, `[y/n]`)
  and the terminal is in raw mode — a card, `send it?`, `work here anyway?`.
- a turn has ended (`Chat.wait_turn_end`): the prompt is ready again, on another row than
  the line that began the turn.

Each state must also hold with the terminal quiet for a moment: nothing drawn meanwhile.

Typing a line is `Chat.line` / `Chat.say`, which wait for the ready prompt first: a line typed
before the prompt took the terminal (it would wait there, unsent, by design) cannot be
written with this driver. Keys typed on purpose while a turn runs are `type_ahead`, which
checks that a turn is running; a key at a question is `press`, which waits for the question.
"""

from __future__ import annotations

import os
import re
import sys
import termios
import time
from collections.abc import Callable
from pathlib import Path

import pexpect
import pytest

from tests.fakes.vt import Screen, Term

PROMPT = "›"
ROWS = 40
QUIET = 0.25  # seconds a state must hold with nothing drawn
TIMEOUT = 60.0
KEYS_OFFERED = re.compile(r"\[(?:[a-z]|y/n)\] ?")


def env_for(host: str | None, **extra: str) -> dict[str, str]:
    """The environment `agent` gets in a terminal test: the fake server (`host`, None for
    none), a colour xterm, no cursor-position requests (nobody answers them), and the pty's
    size as the terminal's (no COLUMNS or LINES)."""
    env = {
        **os.environ,
        "TERM": "xterm-256color",
        "PROMPT_TOOLKIT_NO_CPR": "1",  # nobody answers cursor-position requests in a test
    }
    if host is not None:
        env["OLLAMA_HOST"] = host
    for name in ("XTERM_VERSION", "COLUMNS", "LINES"):
        env.pop(name, None)
    return {**env, **extra}


def flat(screen: Screen) -> str:
    """What the screen shows, its rows joined by spaces: a line the terminal wrapped reads
    whole."""
    return " ".join(screen.transcript())


class Tty:
    """Any program of ours on a pty, drawn on a `Screen`."""

    def __init__(self, child: pexpect.spawn, cols: int, rows: int, *, reflow: bool = True):
        self.term = Term(child, cols, rows, reflow=reflow)

    @property
    def child(self) -> pexpect.spawn:
        return self.term.child

    @property
    def screen(self) -> Screen:
        return self.term.screen

    @property
    def raw(self) -> str:
        """Everything the program wrote, as it came."""
        return self.term.raw

    def text(self) -> str:
        return self.screen.text()

    def flat(self) -> str:
        return flat(self.screen)

    # -- the terminal's mode ---------------------------------------------------------------

    def keys_are_read(self) -> bool:
        """prompt_toolkit has the terminal: no line discipline and no signal keys (raw
        mode). Cooked mode (between prompts) and the type-ahead mode of a running turn
        (Ctrl-C still a signal) are not."""
        try:
            lflag = termios.tcgetattr(self.child.child_fd)[3]
        except (termios.error, OSError, ValueError):
            return False  # the program has ended
        return not lflag & (termios.ICANON | termios.ISIG)

    # -- waiting ---------------------------------------------------------------------------

    def wait(self, what: str | Callable[[Screen], bool], timeout: float = TIMEOUT) -> None:
        """Until `what` is on the screen (or the scrollback), or the predicate holds."""
        self.term.wait(what, timeout)

    def wait_state(
        self, state: Callable[[Screen], bool], timeout: float = TIMEOUT, quiet: float = QUIET
    ) -> None:
        """Until `state` holds and still holds after `quiet` seconds with nothing drawn."""
        deadline = time.monotonic() + timeout
        while True:
            self.term.wait(state, max(0.1, deadline - time.monotonic()))
            before = len(self.raw)
            alive = self.term.pump(quiet)
            if len(self.raw) == before and state(self.screen):
                return
            if not alive or time.monotonic() > deadline:
                raise AssertionError(
                    f"waited for a quiet {state!r}; the terminal shows:\n{self.text()}"
                )

    def settle(self, quiet: float = 0.5, timeout: float = 30) -> None:
        self.term.settle(quiet, timeout)

    def wait_exit(self, timeout: float = TIMEOUT) -> int | None:
        """Reads (and draws) everything until the program ends; its exit status (None when a
        signal ended it: see `child.signalstatus`)."""
        deadline = time.monotonic() + timeout
        while self.term.pump(0.2):
            if time.monotonic() > deadline:
                raise AssertionError(f"still running; the terminal shows:\n{self.text()}")
        self.child.close()
        status: int | None = self.child.exitstatus
        return status

    # -- keys ------------------------------------------------------------------------------

    def interrupt(self) -> None:
        """Ctrl-C, whatever the program is doing (a signal mid-turn, a key at a prompt)."""
        self.child.sendcontrol("c")

    def answer_line(self, text: str) -> None:
        """A line for a program that reads one in cooked mode (`agent run`'s question)."""
        self.child.send(text + "\r")

    def resize(self, cols: int, rows: int) -> None:
        self.term.resize(cols, rows)

    def close(self) -> None:
        if self.child.isalive():
            self.child.terminate(force=True)


class Chat(Tty):
    """`agent chat` on a pty."""

    def __init__(
        self,
        child: pexpect.spawn,
        cols: int,
        rows: int,
        *,
        reflow: bool = True,
        prompt: str = PROMPT,
    ):
        super().__init__(child, cols, rows, reflow=reflow)
        self.prompt = prompt
        self._line_row: int | None = None  # where the line that began the turn was typed

    def since_line(self) -> str:
        """What the screen shows from the last line typed on (that line too), its rows
        joined by spaces: what the turn (or command) said."""
        start = self._line_row or 0
        return " ".join(" ".join(self.screen.transcript()[start:]).split())

    # -- states ----------------------------------------------------------------------------

    def _cursor(self) -> int:
        return self.screen.top + self.screen.y

    def ready(self, plan: bool | None = None, holding: str = "") -> Callable[[Screen], bool]:
        """The prompt (in plan mode `plan › `; None: either) is at the cursor holding
        `holding` (nothing by default), and reads the keys."""
        plain, planning = self.prompt, f"plan {self.prompt}"
        wanted = [plain, planning] if plan is None else [planning] if plan else [plain]
        rows = {f"{p} {holding}".rstrip() for p in wanted}

        def check(screen: Screen) -> bool:
            return screen.cursor_row() in rows and self.keys_are_read()

        check.__qualname__ = f"ready(plan={plan!r}, holding={holding!r})"
        return check

    def at_prompt(self, screen: Screen) -> bool:
        """The prompt is at the cursor and reads the keys, whatever it holds."""
        row = screen.cursor_row()
        starts = (f"{self.prompt} ", f"plan {self.prompt} ")
        bare = (self.prompt, f"plan {self.prompt}")
        return (row.startswith(starts) or row in bare) and self.keys_are_read()

    def asking(self, screen: Screen) -> bool:
        """A question waits for a key: the cursor row offers keys, the terminal is raw."""
        return bool(KEYS_OFFERED.search(screen.cursor_row())) and self.keys_are_read()

    def asking_for(self, label: str) -> Callable[[Screen], bool]:
        """A question whose cursor row holds `label` (`reason (optional)`) reads the keys."""

        def check(screen: Screen) -> bool:
            return label in screen.cursor_row() and self.keys_are_read()

        check.__qualname__ = f"asking_for({label!r})"
        return check

    def running(self) -> bool:
        """A turn runs: neither a prompt nor a question has the terminal."""
        return not self.keys_are_read()

    # -- waiting for them --------------------------------------------------------------------

    def wait_ready(
        self, plan: bool | None = None, holding: str = "", timeout: float = TIMEOUT
    ) -> None:
        self.wait_state(self.ready(plan, holding), timeout)

    def wait_card(self, then: str = "", timeout: float = TIMEOUT) -> None:
        """Until a question (a card's, say) waits for a key; `then` first shown."""
        if then:
            self.wait(then, timeout)
        self.wait_state(self.asking, timeout, quiet=max(QUIET, 0.3))

    def wait_turn_end(
        self, then: str = "", plan: bool | None = None, holding: str = "", timeout: float = TIMEOUT
    ) -> None:
        """Until the turn begun by the last line has ended: `then` shown, and the prompt
        ready again on another row than that line's."""
        if then:
            self.wait(then, timeout)
        ready = self.ready(plan, holding)
        began = self._line_row

        def ended(screen: Screen) -> bool:
            return (began is None or self._cursor() != began) and ready(screen)

        ended.__qualname__ = f"turn ended ({ready.__qualname__})"
        self.wait_state(ended, timeout)

    # -- typing --------------------------------------------------------------------------------

    def line(self, text: str, plan: bool | None = None, holding: str = "") -> None:
        """Types `text` and Enter at the ready prompt (waited for first): the turn begins."""
        self.wait_ready(plan, holding)
        self._line_row = self._cursor()
        self.child.send(text + "\r")

    def say(
        self, text: str, then: str = "", plan: bool | None = None, after: bool | None = None
    ) -> None:
        """A whole turn: `text` typed at the ready prompt (in mode `plan`), then until `then`
        shows and the prompt (in mode `after`, by default either) is ready again."""
        self.line(text, plan)
        self.wait_turn_end(then, after)

    def keys(self, text: str) -> None:
        """Keys (no Enter, or the Enter of a line the prompt already holds) typed at a
        prompt that reads them."""
        self.wait_state(self.at_prompt)
        if "\r" in text:
            self._line_row = self._cursor()
        self.child.send(text)

    def type_ahead(self, text: str) -> None:
        """Keys typed on purpose while a turn runs (streams, waits for the server): once the
        prompt (or question) has let go of the terminal."""
        self.wait(lambda _screen: self.running(), timeout=10)
        self.child.send(text)

    def press(self, key: str, then: str = "") -> None:
        """`key` at the question that waits for one (waited for, `then` shown first)."""
        self.wait_card(then)
        self.child.send(key)

    def reply_line(self, label: str, text: str = "") -> None:
        """`text` and Enter at the line question whose row holds `label`."""
        self.wait_state(self.asking_for(label))
        self.child.send(text + "\r")

    def exit(self, command: str = "/exit") -> int | None:
        """`command` at the ready prompt, then until the chat has ended; its exit status."""
        self.line(command)
        return self.wait_exit()

    def quit(self) -> int | None:
        """Ctrl-D at the ready, empty prompt; the exit status."""
        self.wait_ready()
        self.child.sendcontrol("d")
        return self.wait_exit()


class Ttys:
    """Starts programs on ptys for one test and ends what is left of them afterwards (the
    `ttys` fixture)."""

    def __init__(self, request: pytest.FixtureRequest) -> None:
        self.request = request
        self.started: list[Tty] = []

    def _spawn(
        self,
        args: list[str],
        *,
        host: str | None,
        cwd: Path | str | None,
        cols: int,
        rows: int,
        env: dict[str, str] | None,
        encoding: str,
        timeout: float,
    ) -> pexpect.spawn:
        where = cwd if cwd is not None else self.request.getfixturevalue("workspace")
        return pexpect.spawn(
            sys.executable,
            ["-m", "cli", *args],
            cwd=str(where),
            env=env_for(host, **(env or {})),
            encoding=encoding,
            codec_errors="replace",
            timeout=timeout,
            dimensions=(rows, cols),
        )

    def chat(
        self,
        *args: str,
        host: str | None = None,
        cwd: Path | str | None = None,
        cols: int = 100,
        rows: int = ROWS,
        reflow: bool = True,
        env: dict[str, str] | None = None,
        encoding: str = "utf-8",
        prompt: str = PROMPT,
        ready: bool = True,
        timeout: float = TIMEOUT,
    ) -> Chat:
        """`agent chat ARGS` against `host` in `cwd` (the workspace); with `ready`, once its
        prompt is ready. `prompt` is what the terminal shows for `›` (`?` where it cannot)."""
        child = self._spawn(
            ["chat", *args], host=host, cwd=cwd, cols=cols, rows=rows, env=env,
            encoding=encoding, timeout=timeout,
        )  # fmt: skip
        chat = Chat(child, cols, rows, reflow=reflow, prompt=prompt)
        self.started.append(chat)
        if ready:
            chat.wait_ready()
        return chat

    def run(
        self,
        *args: str,
        host: str | None = None,
        cwd: Path | str | None = None,
        cols: int = 100,
        rows: int = ROWS,
        reflow: bool = True,
        env: dict[str, str] | None = None,
        encoding: str = "utf-8",
        timeout: float = TIMEOUT,
    ) -> Tty:
        """`agent ARGS` (`run`, `audit show`, …) on a pty."""
        child = self._spawn(
            list(args), host=host, cwd=cwd, cols=cols, rows=rows, env=env, encoding=encoding,
            timeout=timeout,
        )  # fmt: skip
        tty = Tty(child, cols, rows, reflow=reflow)
        self.started.append(tty)
        return tty

    def close(self) -> None:
        for tty in self.started:
            tty.close()
