"""The pass rates and their Wilson intervals, against values computed by hand, and the summary
by category."""

from __future__ import annotations

import math

import pytest

from cli.evals.results import TaskRun, summary, wilson


@pytest.mark.parametrize(
    ("passed", "total", "low", "high"),
    [
        (0, 10, 0.0, 0.2775),  # no success seen is not a rate of exactly 0
        (10, 10, 0.7225, 1.0),
        (5, 10, 0.2366, 0.7634),
        (1, 2, 0.0945, 0.9055),
        (31, 44, 0.5578, 0.8185),
        (0, 1, 0.0, 0.7935),
    ],
)
def test_wilson_interval(passed: int, total: int, low: float, high: float) -> None:
    got = wilson(passed, total)
    assert got[0] == pytest.approx(low, abs=5e-4) and got[1] == pytest.approx(high, abs=5e-4)


def test_wilson_is_inside_zero_one_and_holds_the_rate() -> None:
    for total in range(1, 60):
        for passed in range(total + 1):
            low, high = wilson(passed, total)
            assert 0.0 <= low <= passed / total <= high <= 1.0
            assert not math.isnan(low) and not math.isnan(high)
    assert wilson(0, 0) == (0.0, 1.0)  # nothing run: nothing known


def test_summary_by_category() -> None:
    runs = [
        TaskRun("a", "read", passed=True),
        TaskRun("b", "read", passed=False),
        TaskRun("c", "edit", passed=True),
    ]
    found = summary(runs)
    assert (found["passed"], found["total"], found["rate"]) == (2, 3, 0.6667)
    assert found["by_category"]["read"]["passed"] == 1
    assert found["by_category"]["read"]["total"] == 2
    assert found["by_category"]["edit"] == {
        "passed": 1,
        "total": 1,
        "rate": 1.0,
        "ci_low": 0.2065,
        "ci_high": 1.0,
    }
