"""`agent eval`'s output: the progress on stderr, the table and summary on stdout, and the
comparison of two results files. Everything from a task file or a model is sanitised."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, TextIO

from cli.evals.results import TaskRun, summary
from cli.ui.text import sanitize

if TYPE_CHECKING:
    from rich.progress import Progress as RichProgress

    from cli.evals.tasks import Task

HEADER = ("TASK", "CATEGORY", "RESULT", "STEPS", "CALLS", "PROMPT TOKENS", "TIME")


class Progress:
    """A progress bar on a terminal's stderr; elsewhere (a pipe, a CI log) one line a run."""

    def __init__(self, stream: TextIO, total: int) -> None:
        self.stream = stream
        self.total = total
        self.runs: list[TaskRun] = []
        self._bar: RichProgress | None = None
        self._task: Any = None
        self._closed = False

    def __enter__(self) -> Progress:
        if _isatty(self.stream):
            from rich.console import Console

            self._bar = _rich_progress(Console(file=self.stream, highlight=False))
            self._bar.start()
            self._task = self._bar.add_task("eval", total=self.total, passed=0, last="")
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        if self._bar is not None:
            self._bar.stop()

    def done(self, run: TaskRun, index: int, total: int) -> None:
        self.runs.append(run)
        word = "passed" if run.passed else "FAILED"
        if self._bar is not None:
            passed = sum(r.passed for r in self.runs)
            last = f"{sanitize(run.id)} {word}"
            self._bar.update(self._task, completed=index, passed=passed, last=last)
            return
        if self._closed:
            return
        try:
            self.stream.write(
                f"eval {index}/{total}: {sanitize(run.id)} {word} ({run.steps} "
                f"step{'' if run.steps == 1 else 's'}, {run.wall_time:.1f} s)\n"
            )
            self.stream.flush()
        except (OSError, ValueError):  # stderr closed (`2>&1 >out | head -1`): the runs go on
            self._closed = True


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def _rich_progress(console: Any) -> RichProgress:
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        TextColumn,
        TimeElapsedColumn,
    )
    from rich.progress import Progress as RichProgress

    return RichProgress(
        TextColumn("eval"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[passed]} passed"),
        TimeElapsedColumn(),
        TextColumn("{task.fields[last]}"),
        console=console,
        transient=True,
    )


def results_table(runs: Sequence[TaskRun], model: str, aids: Sequence[str]) -> list[str]:
    """The table, a run a row (with its failed checks under it), then the summary."""
    rows = [HEADER, *(_cells(run) for run in runs)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(HEADER))]
    right = {3, 5, 6}  # numbers line up on the right
    lines = []
    for row, run in zip(rows, [None, *runs], strict=True):
        cells = [
            c.rjust(w) if i in right else c.ljust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  ".join(cells).rstrip())
        if run is not None:
            lines += [f"    {sanitize(check)}" for check in run.failed_checks]
    return [*lines, "", *summary_lines(runs, model, aids)]


def summary_lines(runs: Sequence[TaskRun], model: str, aids: Sequence[str]) -> list[str]:
    found = summary(runs)
    used = ", ".join(aids) if aids else "none"
    head = f"{sanitize(model)} · aids: {used} · {_rate(found)}"
    lines = [head]
    categories = found["by_category"]
    width = max((len(name) for name in categories), default=0)
    for name, rate in categories.items():
        lines.append(f"  {sanitize(name).ljust(width)}  {_rate(rate)}")
    return lines


def _rate(rate: Mapping[str, Any]) -> str:
    return (
        f"{rate['passed']} of {rate['total']} passed: {_percent(rate['rate'])} "
        f"(95% interval {_percent(rate['ci_low'])}–{_percent(rate['ci_high'])})"
    )


def _percent(value: float) -> str:
    return f"{round(value * 100)}%"


def _cells(run: TaskRun) -> tuple[str, ...]:
    counts = run.tool_calls
    calls = str(counts.valid + counts.invalid)
    notes = [
        f"{n} {word}"
        for n, word in (
            (counts.invalid, "invalid"),
            (counts.repaired, "mended"),
            (counts.refused, "refused"),
        )
        if n
    ]
    if notes:
        calls += f" ({', '.join(notes)})"
    result = "pass" if run.passed else "FAIL"
    if not run.passed and run.stop_reason and run.stop_reason != "answer":
        result += f" ({run.stop_reason})"
    tokens = _tokens(run.prompt_eval_tokens)
    return (
        sanitize(run.id),
        sanitize(run.category),
        result,
        str(run.steps),
        calls,
        tokens,
        f"{run.wall_time:.1f}s",
    )


def _tokens(count: int) -> str:
    """1234 as 1.2k, 56789 as 57k, 1234567 as 1.2M."""
    for unit, size in (("M", 1_000_000), ("k", 1000)):
        if count >= size:
            value = count / size
            return f"{value:.1f}{unit}" if value < 10 else f"{round(value)}{unit}"
    return str(count)


def comparison_lines(compared: Mapping[str, Any]) -> list[str]:
    """`--compare A B`: each side's rates, then the tasks whose pass count differs."""
    lines = []
    for side in ("a", "b"):
        results = compared[side]
        aids = ", ".join(map(sanitize, results["aids"])) or "none"
        source, model = sanitize(results["source"]), sanitize(results["model"])
        lines.append(f"{side.upper()}: {source} ({model}, aids: {aids})")
        lines.append(f"  {_rate(results['summary'])}")
    categories = dict.fromkeys(
        [*compared["a"]["summary"]["by_category"], *compared["b"]["summary"]["by_category"]]
    )
    if categories:
        lines.append("")
        width = max(len(sanitize(c)) for c in categories)  # measured as shown
        lines.append(f"  {'CATEGORY'.ljust(width)}  A                B")
        for name in categories:
            a = compared["a"]["summary"]["by_category"].get(name)
            b = compared["b"]["summary"]["by_category"].get(name)
            lines.append(f"  {sanitize(name).ljust(width)}  {_short(a):<15}  {_short(b)}")
    if compared["changed"]:
        lines += ["", "tasks that differ (passed/runs):"]
        lines += [f"  {sanitize(c['id'])}: A {c['a']}, B {c['b']}" for c in compared["changed"]]
    else:
        lines += ["", "no task passed a different number of times"]
    if compared["not_in_both"]:
        only = ", ".join(sanitize(i) for i in compared["not_in_both"])
        lines.append(f"run in only one of them: {only}")
    return lines


def _short(rate: Mapping[str, Any] | None) -> str:
    if rate is None:
        return "-"
    return f"{rate['passed']}/{rate['total']} {_percent(rate['rate'])}"


def task_lines(tasks: Sequence[Task]) -> list[str]:
    """`--list`: a task a line."""
    width = max((len(t.id) for t in tasks), default=0)
    cat = max((len(t.category) for t in tasks), default=0)
    return [
        f"{sanitize(t.id).ljust(width)}  {sanitize(t.category).ljust(cat)}  "
        f"{sanitize(' '.join(t.prompt.split()))[:80]}"
        for t in tasks
    ]
