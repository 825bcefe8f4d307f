"""Choosing `num_ctx` for each request, and learning how far off our token estimate is (pure).

Ollama cuts a prompt longer than `num_ctx` silently from the front — system prompt and tool
definitions first — and its default (often 4096) is far too small for an agent. So every
request asks for enough: our estimate of what we send plus a reply budget, rounded up to a
step so that a growing conversation does not reload the model on every turn (any other
`num_ctx` than the loaded one is a reload: seconds to minutes), and at most the caps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

CONTEXT_STEP = 4096
REPLY_TOKENS = 4096  # kept free for the answer unless options.num_predict says how much
MIN_FACTOR, MAX_FACTOR = 0.5, 3.0  # tokenizers differ by about 2× from our estimate
_MIN_SAMPLE = 64  # tokens: a smaller prompt says little about the tokenizer


@dataclass(frozen=True)
class ContextLimits:
    """What bounds `num_ctx` for one model."""

    cap: int  # ollama.max_num_ctx
    floor: int | None = None  # ollama.options.num_ctx, only when the user set it
    trained: int | None = None  # the model's trained context (/api/show)
    reply: int = REPLY_TOKENS

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


def choose_num_ctx(prompt_tokens: int, limits: ContextLimits, loaded: int | None = None) -> int:
    """`num_ctx` for a prompt of about `prompt_tokens` (corrected estimate): the prompt plus
    the reply budget, rounded up to CONTEXT_STEP; at least the user's floor (exactly the
    floor when that is enough); at most the ceiling. A model already `loaded` with a context
    that fits, within the ceiling, keeps it."""
    need = prompt_tokens + limits.reply
    floor = limits.floor or 0
    ceiling = limits.ceiling
    if loaded and max(need, floor) <= loaded <= ceiling:
        return loaded
    size = floor if need <= floor else math.ceil(need / CONTEXT_STEP) * CONTEXT_STEP
    return max(1, min(size, ceiling))


@dataclass
class Calibration:
    """Per model: how many of the server's tokens (`prompt_eval_count`) one token of our
    estimate turned out to be, bounded to MIN_FACTOR–MAX_FACTOR."""

    factors: dict[str, float] = field(default_factory=dict)

    def factor(self, model: str) -> float:
        return self.factors.get(model, 1.0)

    def corrected(self, model: str, estimate: int) -> int:
        return math.ceil(estimate * self.factor(model))

    def observe(self, model: str, estimate: int, actual: int) -> None:
        """Learn from one request. Upwards at once — an undersized context fails or cuts —
        downwards halfway, so that one short or partly cached prompt cannot undersize the
        next one."""
        if estimate < _MIN_SAMPLE or actual <= 0:
            return  # the server said nothing (0), or too little was sent to tell
        seen = _bounded(actual / estimate)
        old = self.factor(model)
        self.factors[model] = seen if seen >= old else (old + seen) / 2

    def at_least(self, model: str, factor: float) -> None:
        """After the server refused a prompt we thought fitted: it holds more tokens."""
        self.factors[model] = max(self.factor(model), _bounded(factor))


def _bounded(factor: float) -> float:
    return min(MAX_FACTOR, max(MIN_FACTOR, factor))
