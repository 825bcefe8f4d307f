"""Lines that fit the terminal: words wrapped under a hanging indent, fields packed onto
continuation lines. A line the terminal wraps itself starts at column 0, where it reads as
a new entry; these keep every continuation indented, so each entry stays one block.

Widths are counted in terminal cells (a wide character takes two)."""

from __future__ import annotations

import os
from collections.abc import Sequence

from rich.cells import cell_len
from rich.console import Console, ConsoleDimensions, ConsoleOptions, RenderResult
from rich.text import Text


def terminal_width(stream: object) -> int | None:
    """The width of the terminal `stream` writes to; None when it is not a terminal (a
    pipe or a file gets one entry a line, as scripts expect)."""
    try:
        fd = stream.fileno()  # type: ignore[attr-defined]
        if not isinstance(fd, int) or not os.isatty(fd):
            return None
        return os.get_terminal_size(fd).columns or None
    except (AttributeError, ValueError, OSError):
        return None


class FittedConsole(Console):
    """A console as wide as its terminal, TERM=dumb too. rich takes 80 columns on a dumb
    terminal (Emacs' shell, whose window may be 60 wide), and the terminal then breaks each
    longer line mid-word; here the width is the terminal's, asked each time, as a resized
    window changes it (or COLUMNS when the terminal does not say). A size given to the
    console (tests, `size =`) stands."""

    @property
    def size(self) -> ConsoleDimensions:
        dimensions = super().size
        if self.is_dumb_terminal and (self._width is None or self._height is None):
            # The terminal's own size first (Emacs sets it, and resizes it); else COLUMNS,
            # which rich read at start and then set aside for the dumb terminal's 80.
            width = terminal_width(self.file) or self._width
            if width:
                return ConsoleDimensions(width, dimensions.height)
        return dimensions

    @size.setter
    def size(self, new_size: tuple[int, int]) -> None:
        self._width, self._height = new_size


def hanging(lead: str, text: str, width: int, indent: int | None = None) -> list[str]:
    """`lead` then `text`'s words, wrapped to `width` cells; every further line starts with
    `indent` spaces (default: as wide as `lead`, so the text keeps its own column). A word
    longer than a line is cut, never pushed past the edge."""
    pad = " " * (cell_len(lead) if indent is None else indent)
    return pack(text.split(), width, lead=lead, indent=pad, sep=" ")


def pack(
    items: Sequence[str], width: int, *, lead: str = "", indent: str = "    ", sep: str = "  "
) -> list[str]:
    """`items` in order, as many on a line as fit in `width` cells, `sep` between them;
    the first line starts with `lead`, the others with `indent`."""
    lines: list[str] = []
    line = lead
    fresh = True  # nothing but the lead or the indent on this line yet
    for item in items:
        gap = "" if fresh else sep
        if not fresh and cell_len(line + gap + item) > width:
            lines.append(line.rstrip())
            line, gap, fresh = indent, "", True
        room = max(1, width - cell_len(line))
        line += gap + (item if cell_len(item) <= room else _cut(item, room))
        fresh = False
    lines.append(line.rstrip())
    return lines


def _cut(text: str, cells: int) -> str:
    """`text` in at most `cells` cells; cut, it ends in `…+N`, N being how many characters
    were left out (in a room too small to say so, in `…` alone)."""
    if cell_len(text) <= cells:
        return text
    counted = cells - cell_len(f"…+{len(text)}") >= 4  # room for some text and the count
    fits = cells - cell_len(f"…+{len(text)}") if counted else cells - 1
    out = ""
    for char in text:
        if cell_len(out + char) > fits:
            break
        out += char
    return out + (f"…+{len(text) - len(out)}" if counted else "…")


class Hanging:
    """Rich text drawn line by line, a line too long for the width going on under a
    hanging indent (its own indent and two more) rather than at column 0: a card's title
    or a path that wraps stays inside its card."""

    def __init__(self, text: Text) -> None:
        self.text = text

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        width = max(1, options.max_width)
        for line in self.text.split("\n", allow_blank=True):
            for row in hang(line, width):
                row.no_wrap = True  # cut where needed, never wrapped again at column 0
                row.end = "\n"
                yield row


def hang(line: Text, width: int) -> list[Text]:
    """`line` in rows of at most `width` cells, broken after a space where there is one;
    every row after the first starts with the line's indent and two more spaces."""
    if line.cell_len <= width:
        return [line]
    plain = line.plain
    pad = " " * min(len(plain) - len(plain.lstrip(" ")) + 2, width // 3)
    rows: list[Text] = []
    rest, room = line, width
    while rest.cell_len > room:
        cut = _break(rest.plain, room)
        rows.append(rest[:cut])
        rest = rest[cut:]
        rest = rest[len(rest.plain) - len(rest.plain.lstrip(" ")) :]
        rest = Text.assemble(pad, rest)
        room = width
    rows.append(rest)
    for row in rows:
        row.rstrip()
    return rows


def _break(plain: str, room: int) -> int:
    """Where to end a row of `plain` that holds at most `room` cells: after the last space
    that fits and leaves the row at least half full, else (a long word: a path) at the last
    character that fits; at least one."""
    cells, fits, space = 0, 0, 0
    for index, char in enumerate(plain):
        cells += cell_len(char)
        if cells > room:
            break
        fits = index + 1
        if char == " ":
            space = index + 1
    start = len(plain) - len(plain.lstrip(" "))
    return space if space > start and 2 * space >= fits else max(1, fits)
