"""Timing and memory: child processes timed and measured by bench/spawner.py (their peak RSS
from os.wait4), interleaved runs of ours and a baseline, medians."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

REPO = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
SPAWNER = REPO / "bench" / "spawner.py"
TIMEOUT = 300.0  # seconds any one child may take before it is killed


class ChildFailed(RuntimeError):
    """A child exited with an error: its command and what it wrote on stderr."""


@dataclass(frozen=True)
class Exited:
    code: int
    started: float  # time.monotonic() just before the spawn
    seconds: float  # from just before the spawn to its exit
    rss_mb: float  # its peak resident set size
    stdout: str
    stderr: str


@dataclass(frozen=True)
class Sample:
    """One run: its time (seconds), the peak RSS of the process that ran it, and anything
    else it reported."""

    seconds: float
    rss_mb: float | None = None
    detail: Mapping[str, Any] = field(default_factory=dict)


def spawn(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: Path,
    stdout: IO[bytes] | None = None,
    timeout: float = TIMEOUT,
    check: bool = True,
) -> Exited:
    """Run `argv` to its end through bench/spawner.py, which times it and reads its peak RSS
    from os.wait4. stdout goes to `stdout` (a file) or is kept; stderr is kept. A child that
    outlives `timeout` is killed with its process group."""
    with contextlib.ExitStack() as stack:
        out = stdout or stack.enter_context(tempfile.TemporaryFile())
        err = stack.enter_context(tempfile.TemporaryFile())
        report = Path(stack.enter_context(tempfile.TemporaryDirectory())) / "report.json"
        proc = subprocess.Popen(
            [PYTHON, "-I", "-S", str(SPAWNER), str(report), *argv],
            env=dict(env),
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            start_new_session=True,
        )
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            _stop(proc)
            raise ChildFailed(f"{argv[0]} took more than {timeout:.0f} s") from None
        except BaseException:  # Ctrl-C: it has a session of its own, so it did not get it
            _stop(proc)
            raise
        if proc.returncode != 0:
            raise ChildFailed(f"could not run {argv[0]}: {_read(err).strip()[-2000:]}")
        times = json.loads(report.read_text(encoding="utf-8"))
        exited = Exited(
            os.waitstatus_to_exitcode(times["status"]),
            times["started"],
            times["ended"] - times["started"],
            times["maxrss_kb"] / 1024,  # kilobytes on Linux
            "" if stdout else _read(out),
            _read(err),
        )
    if check and exited.code != 0:
        raise failed(argv, exited)
    return exited


def failed(argv: Sequence[str], exited: Exited) -> ChildFailed:
    """The error for a child that exited with an error: its first line says which and why
    (the last line of its stderr: a traceback's exception), the rest is its stderr's end."""
    shown = " ".join(a if len(a) <= 60 else a[:57] + "..." for a in argv)
    stderr = exited.stderr.strip()
    last = stderr.splitlines()[-1] if stderr else "(nothing on stderr)"
    return ChildFailed(f"{shown} exited with {exited.code}: {last}\n{stderr[-2000:]}")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """Kill the spawner and what it runs (its process group), and reap it."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _read(file: IO[bytes]) -> str:
    file.seek(0)
    return file.read().decode("utf-8", "replace")


def worker(op: str, params: Mapping[str, Any], *, env: Mapping[str, str], cwd: Path) -> Sample:
    """Run `python -m bench.worker OP PARAMS` (bench/worker.py): it times its own operation
    and prints one JSON object; the sample carries its peak RSS too."""
    argv = [PYTHON, "-m", "bench.worker", op, json.dumps(dict(params))]
    exited = spawn(argv, env={**env, "PYTHONPATH": str(REPO)}, cwd=cwd)
    report = json.loads(exited.stdout.strip().splitlines()[-1])
    return Sample(report["seconds"], exited.rss_mb, report.get("detail", {}))


def interleave(
    series: Mapping[str, Callable[[], Sample]], runs: int, warmup: int = 1
) -> dict[str, list[Sample]]:
    """One run of each series in turn (ours, baseline, ours, baseline…), `runs` times, after
    `warmup` rounds that are not kept (the page cache, compiled bytecode and the server's
    threads are warm by then)."""
    kept: dict[str, list[Sample]] = {name: [] for name in series}
    for round_ in range(warmup + runs):
        for name, run in series.items():
            sample = run()
            if round_ >= warmup:
                kept[name].append(sample)
    return kept


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def peak_rss(samples: Sequence[Sample]) -> float | None:
    sizes = [s.rss_mb for s in samples if s.rss_mb is not None]
    return max(sizes) if sizes else None


@contextlib.contextmanager
def stopwatch(say: Callable[[str], None], what: str) -> Iterator[None]:
    started = time.perf_counter()
    try:
        yield
    finally:
        say(f"  ({what}: {time.perf_counter() - started:.1f} s)")
