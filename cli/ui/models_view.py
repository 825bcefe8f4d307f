"""`agent models`: the server's models as an aligned table, like `ollama list`."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

from cli.backends.catalog import ModelRow
from cli.ui.cards import short_tokens
from cli.ui.text import sanitize
from cli.units import human_size

HEADER = (
    "NAME",
    "SIZE",
    "PARAMS",
    "QUANT",
    "CONTEXT",
    "TOOLS",
    "PROFILE",
    "CAPABILITIES",
    "LOADED",
)
SHOWN_CAPABILITIES = ("tools", "thinking", "vision")
NOTE_WIDTH = 88  # the notes under the table, wrapped
# What each word of the TOOLS column means, said under the table when a model shows it.
TOOL_WORDS = {
    "prompt": "prompt: the model has no tool support of its own; the system prompt describes "
    "the tools and the agent reads its calls from the answer (agent.tool_mode)",
    "none": "none: no tools (agent.tool_mode is native and the model has no tool support, or "
    "the policy enables none): the model answers as plain chat; it cannot read or change files",
}


def model_table(rows: Sequence[ModelRow]) -> list[str]:
    """The header and one line a model. Names and details come from the server: each is
    sanitised before it reaches the terminal. TOOLS says how the agent gives the model its
    tools (native, prompt or none), and a note under the table what prompt and none mean."""
    cells = [HEADER, *(_cells(row) for row in rows)]
    widths = [max(len(line[i]) for line in cells) for i in range(len(HEADER))]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() for line in cells
    ]
    notes = [TOOL_WORDS[w] for w in TOOL_WORDS if any(row.tools == w for row in rows)]
    if notes:
        lines.append("")
    for note in notes:
        lines += textwrap.wrap(note, NOTE_WIDTH, subsequent_indent="  ")
    return lines


def _cells(row: ModelRow) -> tuple[str, ...]:
    return (
        sanitize(row.name),
        human_size(row.size) if row.size is not None else "-",
        sanitize(row.parameter_size or "-"),
        sanitize(row.quantization or "-"),
        short_tokens(row.context_length) if row.context_length else "-",
        row.tools or "?",
        _profile(row),
        _capabilities(row),
        _loaded(row),
    )


def _profile(row: ModelRow) -> str:
    """`smollm2 (compact)`: the profile's name, and the compact tool set when it is in force."""
    if row.profile is None:
        return "-"
    name = sanitize(str(row.profile.get("name", "")))
    return f"{name} (compact)" if row.profile.get("tool_set") == "compact" else name


def _capabilities(row: ModelRow) -> str:
    if row.capabilities is None:
        return f"? ({sanitize(row.problem)})" if row.problem else "?"
    shown = [c for c in SHOWN_CAPABILITIES if c in row.capabilities]
    return ", ".join(shown) or "-"


def _loaded(row: ModelRow) -> str:
    if row.loaded is None:
        return "?"
    if not row.loaded:
        return ""
    return f"yes ({short_tokens(row.loaded_context)} ctx)" if row.loaded_context else "yes"


def model_lines(rows: Sequence[ModelRow], current: str) -> list[str]:
    """`/models` in chat: what `agent models` shows, one compact line a model — `*` marks
    the current one — then what prompt and none mean, when a model shows them:
    `* qwen3:8b · 4.9 GB · 40k ctx · tools native · tools, thinking · loaded`."""
    lines = []
    for row in rows:
        name, size, _params, _quant, context, tools, _profile_cell, capabilities, loaded = _cells(
            row
        )
        parts = [f"{'*' if row.name == current else ' '} {name}", size]
        parts.append(f"{context} ctx" if context != "-" else "ctx ?")
        parts.append(f"tools {tools}")
        parts.append(capabilities)
        if loaded:
            parts.append("loaded" if loaded == "yes" else loaded.replace("yes", "loaded", 1))
        lines.append(" · ".join(parts))
    notes = [TOOL_WORDS[w] for w in TOOL_WORDS if any(row.tools == w for row in rows)]
    return lines + [f"  {note}" for note in notes]
