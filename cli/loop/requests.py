"""The requests the agent sends, built on cli/loop/window.py's windows: each request's num_ctx
(cli/loop/sizing.py) and the conversation fitted to it, compacted when it no longer fits
(and again, harder, after the server refused it as too long), what a server's refusal
teaches, where a request stops repeating the last one (-v says it), /compact, and the
prewarm that sends the stable prefix while the user types."""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from cli.backends.messages import (
    ChatRequest,
    Message,
    ModelInfo,
    Prewarms,
    ReportsLoadedModels,
    Stats,
)
from cli.errors import AgentError, ContextTooLong, MessageTooLong
from cli.loop.agent_base import AgentBase
from cli.loop.events import (
    ContextUse,
    Event,
    Notice,
)
from cli.loop.guards import (
    labelled_results,
)
from cli.loop.images import sees_images, without_images
from cli.loop.sizing import (
    REPLY_TOKENS,
    ContextLimits,
    choose_num_ctx,
    context_advice,
    unfit_message,
)
from cli.loop.tokens import estimate_tokens, message_tokens
from cli.loop.window import Compaction, Window

# The most the first request waits for a prewarm still under way (Agent._prewarmed).
PREWARM_WAIT = 30
# What the request after an empty answer adds (`_asked_again`, `_with_ask_again`).
ASK_AGAIN = "(Your last answer was empty. Answer the request above, or call a tool.)"
_TOOLS_CHANGED = "the tool definitions changed: the server evaluates the whole prompt again"


@dataclass(frozen=True)
class _Plan:
    """One request's context: the messages sent, the num_ctx asked for, and our estimate of
    what is sent (messages and tools, uncorrected: what the calibration learns from)."""

    messages: list[Message]
    num_ctx: int
    estimate: int
    compaction: Compaction | None = None  # what fitting the window took, if anything
    shortened: int = 0  # the newest results shortened to fit, once
    ask_again: bool = False  # after an empty answer: ASK_AGAIN ends what is sent


class AgentRequests(AgentBase):
    """The request building of the agent (cli/loop/agent_base.py holds its state)."""

    def start_prewarm(self, conversation: Sequence[Message] = ()) -> None:
        """Send the prefix every request of this agent starts with (the system prompt, our
        tools, the first user message's context block) for the server to evaluate and keep,
        in a thread, now: chat does it as it starts, while the user types, so that the first
        message evaluates only itself. `conversation`: a resumed chat's history, which the
        first request will carry (the prewarm is sized for it, so that Ollama need not load
        the model again with another num_ctx). Nothing waits for it but the first request,
        and that at most PREWARM_WAIT seconds (it would evaluate the same prefix itself). A
        backend without a way to do it, or a failure, changes nothing; `agent run -v` says
        what failed. MCP tools known only later are not in it (they come after ours)."""
        if self._prewarming is not None or not isinstance(self.backend, Prewarms):
            return
        history = [m for m in conversation if m.get("role") != "system"]
        self._prewarming = threading.Thread(
            target=self._prewarm, args=(history,), name="prewarm", daemon=True
        )
        self._prewarming.start()

    def _prewarm(self, history: list[Message]) -> None:
        try:
            request = self.prewarm_request(history)
            assert isinstance(self.backend, Prewarms)
            self.backend.prewarm(request)
        except Exception as exc:  # whatever it is, the first request will meet it again
            self._prewarm_failed = str(exc) or type(exc).__name__
        else:
            self._warmed = True

    def prewarm_request(self, history: Sequence[Message] = ()) -> ChatRequest:
        """What prewarm sends: the system prompt, the tools and a first user message that is
        the context block alone, with the num_ctx the first request would choose for
        `history` and a short message (the first request keeps the size the model is loaded
        with wherever it fits; one that needs more makes Ollama load it again)."""
        info = self.model_info()
        mode = self.tool_mode(info)
        request_tools = self._request_tools(info)
        system: Message = {"role": "system", "content": self.system_prompt(mode)}
        messages = self._placed([system, {"role": "user", "content": ""}])
        sent = tools_cost_of(request_tools) + sum(message_tokens(m) for m in messages)
        whole = sent + sum(message_tokens(m) for m in history)
        limits = self._limits(info)
        corrected = self.calibration.corrected(info.name, whole)
        loaded = self._loaded_context(info.name)
        num_ctx = choose_num_ctx(corrected, limits, loaded, self._held.get(info.name))
        return self._request(_Plan(messages, num_ctx, sent), info, request_tools)

    def _prewarmed(self) -> Iterator[Event]:
        """Wait for a prewarm still under way, at most PREWARM_WAIT seconds; say (under -v)
        why one failed or was not waited for."""
        thread = self._prewarming
        if thread is None:
            return
        thread.join(PREWARM_WAIT)
        self._prewarming = None  # after the join: a Ctrl-C in it leaves it to wait for again
        if thread.is_alive():
            yield Notice(f"prewarm: not done after {PREWARM_WAIT} s; not waited for", detail=True)
        elif self._prewarm_failed:
            yield Notice(f"prewarm: {self._prewarm_failed}", detail=True)
            self._prewarm_failed = ""

    def _limits(self, info: ModelInfo) -> ContextLimits:
        # Only a num_ctx the user set is in options (the config has no default for it), so
        # it is a floor; num_predict, when set, is what the reply may take. A server whose
        # context is fixed takes no num_ctx: no floor there. What a server's refusal stated
        # is newer than what it said before.
        fixed = info.fixed_context
        floor = None if fixed else _positive_int(self.settings.options.get("num_ctx"))
        profile = self._profiled("num_ctx")
        if floor is None and not fixed and profile is not None and profile.num_ctx:
            # A profile's floor stays under ollama.max_num_ctx (a user's num_ctx may pass it).
            floor = min(profile.num_ctx, self.settings.max_num_ctx)
        reply = _positive_int(self.settings.options.get("num_predict"))
        stated = self._stated.get(info.name)
        return ContextLimits(
            cap=self.settings.max_num_ctx,
            floor=floor,
            trained=stated or info.context_length,
            reply=reply or REPLY_TOKENS,
            fixed=fixed,
            served=bool(stated) or info.context_served,
        )

    def _window_for(self, conversation: list[Message]) -> Window:
        """The window of this conversation list (a new list, a new window)."""
        if conversation is not self._window_of:
            self._window, self._window_of = Window(), conversation
        return self._window

    def _plan(
        self,
        conversation: list[Message],
        info: ModelInfo,
        tools_cost: int,
        loaded: int | None,
        window: Window | None = None,
    ) -> _Plan:
        """num_ctx for the conversation as the server is sent it, and that window: the last
        request's messages and the new ones, compacted once and deep when they do not fit."""
        limits = self._limits(info)
        window = window or self._window_for(conversation)
        shown = window.view(conversation)
        whole = tools_cost + sum(message_tokens(m) for m in shown)
        corrected = self.calibration.corrected(info.name, whole)
        if corrected > limits.room:  # maybe one message that cannot fit: refused, not sent
            self._refuse_unfit(conversation, info, tools_cost)
        num_ctx = choose_num_ctx(corrected, limits, loaded, self._held.get(info.name))
        budget = self._budget(num_ctx, limits, info, tools_cost)
        return self._fit(conversation, window, num_ctx, budget, tools_cost)

    def _fit(
        self,
        conversation: list[Message],
        window: Window,
        num_ctx: int,
        budget: int,
        tools_cost: int,
    ) -> _Plan:
        shown = window.view(conversation)
        size = sum(message_tokens(m) for m in shown)
        compaction, shortened = None, 0
        if size > budget:
            target = self._share(budget, conversation)
            compaction = window.compact(conversation, target, message_tokens)
            self._compacting = self._compacting or compaction.did
            shown = window.view(conversation)
            size = sum(message_tokens(m) for m in shown)
            if size > budget:
                # The newest results alone are too big: shortened, once, to leave the room a
                # compaction leaves, so that the next steps append to them again.
                shortened = window.shorten(conversation, size - target, message_tokens)
                shown = window.view(conversation)
                size = sum(message_tokens(m) for m in shown)
        return _Plan(self._placed(shown), num_ctx, tools_cost + size, compaction, shortened)

    def _fitted(self, plan: _Plan, info: ModelInfo) -> Iterator[Event]:
        """What fitting the request took, said once: a compaction, results shortened."""
        if plan.compaction is not None and plan.compaction.did:
            yield Notice(self.compaction_notice(plan.compaction))
        if plan.shortened:
            yield Notice(
                f"{_count(plan.shortened, 'tool result')} shortened to fit the context window"
            )

    def _request_tools(self, info: ModelInfo) -> list[dict[str, Any]]:
        """The tool definitions a request of this model carries now (none in prompt mode)."""
        if self.tool_mode(info) != "native":
            return []
        box = self.box()
        return [box[name].definition() for name in self.offered_tools()]

    def _request(
        self,
        plan: _Plan,
        info: ModelInfo,
        request_tools: list[dict[str, Any]],
        reply_format: dict[str, Any] | None = None,
        tool_choice: str | None = None,
    ) -> ChatRequest:
        messages = plan.messages
        if sees_images(info) is False:  # a model that cannot see: no image, ever (cli/images)
            messages = without_images(messages)
        if not request_tools and self._user_results(info):
            messages = labelled_results(messages)
        if plan.ask_again:
            messages = _with_ask_again(messages)
        return ChatRequest(
            model=self.settings.model,
            messages=messages,
            tools=request_tools,
            think=self._think_field(info),
            options={**self._options(), "num_ctx": plan.num_ctx},
            keep_alive=self.settings.keep_alive,
            format=reply_format,
            tool_choice=tool_choice if request_tools else None,
        )

    def _share(self, budget: int, conversation: list[Message]) -> int:
        """What a compaction leaves of `budget`: the system prompt, which the server keeps
        cached through it, and agent.compact_to of the room after it, the history's."""
        system = (
            conversation[0] if conversation and conversation[0].get("role") == "system" else None
        )
        fixed = message_tokens(system) if system is not None else 0
        return fixed + int(max(0, budget - fixed) * self.settings.compact_to)

    def _compaction_target(self, info: ModelInfo, conversation: list[Message]) -> int:
        """What a compaction leaves, in our estimate, at the most num_ctx (with the tools
        this model's requests carry now)."""
        limits = self._limits(info)
        tools = self._request_tools(info)
        tools_cost = tools_cost_of(tools) + self._context_cost()
        return self._share(self._budget(limits.ceiling, limits, info, tools_cost), conversation)

    def compaction_sizes(self, conversation: list[Message]) -> tuple[int, int]:
        """What the conversation takes as the server is sent it, and what a compaction
        leaves, in our estimate corrected for this model (what /compact compares)."""
        info = self.model_info()
        size = sum(message_tokens(m) for m in self._window_for(conversation).view(conversation))
        factor = self.calibration.factor(info.name)
        target = self._compaction_target(info, conversation)
        return int(size * factor), int(target * factor)

    def compact(self, conversation: list[Message], summary: str = "") -> Compaction:
        """`/compact`: the conversation's window compacted now, as it is when full, with
        `summary` (of what goes) in the note on what was left out."""
        target = self._compaction_target(self.model_info(), conversation)
        window = self._window_for(conversation)
        done = window.compact(conversation, target, message_tokens, summary)
        self._compacting = self._compacting or done.did
        return done

    def compaction_notice(self, done: Compaction) -> str:
        factor = self.calibration.factor(self.settings.model)
        return (
            f"context compacted: {done.describe()} (about {int(done.before * factor)} → "
            f"{int(done.after * factor)} tokens); the next steps add to what is left"
        )

    def _plan_harder(
        self,
        conversation: list[Message],
        refused: _Plan,
        info: ModelInfo,
        tools_cost: int,
        counted: int | None = None,
    ) -> _Plan:
        """The request again after the server refused `refused` as too long (having counted
        `counted` tokens in it, when it said): the window compacted to the corrected budget,
        for this request and the ones after it."""
        limits = self._limits(info)
        if not counted:
            # The server counted more than the context it has where we estimated
            # refused.estimate: our estimate runs at least that much short for this model.
            served = min(refused.num_ctx, limits.ceiling) if limits.fixed else refused.num_ctx
            self.calibration.at_least(info.name, 1.1 * served / max(1, refused.estimate))
        window = self._window_for(conversation)
        whole = tools_cost + sum(message_tokens(m) for m in window.view(conversation))
        # Not the loaded size: it did not hold the prompt (the session's is kept if it does).
        held = self._held.get(info.name)
        num_ctx = choose_num_ctx(self.calibration.corrected(info.name, whole), limits, None, held)
        budget = self._budget(num_ctx, limits, info, tools_cost)
        if num_ctx <= refused.num_ctx:
            # No more room to ask for: send less than last time, whatever the estimate says.
            budget = min(budget, (refused.estimate - tools_cost) * 2 // 3)
        return self._fit(conversation, window, num_ctx, budget, tools_cost)

    def _refuse_unfit(self, conversation: list[Message], info: ModelInfo, tools: int) -> None:
        """A user message that cannot fit the model's context with the system prompt and the
        tool definitions, whatever older history is left out, is not sent (nor kept, when
        nothing was done with it yet): one line says its size, the context and what to do."""
        message = next((m for m in reversed(conversation) if m.get("role") == "user"), None)
        if message is None:
            return
        system = conversation[0] if conversation[0].get("role") == "system" else None
        fixed_cost = tools + (message_tokens(system) if system is not None else 0)
        size = message_tokens(message)
        limits = self._limits(info)
        if self.calibration.corrected(info.name, fixed_cost + size) <= limits.room:
            return
        if conversation[-1] is message:
            conversation.pop()
        content = message.get("content")
        chars = len(content) if isinstance(content, str) else 0
        factor = self.calibration.factor(info.name)
        raise MessageTooLong(
            unfit_message(int(size * factor), chars, int(fixed_cost * factor), limits, info.name)
        )

    def _learn(self, refusal: ContextTooLong, plan: _Plan, info: ModelInfo) -> int | None:
        """What a server's refusal says: the context it runs the model with (on a server
        whose context is fixed, the one to fit from now on) and the prompt's size in its
        tokens (what our estimate of `plan` should have been). Returns that size."""
        if refusal.context and info.fixed_context:
            self._stated[info.name] = refusal.context
        if refusal.prompt_tokens and plan.estimate:
            self.calibration.at_least(info.name, refusal.prompt_tokens / plan.estimate)
        return refusal.prompt_tokens

    def _answer_overflowed(self, refusal: ContextTooLong, plan: _Plan, info: ModelInfo) -> bool:
        """Whether a refusal is about the answer, not the prompt: it counts far more tokens
        than the prompt held, by an estimate the server's own counts have corrected.
        llama-cpp-python answers 400 when a model's answer fills the context (counting the
        prompt and the answer so far), and sends none of it. Resending less history would
        not help: the turn ends as an answer cut for length, whose notice says to bound it."""
        counted, known = refusal.prompt_tokens, self.calibration.factors.get(info.name)
        if not counted or known is None or not info.fixed_context:
            return False
        return counted > 1.5 * self.calibration.corrected(info.name, plan.estimate)

    def _as_sent(self, request: ChatRequest) -> ChatRequest:
        """`request` as the server gets it: a server whose context is fixed is sent no
        num_ctx, so two requests that differ only there are the same request to it."""
        if "num_ctx" not in request.options or not self.model_info().fixed_context:
            return request
        options = {k: v for k, v in request.options.items() if k != "num_ctx"}
        return dataclasses.replace(request, options=options)

    def _prefix_change(self, request: ChatRequest) -> str:
        """Where `request` stops repeating the last one, when it does and no compaction
        said so: the server evaluates everything after that point again (-v says it)."""
        num_ctx = self._as_sent(request).options.get("num_ctx")
        sent = (request.model, num_ctx, list(request.tools or []), list(request.messages))
        last, self._sent = self._sent, sent
        compacting, self._compacting = self._compacting, False
        self._shared = False
        if last is None:
            # After a prewarm the first request shares its prefix: what the server counts
            # for it may be only what followed that prefix.
            self._shared = self._warmed
            return ""
        if last[0] != sent[0]:
            return ""  # another model starts from nothing anyway
        if last[1] != num_ctx:
            return (
                f"num_ctx changes from {last[1]} to {num_ctx}: Ollama reloads the model and "
                "evaluates the whole prompt again"
            )
        if last[2] != sent[2]:
            return "" if compacting else _TOOLS_CHANGED
        before, now = last[3], sent[3]
        same = len(before)
        for index, message in enumerate(before):
            if index >= len(now) or not (now[index] is message or now[index] == message):
                same = index
                break
        self._shared = same > 0 or bool(sent[2])
        if same == len(before) or compacting:
            return ""
        what = "the system prompt" if same == 0 else f"message {same + 1}"
        return (
            f"{what} of the last request is not sent the same way: the server evaluates "
            f"{len(now) - same} messages again"
        )

    def _budget(self, num_ctx: int, limits: ContextLimits, info: ModelInfo, tools: int) -> int:
        """How much of our estimate the messages may take in `num_ctx`: what the reply does
        not need, in our units, less the tool definitions."""
        room = num_ctx - limits.reserve(num_ctx)
        return int(room / self.calibration.factor(info.name)) - tools

    def _loaded_context(self, model: str) -> int | None:
        """The context the model is loaded with now, if the backend can say (/api/ps)."""
        if not isinstance(self.backend, ReportsLoadedModels):
            return None
        try:
            loaded = self.backend.loaded_models()
        except AgentError:
            return None  # a server without /api/ps: sized without it
        for name in (model, f"{model}:latest"):
            if loaded.get(name):
                return loaded[name]
        return None

    def _context_use(self, plan: _Plan, stats: Stats) -> ContextUse:
        prompt = stats.prompt_eval_count or self.calibration.corrected(
            self.settings.model, plan.estimate
        )
        return ContextUse(prompt + stats.eval_count, plan.num_ctx)

    def _too_long(self, plan: _Plan, info: ModelInfo) -> str:
        limits = self._limits(info)
        what, fix = context_advice(limits, info.name)
        sent = "" if limits.fixed else f"num_ctx {plan.num_ctx}, "
        return (
            "the conversation does not fit the model's context even with history left out "
            f"({sent}bounded by {what}): {fix}, or start a new conversation, or send less"
        )


def _asked_again(plan: _Plan) -> _Plan:
    """The request after an empty answer asks in words for the answer (not the same request
    again: the server would evaluate it once more for the same empty answer)."""
    added = message_tokens({"role": "user", "content": ASK_AGAIN})
    return dataclasses.replace(plan, ask_again=True, estimate=plan.estimate + added)


def _with_ask_again(messages: list[Message]) -> list[Message]:
    """ASK_AGAIN after the messages as sent: at the end of the last one when that is a user
    message (tool results sent as labelled user messages included: two user messages in a
    row break some templates' alternation), else as a message of its own."""
    last = messages[-1] if messages else None
    if last is not None and last.get("role") == "user" and isinstance(last.get("content"), str):
        return [*messages[:-1], {**last, "content": f"{last['content']}\n\n{ASK_AGAIN}"}]
    return [*messages, {"role": "user", "content": ASK_AGAIN}]


def _trim_notice(refused: _Plan, sent: _Plan, limits: ContextLimits) -> str:
    cuts = []
    if sent.compaction is not None and sent.compaction.did:
        cuts.append(sent.compaction.describe())
    if sent.shortened:
        cuts.append(f"{_count(sent.shortened, 'tool result')} shortened")
    if limits.fixed:  # no num_ctx is sent: the server's context is what it is
        context = f" ({limits.ceiling} tokens)" if limits.served else ""
        size = " and ".join(cuts) or "less history"
        return (
            f"the server found the prompt longer than the model's context{context}; "
            f"sending it once more with {size}"
        )
    size = f"num_ctx {sent.num_ctx}" + (f", {' and '.join(cuts)}" if cuts else "")
    return (
        f"the server found the prompt longer than the model's context (num_ctx "
        f"{refused.num_ctx}); sending it once more with {size}"
    )


def tools_cost_of(definitions: list[dict[str, Any]]) -> int:
    """Our estimate of what a request's tool definitions take (none sent: nothing)."""
    return estimate_tokens(json.dumps(definitions)) if definitions else 0


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _positive_int(value: object) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return None
