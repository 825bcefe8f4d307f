"""`agent run`'s consumer of loop events: a one-line-per-call trace on stderr, and the record
that becomes the final answer or the `--json` object on stdout.

The trace (tool names and arguments, thinking, notices) is sanitised wherever stderr goes;
the answer on stdout only on a terminal (see `app.py`): piped, it is the model's text."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console
from rich.markup import escape

from cli.backends.messages import Stats
from cli.events import (
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
from cli.ui.text import call_summary, result_summary, sanitize


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

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "answer": self.answer,
            "model": self.model,
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
    """Writes the trace to `console` (stderr) and fills `record`."""

    def __init__(self, console: Console, record: RunRecord, show_thinking: bool) -> None:
        self.console = console
        self.record = record
        self.show_thinking = show_thinking
        self._in_thinking = False
        self._content = ""

    def consume(self, events: Iterable[Event]) -> RunRecord:
        for event in events:
            self.handle(event)
        return self.record

    def handle(self, event: Event) -> None:
        if isinstance(event, ThinkingDelta):
            if self.show_thinking:
                self._in_thinking = True
                self.console.print(
                    escape(sanitize(event.text, multiline=True)), style="dim", end=""
                )
            return
        self._end_thinking()
        if isinstance(event, ContentDelta):
            self._content += event.text
        elif isinstance(event, Notice):
            self.console.print(f"[yellow]note:[/] {escape(sanitize(event.text))}")
        elif isinstance(event, ToolCallProposed):
            pass  # one line per call, written when it is decided and done
        elif isinstance(event, ToolDecided):
            if not event.allowed:
                self._line(event, "red", f"denied: {sanitize(event.reason)}")
        elif isinstance(event, ToolResult):
            self.record.tool_calls.append(
                {
                    "name": event.call.name,
                    "arguments": dict(event.call.arguments),
                    "decision": "allow" if event.decision.allowed else "deny",
                    "approved_by": event.decision.approved_by or None,
                    "rule": event.decision.decision.rule,
                    "result": dict(event.result),
                }
            )
            if event.decision.allowed:
                ok = bool(event.result.get("success"))
                outcome = result_summary(event.call.name, event.result)
                self._line(event.decision, "green" if ok else "red", outcome)
        elif isinstance(event, StepFinished):
            self.record.steps = event.step
            self._content = ""
        elif isinstance(event, Finished):
            self.record.answer = event.answer
            self.record.stop_reason = event.stop_reason
            self.record.steps = event.steps
            self.record.stats = event.stats
            self.record.wall_time = event.wall_time
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

    @property
    def partial_answer(self) -> str:
        """Text of the current step so far, for an interrupted or failed run."""
        return self._content

    def _line(self, decided: ToolDecided, colour: str, outcome: str) -> None:
        who = decided.approved_by or "denied"
        verdict = {"policy": "allowed", "user": "approved", "--yes": "approved (--yes)"}.get(
            who, who
        )
        if not decided.allowed:
            verdict = "denied"
        self.console.print(
            f"[bold]→ {escape(sanitize(decided.call.name))}[/] "
            f"{escape(call_summary(decided.call))} · {verdict} · "
            f"[{colour}]{escape(outcome)}[/]",
            highlight=False,
        )

    def _end_thinking(self) -> None:
        if self._in_thinking:
            self.console.print()
            self._in_thinking = False
