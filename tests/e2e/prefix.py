"""The prompt's prefix across runs, as the real server counts it: `agent run` in one project,
then in another directory, in another project with an AGENTS.md, and in that project on
another day (the runs' time zones 26 hours apart, so their dates differ). For each later run,
the prompt tokens the server's log says its first request evaluated, against the tokens of
that request's first user message (the context block and the user's words, with the
template's markers), counted in the model's own tokenizer (tests/e2e/prompt_tokens.py).

A server that reuses the longest common prefix (llama-cpp-python, as llama.cpp) then
evaluates that message and not the system prompt and tool definitions before it: the check
allows the message and a few tokens more (where the prefix ends inside a token, and the
generation prompt).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import server_work  # puts the repository on sys.path: tests.fakes
import tasks

from tests.fakes.context import AHEAD, BEHIND

SLACK = 8  # tokens beyond the first user message: the generation prompt, a split token
PROMPT = "what is in notes.txt?"
# (case, directory, AGENTS.md text or "", time zone)
RUNS = (
    ("first run", "prefix-a", "", BEHIND),
    ("another directory", "prefix-b", "", BEHIND),
    ("another project with an AGENTS.md", "prefix-c", "Answer in one sentence.\n", BEHIND),
    ("the same project on another day", "prefix-c", "", AHEAD),
)


def run(url: str, root: Path, recorder: Any, log_path: Path) -> tuple[bool, list[str]]:
    """Runs the four; returns whether every later run met the bound, and lines to print."""
    recorder.take()
    measured: list[tuple[str, list[dict[str, Any]], int, int]] = []
    for case, name, agents_md, tz in RUNS:
        ws = root / name
        if not ws.exists():
            ws = tasks.workspace(root, name)
            (ws / ".git").mkdir()
        if agents_md:
            (ws / "AGENTS.md").write_text(agents_md)
        start = log_path.stat().st_size
        code, _, stderr = tasks.run_agent(url, root, ws, PROMPT, "--max-steps", "1", env={"TZ": tz})
        if code not in (0, 3):
            return False, [f"prefix: {case}: agent run exited {code}: {stderr[-300:]}"]
        measured.append((case, recorder.take(), start, log_path.stat().st_size))
    log = log_path.read_bytes().decode("latin-1")
    lines, ok = [], True
    for case, bodies, start, end in measured[1:]:
        if not bodies:
            return False, [f"prefix: {case}: no chat request was recorded"]
        (counted,) = server_work.count(bodies[:1])
        evaluated = server_work.prompt_evaluated(log[start:end])
        if not evaluated:
            return False, [f"prefix: {case}: the server log shows no prompt evaluation"]
        first = evaluated[0]
        message = _first_user_tokens(bodies[0], counted)
        met = first <= message + SLACK
        ok = ok and met
        lines.append(
            f"prefix: {case}: the first request evaluated {first:,} of its "
            f"{counted['tokens']:,} prompt tokens (its first user message, the context block "
            f"and the question: {message:,}): {'met' if met else 'NOT met'}"
        )
    return ok, lines


def _first_user_tokens(body: dict[str, Any], counted: dict[str, Any]) -> int:
    """The tokens of the request's first user message, as prompt_tokens.py counted them."""
    roles = [m.get("role") for m in body.get("messages") or []]
    index = roles.index("user")
    return int(counted["blocks"][index][1])
