"""Rendering cost per streamed chunk in `agent chat`: it must not grow with the answer.

The chat renderer is timed on a short answer and on a long one (prose, lists and a long
code block) with a terminal-like console writing to memory; the ratio of the two per-chunk
costs should be about 1. The naive way (a Live display re-rendering the whole Markdown at
every chunk) is measured in the same run for comparison.
"""

from __future__ import annotations

import io
import random
import statistics
import time
from collections.abc import Callable

from rich.console import Console
from rich.live import Live
from rich.markdown import Markdown

from cli.backends.messages import Stats
from cli.loop.events import ContentDelta, StepFinished
from cli.ui.render import ChatRenderer

SHORT_CHUNKS = 200
LONG_CHUNKS = 5000
RATIO_LIMIT = 3.0  # generous: the aim is ~1.0, a growing cost shows up as 10x and more
REPEATS = {SHORT_CHUNKS: 15, LONG_CHUNKS: 3}
NAIVE_SAMPLES = 60  # chunks timed across the long answer: all 5,000 would take minutes

_PHRASE = (
    "the agent reads a file then asks the model what to change and writes the result "
    "back under the policy which checks every path before anything is touched"
)
_WORDS = _PHRASE.split(" ")


def _prose(rng: random.Random, words: int) -> str:
    text = " ".join(rng.choice(_WORDS) for _ in range(words))
    return text.capitalize().replace(" model ", " **model** ").replace(" file ", " `file` ") + "."


def _code(rng: random.Random, lines: int) -> str:
    body = [
        f"    total += compute_{n}(items[{n}], factor={rng.randint(1, 9)})  # step {n}"
        for n in range(lines)
    ]
    return "```python\ndef run(items):\n    total = 0\n" + "\n".join(body) + "\n```"


def _section(rng: random.Random, number: int, code_lines: int) -> str:
    items = "\n".join(f"- item {n}: {_prose(rng, 8)}" for n in range(5))
    return (
        f"## Part {number}\n\n{_prose(rng, 60)}\n\n{items}\n\n{_code(rng, code_lines)}\n\n"
        f"{_prose(rng, 30)}\n\n"
    )


def answer(chunks: int, seed: int = 1) -> list[str]:
    """An answer of about `chunks` pieces of 1 to 6 characters (a token is ~3.5)."""
    rng = random.Random(seed)
    text = ""
    number = 0
    while len(text) < chunks * 3.5:
        number += 1
        # Every fourth part of a long answer carries a long code block.
        text += _section(rng, number, 80 if number % 4 == 0 else 4)
    pieces: list[str] = []
    at = 0
    while at < len(text) and len(pieces) < chunks:
        size = rng.randint(1, 6)
        pieces.append(text[at : at + size])
        at += size
    return pieces


def _terminal() -> Console:
    return Console(
        file=io.StringIO(), width=100, height=40, force_terminal=True, color_system="truecolor"
    )


def renderer_cost(pieces: list[str], repeats: int) -> float:
    """Seconds per chunk through ChatRenderer, the end of the step included."""
    runs = []
    for _ in range(repeats):
        renderer = ChatRenderer(_terminal(), cwd="/")
        started = time.perf_counter()
        for piece in pieces:
            renderer.handle(ContentDelta(piece))
        renderer.handle(StepFinished(1, Stats(), 0, "stop"))
        runs.append((time.perf_counter() - started) / len(pieces))
    return statistics.median(runs)


def naive_cost(pieces: list[str], samples: int) -> float:
    """Seconds per chunk for Live(Markdown(everything so far)), timed at `samples` chunks
    spread evenly over the answer: their mean estimates the mean over every chunk."""
    step = max(1, len(pieces) // samples)
    console = _terminal()
    timings = []
    text = ""
    with Live(console=console, auto_refresh=False, transient=True, redirect_stdout=False) as live:
        for index, piece in enumerate(pieces):
            text += piece
            if index % step == step - 1:
                started = time.perf_counter()
                live.update(Markdown(text), refresh=True)
                timings.append(time.perf_counter() - started)
    return statistics.mean(timings)


def run(say: Callable[[str], None] = print) -> bool:
    """Prints the costs; False when the long answer costs too much more per chunk."""
    short, long = answer(SHORT_CHUNKS), answer(LONG_CHUNKS)
    ours_short = renderer_cost(short, REPEATS[SHORT_CHUNKS])
    ours_long = renderer_cost(long, REPEATS[LONG_CHUNKS])
    naive_short = naive_cost(short, SHORT_CHUNKS)
    naive_long = naive_cost(long, NAIVE_SAMPLES)
    ratio = ours_long / ours_short
    say("render: cost per streamed chunk, terminal console 100x40 writing to memory")
    say(_row("ChatRenderer", ours_short, ours_long))
    say(_row("naive Live(Markdown(all))", naive_short, naive_long))
    verdict = "ok" if ratio <= RATIO_LIMIT else "FAIL"
    say(f"  ChatRenderer long/short = {ratio:.2f} (limit {RATIO_LIMIT}): {verdict}")
    return ratio <= RATIO_LIMIT


def _row(name: str, short: float, long: float) -> str:
    return (
        f"  {name:<26} short ({SHORT_CHUNKS}) {short * 1e3:7.3f} ms/chunk   "
        f"long ({LONG_CHUNKS}) {long * 1e3:7.3f} ms/chunk   long/short {long / short:6.2f}"
    )
