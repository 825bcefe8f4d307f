"""`agent chat`'s consumer of loop events: the answer streamed as Markdown, thinking dimmed,
a card per tool call and a stats line per answer.

Everything the model wrote goes through `sanitize` and is shown as `Text` or Markdown, never
as rich markup, so a path like `[bold]x` prints as written, and no control sequence of the
model's (a window title, a clipboard write, a cursor move) reaches the terminal.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rich.console import Console, ConsoleOptions, Group, NewLine, RenderableType, RenderResult
from rich.markdown import Markdown
from rich.padding import Padding
from rich.segment import Segment, Segments
from rich.syntax import Syntax
from rich.text import Text

from cli.backends.messages import ToolCall
from cli.loop.approval import ApprovalRequest
from cli.loop.events import (
    ContentDelta,
    Event,
    Finished,
    Notice,
    StepFinished,
    ThinkingDelta,
    ToolCallProposed,
    ToolDecided,
    ToolResult,
)
from cli.ui.approval_card import describe
from cli.ui.approve import CHANGE_TOOLS
from cli.ui.cards import FOLD_LINES, Row, card_title, stats_line, tool_card
from cli.ui.keys import TypeAhead
from cli.ui.live import Region, StatusLine, live_capable
from cli.ui.text import call_summary, sanitize

CODE_THEME = "monokai"
TAIL_LINES = 40  # complete lines the live tail may hold before they are printed for good
TAIL_CHARS = 4000  # the same bound in characters, for answers written as very long lines


# -- the streamed answer -------------------------------------------------------------------

_BACKTICK_FENCE = re.compile(r"^(\s*)(`{3,})([^`]*)$")
_TILDE_FENCE = re.compile(r"^(\s*)(~{3,})(.*)$")
_HEADING = re.compile(r"^ {0,3}#{1,6}(\s|$)")
_LIST_ITEM = re.compile(r"^ {0,3}(?:[-*+]|\d{1,9}[.)])(?:\s|$)")
# A list item's start, or the start of a line that may still become one ("1", "12.", "-").
_MAYBE_LIST_ITEM = re.compile(r"^(?:[-*+]|\d{1,9}[.)])(?:\s|$)|^\d{1,9}[.)]?$")


@dataclass(frozen=True)
class _Fence:
    """An open fenced code block."""

    marker: str  # "`" or "~"
    length: int
    indent: int
    lexer: Any  # a pygments Lexer, resolved once per block

    def closes(self, line: str) -> bool:
        bare = line.strip()
        return len(bare) >= self.length and set(bare) == {self.marker}

    def dedent(self, line: str) -> str:
        spaces = len(line) - len(line.lstrip(" "))
        return line[min(spaces, self.indent) :]


def _markdown(source: str, code_theme: str) -> Markdown:
    """`source` (already sanitised) as rich Markdown. Links are shown as their text and then
    their target, never as terminal hyperlinks (OSC 8): a link cannot hide where it goes."""
    return Markdown(source, code_theme=code_theme, hyperlinks=False)


class _LastRows:
    """The last `rows` rows of a renderable: a live region taller than the screen cannot be
    erased, and its end is what the reader is waiting for."""

    def __init__(self, renderable: RenderableType, rows: int) -> None:
        self.renderable = renderable
        self.rows = rows

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        lines = console.render_lines(self.renderable, options, pad=False)
        for line in lines[-self.rows :]:
            yield from line
            yield Segment.line()


class MarkdownStream:
    """Renders streamed Markdown at a cost per chunk that does not grow with the answer.

    Finished blocks are printed once, for good: a prose block when a blank line (outside a
    code fence) is followed by an unindented line, a heading at its end of line, and each
    line of a fenced code block as soon as it is complete. Only the unfinished tail (at
    most TAIL_LINES lines) is shown live, in a `Region` (shared with a status line when one
    is given) that `finish` replaces with the tail printed for good. Where no live display
    is possible only finished blocks are printed, so the captured output holds the answer
    once.
    """

    def __init__(
        self, console: Console, *, code_theme: str = CODE_THEME, region: Region | None = None
    ) -> None:
        self.console = console
        self._code_theme = code_theme
        self._theme = Syntax.get_theme(code_theme)
        if region is None and live_capable(console):
            region = Region(console)
        self._region = region
        self._block: list[str] = []  # complete lines of the unfinished prose block
        self._block_chars = 0
        self._partial = ""  # the line being written
        self._fence: _Fence | None = None
        self._after_blank = False  # the block ends with a blank line
        self._printed = False  # a block is out: the next one needs a blank line first
        self._out: list[RenderableType] = []  # finished by the current chunk

    @property
    def active(self) -> bool:
        """Something arrived since the last `finish`."""
        return bool(self._printed or self._block or self._partial or self._fence)

    def feed(self, text: str) -> None:
        lines = text.split("\n")
        if len(lines) == 1:
            self._partial += text
        else:
            lines[0] = self._partial + lines[0]
            self._partial = lines.pop()
            for line in lines:
                self._add_line(sanitize(line.removesuffix("\r"), multiline=True))
        if self._starts_new_block(self._partial):
            self._flush_block()
        self._show()

    def finish(self) -> None:
        """The message is over: print the tail for good and start afresh."""
        self.close()
        if self._partial:
            partial, self._partial = self._partial, ""
            self._add_line(sanitize(partial.removesuffix("\r"), multiline=True))
        self._flush_block()
        if self._fence is not None:
            self._out.append(self._code_padding())
            self._fence = None
        self._print_out()
        self._printed = False

    def close(self) -> None:
        """Take the live tail off the screen without printing; what it held is kept for
        `finish`."""
        if self._region is not None and self._region.tail is not None:
            self._region.update(tail=None)

    # -- blocks ----------------------------------------------------------------------------

    def _add_line(self, line: str) -> None:
        if self._fence is not None:
            self._add_code_line(line)
            return
        opening = _BACKTICK_FENCE.match(line) or _TILDE_FENCE.match(line)
        if opening:
            self._flush_block()
            self._open_fence(opening)
            return
        if not line.strip():
            if self._block:  # blank lines between blocks are the gap we print anyway
                self._block.append(line)
                self._after_blank = True
            return
        if self._starts_new_block(line):
            self._flush_block()
        self._block.append(line)
        self._block_chars += len(line)
        self._after_blank = False
        too_long = len(self._block) >= TAIL_LINES or self._block_chars >= TAIL_CHARS
        if too_long or _HEADING.match(line):
            self._flush_block()

    def _starts_new_block(self, line: str) -> bool:
        """After a blank line an unindented line starts a new block. An indented one may
        still belong to a list item, and an item after a list may continue a loose list, so
        for those the block waits (rendered apart, each item would be a list of its own)."""
        if self._fence is not None or not self._after_blank or line[:1] in ("", " ", "\t"):
            return False
        in_list = bool(self._block) and _LIST_ITEM.match(self._block[0]) is not None
        return not (in_list and _MAYBE_LIST_ITEM.match(line))

    def _flush_block(self) -> None:
        self._after_blank = False
        while self._block and not self._block[-1].strip():
            self._block.pop()
        if self._block:
            self._emit(self._rendered("\n".join(self._block)))
        self._block, self._block_chars = [], 0

    def _rendered(self, source: str) -> Segments:
        """The block rendered once, without the blank line rich puts before a list, a quote
        or a table even when it comes first: `_emit` spaces every block the same way."""
        markdown = _markdown(source, self._code_theme)
        lines = self.console.render_lines(markdown, self.console.options, pad=False)
        while lines and not any(segment.text for segment in lines[0]):
            lines.pop(0)
        return Segments(segment for line in lines for segment in (*line, Segment.line()))

    def _open_fence(self, opening: re.Match[str]) -> None:
        indent, marker, info = opening.groups()
        name = info.strip().split(" ")[0] or "text"
        lexer = Syntax("", name).lexer or Syntax("", "text").lexer
        self._fence = _Fence(marker[0], len(marker), len(indent), lexer)
        self._emit(self._code_padding())

    def _add_code_line(self, line: str) -> None:
        assert self._fence is not None
        if self._fence.closes(line):
            self._out.append(self._code_padding())
            self._fence = None
            return
        self._out.append(self._code(self._fence.dedent(line)))

    def _code(self, line: str) -> Syntax:
        assert self._fence is not None
        return Syntax(line, self._fence.lexer, theme=self._theme, word_wrap=True, padding=(0, 1))

    def _code_padding(self) -> RenderableType:
        """A blank line in the code background, as rich's Markdown pads a code block."""
        return Padding(Text(""), 0, style=self._theme.get_background_style(), expand=True)

    def _emit(self, renderable: RenderableType) -> None:
        if self._printed or self._out:
            self._out.append(NewLine())
        self._out.append(renderable)

    # -- output ----------------------------------------------------------------------------

    def _show(self) -> None:
        """One draw per chunk: the blocks this chunk finished, then the live tail."""
        if self._region is None:
            self._print_out()
            return
        out, self._out = self._out, []
        self._printed = self._printed or bool(out)
        self._region.update(above=Group(*out) if out else None, tail=self._tail())

    def _print_out(self) -> None:
        if self._out:
            out, self._out = Group(*self._out), []
            self._printed = True
            if self._region is not None:
                self._region.update(above=out)
            else:
                self.console.print(out)

    def _tail(self) -> RenderableType | None:
        """The unfinished part, bounded in lines and characters whatever came before."""
        partial = self._partial
        if len(partial) > TAIL_CHARS:
            partial = "…" + partial[-TAIL_CHARS:]
        partial = sanitize(partial, multiline=True)
        if self._fence is not None:
            return self._code(self._fence.dedent(partial)) if partial else None
        if not partial.strip() and not self._block:
            return None
        text = "\n".join([*self._block, partial])
        rows = max(3, self.console.height - 2)
        return _LastRows(_markdown(text, self._code_theme), rows)


# -- the renderer --------------------------------------------------------------------------


class ChatRenderer:
    """Shows one turn's events as they arrive. Call `begin()` when a turn starts, `close()`
    before anything else writes to the terminal (a prompt), `interrupted()` or `error()`
    when a turn ends early.

    On a terminal, while the turn runs, a status line says what it waits for when nothing
    shows that it is alive, and the terminal does not echo keys (`keys`): what is typed
    meanwhile is kept for the next input line (`typed_ahead`)."""

    def __init__(
        self,
        console: Console,
        *,
        cwd: str,
        show_thinking: bool = True,
        model: str = "the model",
        keys: TypeAhead | None = None,
        reflow: bool | None = None,
        clock: Callable[[], float] = time.monotonic,
        waited: Callable[[], float] | None = None,
    ) -> None:
        self.console = console
        self.cwd = cwd
        self.show_thinking = show_thinking
        self.model = model
        self.keys = keys
        self.waited = waited  # seconds the person's answers took so far (ChatApprover.waited)
        self._waited_at_begin = 0.0
        self._region = Region(console, reflow=reflow) if live_capable(console) else None
        self._answer = MarkdownStream(console, region=self._region)
        self._status = StatusLine(self._region, clock)
        self._typed = ""
        self._pending: ToolCall | None = None  # proposed, not yet reported
        self._thinking = False  # thinking text is on screen and its line is open
        self._held_newlines = 0  # thinking's trailing newlines, written only if more follows
        self._printed = False  # this turn printed something: the next section needs a gap
        self._tool_calls = 0
        self._folded: list[Text] = []  # a change made without asking, worked out before it ran

    def begin(self, model: str | None = None, *, plan: bool = False) -> None:
        """A turn starts: the model is asked now (`plan`: in plan mode, which the status
        line says)."""
        self.model = model or self.model
        self._status.prefix = "plan · " if plan else ""
        self._waited_at_begin = self.waited() if self.waited is not None else 0.0
        if self.keys is not None:
            self.keys.start()
        self._status.begin()
        self._status.expect(f"waiting for {self.model}", after=0)

    def typed_ahead(self) -> str:
        """What was typed while the last turn ran (once)."""
        typed, self._typed = self._typed, ""
        return typed

    def handle(self, event: Event) -> None:
        if isinstance(event, ThinkingDelta):
            self._on_thinking(event.text)
        elif isinstance(event, ContentDelta):
            self._on_content(event.text)
        elif isinstance(event, Notice) and event.detail:
            pass  # chat has no -v: a detail (a request that changes the cached prefix) is not shown
        elif isinstance(event, Notice):
            self._settle()
            self._line(Text(f"⚠ {sanitize(event.text)}", style="yellow"))
            self._status.expect(f"waiting for {self.model}")
        elif isinstance(event, ToolCallProposed):
            self._settle()  # a confirmation may be asked now: nothing else may draw
            self._pending = event.call
        elif isinstance(event, ToolDecided):
            self._on_decided(event)
        elif isinstance(event, ToolResult):
            self._on_result(event)
        elif isinstance(event, StepFinished):
            self._settle()  # the step limit may be put to the user now
        elif isinstance(event, Finished):
            self._on_finished(event)

    def interrupted(self) -> None:
        self._end_turn(Text("⏹ interrupted", style="dim"), "interrupted")

    def error(self, message: str) -> None:
        self._end_turn(Text(f"✖ {sanitize(message)}", style="red"), "not run")

    def close(self) -> None:
        self._status.stop()
        self._answer.close()
        if self.keys is not None:
            self._typed = self.keys.stop() or self._typed

    # -- events ----------------------------------------------------------------------------

    def _on_thinking(self, text: str) -> None:
        if not self.show_thinking:
            if not self._answer.active:
                self._status.expect("model is thinking", after=0)
            return
        text = sanitize(text, multiline=True)
        if not self._thinking:
            text = text.lstrip("\n")
            if not text:
                return
            self._settle()
            self._gap()
            self.console.print(Text("💭 thinking", style="dim"))
            self._thinking = True
        # The thinking line is open: a status line under it would erase it, and the text
        # itself shows that the model is at work.
        self._status.quiet()
        body = text.rstrip("\n")
        if body:
            shown = "\n" * self._held_newlines + body
            self.console.print(Text(shown, style="dim italic"), end="", soft_wrap=True)
            self._held_newlines = 0
        self._held_newlines += len(text) - len(body)

    def _on_content(self, text: str) -> None:
        if not self._answer.active:
            if not text.strip():
                return  # leading blank lines would only push the answer down
            self._settle()
            self._gap()
        self._status.quiet()
        self._answer.feed(text)
        self._printed = True
        self._status.expect(f"waiting for {self.model}")  # shown if the stream stalls

    def _on_decided(self, event: ToolDecided) -> None:
        self._settle()
        self._pending = event.call
        self._folded = []
        if event.allowed and event.approved_by == "session":
            self._folded = folded_change(event, self.cwd)
        if event.allowed:
            summary = call_summary(event.call, 40)
            what = f"running {sanitize(event.call.name)}" + (f" {summary}" if summary else "")
            self._status.expect(what, after=0, style="blue")

    def _on_result(self, event: ToolResult) -> None:
        self._settle()
        self._pending = None
        self._tool_calls += 1
        folded, self._folded = self._folded, []
        card = tool_card(event, self.cwd)
        if folded and event.result.get("success"):  # made without asking: what it changed
            card = Group(card, *(Row(Text.assemble(" ", line)) for line in folded))
        self._section(card)
        self._status.expect(f"waiting for {self.model}")

    def _on_finished(self, event: Finished) -> None:
        self._settle()
        if event.stop_reason == "max_steps":
            pending = f"; {event.pending_calls} tool call(s) not run" if event.pending_calls else ""
            self._line(
                Text(
                    f"step limit reached after {event.steps} model calls{pending} "
                    "(raise agent.max_steps to allow more)",
                    style="yellow",
                )
            )
        elif event.stop_reason == "stopped":
            self._line(Text("stopped: the rest of this turn was cancelled", style="dim"))
        elif event.stop_reason == "repeating":
            self._line(
                Text("stopped: the model kept repeating a call that was refused", style="yellow")
            )
        waited = self.waited() - self._waited_at_begin if self.waited is not None else 0.0
        stats = stats_line(event.stats, event.wall_time, self._tool_calls, event.context, waited)
        self._section(stats)
        self._reset_turn()

    def _end_turn(self, last: Text, pending_word: str) -> None:
        """A turn that ends early: what arrived is shown, an open call gets its card."""
        self._settle()
        if self._pending is not None:
            self._line(card_title(self._pending, "cancelled", pending_word))
        self._section(last)
        self._reset_turn()

    # -- helpers ---------------------------------------------------------------------------

    def _settle(self) -> None:
        """Whatever is streaming or waiting ends here, and what arrived stays on screen."""
        self._status.quiet()
        if self._thinking:
            self.console.print()
            self._thinking, self._held_newlines = False, 0
        if self._answer.active:
            self._answer.finish()

    def _gap(self) -> None:
        if self._printed:
            self.console.print()
        self._printed = True

    def _section(self, renderable: RenderableType) -> None:
        """A card or a closing line, apart from what came before."""
        self._gap()
        self.console.print(renderable, highlight=False)

    def _line(self, text: Text) -> None:
        self.console.print(text, highlight=False)
        self._printed = True

    def _reset_turn(self) -> None:
        self._printed = False
        self._tool_calls = 0
        self._pending = None


def folded_change(event: ToolDecided, cwd: str) -> list[Text]:
    """A change approved for the session ("a", "d"), as its card would have shown it (the
    diff, a new file's first lines), folded: it runs without a card, not unseen."""
    if event.call.name not in CHANGE_TOOLS:
        return []
    request = ApprovalRequest(event.call, event.arguments, event.decision)
    body = describe(request, cwd)[0][1:]  # the path is on the card's title already
    if len(body) <= FOLD_LINES + 1:
        return body
    hidden = len(body) - FOLD_LINES
    return [*body[:FOLD_LINES], Text(f"  … {hidden} more lines", style="dim")]
