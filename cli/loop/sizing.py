"""Choosing `num_ctx` for each request, and learning how far off our token estimate is (pure).

Ollama cuts a prompt longer than `num_ctx` silently from the front — system prompt and tool
definitions first — and its default (often 4096) is far too small for an agent. So every
request asks for enough: our estimate of what we send plus a reply budget, at most the caps.
Any other `num_ctx` than the loaded one makes Ollama reload the model and evaluate the whole
prompt again (seconds to minutes), so the size changes as seldom as it can: a size that holds
the prompt is kept (the loaded one, else the session's), the first size of a session is a
quarter of the most it may reach, and a session that outgrows it goes to that most at once:
one reload at most after the first request, however far the session grows. Within a session
the size never shrinks.

An OpenAI-compatible server runs the model with one context, whatever a request says: there
is nothing to choose, and history is fitted to that context (`ContextLimits.fixed`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from cli.backends.messages import SERVER_CONTEXT_FLAGS

CONTEXT_STEP = 4096
REPLY_TOKENS = 4096  # kept free for the answer unless options.num_predict says how much
FIRST_SHARE = 4  # a session's first size: a quarter of the ceiling (unless it needs more)
MIN_FACTOR, MAX_FACTOR = 0.5, 3.0  # tokenizers differ by about 2× from our estimate
_MIN_SAMPLE = 64  # tokens: a smaller prompt says little about the tokenizer


@dataclass(frozen=True)
class ContextLimits:
    """What bounds `num_ctx` for one model."""

    cap: int  # ollama.max_num_ctx
    floor: int | None = None  # ollama.options.num_ctx, only when the user set it
    # The model's context: what it was trained for (/api/show), or, where `served`, what the
    # server runs it with.
    trained: int | None = None
    reply: int = REPLY_TOKENS
    fixed: bool = False  # the server's context is fixed (OpenAI-compatible): nothing to choose
    served: bool = False

    @property
    def ceiling(self) -> int:
        """The most we ask for: max_num_ctx, or the user's own num_ctx when it is larger
        (set by hand, it is honoured), never more than the model was trained for."""
        top = max(self.cap, self.floor or 0)
        return min(top, self.trained) if self.trained else top

    def reserve(self, num_ctx: int) -> int:
        """Tokens of `num_ctx` kept for the answer when history has to be fitted into it:
        the reply budget, but never more than a quarter of a small context."""
        return min(self.reply, num_ctx // 4)

    @property
    def room(self) -> int:
        """Tokens the prompt may take at the ceiling: what the answer does not need."""
        return self.ceiling - self.reserve(self.ceiling)


def choose_num_ctx(
    prompt_tokens: int, limits: ContextLimits, loaded: int | None = None, held: int | None = None
) -> int:
    """`num_ctx` for a prompt of about `prompt_tokens` (corrected estimate), with the reply
    budget on top. A size that holds it, within the ceiling, is kept: the one the model is
    `loaded` with (no reload), else the one this session `held` so far (it never shrinks).
    Otherwise: exactly the user's floor when that is enough; else a session's first size is a
    quarter of the ceiling, or what the prompt needs rounded up to CONTEXT_STEP if more, and a
    session that outgrew its size goes to the ceiling. A fixed context is the ceiling."""
    ceiling = limits.ceiling
    if limits.fixed:
        return ceiling
    need = prompt_tokens + limits.reply
    floor = limits.floor or 0
    for size in (loaded, held):
        if size and max(need, floor) <= size <= ceiling:
            return size
    if need <= floor:
        return max(1, min(floor, ceiling))
    if held:
        return ceiling  # outgrown: once to the most, not step by step (a reload each)
    first = _stepped(ceiling / FIRST_SHARE)
    return max(1, min(max(_stepped(need), first), ceiling))


def _stepped(tokens: float) -> int:
    return math.ceil(tokens / CONTEXT_STEP) * CONTEXT_STEP


def context_advice(limits: ContextLimits, model: str, need: int | None = None) -> tuple[str, str]:
    """What bounds the context the prompt must fit, as a noun phrase, and what to do about
    it. The cap is named only where it is the limit, and raising it only where that is
    enough for a prompt that `need`s so many tokens: never "raise max_num_ctx" when the
    server's own context, or the model's, is what stops it."""
    trained, cap = limits.trained, limits.cap
    load = f"load the model with a larger context ({SERVER_CONTEXT_FLAGS})"
    longer = "use a model with a longer context"
    if limits.fixed:
        if trained and trained <= cap:
            if limits.served:
                return f"the context of {trained} tokens the server runs '{model}' with", load
            return f"the {trained} tokens model '{model}' was trained for", longer
        if trained:
            serves = "serves" if limits.served else "allows at most"
            what = f"the {cap} tokens of ollama.max_num_ctx (the server {serves} {trained})"
            if _holds(limits, trained, need):
                return what, f"raise ollama.max_num_ctx (now {cap}) up to {trained}"
            return what, (load if limits.served else longer) + " and raise ollama.max_num_ctx"
        return (
            f"the {cap} tokens of ollama.max_num_ctx (the server does not say its own context)",
            f"if the server's context is larger, raise ollama.max_num_ctx (now {cap}) to it; "
            f"else {load} and raise ollama.max_num_ctx to match",
        )
    top = max(cap, limits.floor or 0)
    if trained and trained <= top:
        return f"the {trained} tokens model '{model}' was trained for", longer
    key = "ollama.max_num_ctx" if cap >= (limits.floor or 0) else "ollama.options.num_ctx"
    what = f"the {top} tokens of {key}"
    if trained and not _holds(limits, trained, need):
        return what, f"{longer} (model '{model}' was trained for {trained})"
    upto = f" up to {trained} (what the model was trained for)" if trained else ""
    return what, f"raise {key} (now {top}){upto}"


def _holds(limits: ContextLimits, context: int, need: int | None) -> bool:
    """Whether a prompt of `need` tokens would fit a context of `context`, room for the answer
    kept (unknown `need`: it may)."""
    return need is None or need <= context - limits.reserve(context)


def unfit_message(size: int, chars: int, fixed_cost: int, limits: ContextLimits, model: str) -> str:
    """The one line that refuses a message of about `size` tokens (`chars` characters) that
    cannot fit, with `fixed_cost` tokens of system prompt, tool definitions and context block,
    whatever older history is left out."""
    what, fix = context_advice(limits, model, size + fixed_cost)
    return (
        f"the message is about {_tokens(size)} tokens ({_tokens(chars)} characters): with the "
        f"system prompt, tool definitions and context (about {_tokens(fixed_cost)} tokens) it "
        f"cannot fit {what}, whatever older history is left out, so it was not sent: {fix}, "
        "or send less"
    )


def _tokens(count: int) -> str:
    """812, 12.1k: counts as a person reads them."""
    return str(count) if count < 1000 else f"{count / 1000:.1f}k"


@dataclass
class Calibration:
    """Per model: how many of the server's tokens (`prompt_eval_count`) one token of our
    estimate turned out to be, bounded to MIN_FACTOR–MAX_FACTOR."""

    factors: dict[str, float] = field(default_factory=dict)

    def factor(self, model: str) -> float:
        return self.factors.get(model, 1.0)

    def corrected(self, model: str, estimate: int) -> int:
        return math.ceil(estimate * self.factor(model))

    def observe(self, model: str, estimate: int, actual: int, cached: bool = False) -> None:
        """Learn from one request. Upwards at once — an undersized context fails or cuts —
        downwards halfway, so that one short or partly cached prompt cannot undersize the
        next one; and only upwards from a request that shared a prefix with the last one
        (`cached`): some servers (Ollama before 0.30's fix, llama-server's own counts)
        report only the tokens after the cached prefix, which says nothing of the whole."""
        if estimate < _MIN_SAMPLE or actual <= 0:
            return  # the server said nothing (0), or too little was sent to tell
        seen = _bounded(actual / estimate)
        old = self.factor(model)
        if seen >= old:
            self.factors[model] = seen
        elif not cached:
            self.factors[model] = (old + seen) / 2

    def at_least(self, model: str, factor: float) -> None:
        """After the server refused a prompt we thought fitted: it holds more tokens."""
        self.factors[model] = max(self.factor(model), _bounded(factor))


def _bounded(factor: float) -> float:
    return min(MAX_FACTOR, max(MIN_FACTOR, factor))
