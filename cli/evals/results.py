"""What `agent eval` found: one record a run of a task, the pass rates with their Wilson 95%
intervals overall and by category, the results as JSON (docs/eval.md has the schema), and
the comparison of two results files (pure).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cli.errors import ConfigError

VERSION = 1  # of the results' JSON: a new field keeps it, a changed meaning raises it
Z95 = 1.959963984540054  # the normal quantile of a two-sided 95% interval


@dataclass
class CallCounts:
    """A run's tool calls: every call is valid or invalid (it broke the schema, named no
    tool the agent has, or gave a path that cannot be one); `repaired` are the valid ones
    that were mended first (agent.aids: repair), `refused` the valid ones the policy, the
    repeat guard or nobody-to-ask did not let run, a tool of ours not offered included."""

    valid: int = 0
    invalid: int = 0
    repaired: int = 0
    refused: int = 0
    failed: int = 0  # valid, ran, and failed (a missing file, an edit that found nothing)

    def to_json(self) -> dict[str, int]:
        return {
            "valid": self.valid,
            "invalid": self.invalid,
            "repaired": self.repaired,
            "refused": self.refused,
            "failed": self.failed,
        }


@dataclass
class TaskRun:
    """One run of one task."""

    id: str
    category: str
    passed: bool = False
    failed_checks: list[str] = field(default_factory=list)
    stop_reason: str = ""  # the loop's (answer, max_steps, repeating, …), or error
    steps: int = 0
    tool_calls: CallCounts = field(default_factory=CallCounts)
    prompt_eval_tokens: int = 0  # as the server reported them, every model call summed
    wall_time: float = 0.0
    error: str | None = None  # why the run failed, when it did (the server, the loop)
    answer: str = ""
    # Each call as it went: tool, outcome (cli/loop/outcomes.py), and the error it got.
    calls: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "id": self.id,
            "category": self.category,
            "passed": self.passed,
            "failed_checks": list(self.failed_checks),
            "stop_reason": self.stop_reason,
            "steps": self.steps,
            "tool_calls": self.tool_calls.to_json(),
            "prompt_eval_tokens": self.prompt_eval_tokens,
            "wall_time": round(self.wall_time, 3),
            "answer": self.answer,
            "calls": list(self.calls),
        }
        if self.error is not None:
            data["error"] = self.error
        return data


@dataclass(frozen=True)
class Rate:
    passed: int
    total: int

    @property
    def rate(self) -> float:
        return self.passed / self.total if self.total else 0.0

    @property
    def interval(self) -> tuple[float, float]:
        return wilson(self.passed, self.total)

    def to_json(self) -> dict[str, Any]:
        low, high = self.interval
        return {
            "passed": self.passed,
            "total": self.total,
            "rate": round(self.rate, 4),
            "ci_low": round(low, 4),
            "ci_high": round(high, 4),
        }


def wilson(passed: int, total: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of a pass rate: honest at 0 and at n out of n, and for
    the few dozen runs an eval makes, where the normal approximation is not."""
    if total <= 0:
        return 0.0, 1.0
    p = passed / total
    denominator = 1 + z * z / total
    centre = (p + z * z / (2 * total)) / denominator
    margin = z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total)) / denominator
    low = 0.0 if passed == 0 else max(0.0, centre - margin)  # exact at the ends, not 1e-17
    high = 1.0 if passed == total else min(1.0, centre + margin)
    return low, high


def summary(runs: Sequence[TaskRun]) -> dict[str, Any]:
    """`summary`: passed, total, rate, ci_low, ci_high, and the same by_category."""
    categories: dict[str, list[TaskRun]] = {}
    for run in runs:
        categories.setdefault(run.category, []).append(run)
    whole = Rate(sum(r.passed for r in runs), len(runs)).to_json()
    whole["by_category"] = {
        name: Rate(sum(r.passed for r in group), len(group)).to_json()
        for name, group in categories.items()
    }
    return whole


def results_json(
    runs: Sequence[TaskRun], *, model: str, aids: Sequence[str], meta: Mapping[str, Any]
) -> dict[str, Any]:
    """The results as `--output-format json` prints them (docs/eval.md, Results)."""
    from cli import __version__

    return {
        "version": VERSION,
        "agent_version": __version__,
        "model": model,
        "aids": list(aids),
        **meta,
        "tasks": [run.to_json() for run in runs],
        "summary": summary(runs),
    }


# -- --compare ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Results:
    """A results file as `--compare` reads it back."""

    source: str
    model: str
    aids: tuple[str, ...]
    runs: tuple[tuple[str, str, bool], ...]  # id, category, passed: one a run


def read_results(path: str) -> Results:
    """A results file written by `agent eval --output-format json` (untrusted: checked)."""
    from cli.fs.stored import Unreadable, read_capped

    try:
        data = json.loads(read_capped(Path(path).expanduser(), 64 * 1024 * 1024))
    except RuntimeError:  # ~nosuchuser
        raise ConfigError(f"--compare {path}: no such user's home dir") from None
    except Unreadable as exc:
        raise ConfigError(f"--compare {path}: {exc}") from None
    except FileNotFoundError:
        raise ConfigError(f"--compare {path}: no such file") from None
    except (OSError, ValueError, RecursionError) as exc:
        raise ConfigError(f"--compare {path}: not a results file ({exc})") from None
    tasks = data.get("tasks") if isinstance(data, dict) else None
    version = data.get("version") if isinstance(data, dict) else None
    if not isinstance(tasks, list) or type(version) is not int or version != VERSION:
        raise ConfigError(
            f"--compare {path}: not a results file of version {VERSION} "
            "(agent eval --output-format json writes one)"
        )
    runs = []
    for task in tasks:
        ok = isinstance(task, dict) and isinstance(task.get("id"), str) and task["id"]
        category = task.get("category") if isinstance(task, dict) else None
        if not ok or not isinstance(task.get("passed"), bool):
            raise ConfigError(f"--compare {path}: a task without an id or `passed`")
        if not isinstance(category, str) or not category.strip():
            raise ConfigError(f"--compare {path}: task {task['id']!r} has no category")
        runs.append((task["id"], category, task["passed"]))
    model, aids = data.get("model"), data.get("aids")
    if not isinstance(model, str) or not (
        isinstance(aids, list) and all(isinstance(a, str) for a in aids)
    ):
        raise ConfigError(
            f"--compare {path}: `model` must be a string and `aids` a list of names "
            "(agent eval --output-format json writes them)"
        )
    return Results(path, model, tuple(aids), tuple(runs))


def compare(a: Results, b: Results) -> dict[str, Any]:
    """Two results side by side: each one's rates (overall and by category), and the tasks
    whose pass count differs (of the tasks both ran)."""

    def rates(results: Results) -> dict[str, Any]:
        runs = [TaskRun(task_id, category, passed) for task_id, category, passed in results.runs]
        return {
            "source": results.source,
            "model": results.model,
            "aids": list(results.aids),
            "summary": summary(runs),
        }

    def tally(results: Results) -> dict[str, tuple[int, int]]:
        counts: dict[str, tuple[int, int]] = {}
        for task_id, _category, passed in results.runs:
            done, total = counts.get(task_id, (0, 0))
            counts[task_id] = (done + passed, total + 1)
        return counts

    left, right = tally(a), tally(b)
    changed = [
        {
            "id": task_id,
            "a": f"{left[task_id][0]}/{left[task_id][1]}",
            "b": f"{right[task_id][0]}/{right[task_id][1]}",
        }
        for task_id in left
        if task_id in right
        and left[task_id][0] / left[task_id][1] != right[task_id][0] / right[task_id][1]
    ]
    only = sorted(set(left) ^ set(right))
    return {"a": rates(a), "b": rates(b), "changed": changed, "not_in_both": only}
