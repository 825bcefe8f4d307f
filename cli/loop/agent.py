"""The agent loop: messages + tools → typed events. Never prints.

One turn: send the conversation, accumulate the streamed answer, append it; if it asked for
tools, decide on each call (policy → approver → execute), append one tool message per call
in order, and send again; stop when an answer has no tool calls or after `max_steps` model
calls. The conversation list is the caller's and stays well-formed whatever happens, Ctrl-C
included: a partial answer is kept, and every tool call gets its tool message.

Each request gets its own num_ctx (cli/loop/sizing.py) and the conversation as the server is sent
it (cli/loop/window.py): the last request and the new messages, compacted once and deep when they
no longer fit; the server's prompt_eval_count corrects our token estimate for the next one.
A prompt the server still refuses as too long is compacted to the corrected budget and sent
once more; the context and prompt size the server's refusal states are learnt. A message
that cannot fit whatever older history is left out is refused before it is sent. An answer
the server cut for length ends the turn as "length", not as an answer.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from cli import tools
from cli.backends.messages import Message, ModelInfo, Stats, ToolCall
from cli.errors import AgentError, FormatRefused
from cli.loop.calls import AgentCalls, tool_message
from cli.loop.constrained import read_reply
from cli.loop.events import (
    ContentDelta,
    ContextUse,
    Event,
    Finished,
    Notice,
    StepFinished,
    StopReason,
)
from cli.loop.guards import (
    RepeatGuard,
    unparsable_call,
)
from cli.loop.images import blind_notice, sees_images
from cli.loop.requests import _asked_again, _Plan, tools_cost_of
from cli.loop.streaming import _Turn
from cli.loop.textcalls import extract_tool_calls
from cli.tools.repair import LenientNames, repair_call


class Agent(AgentCalls):
    """Runs turns: the turn and step state machine, on the parts of cli/loop/agent_base.py,
    requests.py, streaming.py and calls.py."""

    def run(
        self, conversation: list[Message], prompt: str, images: Sequence[str] = ()
    ) -> Iterator[Event]:
        """Add the user's prompt to `conversation` and work until the model answers.
        `images`: base64 images the message carries (cli/loop/images.py), as Ollama takes them."""
        self._set_system_prompt(conversation)
        self._last_request = None  # a turn of its own (chat's /retry asks the same again)
        self.context.edits.clear()  # edit_file's failures count per turn
        if self.context.changes is not None:
            self.context.changes.new_turn()  # its changes are undone and redone together
        message: Message = {"role": "user", "content": prompt}
        if images:
            message["images"] = list(images)
        conversation.append(message)
        return self._with_stop_hooks(self._loop(conversation))

    def _with_stop_hooks(self, events: Iterator[Event]) -> Iterator[Event]:
        """The turn's events, with hooks.stop run as it ends (before its Finished is passed
        on). Closing this closes the loop, which tidies the conversation up."""
        try:
            for event in events:
                if isinstance(event, Finished) and self.hooks:
                    payload = {
                        "stop_reason": event.stop_reason,
                        "answer": event.answer,
                        "steps": event.steps,
                        "cwd": self.policy.cwd,
                    }
                    yield from self._hooks_said(self.hooks.run("stop", payload))
                yield event
        finally:
            close = getattr(events, "close", None)
            if close is not None:
                close()

    def _loop(self, conversation: list[Message]) -> Iterator[Event]:
        """The turn: a step (one model call) after another until an answer, the step limit,
        a stop (the user's, a repeated refusal) or a failure."""
        state = yield from self._begin(conversation)
        while True:
            state.steps += 1
            if state.steps > 1 and self.mcp is not None and state.mode != "off":
                yield from self._tools_changed(state, conversation)
            mode, definitions = state.mode, state.definitions
            request_tools = definitions if mode == "native" else []
            reply_format = self._reply_format(mode, definitions) if mode == "prompt" else None
            if state.costed[0] is not request_tools:  # once, not every step: seldom changed
                state.costed = (request_tools, tools_cost_of(request_tools))
            tools_cost = state.costed[1] + self._context_cost()  # what leads every message
            plan = self._plan(conversation, state.info, tools_cost, state.loaded)
            if state.nudge:
                plan, state.nudge = _asked_again(plan), False
            yield from self._fitted(plan, state.info)
            called = yield from self._step_call(
                state, conversation, plan, request_tools, tools_cost, reply_format
            )
            if called is None:  # the same step again, asked another way
                state.steps -= 1
                continue
            turn, plan = called
            self._observe(state, plan, turn)
            context = self._context_use(plan, turn.stats)
            calls, content, said = yield from self._read_calls(state, turn, reply_format)
            conversation.append(turn.message(calls, said))
            yield StepFinished(state.steps, turn.stats, len(calls), turn.done_reason)
            if not calls:
                answered = yield from self._answered(
                    state, conversation, turn, plan, content, context
                )
                if answered is None:  # an empty answer, asked for once more
                    continue
                yield answered
                return
            if state.steps >= state.limit:
                ended = yield from self._at_step_limit(
                    state, conversation, calls, content, request_tools, tools_cost, context
                )
                if ended is not None:
                    yield ended
                    return
            stopped = yield from self._run_calls(
                calls, state.steps, conversation, state.tool_names, state.guard
            )
            if stopped:
                elapsed = self.clock() - state.started
                yield Finished(stopped, content, state.steps, state.total, elapsed, context=context)
                return

    def _begin(self, conversation: list[Message]) -> Generator[Event, None, _TurnState]:
        """What a turn starts from: the MCP servers' tools (waited for), a prewarm under way
        (waited for), the tool mode and the tools offered, what the model cannot do."""
        started = self.clock()
        info = self.model_info()
        for line in self.mcp_tools():  # waits for the MCP servers, while a prewarm goes on
            yield Notice(line)
        yield from self._prewarmed()
        mode = self.tool_mode(info)
        if self.mcp is not None and mode == "prompt":  # the prompt lists the servers' tools too
            self._set_system_prompt(conversation, mode)
        tool_names = self.offered_tools() if mode != "off" else []
        yield from self._capability_notices(info, mode)
        if sees_images(info) is False and any("images" in m for m in conversation):
            yield from self._once(blind_notice(info.name))
        definitions = [self.box()[name].definition() for name in tool_names]
        loaded = self._loaded_context(info.name)
        limit = self.settings.max_steps
        return _TurnState(info, mode, tool_names, definitions, loaded, started, limit)

    def _tools_changed(self, state: _TurnState, conversation: list[Message]) -> Iterator[Event]:
        """Before a step after the first: an MCP server's list_changed is heard, and the
        tools offered follow it."""
        for line in self.mcp_tools():
            yield Notice(line)
        if self.offered_tools() != state.tool_names:
            state.tool_names = self.offered_tools()
            state.definitions = [self.box()[name].definition() for name in state.tool_names]
            if state.mode == "prompt":
                self._set_system_prompt(conversation, state.mode)

    def _step_call(
        self,
        state: _TurnState,
        conversation: list[Message],
        plan: _Plan,
        request_tools: list[dict[str, Any]],
        tools_cost: int,
        reply_format: dict[str, Any] | None,
    ) -> Generator[Event, None, tuple[_Turn, _Plan] | None]:
        """The step's model call; None when the same step must be asked again another way
        (what streamed of it taken back): the server holds no answer to a JSON schema, will
        not take the tool role, or could not parse the model's own tool call."""
        kept = len(conversation)
        info = state.info
        try:
            return (
                yield from self._call(
                    conversation, plan, info, request_tools, tools_cost, reply_format
                )
            )
        except FormatRefused:
            # The server takes no JSON schema for the answer (it says so once; it is sent
            # none from now on): the same step again, the tools described for free text.
            del conversation[kept:]
            self._set_system_prompt(conversation, state.mode)
            yield Notice(
                "the server cannot hold answers to a JSON schema: the model writes its "
                "calls as text (agent.aids: constrained)"
            )
            return None
        except AgentError as exc:
            if self._refused_tool_role(exc, state.mode, conversation):
                return None
            if state.mode != "native" or not unparsable_call(exc.message):
                raise
            # The server could not read the model's own tool call: the same step once
            # more with the tools in the prompt, which we parse ourselves.
            del conversation[kept:]  # what streamed before the failure is asked again
            state.mode = "prompt"
            self._set_system_prompt(conversation, state.mode)
            yield Notice(
                "the server could not parse the model's tool call; asking again with the "
                "tools described in the prompt, for the rest of this turn"
            )
            return None

    def _observe(self, state: _TurnState, plan: _Plan, turn: _Turn) -> None:
        """What a call that was answered teaches: the num_ctx the model is loaded with now,
        the calibration of our estimate, the turn's counts."""
        info = state.info
        state.loaded = plan.num_ctx  # the model is loaded with it now
        self._held[info.name] = max(plan.num_ctx, self._held.get(info.name, 0))
        self.calibration.observe(
            info.name, plan.estimate, turn.stats.prompt_eval_count, self._shared
        )
        state.total = state.total + turn.stats

    def _read_calls(
        self, state: _TurnState, turn: _Turn, reply_format: dict[str, Any] | None
    ) -> Generator[Event, None, tuple[list[ToolCall], str, str]]:
        """The step's tool calls, its answer, and what history keeps of its text: calls the
        server parsed, else read from a reply held to the schema, else from the text (only
        the offered tools' names), mended where agent.aids says repair."""
        calls, content, said = turn.calls, turn.content, turn.content
        mending = "repair" in self.settings.aids
        tool_names = state.tool_names
        read = None
        if not calls and reply_format is not None:
            # A reply held to the schema: a call, or the answer. Either way its text did
            # not stream (it is JSON): what it says is shown now.
            known = LenientNames(tool_names) if mending else tool_names
            read = read_reply(turn.content, known)
            if read is not None:
                calls, content = read
            shown = content if read is not None else turn.content
            if shown:
                yield ContentDelta(shown)
        if not calls and read is None:
            # Only the offered tools' names (or one a repair reads as one of them):
            # anything else written as a call is text.
            known = LenientNames(tool_names) if mending else tool_names
            calls, content = extract_tool_calls(turn.content, known)
            # In prompt mode the model sees its own calls as it wrote them: templates of
            # models without tool support do not show `tool_calls`.
            said = turn.content if state.mode == "prompt" else content
        if mending and calls:
            # Mended before anything sees them: history then shows the calls as they ran.
            box = self.box()
            schemas = {name: box[name].parameters for name in tool_names if name in box}
            calls = [repair_call(call, schemas, tools.ALL_TOOLS) for call in calls]
        return calls, content, said

    def _answered(
        self,
        state: _TurnState,
        conversation: list[Message],
        turn: _Turn,
        plan: _Plan,
        content: str,
        context: ContextUse,
    ) -> Generator[Event, None, Finished | None]:
        """A step that called no tool ends the turn (None: an empty answer, asked for once
        more)."""
        elapsed = self.clock() - state.started
        cut, limit = turn.done_reason == "length", state.limit
        if cut:
            yield Notice(self._cut_notice(state.info, plan))
        if not content.strip() and turn.thinking.strip():
            # Some models put the whole answer in their thinking: better shown than
            # lost (the user did not necessarily ask to see thinking).
            yield Notice("the model answered only in its thinking; showing that")
            content = turn.thinking.strip()
        elif not content.strip() and not cut and not state.retried_empty and state.steps < limit:
            # An empty answer after tool results is a known local-model failure
            # (ollama#10899): asking once more usually gets the real answer.
            state.retried_empty, state.nudge = True, True
            conversation.pop()
            yield Notice("the model sent an empty answer; asking it once more")
            return None
        elif not content.strip():
            yield Notice("the model sent an empty answer again; nothing to show")
        # A cut answer is not an answer, nor is an empty one: `agent run` exits 3.
        reason: StopReason = "length" if cut else "answer" if content.strip() else "empty"
        return Finished(reason, content, state.steps, state.total, elapsed, context=context)

    def _at_step_limit(
        self,
        state: _TurnState,
        conversation: list[Message],
        calls: list[ToolCall],
        content: str,
        request_tools: list[dict[str, Any]],
        tools_cost: int,
        context: ContextUse,
    ) -> Generator[Event, None, Finished | None]:
        """The model still calls tools at the step limit: go on (None, the limit raised),
        wrap up or stop, as at_step_limit answers; the calls are not run."""
        answer = self.at_step_limit(state.steps)
        if answer.action == "continue" and answer.steps > 0:
            state.limit += answer.steps
            return None
        why = f"not run: the step limit (agent.max_steps={state.limit}) was reached"
        for call in calls:
            conversation.append(tool_message(call, {"success": False, "error": why}))
        if answer.action == "wrap":
            summary, spent = yield from self._wrap_up(
                conversation, state.info, state.steps, request_tools, tools_cost
            )
            content, state.total = summary or content, state.total + spent
        elapsed = self.clock() - state.started
        return Finished(
            "max_steps", content, state.steps, state.total, elapsed, len(calls), context=context
        )


@dataclass
class _TurnState:
    """What the steps of one turn carry from one to the next."""

    info: ModelInfo
    mode: str  # native | prompt | off; prompt from a step the server could not parse on
    tool_names: list[str]  # offered
    definitions: list[dict[str, Any]]
    loaded: int | None  # the num_ctx the model is loaded with
    started: float
    limit: int  # agent.max_steps, raised by a "continue" at the limit
    total: Stats = field(default_factory=Stats)
    steps: int = 0
    retried_empty: bool = False  # an empty answer was asked for once more
    nudge: bool = False  # this step asks again after an empty answer (sent, not kept)
    guard: RepeatGuard = field(default_factory=RepeatGuard)
    costed: tuple[object, int] = (None, 0)  # the definitions last estimated, and their cost
