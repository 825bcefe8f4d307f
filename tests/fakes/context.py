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


def block_of(content: str) -> str:
    """The context block leading `content` ("" when none does)."""
    found = _BLOCK.match(content)
    return found.group(0) if found else ""
