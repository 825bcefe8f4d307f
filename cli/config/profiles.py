"""Model profiles: what a model gets by its name and size (pure).

A profile gives five things: how the tools reach the model (tool_mode), the temperature,
thinking, the tool set (full, or the compact one for small models) and a num_ctx floor. The
built-in table below holds the families users run most; the user's own entries (`models:`
in the config) are checked first, and a key an entry leaves out is the next matching
entry's. A setting the user made in the config or on the command line wins over any
profile (cli/loop/agent.py). `agent models` shows which profile each model gets, and
`agent eval` measures what a profile is worth (docs/eval.md).

Where a value comes from is said beside it: the model maker's recommended sampling from the
model card or the Ollama library's Modelfile, or our own measurement with `agent eval`.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Sequence
from dataclasses import dataclass

from cli.config.settings import ModelProfileConfig


@dataclass(frozen=True)
class Profile:
    """What a model gets. None: the profile says nothing of it (the setting stays)."""

    name: str  # the entry that matched: a built-in family, or a `models:` glob
    tool_mode: str | None = None  # auto | native | prompt
    temperature: float | None = None
    think: bool | str | None = None
    tool_set: str | None = None  # full | compact
    num_ctx: int | None = None  # the least num_ctx asked for
    user: bool = False  # the first entry that matched is the user's (`models:`)


@dataclass(frozen=True)
class Entry:
    """One row of the table: the names it matches (globs, case ignored, of the model's name
    without a registry path), the sizes it takes, and its profile."""

    names: tuple[str, ...]
    profile: Profile
    size: str = ""  # "<4B": see size_bound
    basis: str = ""  # where the values come from


def _entry(
    family: str,
    names: tuple[str, ...],
    *,
    size: str = "",
    tool_mode: str,
    temperature: float,
    think: bool | str,
    tool_set: str,
    num_ctx: int,
    basis: str,
) -> Entry:
    profile = Profile(family, tool_mode, temperature, think, tool_set, num_ctx)
    return Entry(names, profile, size, basis)


# First match wins: a family's small sizes before its other sizes, a coder or a variant
# before its family. `basis` says where each row's values come from; docs/eval.md prints
# the table. A sampling value no maker published is the agent's own default (0.7). The
# compact tool set goes to models under about 4B parameters, whose whole context the 1.5k
# tokens of the full set's descriptions would crowd, and to SmolLM2 as measured.
BUILT_IN: tuple[Entry, ...] = (
    _entry(
        "smollm2",
        ("smollm2*", "smollm-2*"),
        tool_mode="prompt",
        temperature=0.2,
        think=False,
        tool_set="compact",
        num_ctx=8192,
        basis="SmolLM2 model card: temperature 0.2, top_p 0.9; 8k context; prompt mode: its "
        "own template has no tools, and only so (with constrained) does it call one "
        "(agent eval, docs/eval.md; no more tasks passed); compact: a third of the tokens",
    ),
    _entry(
        "qwen3-coder",
        ("qwen3-coder*",),
        tool_mode="native",
        temperature=0.7,
        think=False,
        tool_set="full",
        num_ctx=16384,
        basis="Qwen3-Coder model card: temperature 0.7, top_p 0.8, top_k 20; no thinking",
    ),
    _entry(
        "qwen3-small",
        ("qwen3", "qwen3:*", "qwen3-*", "qwen3_*"),
        size="<4B",
        tool_mode="native",
        temperature=0.7,
        think=False,
        tool_set="compact",
        num_ctx=8192,
        basis="Qwen3 quickstart: non-thinking temperature 0.7, top_p 0.8, top_k 20 (never "
        "greedy); compact below 4B",
    ),
    _entry(
        "qwen3",
        ("qwen3", "qwen3:*", "qwen3-*", "qwen3_*"),
        tool_mode="native",
        temperature=0.7,
        think=False,
        tool_set="full",
        num_ctx=8192,
        basis="Qwen3 quickstart: non-thinking temperature 0.7, top_p 0.8, top_k 20 (thinking: "
        "0.6, 0.95); never greedy",
    ),
    _entry(
        "qwen2.5-coder-small",
        ("qwen2.5-coder*",),
        size="<4B",
        tool_mode="native",
        temperature=0.7,
        think=False,
        tool_set="compact",
        num_ctx=8192,
        basis="Qwen2.5-Coder generation_config: temperature 0.7, top_p 0.8; compact below 4B",
    ),
    _entry(
        "qwen2.5-coder",
        ("qwen2.5-coder*",),
        tool_mode="native",
        temperature=0.7,
        think=False,
        tool_set="full",
        num_ctx=8192,
        basis="Qwen2.5-Coder generation_config: temperature 0.7, top_p 0.8 (it often writes "
        "its calls as bare JSON: ollama#12174, read back as calls)",
    ),
    _entry(
        "llama3-small",
        ("llama3.[123]*", "llama-3.[123]*", "meta-llama-3.[123]*"),
        size="<4B",
        tool_mode="native",
        temperature=0.6,
        think=False,
        tool_set="compact",
        num_ctx=8192,
        basis="Meta's reference generation: temperature 0.6, top_p 0.9; compact for 1B and 3B",
    ),
    _entry(
        "llama3",
        ("llama3.[123]*", "llama-3.[123]*", "meta-llama-3.[123]*"),
        tool_mode="native",
        temperature=0.6,
        think=False,
        tool_set="full",
        num_ctx=8192,
        basis="Meta's reference generation: temperature 0.6, top_p 0.9",
    ),
    _entry(
        "mistral-small",
        ("mistral-small*",),
        tool_mode="native",
        temperature=0.15,
        think=False,
        tool_set="full",
        num_ctx=8192,
        basis="Mistral Small 3.x model card: temperature 0.15",
    ),
    _entry(
        "mistral-nemo",
        ("mistral-nemo*",),
        tool_mode="native",
        temperature=0.3,
        think=False,
        tool_set="full",
        num_ctx=8192,
        basis="Mistral NeMo model card: temperature 0.3, lower than earlier Mistral models",
    ),
    _entry(
        "mistral",
        ("mistral", "mistral:*", "mistral-7b*"),
        tool_mode="native",
        temperature=0.7,
        think=False,
        tool_set="full",
        num_ctx=8192,
        basis="Mistral 7B v0.3 (tools in Ollama from v0.3): no sampling published; the "
        "agent's default",
    ),
    _entry(
        "gemma3-small",
        ("gemma3*", "gemma-3*"),
        size="<2B",
        tool_mode="prompt",
        temperature=1.0,
        think=False,
        tool_set="compact",
        num_ctx=8192,
        basis="Gemma 3: temperature 1.0, top_k 64, top_p 0.95; no tool support (Ollama "
        "answers 400 to `tools`), prompt mode; compact for 270M and 1B",
    ),
    _entry(
        "gemma3",
        ("gemma3*", "gemma-3*"),
        tool_mode="prompt",
        temperature=1.0,
        think=False,
        tool_set="full",
        num_ctx=8192,
        basis="Gemma 3: temperature 1.0, top_k 64, top_p 0.95; no tool support (its template "
        "leaves out tool messages: agent.aids user_results), prompt mode",
    ),
    _entry(
        "gpt-oss",
        ("gpt-oss*", "gpt_oss*"),
        tool_mode="native",
        temperature=1.0,
        think=False,
        tool_set="full",
        num_ctx=16384,
        basis="gpt-oss README: temperature 1.0, top_p 1.0; it reasons at medium whatever a "
        "boolean says (--think-level for another level); harmony prompts are long",
    ),
    _entry(
        "deepseek-r1",
        ("deepseek-r1*",),
        tool_mode="native",
        temperature=0.6,
        think=False,
        tool_set="full",
        num_ctx=16384,
        basis="DeepSeek-R1 README: temperature 0.6 (0.5-0.7), top_p 0.95; it reasons anyway "
        "(--think shows it)",
    ),
    _entry(
        "phi4-mini",
        ("phi4-mini*", "phi-4-mini*"),
        tool_mode="native",
        temperature=0.7,
        think=False,
        tool_set="compact",
        num_ctx=8192,
        basis="Phi-4-mini (3.8B, tools in Ollama; unreliable with them: ollama#10981): no "
        "sampling published; compact below 4B",
    ),
    _entry(
        "phi4",
        ("phi4*", "phi-4*"),
        tool_mode="prompt",
        temperature=0.7,
        think=False,
        tool_set="full",
        num_ctx=8192,
        basis="Phi-4 (14B): not trained for tool use, no tools in Ollama (ollama#9647), prompt "
        "mode; no sampling published",
    ),
)


def profile_for(
    model: str, parameter_size: str | None, user: Sequence[ModelProfileConfig] = ()
) -> Profile | None:
    """The profile of `model` (as the server names it; `parameter_size` as it reports it,
    "8.2B"), or None when no entry matches: the user's entries first, then the built-in
    ones; each key from the first matching entry that sets it."""
    name = bare_name(model)
    size = parameters(model, parameter_size)
    found: list[Profile] = []
    for entry in user:
        if _matches(name, (entry.match,), entry.size, size):
            found.append(
                Profile(
                    entry.match,
                    entry.tool_mode or None,
                    entry.temperature,
                    entry.think,
                    entry.tool_set or None,
                    entry.num_ctx,
                    user=True,
                )
            )
    built_in = next((e.profile for e in BUILT_IN if _matches(name, e.names, e.size, size)), None)
    if built_in is not None:
        found.append(built_in)
    if not found:
        return None
    first = found[0]
    return Profile(
        first.name,
        next((p.tool_mode for p in found if p.tool_mode is not None), None),
        next((p.temperature for p in found if p.temperature is not None), None),
        next((p.think for p in found if p.think is not None), None),
        next((p.tool_set for p in found if p.tool_set is not None), None),
        next((p.num_ctx for p in found if p.num_ctx is not None), None),
        user=first.user,
    )


def tool_mode_setting(setting: str, profile: Profile | None, supports_tools: bool) -> str:
    """agent.tool_mode as a model's profile sets it (the caller passes no profile when the
    user set the mode, or the aid is off). A profile's "native" never turns the tools off:
    a model the server says has no tool support gets them in the prompt, as under auto."""
    if profile is None or not profile.tool_mode:
        return setting
    if profile.tool_mode == "native" and not supports_tools:
        return "auto"
    return profile.tool_mode


def bare_name(model: str) -> str:
    """The model's name without a registry or file path, lowercase: `hf.co/Qwen/Qwen3-8B-GGUF:
    Q4_K_M` is `qwen3-8b-gguf:q4_k_m`, `/models/SmolLM2-135M.gguf` is `smollm2-135m.gguf`."""
    return model.strip().replace("\\", "/").rsplit("/", 1)[-1].casefold()


_SIZE_IN_NAME = re.compile(r"(?<![a-z0-9.])(\d+(?:\.\d+)?)\s*([mb])(?![a-z])", re.IGNORECASE)
_SIZE_TEXT = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([mbk])?\s*", re.IGNORECASE)
_UNITS = {"k": 1e3, "m": 1e6, "b": 1e9}


def parameters(model: str, parameter_size: str | None) -> float | None:
    """The model's parameter count: what the server reports ("8.2B", "134.52M"), else what
    its name says (`qwen3:1.7b`, `SmolLM2-135M-Instruct`, `llama3.2:3b`); None if neither."""
    if parameter_size:
        match = _SIZE_TEXT.fullmatch(parameter_size)
        if match and match.group(2):
            return float(match.group(1)) * _UNITS[match.group(2).lower()]
    found = _SIZE_IN_NAME.search(bare_name(model).replace("_", "-"))
    if found:
        return float(found.group(1)) * _UNITS[found.group(2).lower()]
    return None


_BOUND = re.compile(r"\s*(<=|>=|<|>)\s*(\d+(?:\.\d+)?)\s*([mb])\s*", re.IGNORECASE)


def size_bound(text: str) -> tuple[str, float] | None:
    """`<4B` as ("<", 4e9); None when it is not a bound."""
    match = _BOUND.fullmatch(text)
    if match is None:
        return None
    return match.group(1), float(match.group(2)) * _UNITS[match.group(3).lower()]


def _matches(name: str, globs: Sequence[str], size_text: str, size: float | None) -> bool:
    if not any(fnmatch.fnmatchcase(name, glob.casefold()) for glob in globs):
        return False
    if not size_text:
        return True
    bound = size_bound(size_text)
    if bound is None or size is None:
        return False  # a size bound says nothing of a model of unknown size: not matched
    op, limit = bound
    return {"<": size < limit, "<=": size <= limit, ">": size > limit, ">=": size >= limit}[op]
