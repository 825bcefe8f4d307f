"""What a server with a KV cache must evaluate for each chat request, counted by the fakes.

llama.cpp, Ollama, LM Studio and vLLM keep the previous prompt's KV cache and evaluate only
what follows the longest common prefix with it. This counts that exactly, in tokens of a
simple tokenizer of our own (words and single punctuation marks, `\\w+|[^\\w\\s]`): each
request is rendered as a chat template would render it — the system message, the tool
definitions, then every other message in order (a role marker, then each field: content,
thinking, tool calls, tool name…, then an end marker) — and compared with the previous
request to the same model.

Per request (a `Row`): its `tokens`; `lcp`, the tokens it shares from the start with the
previous request to that model; `evaluated`, what the server pays: `tokens - lcp`, or all of
them when Ollama reloads the model (a `num_ctx` other than the previous request's: the cache
is gone); `new`, the tokens of the blocks (tool definitions, messages) it appends: those after
the last block this session had sent before, each rendered as never before (`Novelty`). That
is the ideal, each message evaluated once, when it joins the conversation. A block rendered
anew *before* one sent earlier — an old tool result shortened, a stub or summary in place of
elided turns — is `rewritten`, not new: its cost is in `evaluated` only, as the server pays
it. Over a session, `evaluated / new` is the figure: 1.0 for a conversation that only ever
appends; about 1 + f/(1-f) in the steady state for one compacted to a fraction f of its
budget whenever it is full.

A `compaction` is a request whose common prefix stops short of the previous request (its
history was changed, not appended to); a `num_ctx` change is counted after a model's first
request (only Ollama sends num_ctx).
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

TOKEN = re.compile(r"\w+|[^\w\s]")

# The fields of a message in the order a template renders them; any other field follows,
# by name.
FIELDS = (
    "content",
    "thinking",
    "reasoning_content",
    "reasoning",
    "tool_calls",
    "tool_name",
    "tool_call_id",
    "name",
    "images",
)


def tokenize(text: str) -> list[str]:
    return TOKEN.findall(text)


def _value_tokens(value: Any) -> list[str]:
    if isinstance(value, str):
        return tokenize(value)
    # Objects as a server re-serialises them (Ollama's Go structs and maps: keys in order).
    return tokenize(json.dumps(value, sort_keys=True, ensure_ascii=False))


def render_message(message: Mapping[str, Any]) -> list[str]:
    """One message as a template renders it: role marker, its fields, end marker."""
    tokens = [f"<|{message.get('role')}|>"]
    others = sorted(k for k in message if k not in FIELDS and k != "role")
    for key in (*FIELDS, *others):
        value = message.get(key)
        if value is None or value == "" or value == []:
            continue
        tokens.append(f"<{key}>")
        tokens += _value_tokens(value)
    tokens.append("<|end|>")
    return tokens


def render_tools(tools: Any) -> list[str]:
    if not tools:
        return []
    return ["<|tools|>", *_value_tokens(tools), "<|end|>"]


def blocks(body: Mapping[str, Any]) -> list[list[str]]:
    """The request as its template renders it, block by block: a leading system message,
    the tool definitions (if any), then each other message: the order of the templates that
    keep a prefix across runs (ChatML/Qwen put the tools in the system turn, after its
    text); docs/context-and-servers.md says which do not."""
    messages = body.get("messages")
    listed = [m for m in messages if isinstance(m, Mapping)] if isinstance(messages, list) else []
    lead = [render_message(listed.pop(0))] if listed and listed[0].get("role") == "system" else []
    rendered = [*lead, render_tools(body.get("tools")), *(render_message(m) for m in listed)]
    return [b for b in rendered if b]


def prompt_tokens(body: Mapping[str, Any]) -> int:
    """The prompt's length in this tokenizer's tokens (what a fake reports as its count)."""
    return sum(len(b) for b in blocks(body))


def common_prefix(a: Sequence[str], b: Sequence[str]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


@dataclass(frozen=True)
class Row:
    """One request, as the server paid for it."""

    model: str
    tokens: int
    lcp: int  # tokens in common from the start with the previous request to this model
    evaluated: int  # what the server evaluated: tokens - lcp, all of them after a reload
    new: int  # tokens of the blocks it appended (after every block sent before)
    rewritten: int = 0  # tokens of blocks rendered anew before one sent earlier
    num_ctx: int | None = None
    reloaded: bool = False  # Ollama: num_ctx changed, the model reloaded, the cache gone
    compaction: bool = False  # the prefix stopped short of the previous request

    def to_json(self) -> dict[str, Any]:
        return {
            "tokens": self.tokens,
            "lcp": self.lcp,
            "evaluated": self.evaluated,
            "new": self.new,
            "rewritten": self.rewritten,
            "num_ctx": self.num_ctx,
            "reloaded": self.reloaded,
            "compaction": self.compaction,
        }


class Novelty:
    """Which blocks of each request of a session are new: appended after the last block the
    session had sent before. A block is "sent before" when an earlier request held it (the
    same key) at least as many times as this request has so far: a message rendered exactly
    like an earlier one (two identical tool results) is still new the first time it is
    repeated. A rewrite of the previous request's last block cannot be told from an appended
    block, and counts as new."""

    def __init__(self) -> None:
        self._held: dict[Any, int] = {}  # key → the most times one request held it

    def observe(self, keyed: Sequence[tuple[Any, int]]) -> tuple[int, int]:
        """`keyed`: each block's key and size, in order. Returns (new, rewritten) tokens."""
        counts: dict[Any, int] = {}
        sent_before = []
        for key, _ in keyed:
            counts[key] = counts.get(key, 0) + 1
            sent_before.append(counts[key] <= self._held.get(key, 0))
        last = max((i for i, sent in enumerate(sent_before) if sent), default=-1)
        new = sum(size for _, size in keyed[last + 1 :])
        rewritten = sum(
            size
            for (_, size), sent in zip(keyed[: max(last, 0)], sent_before, strict=False)
            if not sent
        )
        for key, count in counts.items():
            self._held[key] = max(self._held.get(key, 0), count)
        return new, rewritten


@dataclass
class _Model:
    tokens: list[str]
    num_ctx: int | None


@dataclass
class ServerWork:
    """The prompt evaluation of one session, request by request. Thread-safe: the fakes
    answer in threads."""

    rows: list[Row] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._last: dict[str, _Model] = {}
        self._novelty = Novelty()

    def reset(self) -> None:
        """A new session: nothing sent, nothing cached."""
        with self._lock:
            self.rows.clear()
            self._last.clear()
            self._novelty = Novelty()

    def observe(self, body: Mapping[str, Any]) -> Row:
        """Count one chat request the server evaluates (not one it refused unread)."""
        model = str(body.get("model"))
        options = body.get("options")
        num_ctx = options.get("num_ctx") if isinstance(options, Mapping) else None
        num_ctx = num_ctx if isinstance(num_ctx, int) else None
        rendered = blocks(body)
        tokens = [t for b in rendered for t in b]
        with self._lock:
            new, rewritten = self._novelty.observe([(tuple(b), len(b)) for b in rendered])
            last = self._last.get(model)
            lcp = common_prefix(last.tokens, tokens) if last else 0
            reloaded = bool(
                last and None not in (num_ctx, last.num_ctx) and num_ctx != last.num_ctx
            )
            row = Row(
                model,
                len(tokens),
                lcp,
                len(tokens) if reloaded else len(tokens) - lcp,
                new,
                rewritten,
                num_ctx,
                reloaded,
                compaction=bool(last and lcp < len(last.tokens)),
            )
            self._last[model] = _Model(tokens, num_ctx)
            self.rows.append(row)
            return row

    # totals
    @property
    def requests(self) -> int:
        return len(self.rows)

    @property
    def tokens(self) -> int:
        return sum(r.tokens for r in self.rows)

    @property
    def evaluated(self) -> int:
        return sum(r.evaluated for r in self.rows)

    @property
    def new(self) -> int:
        return sum(r.new for r in self.rows)

    @property
    def rewritten(self) -> int:
        return sum(r.rewritten for r in self.rows)

    @property
    def ratio(self) -> float:
        """Evaluated / new: 1.0 when every token was evaluated once."""
        return self.evaluated / self.new if self.new else 0.0

    @property
    def compactions(self) -> int:
        return sum(r.compaction for r in self.rows)

    @property
    def num_ctx_changes(self) -> int:
        """Requests whose num_ctx differs from the previous one's to the same model (every
        request after a model's first)."""
        return sum(r.reloaded for r in self.rows)

    def summary(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "tokens": self.tokens,
            "evaluated": self.evaluated,
            "new": self.new,
            "rewritten": self.rewritten,
            "ratio": self.ratio,
            "compactions": self.compactions,
            "num_ctx_changes": self.num_ctx_changes,
            "num_ctx": _distinct(r.num_ctx for r in self.rows),
        }


def _distinct(values: Iterable[int | None]) -> list[int]:
    seen: list[int] = []
    for value in values:
        if value is not None and value not in seen:
            seen.append(value)
    return seen
