"""What a run found, three ways: a table on stdout, bench/results.json, bench/scaling.png."""

from __future__ import annotations

import json
import os
import platform
import sys
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from bench import fixtures
from bench.measure import REPO
from bench.result import RSS_LIMIT_MB, Result

RESULTS = REPO / "bench" / "results.json"
CHART = REPO / "bench" / "scaling.png"
# Written by tests/conftest.py at the end of a whole `make test`: {"tests", "seconds",
# "finished"}. The bench does not run the suite (it takes minutes); it says what it took.
TEST_TIME = REPO / ".pytest_cache" / "metona-test-time.json"

Points = Mapping[tuple[str, str, int], float]


# -- the table -----------------------------------------------------------------------------


def _time(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return f"{seconds * 1e3:.1f} ms" if seconds < 1 else f"{seconds:.2f} s"


def _times(ratio: float | None) -> str:
    return "-" if ratio is None else f"{ratio:.2f}x"


def _met(result: Result) -> str:
    return {True: "yes", False: "NO", None: "skip"}[result.met]


def _row(result: Result) -> list[str]:
    if result.error or result.skipped:  # why: in the notes below the table
        target = f"≤ {result.target:g}{' ms' if result.unit == 'ms' else 'x'}"
        return [result.name, "-", "-", "-", "-" if result.error else target, _met(result), ""]
    if result.unit == "ms":
        value, target = f"{result.value:+.2f} ms", f"≤ {result.target:g} ms"
    else:
        value, target = f"{result.value:.2f}x", f"≤ {result.target:g}x"
    rss = "-" if result.rss_mb is None else f"{result.rss_mb:.1f}"
    if result.small_enough is False:
        rss += " (over)"
    met = _met(result)
    shown = _time if result.shows == "s" else _times
    return [result.name, shown(result.ours), shown(result.baseline), value, target, met, rss]


def peak_rss(results: Sequence[Result]) -> dict[str, Any]:
    """The largest RSS of ours over every figure, and which figure it was."""
    measured = [r for r in results if r.rss_mb is not None]
    if not measured:
        return {"rss_mb": None, "figure": None, "limit_mb": RSS_LIMIT_MB, "met": None}
    top = max(measured, key=lambda r: r.rss_mb or 0.0)
    over = [r.name for r in measured if r.small_enough is False]
    return {
        "rss_mb": top.rss_mb,
        "figure": top.name,
        "limit_mb": RSS_LIMIT_MB,
        "met": not over,
        "over": over,
    }


def last_test_run() -> dict[str, Any] | None:
    """The last whole `make test`, if it was recorded."""
    try:
        data = json.loads(TEST_TIME.read_text(encoding="utf-8"))
        return {**data, "tests": int(data["tests"]), "seconds": float(data["seconds"])}
    except (OSError, ValueError, KeyError, TypeError):
        return None


def table(results: Sequence[Result]) -> str:
    """The main table: every figure not shown in a table of its own, the peak RSS over all."""
    header = ["figure", "ours", "baseline", "ratio", "target", "met", "rss MB"]
    rows = [header, *(_row(r) for r in results if not r.group)]
    peak = peak_rss(results)
    if peak["rss_mb"] is not None:
        met = "yes" if peak["met"] else "NO"
        limit = f"≤ {RSS_LIMIT_MB:g} MB"
        rows.append(["peak_rss", f"{peak['rss_mb']:.1f} MB", peak["figure"], "", limit, met, ""])
    tests = last_test_run()
    recorded = (
        f"{tests['tests']} tests in {tests['seconds']:.0f} s ({tests.get('finished', '?')})"
        if tests
        else "not recorded: run make test"
    )
    rows.append(["make_test_time", recorded, "", "", "none", "", ""])
    widths = [max(len(row[i]) for row in rows if len(row[i]) < 40) for i in range(len(header))]

    def line(row: list[str]) -> str:
        cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=True)]
        return "  ".join(cells).rstrip()

    return "\n".join(line(row) for row in rows)


SERVER_WORK = "server work"


def server_table(results: Sequence[Result]) -> str:
    """The server-work table (bench/server_work.py): per session, the chat requests, how
    many changed the history instead of appending (compactions), the prompt tokens the
    server evaluated and those that were new, and the figure; then the num_ctx changes.
    "" when none was run."""
    shown = [r for r in results if r.group == SERVER_WORK]
    if not shown:
        return ""
    header = ["server work", "requests", "compactions", "evaluated", "new", "value", "target"]
    rows = [[*header, "met"]]
    for result in shown:
        d = result.detail
        counted = result.unit == "x" and "evaluated" in d
        counts = [str(d["requests"]), str(d["compactions"])] if counted else ["", ""]
        tokens = [f"{d['evaluated']:,}", f"{d['new']:,}"] if counted else ["", ""]
        if result.value is None:
            value = "-"
        else:
            value = f"{result.value:.2f}x" if result.unit == "x" else f"{result.value:g}"
        target = f"≤ {result.target:g}{'x' if result.unit == 'x' else ''}"
        rows.append([result.name, *counts, *tokens, value, target, _met(result)])
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows
    )


def notes(results: Sequence[Result]) -> list[str]:
    """What each figure is, and what a reader should not miss: walks whose ours and
    baseline found different numbers of things."""
    said = [f"  {r.name}: {r.what}" for r in results if r.what]
    for result in results:
        if result.error:
            said.append(f"  error: {result.name}: {result.error.splitlines()[0][:300]}")
        if result.skipped:
            said.append(f"  skipped: {result.name}: {result.skipped}")
        found = result.detail.get("found")
        if isinstance(found, dict) and len(set(found.values())) > 1:
            counts = ", ".join(f"{k}: {v}" for k, v in found.items())
            said.append(f"  note: {result.name} found different numbers of entries ({counts})")
    return said


# -- results.json --------------------------------------------------------------------------


def machine() -> dict[str, Any]:
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return {
        "platform": platform.platform(),
        "machine": platform.machine(),
        "processor": platform.processor() or None,
        "cpus": os.cpu_count(),
        "memory_gb": round(memory / 2**30, 1),
    }


def write_results(
    results: Sequence[Result],
    *,
    quick: bool,
    runs: int,
    trees: Sequence[fixtures.Tree],
    points: Points,
    others: Mapping[str, bool],
    path: Path = RESULTS,
) -> None:
    data = {
        "machine": machine(),
        "python": sys.version.split()[0],
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "quick": quick,
        "runs": runs,
        "trees": [
            {"scale": t.scale, "files": t.files, "bytes": t.bytes, "needle_files": t.needle_files}
            for t in trees
        ],
        "figures": {r.name: r.to_json() for r in results},
        "peak_rss": peak_rss(results),
        "make_test_time": last_test_run() or {"recorded": False, "hint": "run make test"},
        "scaling": [
            {"chart": chart, "series": series, "files": files, "seconds": seconds}
            for (chart, series, files), seconds in sorted(points.items())
        ],
        "benchmarks": {name: {"met": met} for name, met in others.items()},
    }
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


# -- scaling.png ---------------------------------------------------------------------------


# The same program has the same colour in every panel; ours solid, the others dashed.
_STYLES = {
    "ours": ("C0", "-"),
    "ours (python)": ("C0", "-"),
    "ours (rg)": ("C2", "-"),
    "grep": ("C1", "--"),
    "find": ("C1", "--"),
    "rg": ("C3", "--"),
}


def _legend_order(series: str) -> tuple[int, str]:
    return (list(_STYLES).index(series) if series in _STYLES else len(_STYLES), series)


def draw_chart(points: Points, title: str = "", path: Path = CHART) -> str:
    """Time against tree size, a panel per walk, a line per program; "" or why not drawn."""
    if not points:
        return "no scaling points were measured"
    try:
        import matplotlib
    except ImportError:
        return "matplotlib is not installed (make bench installs .[bench])"
    matplotlib.use("Agg")
    from matplotlib import pyplot

    charts = sorted({chart for chart, _, _ in points})
    figure, axes = pyplot.subplots(1, len(charts), figsize=(5 * len(charts), 4), squeeze=False)
    for axis, chart in zip(axes[0], charts, strict=True):
        for series in sorted({s for c, s, _ in points if c == chart}, key=_legend_order):
            line = sorted((f, t) for (c, s, f), t in points.items() if (c, s) == (chart, series))
            files, seconds = zip(*line, strict=True)
            color, style = _STYLES.get(series, ("C4", ":"))
            axis.plot(files, seconds, style, color=color, marker="o", label=series)
        axis.set_title(chart)
        axis.set_xlabel("files in the tree")
        axis.set_ylabel("seconds (median)")
        axis.set_ylim(bottom=0)
        axis.grid(alpha=0.3)
        axis.legend()
    if title:
        figure.suptitle(title)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    pyplot.close(figure)
    return ""
