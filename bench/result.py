"""What a figure found: medians of ours and its baseline, their ratio (or, for the loop,
milliseconds per step), the target, the peak RSS of ours, and every sample."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from bench.measure import Sample, median, peak_rss

RSS_LIMIT_MB = 60.0  # every figure's ours, whatever it measures


@dataclass
class Result:
    name: str
    what: str
    target: float  # value ≤ target meets it
    # "x": ours / baseline; "ms": milliseconds per step beyond the baseline; "n": a count
    unit: str = "x"
    # What ours and baseline are: "s", seconds; "x", ratios themselves; "n", counts (tokens)
    shows: str = "s"
    samples: dict[str, list[Sample]] = field(default_factory=dict)
    value: float | None = None
    ours: float | None = None  # medians: seconds (per step for the loop), or see `shows`
    baseline: float | None = None
    rss_mb: float | None = None  # the peak RSS of ours, over its runs
    skipped: str = ""  # why it was not run (ripgrep missing…): not a failure
    error: str = ""  # why it could not be measured: a failure
    detail: dict[str, Any] = field(default_factory=dict)
    group: str = ""  # the table it is shown in: "" the main one, "server work" its own

    @property
    def fast_enough(self) -> bool | None:
        return None if self.value is None else self.value <= self.target

    @property
    def small_enough(self) -> bool | None:
        return None if self.rss_mb is None else self.rss_mb <= RSS_LIMIT_MB

    @property
    def met(self) -> bool | None:
        """None: not run. Otherwise both its target and the RSS limit."""
        if self.error:
            return False
        if self.skipped or self.value is None:
            return None
        return bool(self.fast_enough) and self.small_enough is not False

    def to_json(self) -> dict[str, Any]:
        return {
            "what": self.what,
            **({"group": self.group} if self.group else {}),
            "unit": self.unit,
            "shows": self.shows,
            "ours": self.ours,
            "baseline": self.baseline,
            "value": self.value,
            "target": self.target,
            "met": self.met,
            "rss_mb": self.rss_mb,
            "rss_limit_mb": RSS_LIMIT_MB,
            "skipped": self.skipped or None,
            "error": self.error or None,
            "samples": {side: [_sample(s) for s in runs] for side, runs in self.samples.items()},
            "detail": self.detail,
        }


def _sample(sample: Sample) -> dict[str, Any]:
    data: dict[str, Any] = {"seconds": sample.seconds, "rss_mb": sample.rss_mb}
    if sample.detail:
        data["detail"] = dict(sample.detail)
    return data


def ratio(
    name: str, what: str, target: float, samples: dict[str, list[Sample]], **detail: Any
) -> Result:
    """ours / baseline of the medians."""
    ours = median([s.seconds for s in samples["ours"]])
    baseline = median([s.seconds for s in samples["baseline"]])
    return Result(
        name,
        what,
        target,
        samples=samples,
        value=ours / baseline,
        ours=ours,
        baseline=baseline,
        rss_mb=peak_rss(samples["ours"]),
        detail={"baseline_rss_mb": peak_rss(samples["baseline"]), **detail},
    )


def skipped(name: str, what: str, target: float, reason: str, unit: str = "x") -> Result:
    return Result(name, what, target, unit=unit, skipped=reason)
