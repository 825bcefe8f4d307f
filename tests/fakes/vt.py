"""A small terminal emulator for the pty tests: it plays a program's output on a screen of
cells, as xterm or VTE would, so a test can read what a person ends up looking at — the
rows on the screen and those scrolled off above it — rather than the bytes that drew them.

It knows what rich, prompt_toolkit and the kernel's echo write: text (wide characters take
two cells), CR, LF, BS, TAB, autowrap with the pending-wrap state of the last column,
cursor moves, erase in line and display, save and restore of the cursor; colours, modes
and titles are ignored. A resize either reflows the rows (VTE, kitty, iTerm2, tmux: a
line the terminal wrapped is rewrapped at the new width, a row ended by a newline stays a
row and is wrapped again only when it is now too wide) or, like xterm, only cuts them.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import pexpect
from wcwidth import wcwidth

_TOKEN = re.compile(
    r"\x1b\[(?P<args>[0-?]*)(?P<mid>[ -/]*)(?P<cmd>[@-~])"  # CSI
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)"  # OSC: titles, hyperlinks
    r"|\x1b[()*+][0-9A-Za-z]"  # character sets
    r"|\x1b[0-9=>A-Za-z\\]"  # other escapes (save/restore cursor, keypad modes)
    r"|[\x00-\x1f\x7f]"  # one control character
    r"|[^\x00-\x1f\x1b\x7f]+"  # text
)


@dataclass
class Row:
    cells: list[str] = field(default_factory=list)  # "" follows a wide character's cell
    wrapped: bool = False  # the terminal wrapped it: the next row continues it

    def text(self) -> str:
        return "".join(self.cells).rstrip()


class Screen:
    def __init__(self, cols: int, rows: int, *, reflow: bool = True) -> None:
        self.cols, self.height, self.reflow = cols, rows, reflow
        self.lines: list[Row] = [Row() for _ in range(rows)]  # scrollback, then the screen
        self.top = 0  # index in `lines` of the screen's first row
        self.y = self.x = 0  # cursor on the screen; x == cols: pending wrap
        self.autowrap = True
        self.saved = (0, 0)
        self._held = ""  # an escape sequence cut in two by the pty

    # -- reading ---------------------------------------------------------------------------

    def rows(self) -> list[str]:
        """The screen's rows, trailing blanks removed."""
        return [row.text() for row in self.lines[self.top : self.top + self.height]]

    def transcript(self) -> list[str]:
        """Every row there is (scrolled off and on screen), without the empty ones at the end."""
        texts = [row.text() for row in self.lines]
        while texts and not texts[-1]:
            texts.pop()
        return texts

    def text(self) -> str:
        return "\n".join(self.transcript())

    def cursor_row(self) -> str:
        return self.lines[self.top + self.y].text()

    # -- writing ---------------------------------------------------------------------------

    def feed(self, data: str) -> None:
        data = self._held + data
        self._held = ""
        at = 0
        while at < len(data):
            match = _TOKEN.match(data, at)
            assert match is not None  # one control character always matches
            if match.group() == "\x1b":  # a sequence not complete yet, or a stray ESC
                if len(data) - at < 64:
                    self._held = data[at:]  # the rest is on its way
                    return
                at += 1
                continue
            self._token(match)
            at = match.end()

    def _token(self, match: re.Match[str]) -> None:
        token = match.group()
        if match.group("cmd"):
            self._csi(match.group("args"), match.group("mid"), match.group("cmd"))
        elif token == "\x1b7":
            self.saved = (self.y, min(self.x, self.cols - 1))
        elif token == "\x1b8":
            self.y, self.x = self.saved
        elif token.startswith("\x1b"):
            pass
        elif token == "\r":
            self.x = 0
        elif token in ("\n", "\x0b", "\x0c"):
            self._linefeed()
        elif token == "\b":
            self.x = max(0, min(self.x, self.cols - 1) - 1)
        elif token == "\t":
            self.x = min(self.cols - 1, (min(self.x, self.cols - 1) // 8 + 1) * 8)
        elif len(token) == 1 and (token < " " or token == "\x7f"):
            pass  # BEL and the like
        else:
            for char in token:
                self._put(char)

    def _row(self) -> Row:
        return self.lines[self.top + self.y]

    def _linefeed(self) -> None:
        if self.y == self.height - 1:
            self.top += 1  # the top row scrolls off into the scrollback
            if self.top + self.y >= len(self.lines):
                self.lines.append(Row())
        else:
            self.y += 1
        while len(self.lines) < self.top + self.height:
            self.lines.append(Row())

    def _put(self, char: str) -> None:
        width = wcwidth(char)
        if width < 0:
            return
        if width == 0:
            return  # a combining mark: nothing the tests read
        if self.x + width > self.cols:
            if self.autowrap:
                self._row().wrapped = True
                self._linefeed()
                self.x = 0
            else:
                self.x = self.cols - width
        row = self._row()
        if len(row.cells) < self.x + width:
            row.cells += [" "] * (self.x + width - len(row.cells))
        row.cells[self.x] = char
        if width == 2:
            row.cells[self.x + 1] = ""
        self.x += width  # == cols: the pending-wrap state of the last column

    def _csi(self, args: str, mid: str, cmd: str) -> None:
        if args.startswith(("?", ">", "=", "<")) or mid:
            if args in ("?7",) and cmd in "hl":
                self.autowrap = cmd == "h"
            return
        numbers = [int(n) if n else 0 for n in args.split(";")] if args else []
        n = numbers[0] if numbers and numbers[0] else 1
        x = min(self.x, self.cols - 1)
        if cmd == "A":
            self.y, self.x = max(0, self.y - n), x
        elif cmd == "B":
            self.y, self.x = min(self.height - 1, self.y + n), x
        elif cmd == "C":
            self.x = min(self.cols - 1, x + n)
        elif cmd == "D":
            self.x = max(0, x - n)
        elif cmd == "G":
            self.x = min(self.cols - 1, n - 1)
        elif cmd in "Hf":
            row = numbers[0] if numbers and numbers[0] else 1
            col = numbers[1] if len(numbers) > 1 and numbers[1] else 1
            self.y, self.x = min(self.height, row) - 1, min(self.cols, col) - 1
        elif cmd == "K":
            self._erase_line(numbers[0] if numbers else 0)
        elif cmd == "J":
            self._erase_display(numbers[0] if numbers else 0)
        elif cmd == "P":  # delete characters
            row = self._row()
            del row.cells[x : x + n]
        elif cmd == "X":  # erase characters
            row = self._row()
            for i in range(x, min(len(row.cells), x + n)):
                row.cells[i] = " "

    def _erase_line(self, mode: int) -> None:
        row = self._row()
        x = min(self.x, self.cols - 1)
        if mode == 0:
            del row.cells[x:]
            row.wrapped = False
        elif mode == 1:
            for i in range(min(x + 1, len(row.cells))):
                row.cells[i] = " "
        else:
            row.cells.clear()
            row.wrapped = False

    def _erase_display(self, mode: int) -> None:
        if mode == 0:
            self._erase_line(0)
            for row in self.lines[self.top + self.y + 1 : self.top + self.height]:
                row.cells.clear()
                row.wrapped = False
        elif mode == 1:
            for row in self.lines[self.top : self.top + self.y]:
                row.cells.clear()
            self._erase_line(1)
        elif mode in (2, 3):
            for row in self.lines[self.top : self.top + self.height]:
                row.cells.clear()
                row.wrapped = False

    # -- resizing --------------------------------------------------------------------------

    def resize(self, cols: int, rows: int) -> None:
        if self.reflow and cols != self.cols:
            self._rewrap(cols)
        else:
            for row in self.lines:
                del row.cells[cols:]
            self.x = min(self.x, cols)
        self.cols = cols
        if rows < self.height and self.y >= rows:
            self.top += self.y - rows + 1
            self.y = rows - 1
        self.height = rows
        while len(self.lines) < self.top + self.height:
            self.lines.append(Row())

    def _rewrap(self, cols: int) -> None:
        """Joins what the terminal wrapped, cuts every logical line again at `cols`, and
        keeps the cursor on the cell it was on; the screen keeps its bottom rows in view."""
        cursor = self.top + self.y
        logical: list[list[str]] = []
        at: tuple[int, int] = (0, 0)
        current: list[str] = []
        last = max(cursor, max((i for i, r in enumerate(self.lines) if r.cells), default=0))
        for index, row in enumerate(self.lines[: last + 1]):
            if index == cursor:
                at = (len(logical), len(current) + self.x)
            current += row.cells + ([" "] * (self.cols - len(row.cells)) if row.wrapped else [])
            if not row.wrapped or index == last:
                logical.append(current)
                current = []
        lines: list[Row] = []
        cursor_at = (0, 0)
        for number, cells in enumerate(logical):
            start = len(lines)
            pieces = _cut(cells, cols)
            for i, piece in enumerate(pieces):
                lines.append(Row(piece, wrapped=i < len(pieces) - 1))
            if number == at[0]:
                row, col = divmod(at[1], cols)
                if col == 0 and row > 0 and at[1] >= len(cells):
                    row, col = row - 1, cols  # just after the last cell: pending wrap
                while start + row >= len(lines):
                    lines.append(Row())
                cursor_at = (start + row, col)
        self.lines = lines
        self.top = max(0, max(len(lines), cursor_at[0] + 1) - self.height)
        self.y, self.x = cursor_at[0] - self.top, cursor_at[1]
        while len(self.lines) < self.top + self.height:
            self.lines.append(Row())


def _cut(cells: list[str], cols: int) -> list[list[str]]:
    pieces: list[list[str]] = []
    piece: list[str] = []
    width = 0
    for cell in cells:
        if cell == "":
            piece.append(cell)
            continue
        w = max(1, wcwidth(cell))
        if width + w > cols:
            pieces.append(piece)
            piece, width = [], 0
        piece.append(cell)
        width += w
    pieces.append(piece)
    return pieces


class Term:
    """A pexpect child drawn on a `Screen`: read what it wrote, wait for what a person would
    see, resize both the pty and the screen at one point in the output."""

    def __init__(self, child: pexpect.spawn, cols: int, rows: int, *, reflow: bool = True):
        self.child = child
        self.screen = Screen(cols, rows, reflow=reflow)
        self.raw = ""  # everything the child wrote, for failure messages and searches

    def pump(self, wait: float = 0.05) -> bool:
        """Reads what is there (waiting up to `wait` for the first bytes); False at EOF."""
        while True:
            try:
                data = self.child.read_nonblocking(65536, timeout=wait)
            except pexpect.TIMEOUT:
                return True
            except pexpect.EOF:
                return False
            self.raw += data
            self.screen.feed(data)
            wait = 0.01

    def wait(self, what: str | Callable[[Screen], bool], timeout: float = 60) -> None:
        """Until `what` is on the screen (or the scrollback), or the predicate holds."""
        check = what if callable(what) else (lambda screen: what in screen.text())
        deadline = time.monotonic() + timeout
        while not check(self.screen):
            alive = self.pump(0.1)
            if check(self.screen):
                return
            if not alive or time.monotonic() > deadline:
                raise AssertionError(
                    f"waited for {what!r}; the terminal shows:\n{self.screen.text()}"
                )

    def settle(self, quiet: float = 0.5, timeout: float = 30) -> None:
        """Reads until the child has written nothing for `quiet` seconds."""
        deadline = time.monotonic() + timeout
        before = len(self.raw)
        while time.monotonic() < deadline:
            if not self.pump(quiet):
                return
            if len(self.raw) == before:
                return
            before = len(self.raw)

    def resize(self, cols: int, rows: int) -> None:
        self.pump(0.01)
        self.screen.resize(cols, rows)
        self.child.setwinsize(rows, cols)

    def send(self, text: str) -> None:
        self.child.send(text)
