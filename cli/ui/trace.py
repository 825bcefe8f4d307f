"""`agent run`'s consumer of loop events: a one-line-per-call trace on stderr, and the record
that becomes the final answer or the `--json` object on stdout.

The trace (tool names and arguments, thinking, notices) is sanitised wherever stderr goes;
the answer on stdout only on a terminal (see `commands/run_drive.py`): piped, it is the
model's text.

On a terminal there is more: the answer streams onto stdout as chat renders it (Markdown,
sanitised), a status line on stderr says what the run waits for while nothing else shows
it is alive (never in a pipe), and keys are not echoed (a `^C` would land in the answer).
When stdout and stderr are one terminal, one region holds both the answer's live tail and
the status line, so neither redraw erases the other."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TextIO

from cli.backends.messages import Stats
from cli.loop import outcomes
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
from cli.ui.keys import TypeAhead, terminal_fd
from cli.ui.text import call_summary, mended, result_summary, sanitize, shorten_text

if TYPE_CHECKING:
    from rich.console import Console

    from cli.ui.live import StatusLine
    from cli.ui.render import MarkdownStream


class LazyConsole:
    """The trace's rich Console, made when the trace first writes or a terminal needs it:
    rich costs a tenth of `agent run`'s start-up, and a piped run whose trace has nothing
    to say (no tool calls, no notices) never imports it."""

    def __init__(self, file: TextIO, **options: Any) -> None:
        self.file = file
        self._options = options
        self._console: Console | None = None

    def get(self) -> Console:
        if self._console is None:
            # As wide as the terminal, TERM=dumb too (rich would take 80 columns there, and
            # card lines wrapped to 80 would break a 200-column window's lines).
            from cli.ui.layout import FittedConsole

            self._console = FittedConsole(file=self.file, **self._options)
        return self._console

    def print(self, *objects: Any, **options: Any) -> None:
        self.get().print(*objects, **options)


def escape(text: str) -> str:
    """rich's markup escape, imported when there is something to print."""
    from rich.markup import escape

    return escape(text)


@dataclass
class RunRecord:
    """What `--json` prints, filled in as events arrive."""

    model: str
    answer: str = ""
    steps: int = 0
    stop_reason: str | None = None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    stats: Stats = field(default_factory=Stats)
    wall_time: float = 0.0
    error: str | None = None
    mode: str = "act"  # "plan": --plan (or a command's plan: true)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "answer": self.answer,
            "model": self.model,
            "mode": self.mode,
            "steps": self.steps,
            "stop_reason": self.stop_reason,
            "tool_calls": self.tool_calls,
            "stats": stats_json(self.stats, self.wall_time),
        }
        if self.error is not None:
            data["error"] = self.error
        return data


def stats_json(stats: Stats, wall_time: float) -> dict[str, Any]:
    return {
        "prompt_eval_count": stats.prompt_eval_count,
        "eval_count": stats.eval_count,
        "eval_duration": stats.eval_duration,
        "prompt_eval_duration": stats.prompt_eval_duration,
        "load_duration": stats.load_duration,
        "total_duration": stats.total_duration,
        "tokens_per_second": round(stats.tokens_per_second, 2),
        "wall_time": round(wall_time, 3),
    }


class RunTrace:
    """Writes the trace to `console` (stderr) and fills `record`. With `stdout` a terminal,
    the answer streams there too (`streams_answer`); `stdin` is where keys come from."""

    def __init__(
        self,
        console: LazyConsole,
        record: RunRecord,
        show_thinking: bool,
        *,
        stdin: TextIO | None = None,
        stdout: TextIO | None = None,
        reflow: bool | None = None,
        clock: Callable[[], float] = time.monotonic,
        verbose: bool = False,
    ) -> None:
        self.console = console
        self.verbose = verbose  # -v: details too (a request that changes the cached prefix)
        self.record = record
        self.show_thinking = show_thinking
        self._in_thinking = False
        # For a run cut short (Ctrl-C), which no Finished event sums up: when it started,
        # and whether a model call is under way (it streamed) that no StepFinished counted.
        self._clock = clock
        self._started = clock()
        self._step_open = False
        # This step's text so far, and what streamed onto stdout in this step and the last
        # one: kept in pieces (an answer of 20,000 chunks is not copied 20,000 times).
        self._content: list[str] = []
        self._step_text: list[str] = []
        self._last_text = ""
        self._waiting = f"waiting for {sanitize(self.record.model)}"
        self._answer: MarkdownStream | None = None
        # Neither needs rich unless stderr or stdout is a terminal (or rich is told to take
        # stderr for one: then rich decides, as it always did).
        status_region = None
        if terminal_fd(console.file) is not None or _told_terminal(os.environ):
            from cli.ui.live import Region, live_capable

            if live_capable(console.get()):
                status_region = Region(console.get(), reflow=reflow)
        if stdout is not None and terminal_fd(stdout) is not None:
            from rich.console import Console

            from cli.ui.layout import terminal_width
            from cli.ui.live import Region

            answers = Console(file=stdout, highlight=False)
            width = terminal_width(stdout)
            if answers.is_dumb_terminal and width:  # rich takes 80 columns there
                answers.size = (width, answers.height)
            region = None
            if status_region is not None and _same_terminal(stdout, console.file):
                region = status_region = Region(answers, reflow=reflow)
            # Imported here: Markdown (and the syntax highlighter under it) costs a tenth of
            # a second of start-up, and only an answer streamed to a terminal needs it.
            from cli.ui.render import MarkdownStream

            self._answer = MarkdownStream(answers, region=region)
        self._status: StatusLine | _NoStatus = _NoStatus()
        self._live = status_region is not None  # a status line to keep: only on a terminal
        if status_region is not None:
            from cli.ui.live import StatusLine

            self._status = StatusLine(status_region, clock)
        # Keys typed meanwhile are not ours to keep: they stay for whatever reads next.
        streams = (s for s in (stdin, console.file, stdout) if s is not None)
        self._keys = TypeAhead(*streams, keep=False)

    @property
    def streams_answer(self) -> bool:
        """The answer was shown on stdout as it came: it is not written again at the end."""
        return self._answer is not None

    def consume(self, events: Iterable[Event]) -> RunRecord:
        self.begin()
        try:
            for event in events:
                self.handle(event)
        finally:
            self.close()
        return self.record

    def begin(self) -> None:
        self._keys.start()
        self._status.begin()
        self._status.expect(f"waiting for {sanitize(self.record.model)}", after=0)

    def close(self) -> None:
        """The run is over (or cut short): what streamed stays, the status line goes, the
        terminal is as it was; the cursor is at the start of a line."""
        self._status.stop()
        self._end_thinking()
        if self._answer is not None and self._answer.active:
            self._answer.finish()
        self._keys.stop()

    def handle(self, event: Event) -> None:
        waiting = self._waiting
        if isinstance(event, ContentDelta):  # the usual event: asked first, and kept short
            if self._in_thinking:
                self._end_thinking()
            live = self._live
            if live:
                self._status.quiet()
            self._content.append(event.text)
            self._step_open = True
            if self._answer is not None and (self._answer.active or event.text.strip()):
                self._answer.feed(event.text)
                self._step_text.append(event.text)
            if live:
                self._status.expect(waiting)
            return
        if isinstance(event, ThinkingDelta):
            self._step_open = True
            if self.show_thinking:
                self._settle(end_thinking=False)
                self._in_thinking = True
                self.console.print(
                    escape(sanitize(event.text, multiline=True)), style="dim", end=""
                )
            else:
                self._status.expect("model is thinking", after=0)
            return
        if isinstance(event, Notice) and event.detail and not self.verbose:
            return
        self._settle()
        if isinstance(event, Notice):
            self.console.print(f"[yellow]note:[/] {escape(sanitize(event.text))}")
        elif isinstance(event, ToolCallProposed):
            pass  # one line per call, written when it is decided and done
        elif isinstance(event, ToolDecided):
            if not event.allowed:
                self._line(event, shorten_text(outcomes.detail(event, {}), 160))
            else:
                summary = call_summary(event.call, 40)
                what = f"running {sanitize(event.call.name)}" + (f" {summary}" if summary else "")
                self._status.expect(what, after=0, style="blue")
        elif isinstance(event, ToolResult):
            decided = event.decision
            self._record_call(event)
            if decided.allowed:
                self._line(decided, result_summary(event.call.name, event.result), event.result)
            self._status.expect(waiting)
        elif isinstance(event, StepFinished):
            self.record.steps = event.step
            self.record.stats = self.record.stats + event.stats
            self._step_open = False
            self._content = []
            self._last_text, self._step_text = "".join(self._step_text), []
        elif isinstance(event, Finished):
            self._finish_run(event)

    def _record_call(self, event: ToolResult) -> None:
        """The call, its decision and its result, as the run record keeps them."""
        decided = event.decision
        self.record.tool_calls.append(
            {
                "name": event.call.name,
                "arguments": dict(event.call.arguments),
                "outcome": outcomes.outcome(decided, event.result),
                "decision": "allow" if decided.allowed else "deny",
                "approved_by": decided.approved_by or None,
                "rule": outcomes.rule(decided),
                "result": dict(event.result),
                # how the call was mended before it ran (agent.aids: repair), if it was
                **({"repairs": list(event.call.repairs)} if event.call.repairs else {}),
            }
        )

    def _finish_run(self, event: Finished) -> None:
        """The run's end: into the record, the answer shown if it did not stream, and why the
        run stopped where it was not the model's choice."""
        self.record.answer = event.answer
        self.record.stop_reason = event.stop_reason
        self.record.steps = event.steps
        self.record.stats = event.stats
        self.record.wall_time = event.wall_time
        self._show_final(event.answer)
        if event.stop_reason == "repeating":
            self.console.print(
                "[yellow]stopped[/]: the model kept repeating a call that was refused"
            )
        if event.stop_reason == "max_steps":
            pending = (
                f"; {event.pending_calls} pending tool call(s) not run"
                if event.pending_calls
                else ""
            )
            self.console.print(
                f"[yellow]step limit reached[/] after {event.steps} model calls{pending} "
                "(raise it with --max-steps or agent.max_steps)"
            )

    def _show_final(self, answer: str) -> None:
        """An answer that did not stream as text (one the model gave only in its thinking,
        say) is shown at the end; one that did is not shown twice."""
        if self._answer is None or not answer.strip():
            return
        if answer.strip() != ("".join(self._step_text) or self._last_text).strip():
            self._answer.feed(answer)
            self._answer.finish()

    def _settle(self, *, end_thinking: bool = True) -> None:
        """Before a line of the trace: the status line goes, a streamed block is finished,
        the thinking's line is ended."""
        self._status.quiet()
        if end_thinking:
            self._end_thinking()
        if self._answer is not None and self._answer.active:
            self._answer.finish()

    def cut_short(self) -> RunRecord:
        """The record of a run Ctrl-C ended, which no Finished event filled in: the model
        calls made (the one that was streaming included), the usage of those that ended,
        the wall time so far, and the text of the step that was cut."""
        record = self.record
        record.steps += 1 if self._step_open else 0
        self._step_open = False
        record.wall_time = self._clock() - self._started
        record.answer = self.partial_answer
        return record

    @property
    def partial_answer(self) -> str:
        """Text of the current step so far, for an interrupted or failed run."""
        return "".join(self._content)

    def _line(
        self, decided: ToolDecided, what: str, result: Mapping[str, Any] | None = None
    ) -> None:
        """`→ read_file notes.txt · allowed by policy · 12 lines, 340 B`; the outcome's words
        are cli/loop/outcomes.py's, `what` is the result or the reason, already made safe."""
        word = outcomes.outcome(decided, result or {})
        colour = _COLOURS.get(word, "red")
        self.console.print(
            f"[bold]→ {escape(sanitize(decided.call.name))}[/] "
            f"{escape(call_summary(decided.call))} · "
            f"[{colour}]{escape(outcomes.label(decided, result))}[/]"
            + (f" · {escape(what)}" if what else "")
            + (
                f" · [dim]{escape(mended(decided.call.repairs))}[/]" if decided.call.repairs else ""
            ),
            highlight=False,
        )

    def _end_thinking(self) -> None:
        if self._in_thinking:
            self.console.print()
            self._in_thinking = False


_COLOURS = {"allowed": "green", "declined": "yellow"}  # the rest in red


class _NoStatus:
    """StatusLine without a terminal does nothing; this is it, without importing rich."""

    def begin(self) -> None:
        pass

    def expect(self, label: str, *, after: float = 0, style: str = "dim") -> None:
        pass

    def quiet(self) -> None:
        pass

    def stop(self) -> None:
        pass


def _told_terminal(environ: Mapping[str, str]) -> bool:
    """rich's Console takes a stream that is no terminal for one with these (force-color.org,
    TTY_COMPATIBLE=1)."""
    return environ.get("TTY_COMPATIBLE") == "1" or bool(environ.get("FORCE_COLOR"))


def _same_terminal(a: object, b: object) -> bool:
    """Both streams write to one terminal (stdout and stderr of a shell, as a rule)."""
    fd_a, fd_b = terminal_fd(a), terminal_fd(b)
    if fd_a is None or fd_b is None:
        return False
    try:
        return os.path.samestat(os.fstat(fd_a), os.fstat(fd_b))
    except OSError:
        return False
