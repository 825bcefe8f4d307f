"""Model profiles: which profile a model's name and size get, the user's `models:` entries
before the built-in table, the config's checks of them, and docs/eval.md's table, which must
be the built-in one."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cli.config.loading import parse_config
from cli.config.profiles import BUILT_IN, parameters, profile_for, size_bound
from cli.config.settings import ModelProfileConfig
from cli.errors import ConfigError

DOC = Path(__file__).resolve().parents[2] / "docs" / "eval.md"


@pytest.mark.parametrize(
    ("model", "size", "profile", "tool_set"),
    [
        ("qwen3:8b", "8.2B", "qwen3", "full"),
        ("qwen3:1.7b", None, "qwen3-small", "compact"),
        ("qwen3:0.6b", "751.63M", "qwen3-small", "compact"),
        ("qwen3", None, "qwen3", "full"),  # no size known: not the small row
        ("qwen3-coder:30b", None, "qwen3-coder", "full"),
        ("hf.co/Qwen/Qwen3-8B-GGUF:Q4_K_M", None, "qwen3", "full"),
        ("smollm2:135m", "134.52M", "smollm2", "compact"),
        ("/models/SmolLM2-135M-Instruct.Q4_1.gguf", None, "smollm2", "compact"),
        ("llama3.2:3b", "3.2B", "llama3-small", "compact"),
        ("llama3.1:8b", "8.0B", "llama3", "full"),
        ("Meta-Llama-3.1-8B-Instruct", None, "llama3", "full"),
        ("gemma3:1b", "999.89M", "gemma3-small", "compact"),
        ("gemma3:27b", "27.4B", "gemma3", "full"),
        ("gpt-oss:20b", "20.9B", "gpt-oss", "full"),
        ("mistral-small3.2:24b", None, "mistral-small", "full"),
        ("mistral:7b", None, "mistral", "full"),
        ("phi4-mini:3.8b", None, "phi4-mini", "compact"),
        ("phi4:14b", None, "phi4", "full"),
        ("deepseek-r1:8b", None, "deepseek-r1", "full"),
    ],
)
def test_the_table(model: str, size: str | None, profile: str, tool_set: str) -> None:
    found = profile_for(model, size)
    assert found is not None and (found.name, found.tool_set) == (profile, tool_set)
    assert not found.user


@pytest.mark.parametrize("model", ["oracle", "granite3.3:8b", "my-finetune", "mistralai-x", ""])
def test_other_models_get_none(model: str) -> None:
    assert profile_for(model, None) is None


def test_sizes() -> None:
    assert parameters("x", "8.2B") == pytest.approx(8.2e9)
    assert parameters("x", "134.52M") == pytest.approx(134.52e6)
    assert parameters("qwen3:1.7b", None) == pytest.approx(1.7e9)
    assert parameters("SmolLM2-135M-Instruct", None) == pytest.approx(135e6)
    assert parameters("qwen3:30b-a3b", None) == 30e9  # the first size the name gives
    assert parameters("gemma3", None) is None and parameters("x", "unknown") is None
    assert size_bound("<4B") == ("<", 4e9) and size_bound(" >= 135m ") == (">=", 135e6)
    assert size_bound("4B") is None and size_bound("<4") is None and size_bound("<4GB") is None


def test_the_user_s_entries_come_first_and_fall_through_key_by_key() -> None:
    user = [
        ModelProfileConfig(match="qwen3:*", size="<=9B", temperature=0.3),
        ModelProfileConfig(match="*", tool_set="compact"),
    ]
    found = profile_for("qwen3:8b", "8.2B", user)
    assert found is not None and found.user
    assert (found.name, found.temperature, found.tool_set, found.tool_mode, found.num_ctx) == (
        "qwen3:*",
        0.3,
        "compact",  # the second entry of the user's
        "native",  # the built-in qwen3 row
        8192,
    )
    assert profile_for("granite3.3:8b", None, user).tool_set == "compact"  # type: ignore[union-attr]
    assert profile_for("qwen3:32b", "32.8B", user[:1]).temperature == 0.7  # type: ignore[union-attr]


def test_models_in_the_config() -> None:
    config = parse_config(
        "models:\n  - match: 'llama*'\n    size: '<4B'\n    temperature: 0\n    think: low\n",
        "c.yaml",
    )
    assert config.models == [
        ModelProfileConfig(match="llama*", size="<4B", temperature=0.0, think="low")
    ]


@pytest.mark.parametrize(
    ("yaml", "words"),
    [
        ("models: {match: x}\n", "models: expected a list of model entries"),
        ("models: [x]\n", "entry 1: expected a mapping"),
        ("models: [{size: '<4B'}]\n", "entry 1: `match` (a glob of model names) is required"),
        ("models: [{match: x, colour: red}]\n", "entry 1: unknown key 'colour'; known: match"),
        ("models: [{match: x, size: big}]\n", "entry 1: size 'big': expected <N, <=N"),
        ("models: [{match: x, temperature: 3}]\n", "entry 1: temperature: expected a number"),
        ("models: [{match: x, tool_mode: magic}]\n", "entry 1: tool_mode: expected one of"),
        ("models: [{match: x, num_ctx: 100}]\n", "entry 1: num_ctx: expected a whole number"),
        ("models: [{match: x, tool_set: tiny}]\n", "entry 1: tool_set: expected full or compact"),
        ("agent: {aids: [turbo]}\n", "agent.aids: unknown aid 'turbo'; the aids are: repair,"),
        ("agent: {aids: 3}\n", "agent.aids: expected on, off or a list of aids"),
        ("agent: {tool_set: tiny}\n", "agent.tool_set: expected one of auto, full, compact"),
    ],
)
def test_a_bad_entry_is_one_line(yaml: str, words: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(yaml, "c.yaml")
    assert words in caught.value.message and "c.yaml, line 1" in caught.value.message


@pytest.mark.parametrize(("text", "value"), [("on", True), ("off", False), ("'on'", True)])
def test_aids_on_and_off(text: str, value: bool) -> None:
    assert parse_config(f"agent: {{aids: {text}}}\n", "c.yaml").agent.aids is value


def test_docs_eval_table_is_the_built_in_table() -> None:
    text = DOC.read_text(encoding="utf-8")
    table = text.split("<!-- BEGIN profiles")[1].split("<!-- END profiles -->")[0]
    rows = [line for line in table.splitlines() if line.startswith("| ") and "---" not in line]
    assert len(rows) == len(BUILT_IN) + 1  # and its header
    for row, entry in zip(rows[1:], BUILT_IN, strict=True):
        cells = [c.strip() for c in row.strip("|").split("|")]
        p = entry.profile
        names = ", ".join(f"`{n}`" for n in entry.names)
        think = str(p.think).lower()
        expected = [p.name, names, entry.size, p.tool_mode, str(p.temperature), think]
        expected += [p.tool_set, str(p.num_ctx), entry.basis]
        assert cells == expected, entry.profile.name
    assert not re.search(r"\| qwen3 \|.*\| true \|", table)
