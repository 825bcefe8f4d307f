"""`agent run --output-format stream-json`: each loop event as one JSON object on one line
of stdout, written (and flushed) as it happens, for scripts that watch a run.

Another consumer of the loop's events, beside the stderr trace (cli/ui/trace.py), which
still runs: the trace is for a person, this is for a program. Every line is an object with
a `type`; the first is `start` (with the schema's `version`), the last is `end` (with
`stop_reason`), also after an error (`"error"`) and after Ctrl-C (`"interrupted"`).
docs/chat-and-run.md ("stream-json") documents each type and its fields. A change that
removes or renames a field raises `VERSION`; a new field or a new type does not.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from cli import __version__
from cli.backends.messages import Stats
from cli.errors import AgentError
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

if TYPE_CHECKING:
    from cli.loop.agent import Agent

VERSION = 1

Write = Callable[[dict[str, Any]], None]


def usage(stats: Stats) -> dict[str, Any]:
    """A model call's counters, as the server gave them (durations in nanoseconds)."""
    return {
        "prompt_eval_count": stats.prompt_eval_count,
        "eval_count": stats.eval_count,
        "prompt_eval_duration": stats.prompt_eval_duration,
        "eval_duration": stats.eval_duration,
        "load_duration": stats.load_duration,
        "total_duration": stats.total_duration,
    }


class StreamJson:
    """Writes one object per event through `write` (which must write one line and flush)."""

    def __init__(
        self,
        write: Write,
        *,
        verbose: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._write = write
        self._verbose = verbose  # -v: detail notices too, as the trace shows them
        self._clock = clock
        self._started_at = clock()
        self._started = False
        self._ended = False
        self._step = 1  # the model call under way
        self._steps = 0  # model calls finished
        self._stats = Stats()
        self._calls = 0  # tool calls decided so far: each one's number
        self._call_step = 1
        self._text: list[str] = []  # the current step's text, for an answer cut short

    # -- the first and the last line ------------------------------------------------------

    def start(self, agent: Agent, *, yes: bool = False, images: Iterable[str] = ()) -> None:
        """The `start` line, once: what the run works with. A model the server does not
        have (the error that follows says so) gives `tool_mode` and `tools` as null."""
        if self._started:
            return
        self._started = True
        mode: str | None
        think = agent.think  # the model's profile may set it
        try:
            mode = agent.tool_mode()
        except AgentError:
            mode = None
        settings, limits = agent.settings, agent.context.limits
        tools = None if mode is None else ([] if mode == "off" else agent.offered_tools())
        self._write(
            {
                "type": "start",
                "version": VERSION,
                "agent_version": __version__,
                "model": settings.model,
                "host": agent.backend.host,
                "cwd": agent.policy.cwd,
                "mode": "plan" if agent.plan_mode else "act",
                "tool_mode": mode,
                "tools": tools,
                "think": think,
                "yes": yes,
                "images": list(images),
                "limits": {
                    "max_steps": settings.max_steps,
                    "max_tool_calls_per_step": limits.max_tool_calls_per_step,
                    "max_tool_result_chars": limits.max_tool_result_chars,
                    "max_answer_chars": settings.max_answer_chars,
                    "max_num_ctx": settings.max_num_ctx,
                },
            }
        )

    def end(self, stop_reason: str, *, error: str | None = None) -> None:
        """The `end` line of a run cut short: by Ctrl-C ("interrupted") or an error
        ("error", with its message). What the model had written of this step is `answer`."""
        self._end(stop_reason, "".join(self._text), error=error)

    def _end(
        self,
        stop_reason: str,
        answer: str,
        *,
        error: str | None = None,
        pending_calls: int = 0,
        context: Mapping[str, int] | None = None,
    ) -> None:
        if self._ended:
            return
        self._ended = True
        line: dict[str, Any] = {
            "type": "end",
            "stop_reason": stop_reason,
            "answer": answer,
            "steps": self._steps,
            "tool_calls": self._calls,
            "pending_calls": pending_calls,
            "usage": usage(self._stats),
            "wall_time": round(self._clock() - self._started_at, 3),
            "context": dict(context) if context else None,
        }
        if error is not None:
            line["error"] = error
        self._write(line)

    # -- the events -----------------------------------------------------------------------

    def tee(self, events: Iterable[Event]) -> Iterator[Event]:
        """The events, each written here before it goes on to the next consumer."""
        for event in events:
            self.handle(event)
            yield event

    def handle(self, event: Event) -> None:
        if isinstance(event, ContentDelta):
            self._text.append(event.text)
            self._write({"type": "text", "step": self._step, "text": event.text})
        elif isinstance(event, ThinkingDelta):
            self._write({"type": "thinking", "step": self._step, "text": event.text})
        elif isinstance(event, Notice):
            if self._verbose or not event.detail:
                self._write({"type": "notice", "text": event.text})
        elif isinstance(event, ToolCallProposed):
            self._call_step = event.step  # the model call that asked for it
        elif isinstance(event, ToolDecided):
            self._calls += 1
            self._write(self._decided(event))
        elif isinstance(event, ToolResult):
            self._write(
                {
                    "type": "tool_result",
                    "step": self._call_step,
                    "call": self._calls,
                    "name": event.call.name,
                    "outcome": outcomes.outcome(event.decision, event.result),
                    "result": dict(event.result),
                    "duration": round(event.duration, 3),
                }
            )
        elif isinstance(event, StepFinished):
            self._steps = event.step
            self._stats = self._stats + event.stats
            self._write(
                {
                    "type": "step_end",
                    "step": event.step,
                    "tool_calls": event.tool_calls,
                    "done_reason": event.done_reason,
                    "usage": usage(event.stats),
                }
            )
            self._step, self._text = event.step + 1, []
        elif isinstance(event, Finished):
            # The loop's own totals: a step-limit summary is counted in them too.
            self._steps, self._stats = event.steps, event.stats
            context = event.context
            self._end(
                event.stop_reason,
                event.answer,
                pending_calls=event.pending_calls,
                context=None if context is None else {"used": context.used, "size": context.size},
            )

    def _decided(self, event: ToolDecided) -> dict[str, Any]:
        word = outcomes.decided_outcome(event)
        return {
            "type": "tool_call",
            "step": self._call_step,
            "call": self._calls,
            "id": event.call.id,
            "name": event.call.name,
            "arguments": dict(event.call.arguments),
            "decision": "allow" if event.allowed else "deny",
            "outcome": word,
            "approved_by": event.approved_by or None,
            "rule": outcomes.rule(event),
            "reason": "" if event.allowed else outcomes.detail(event, {}),
            **({"repairs": list(event.call.repairs)} if event.call.repairs else {}),
        }
