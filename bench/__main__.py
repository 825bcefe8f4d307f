"""`python -m bench [--quick] [NAME ...]` (`make bench`, `make bench ARGS=--quick`): every
figure (or those named) against its baseline, then a table, bench/results.json and
bench/scaling.png; exit 1 if any misses its target. A figure is a function of the Bench that
returns Results (bench/figures.py, bench/walks.py); add new ones to FIGURES. BENCHMARKS are
older, self-contained ones that print their own numbers and return whether they passed.

--quick runs on trees a tenth of the size, three runs a figure instead of five, and leaves
out the BENCHMARKS (render alone takes 20 s) unless they are named."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable

from bench import context, figures, fixtures, prefix, render, report, server_work, walks
from bench.measure import stopwatch
from bench.result import Result

Figure = Callable[[context.Bench], list[Result]]

FIGURES: dict[str, Figure] = {
    "startup_first_request": figures.startup_first_request,
    "startup_version": figures.startup_version,
    "startup_help": figures.startup_help,
    "loop_20_steps": figures.loop_20_steps,
    "streaming_20k": figures.streaming_20k,
    "write_file_5mb": figures.write_file_5mb,
    "write_file_store_size": figures.write_file_store_size,
    "server_work": server_work.server_work,  # 40-step sessions: prompt tokens evaluated / new
    "prefix": prefix.prefix,  # a run after a run elsewhere, chat's first message: prefix reuse
    "search_content": walks.search_content,
    "search_content_rg": walks.search_content_rg,
    "glob_md": walks.glob_md,
    "list_recursive": walks.list_recursive,
    "scaling": walks.scaling,  # the chart: every walk on every tree
}
ON_TREES = {"search_content", "search_content_rg", "glob_md", "list_recursive"}

BENCHMARKS: dict[str, Callable[[], bool]] = {
    "render": render.run,
}

RUNS, QUICK_RUNS = 5, 3


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small trees, 3 runs a figure")
    parser.add_argument("names", nargs="*", metavar="NAME", help="what to run (default: all)")
    options = parser.parse_args(argv)
    known = [*FIGURES, *BENCHMARKS]
    unknown = [name for name in options.names if name not in known]
    if unknown:
        print(f"unknown benchmark: {', '.join(unknown)}; known: {', '.join(known)}")
        return 2
    chosen = options.names or (list(FIGURES) if options.quick else known)
    started = time.perf_counter()
    results, trees, points = _figures([n for n in chosen if n in FIGURES], options.quick)
    others = {}
    for name in (n for n in chosen if n in BENCHMARKS):
        with stopwatch(print, name):
            try:
                others[name] = BENCHMARKS[name]()
            except Exception as exc:  # the figures' results are still written
                print(f"{name}: {type(exc).__name__}: {exc}")
                others[name] = False
    if results or points:
        print()
        print(report.table(results))
        if server := report.server_table(results):
            print()
            print(server)
        for note in report.notes(results):
            print(note)
        runs = QUICK_RUNS if options.quick else RUNS
        report.write_results(
            results, quick=options.quick, runs=runs, trees=trees, points=points, others=others
        )
        print(f"results: {report.RESULTS}")
        title = f"median of {runs} runs{', --quick trees' if options.quick else ''}"
        why_not = report.draw_chart(points, title)
        print(f"chart: {why_not}" if why_not else f"chart: {report.CHART}")
    failed = [r.name for r in results if r.met is False]
    failed += [name for name, passed in others.items() if not passed]
    print(f"(all: {time.perf_counter() - started:.0f} s)")
    if failed:
        print(f"failed: {', '.join(failed)}")
        return 1
    return 0


def _figures(
    names: list[str], quick: bool
) -> tuple[list[Result], list[fixtures.Tree], dict[tuple[str, str, int], float]]:
    """Run the figures `names`, in FIGURES's order (the scaling chart last: it reuses what
    the figures measured); a figure that breaks is an error in its row, and the others
    still run."""
    names = [name for name in FIGURES if name in names]
    if not names:
        return [], [], {}
    results: list[Result] = []
    with context.session(quick, QUICK_RUNS if quick else RUNS) as b:
        scales = fixtures.scales(quick)
        wanted = scales if "scaling" in names else scales[:1] if ON_TREES & set(names) else ()
        with stopwatch(print, "fixtures"):
            b.trees = [fixtures.tree(scale) for scale in wanted]
            for tree in b.trees:
                print(f"  tree {tree.scale:g}x: {fixtures.describe(tree)} in {tree.root}")
        for name in names:
            print(f"{name} …", flush=True)
            with stopwatch(print, name):
                try:
                    results += FIGURES[name](b)
                except Exception as exc:  # one broken figure must not hide the others
                    results.append(Result(name, "", 0.0, error=f"{type(exc).__name__}: {exc}"))
        return results, b.trees, dict(b.points)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
