"""`python -m bench [NAME ...]`: runs every benchmark (or those named) and exits 1 if any
misses its target. A benchmark is a function that prints its numbers and returns whether
it passed; add new ones to BENCHMARKS."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

from bench import render

BENCHMARKS: dict[str, Callable[[], bool]] = {
    "render": render.run,
}


def main(argv: list[str]) -> int:
    unknown = [name for name in argv if name not in BENCHMARKS]
    if unknown:
        print(f"unknown benchmark: {', '.join(unknown)}; known: {', '.join(BENCHMARKS)}")
        return 2
    failed = []
    for name in argv or list(BENCHMARKS):
        started = time.perf_counter()
        if not BENCHMARKS[name]():
            failed.append(name)
        print(f"  ({name}: {time.perf_counter() - started:.1f} s)")
    if failed:
        print(f"failed: {', '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
