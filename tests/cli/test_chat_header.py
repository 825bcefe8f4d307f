"""The chat's header line (cli/commands/chat.py header_lines): at any width it breaks only
between its parts, so `confirm: write-only` is never cut from its mode."""

from __future__ import annotations

import pytest
from rich.text import Text

from cli.commands.chat import header_lines

PARTS = [
    "metona-agent",
    "qwen3:8b",
    "http://127.0.0.1:11434",
    "/home/me/code/project",
    "plan",
    "tools on",
    "confirm: write-only",
    "think off",
    "/help",
]


@pytest.mark.parametrize("width", [27, 30, 40, 41, 50, 60, 80, 120, 200])
def test_the_header_breaks_between_parts_only(width: int) -> None:
    lines = [line.plain for line in header_lines([Text(p) for p in PARTS], width)]
    assert all(len(line) <= width for line in lines), lines
    assert " ".join(lines).replace(" · ", "\0").replace(" ·", "\0").split("\0") == PARTS
    assert any("confirm: write-only" in line for line in lines)
    if width >= len(" · ".join(PARTS)):
        assert len(lines) == 1


def test_a_part_as_wide_as_the_line_takes_the_separator_to_the_next() -> None:
    """`confirm: write-only` fills 20 columns: its ` ·` would wrap onto a row of its own."""
    lines = [line.plain for line in header_lines([Text(p) for p in PARTS[5:]], 20)]
    assert lines == ["tools on ·", "confirm: write-only", "· think off · /help"]


def test_a_part_wider_than_the_line_has_a_line_of_its_own() -> None:
    long = "/home/me/" + "x" * 60
    lines = [line.plain for line in header_lines([Text("a"), Text(long), Text("b")], 40)]
    assert lines == ["a ·", long, "· b"]  # its ` ·` would wrap alone: it starts the next
