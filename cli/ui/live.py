"""The part of the screen that is redrawn while a turn runs: the unfinished tail of the
answer and, under it, a status line (a spinner, what is awaited, the seconds so far).

Redrawing means moving the cursor up over the rows drawn last time and writing them anew,
so everything depends on knowing how many rows those are:

- no row is padded to the full width (rich pads paragraphs with spaces): a full row leaves
  the cursor in the terminal's pending-wrap state, where one more character — an echoed key,
  the `^C` of Ctrl-C — opens a row nobody counted, and a reflowing terminal turns a padded
  row into two as soon as the window narrows;
- nothing else may write while the region is on screen: `update` prints what is finished
  above it, and the terminal does not echo keys meanwhile (cli/ui/keys.py's TypeAhead);
- after the window narrows, a row wider than the new width takes several rows in a terminal
  that reflows (VTE, kitty, iTerm2, tmux…) and one, cut, in one that does not (xterm, rxvt,
  st, the Linux console, screen): `terminal_reflows` tells which from the environment;
- a status line comes and goes from a second thread (`Pulse`), under the same lock.
"""

from __future__ import annotations

import enum
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.control import Control
from rich.segment import ControlType, Segment, Segments
from rich.spinner import Spinner
from rich.text import Text

STALL_SECONDS = 1.0  # no output for this long: the status line says what is awaited
TICK_SECONDS = 0.1  # how often the status line is redrawn (spinner, seconds, window size)

Line = list[Segment]


def live_capable(console: Console) -> bool:
    """Live displays only on a real, interactive terminal: elsewhere (a file, a pipe, a
    test's StringIO) each refresh would be written out as one more copy."""
    return console.is_terminal and console.is_interactive and not console.is_dumb_terminal


def terminal_reflows(environ: Mapping[str, str] | None = None) -> bool:
    """Whether the terminal rewraps long rows when its window narrows. Most do; the ones
    that do not say who they are in the environment."""
    env = os.environ if environ is None else environ
    if env.get("TMUX"):
        return True  # tmux reflows, whatever TERM it sets
    if env.get("XTERM_VERSION"):
        return False
    term = env.get("TERM", "")
    return not term.startswith(("rxvt", "st-", "linux", "screen")) and term != "st"


@dataclass
class Status:
    """A status line: a spinner, what is awaited, and the seconds since the wait began."""

    label: str
    since: float
    style: str = "dim"
    clock: Callable[[], float] = time.monotonic
    _spinner: Spinner = field(init=False)

    def __post_init__(self) -> None:
        self._spinner = Spinner("dots", style=self.style)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        seconds = int(max(0.0, self.clock() - self.since))
        suffix = f" · {seconds} s"
        label = Text(self.label, style=self.style)
        # One row whatever the width: the label gives way, the seconds stay.
        label.truncate(max(1, options.max_width - 2 - len(suffix)), overflow="ellipsis")
        self._spinner.update(text=label + Text(suffix, style=self.style))
        yield self._spinner


class _Keep(enum.Enum):
    KEEP = enum.auto()


class Region:
    """The redrawn rows at the bottom of the output: `tail` above `status`, either may be
    None. Every write to the console while the region is shown goes through `update`."""

    def __init__(self, console: Console, *, reflow: bool | None = None) -> None:
        self.console = console
        self.reflow = terminal_reflows() if reflow is None else reflow
        self.lock = threading.RLock()
        self.tail: RenderableType | None = None
        self.status: Status | None = None
        self._shown: list[Line] = []  # the rows on screen now
        self._width = 0  # the width they were drawn at
        self._tail_cache: tuple[RenderableType | None, int, list[Line]] = (None, 0, [])

    @property
    def shown(self) -> bool:
        return bool(self._shown)

    def update(
        self,
        *,
        above: RenderableType | None = None,
        tail: RenderableType | _Keep | None = _Keep.KEEP,
        status: Status | _Keep | None = _Keep.KEEP,
    ) -> None:
        """Print `above` for good, then draw the region with the new `tail` and `status`
        (KEEP: what there is)."""
        with self.lock:
            if not isinstance(tail, _Keep):
                self.tail = tail
            if not isinstance(status, _Keep):
                self.status = status
            self._draw(above)

    def refresh(self) -> None:
        """Redraw what changed: the spinner, the seconds, everything after a resize."""
        with self.lock:
            if self._shown or self.tail is not None or self.status is not None:
                self._draw(None)

    def clear(self) -> None:
        self.update(tail=None, status=None)

    # -- drawing ---------------------------------------------------------------------------

    def _draw(self, above: RenderableType | None) -> None:
        width = self.console.width
        new = self._render(width)
        old = self._shown
        if above is None and new == old and width == self._width:
            return
        keep = 0
        if above is None and width == self._width and old:
            # Rows that did not change stay; at least the last one is written again, so the
            # cursor goes on from where it is.
            while keep < min(len(new), len(old)) - 1 and new[keep] == old[keep]:
                keep += 1
        with self.console.capture() as capture:
            if not old and new:
                self.console.show_cursor(False)
            self.console.control(self._erase(self._rows_on_screen(width) - keep))
            if above is not None:
                self.console.print(above)
            rows: list[Segment] = []
            for index, line in enumerate(new[keep:]):
                if index:
                    rows.append(Segment.line())
                rows += line
            if rows:
                self.console.print(Segments(rows), end="", soft_wrap=True)
            if old and not new:
                self.console.show_cursor(True)
        # One write, the state set just before it: a Ctrl-C (KeyboardInterrupt) cannot
        # leave the rows on screen and the rows counted apart.
        self._shown, self._width = new, width
        self.console.file.write(capture.get())
        self.console.file.flush()

    def _render(self, width: int) -> list[Line]:
        parts: list[Line] = []
        if self.tail is not None:
            cached, cached_width, lines = self._tail_cache
            if cached is not self.tail or cached_width != width:
                lines = self._lines(self.tail, width)
                self._tail_cache = (self.tail, width, lines)
            parts += lines
        if self.status is not None:
            parts += self._lines(self.status, width)
        room = max(1, self.console.height - 1)
        return parts[-room:]

    def _lines(self, renderable: RenderableType, width: int) -> list[Line]:
        options = self.console.options.update_width(width)
        lines = self.console.render_lines(Group(renderable), options, pad=False)
        return [_rstrip(line) for line in lines]

    def _rows_on_screen(self, width: int) -> int:
        """How many terminal rows the region drawn last takes now: more than it had when
        the window narrowed in a terminal that rewraps long rows."""
        if not self._shown:
            return 0
        if self.reflow and width < self._width:
            return sum(max(1, -(-Segment.get_line_length(line) // width)) for line in self._shown)
        return len(self._shown)

    @staticmethod
    def _erase(rows: int) -> Control:
        """From the end of the region's last row, erase `rows` rows upwards; the cursor ends
        at the start of the first of them."""
        if rows <= 0:
            return Control()
        codes: list[ControlType | tuple[ControlType, int]] = [
            ControlType.CARRIAGE_RETURN,
            (ControlType.ERASE_IN_LINE, 2),
        ]
        for _ in range(rows - 1):
            codes += [(ControlType.CURSOR_UP, 1), (ControlType.ERASE_IN_LINE, 2)]
        return Control(*codes)


def _rstrip(line: Line) -> Line:
    """The line without the spaces that only pad it to the width (styled or not: a padded
    background is not worth a row that breaks the count)."""
    segments = list(line)
    while segments and not segments[-1].control and not segments[-1].text.rstrip(" "):
        segments.pop()
    if segments and not segments[-1].control:
        last = segments[-1]
        segments[-1] = Segment(last.text.rstrip(" "), last.style, last.control)
    return segments


class Pulse:
    """A thread that calls `tick` every TICK_SECONDS until `stop`."""

    def __init__(self, tick: Callable[[], None], interval: float = TICK_SECONDS) -> None:
        self._tick = tick
        self._interval = interval
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="status-line", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stopped.wait(self._interval):
            self._tick()

    def stop(self) -> None:
        self._stopped.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=5)


@dataclass
class _Wait:
    label: str
    since: float
    after: float  # seconds of quiet before the status line shows
    style: str


class StatusLine:
    """Signs of life on a Region: while the turn waits for something, a status line says
    what (`waiting for qwen3:8b`, `model is thinking`, `running search_files`) and for how
    long. It shows at once for a wait that is known to be one (`after=0`), after
    STALL_SECONDS of quiet otherwise; output that arrives takes it off first (`quiet`).
    Without a region (no terminal) it does nothing."""

    def __init__(self, region: Region | None, clock: Callable[[], float] = time.monotonic):
        self.region = region
        self.clock = clock
        self._wait: _Wait | None = None
        self._pulse: Pulse | None = None
        self.prefix = ""  # leads every label: "plan · " in plan mode

    def begin(self) -> None:
        """The turn starts: from now on a thread keeps the line going."""
        if self.region is not None and self._pulse is None:
            self._pulse = Pulse(self._tick)

    def expect(self, label: str, *, after: float = STALL_SECONDS, style: str = "dim") -> None:
        region = self.region
        if region is None:
            return
        label = self.prefix + label
        with region.lock:
            showing = region.status
            if showing is not None and showing.label == label and self._wait is not None:
                return  # the same wait goes on: its seconds keep counting
            self._wait = _Wait(label, self.clock(), after, style)
            if after <= 0:
                region.update(status=Status(label, self._wait.since, style, self.clock))
            elif showing is not None:
                region.update(status=None)

    def quiet(self) -> None:
        """Nothing is awaited (output arrives, or a question is about to be asked)."""
        if self.region is None:
            return
        with self.region.lock:
            self._wait = None
            if self.region.status is not None:
                self.region.update(status=None)

    def stop(self) -> None:
        if self._pulse is not None:
            self._pulse.stop()
            self._pulse = None
        self.quiet()

    def _tick(self) -> None:
        region = self.region
        assert region is not None
        with region.lock:
            wait = self._wait
            due = wait is not None and self.clock() - wait.since >= wait.after
            if wait is not None and due and region.status is None:
                region.update(status=Status(wait.label, wait.since, wait.style, self.clock))
            else:
                region.refresh()
