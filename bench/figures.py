"""The figures that are not about walking a tree: start-up, the agent loop, streaming, and
writes. Each runs ours and its baseline interleaved and returns Results (bench/result.py).

Where a figure is a whole program (start-up, streaming), both sides are child processes
timed from just before the spawn. Where it is a tool's own cost (writes) or the loop's,
ours runs in `python -m bench.worker` (bench/worker.py), which times the operation itself,
and the parent reads the child's peak RSS."""

from __future__ import annotations

import itertools
import json
import shutil
from collections.abc import Callable
from typing import Any

from bench import fixtures
from bench.context import AGENT, Bench, child_env
from bench.measure import PYTHON, REPO, Sample, interleave, median, peak_rss, spawn, worker
from bench.result import Result, ratio, skipped
from tests.fakes.fake_http import Recorded
from tests.fakes.fake_ollama import Stream, reply, tool_call

BASELINE_TYPER = REPO / "bench" / "baseline_typer.py"
BASELINE_STREAM = REPO / "bench" / "baseline_stream.py"

LOOP_STEPS = 20
LOOP_FILE_BYTES = 100_000
# The loop's cost beyond a plain client, per step; and its flatness: how much more a late
# step (18-20) costs than an early one (2-4), against the same for the plain client, which
# sends the same growing bodies (so what the bodies' growth costs anyway is not counted).
# Windows of three steps, each step the median over the runs: one slow step is not the figure.
LOOP_EXTRA_MS = 2.0
LOOP_FLATNESS = 1.2
LOOP_EARLY, LOOP_LATE = (2, 3, 4), (18, 19, 20)

# A start-up is ~0.1-0.5 s and varies by tens of ms with whatever else the machine does:
# three times the runs, for the price of a few seconds.
STARTUP_RUNS = 3

STREAM_CHUNKS = 20_000
WRITE_BIG = 5_000_000  # characters (bytes: it is ASCII), under max_write_bytes (5 MiB)
WRITE_SMALL = 1024


def _no_agent(name: str, what: str, target: float) -> Result | None:
    if AGENT.exists():
        return None
    return skipped(name, what, target, f"no console script at {AGENT} (make install)")


# -- start-up ------------------------------------------------------------------------------


def startup_first_request(b: Bench) -> list[Result]:
    name, what, target = "startup_first_request", "agent run 'hi': spawn → first request", 1.1
    if missing := _no_agent(name, what, target):
        return [missing]
    home, workspace = b.dir("home-startup"), b.dir("ws-startup")
    env = child_env(home, OLLAMA_HOST=b.fake.url)
    first: dict[str, Any] = {}  # the request ours sent first, which the baseline sends

    def arrival(argv: list[str], extra: dict[str, str]) -> tuple[Sample, Recorded]:
        b.reset_fake()
        b.fake.enqueue(reply("Hello."))
        exited = spawn(argv, env={**env, **extra}, cwd=workspace)
        request = b.fake.requests[0]
        return Sample(request.started - exited.started, exited.rss_mb), request

    def ours() -> Sample:
        sample, request = arrival([str(AGENT), "run", "hi"], {})
        first.update(method=request.method, path=request.path, body=request.body)
        return sample

    def baseline() -> Sample:
        argv = [PYTHON, str(BASELINE_TYPER), "run", "hi"]
        return arrival(argv, {"BENCH_REQUEST": json.dumps(first)})[0]

    samples = interleave({"ours": ours, "baseline": baseline}, b.runs * STARTUP_RUNS)
    return [ratio(name, what, target, samples, first=f"{first['method']} {first['path']}")]


def startup_command(b: Bench, flag: str) -> list[Result]:
    """`agent --version` or `agent --help` against `python -c "import typer"`."""
    name, what, target = f"startup_{flag}", f"agent --{flag} vs python -c 'import typer'", 1.2
    if missing := _no_agent(name, what, target):
        return [missing]
    home, workspace = b.dir(f"home-{flag}"), b.dir(f"ws-{flag}")
    env = child_env(home)

    def run(argv: list[str]) -> Callable[[], Sample]:
        def once() -> Sample:
            exited = spawn(argv, env=env, cwd=workspace)
            return Sample(exited.seconds, exited.rss_mb)

        return once

    samples = interleave(
        {"ours": run([str(AGENT), f"--{flag}"]), "baseline": run([PYTHON, "-c", "import typer"])},
        b.runs * STARTUP_RUNS,
    )
    return [ratio(name, what, target, samples)]


def startup_version(b: Bench) -> list[Result]:
    return startup_command(b, "version")


def startup_help(b: Bench) -> list[Result]:
    return startup_command(b, "help")


# -- the agent loop ------------------------------------------------------------------------


def loop_20_steps(b: Bench) -> list[Result]:
    """20 steps of read_file (a different 100 KB file each), then the answer. Step k's cost
    is the time from the fake's receiving request k to its receiving request k+1: the
    model's streamed reply, then everything the agent does before it asks again. The
    baseline sends the same 21 bodies with a plain client."""
    workspace, home = b.dir("ws-loop"), b.dir("home-loop")
    names = fixtures.text_files(workspace, LOOP_STEPS, LOOP_FILE_BYTES, "loop")
    script = [
        reply(f"Let me read {n}.", tool_calls=[tool_call("read_file", {"path": n})]) for n in names
    ]
    script.append(reply("I have read every file."))
    bodies_file = b.temp / "loop-bodies.json"
    env = child_env(home)
    params = {
        "cwd": str(workspace),
        "url": b.fake.url,
        "prompt": "Read every file here, one at a time, then say you are done.",
        "config": f"agent: {{max_steps: {LOOP_STEPS + 5}}}\n",
    }

    def stepped(sample: Sample) -> Sample:
        """The sample timed by the fake's clock: the mean of steps 2-20, and every step.
        Step 1 is left out of the mean (it is in the detail): ours pays its process's
        one-time costs there, the tool's code imported and the policy's matchers compiled at
        the first call, which are no step's cost; the plain client's step 1 is left out
        alike."""
        arrivals = [r.started for r in b.fake.requests_to("/api/chat")]
        if len(arrivals) != LOOP_STEPS + 1:
            raise RuntimeError(f"{len(arrivals)} chat requests arrived, not {LOOP_STEPS + 1}")
        intervals = [later - earlier for earlier, later in itertools.pairwise(arrivals)]
        detail = {**sample.detail, "steps": intervals}
        return Sample(sum(intervals[1:]) / (len(intervals) - 1), sample.rss_mb, detail)

    def ours() -> Sample:
        b.reset_fake()
        b.fake.enqueue(*script)
        sample = worker("loop", params, env=env, cwd=workspace)
        bodies_file.write_text(json.dumps(b.fake.chat_bodies))
        return stepped(sample)

    def baseline() -> Sample:
        b.reset_fake()
        b.fake.enqueue(*script)
        sent = {"url": b.fake.url, "bodies": str(bodies_file)}
        return stepped(worker("loop_baseline", sent, env=env, cwd=workspace))

    samples = interleave({"ours": ours, "baseline": baseline}, b.runs)
    per_step = {
        side: [median([s.detail["steps"][k] for s in runs]) for k in range(LOOP_STEPS)]
        for side, runs in samples.items()
    }
    ours_step = median([s.seconds for s in samples["ours"]])
    base_step = median([s.seconds for s in samples["baseline"]])
    rss = peak_rss(samples["ours"])
    cost = Result(
        "loop_20_steps",
        "agent loop: ms per step beyond a plain client (steps 2-20; step 1 in the detail)",
        LOOP_EXTRA_MS,
        unit="ms",
        samples=samples,
        value=(ours_step - base_step) * 1e3,
        ours=ours_step,
        baseline=base_step,
        rss_mb=rss,
        detail={
            "per_step_ours": per_step["ours"],
            "per_step_baseline": per_step["baseline"],
            "first_step_ms": {side: costs[0] * 1e3 for side, costs in per_step.items()},
        },
    )
    growth = {
        side: _window(costs, LOOP_LATE) / _window(costs, LOOP_EARLY)
        for side, costs in per_step.items()
    }
    flat = Result(
        "loop_20_steps_flatness",
        "agent loop: steps 18-20 / steps 2-4, ours vs the plain client's",
        LOOP_FLATNESS,
        shows="x",
        value=growth["ours"] / growth["baseline"],
        ours=growth["ours"],
        baseline=growth["baseline"],
        rss_mb=rss,
        detail={
            f"{side}_ms_{when}": _window(costs, window) * 1e3
            for side, costs in per_step.items()
            for when, window in (("early", LOOP_EARLY), ("late", LOOP_LATE))
        },
    )
    return [cost, flat]


def _window(costs: list[float], steps: tuple[int, ...]) -> float:
    """The mean cost of these steps (numbered from 1)."""
    return sum(costs[k - 1] for k in steps) / len(steps)


# -- streaming -----------------------------------------------------------------------------


def streaming_20k(b: Bench) -> list[Result]:
    name, what, target = "streaming_20k", "agent run, an answer of 20,000 chunks", 1.5
    if missing := _no_agent(name, what, target):
        return [missing]
    content = fixtures.text_of_size(STREAM_CHUNKS * 4, "stream")
    stream: Stream = reply(content, token=4)
    home, workspace = b.dir("home-stream"), b.dir("ws-stream")
    env = child_env(home, OLLAMA_HOST=b.fake.url)
    body_file, out_file = b.temp / "stream-body.json", b.temp / "stream-out.txt"

    def run(argv: list[str]) -> Sample:
        b.reset_fake()
        b.fake.enqueue(stream)
        with out_file.open("wb") as out:
            exited = spawn(argv, env=env, cwd=workspace, stdout=out)
        written = out_file.read_text(encoding="utf-8")
        if written.strip() != content.strip():
            raise RuntimeError(f"{argv[0]} wrote {len(written)} characters, not the answer")
        return Sample(exited.seconds, exited.rss_mb)

    def ours() -> Sample:
        sample = run([str(AGENT), "run", "hi"])
        body_file.write_text(json.dumps(b.fake.chat_bodies[0]))
        return sample

    def baseline() -> Sample:
        return run([PYTHON, str(BASELINE_STREAM), b.fake.url, str(body_file), str(out_file)])

    samples = interleave({"ours": ours, "baseline": baseline}, b.runs)
    return [ratio(name, what, target, samples, chunks=len(stream.lines) - 1)]


# -- writes --------------------------------------------------------------------------------


def write_file_5mb(b: Bench) -> list[Result]:
    """write_file of 5 MB over a file of 5 MB, the old content kept in the change store."""
    name, what, target = "write_file_5mb", "write_file 5 MB over 5 MB, backup kept", 1.5
    workspace, home = b.dir("ws-write"), b.dir("home-write")
    env = child_env(home)
    params = {"cwd": str(workspace), "file": "big.txt", "size": WRITE_BIG, "repeat": 2}
    backups = b.temp / "write-backups"
    by_hand = {**params, "backups": str(backups)}

    def ours() -> Sample:
        return worker("write_file", params, env=env, cwd=workspace)

    def baseline() -> Sample:
        shutil.rmtree(backups, ignore_errors=True)
        return worker("write_by_hand", by_hand, env=env, cwd=workspace)

    samples = interleave({"ours": ours, "baseline": baseline}, b.runs)
    return [ratio(name, what, target, samples)]


def write_file_store_size(b: Bench) -> list[Result]:
    """A 1 KB write_file with ~15,000 backups in the change store against one with none."""
    from cli.config.settings import state_dir

    name, target = "write_file_store_size", 1.2
    what = f"write_file 1 KB: store of {fixtures.STORE_BACKUPS:,} vs an empty one"
    source = fixtures.change_store(b.say)
    full_home, empty_home, workspace = b.dir("home-full"), b.dir("home-empty"), b.dir("ws-store")
    full_env, empty_env = child_env(full_home), child_env(empty_home)
    fixtures.copy_store(source, state_dir(full_env) / "changes")
    params = {"cwd": str(workspace), "file": "small.txt", "size": WRITE_SMALL, "repeat": 3}

    def ours() -> Sample:
        return worker("write_file", params, env=full_env, cwd=workspace)

    def baseline() -> Sample:
        shutil.rmtree(state_dir(empty_env), ignore_errors=True)  # empty again every time
        return worker("write_file", params, env=empty_env, cwd=workspace)

    samples = interleave({"ours": ours, "baseline": baseline}, b.runs)
    later = {  # the writes after the first, in the same process: the store is open by then
        side: median([t for s in runs for t in s.detail["later"]]) for side, runs in samples.items()
    }
    held = samples["ours"][-1].detail.get("changes")
    return [ratio(name, what, target, samples, store_changes=held, later_writes_s=later)]
