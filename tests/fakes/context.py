"""The user's own words in a request: the first user message each request holds is led by
the context block (cli/loop/prompt.py, `context_block`), which tests that look at what the
user typed leave aside."""

from __future__ import annotations

import re
from typing import Any

_BLOCK = re.compile(r"\A<context>\n.*?\n</context>\n\n", re.DOTALL)


def typed(content: Any) -> Any:
    """`content` without a leading context block (anything else as it is)."""
    return _BLOCK.sub("", content, count=1) if isinstance(content, str) else content


# Two time zones 26 hours apart: the same instant is on two different dates, so two runs
# made one in each are on two days (a fixed clock, without a seam in the agent).
BEHIND, AHEAD = "Etc/GMT+12", "Etc/GMT-14"


def first_user_text(body: dict[str, Any]) -> str:
    """The text of a chat request's first user message (Ollama's string, or the first text
    part of an OpenAI-compatible message)."""
    first = next(m for m in body["messages"] if m["role"] == "user")
    content = first["content"]
    return content if isinstance(content, str) else str(content[0]["text"])


def block_of(content: str) -> str:
    """The context block leading `content` ("" when none does)."""
    found = _BLOCK.match(content)
    return found.group(0) if found else ""
