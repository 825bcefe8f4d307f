"""The figures that walk a tree: content search, filename glob and recursive listing, each
against grep or find (and ripgrep), on the first tree; and the same on every tree of the
scaling chart.

Ours is the tool called in a worker as the agent calls it (bench/worker.py). The baselines
prune what our walk prunes (cli/fs/walk.py): every hidden name (so `.git`) and the
dependency dirs (`node_modules`…). They run from the tree's parent on its bare name: grep
matches `--exclude-dir=.*` against every suffix of a command-line path, and the cache's
path holds `.cache`."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bench import fixtures
from bench.context import Bench, child_env, find_rg, tool_config
from bench.measure import Sample, failed, interleave, median, spawn, worker
from bench.result import Result, ratio, skipped
from cli.fs.walk import NOISE_DIRS
from cli.tools.ripgrep import ENGINE_VARIABLE

# The dependency dirs our walk does not enter; hidden names are pruned as one pattern, `.*`.
PRUNED = sorted(name for name in NOISE_DIRS if not name.startswith("."))

Argv = Callable[[fixtures.Tree], list[str]]


def grep_content(tree: fixtures.Tree) -> list[str]:
    excluded = [f"--exclude-dir={name}" for name in PRUNED]
    options = ["-rIlF", "-i", "--exclude-dir=.*", "--exclude=.*", *excluded]
    return ["grep", *options, "-e", fixtures.NEEDLE, tree.root.name]


def _find(tree: fixtures.Tree, *action: str) -> list[str]:
    names = [arg for name in PRUNED for arg in ("-o", "-name", name)]
    return ["find", tree.root.name, "(", "-name", ".*", *names, ")", "-prune", "-o", *action]


def find_md(tree: fixtures.Tree) -> list[str]:
    return _find(tree, "-name", "*.md", "-print")


def find_all(tree: fixtures.Tree) -> list[str]:
    return _find(tree, "-printf", "%p %s\n")


def _rg(*options: str) -> Argv:
    """ripgrep, hidden names skipped (its default) and the dependency dirs by glob."""

    def argv(tree: fixtures.Tree) -> list[str]:
        rg = find_rg() or "rg"
        globs = [f"--glob=!{name}/" for name in PRUNED]
        return [rg, "--no-ignore", "--no-messages", *globs, *options, tree.root.name]

    return argv


@dataclass(frozen=True)
class Walk:
    chart: str  # the chart's panel
    tool: str
    args: dict[str, Any]
    baseline: str  # grep or find
    baseline_argv: Argv
    rg_argv: Argv
    # Ours, by series name: the engine search_files runs with (cli/tools/ripgrep.py: "python"
    # reads every file itself, "rg" has ripgrep propose the files, every match re-read and
    # checked by our code; "": the tool's own choice).
    ours: dict[str, str] = field(default_factory=lambda: {"ours": ""})
    count: str = "total_files"  # what, in ours's result, the baseline's lines count

    def series(self) -> tuple[str, ...]:
        return (*self.ours, self.baseline, "rg")


CONTENT = Walk(
    "content search",
    "search_files",
    {"path": ".", "query": fixtures.NEEDLE, "search_type": "content"},
    "grep",
    grep_content,
    _rg("--files-with-matches", "--ignore-case", "--fixed-strings", "-e", fixtures.NEEDLE),
    ours={"ours (python)": "python", "ours (rg)": "rg"},
)
GLOB = Walk(
    "filename glob",
    "search_files",
    {"path": ".", "query": "*.md", "search_type": "filename"},
    "find",
    find_md,
    _rg("--files", "--glob=*.md"),
)
LISTING = Walk(
    "recursive list",
    "list_directory",
    {"path": ".", "recursive": True, "max_depth": 64},
    "find",
    find_all,
    _rg("--files"),
    count="total",
)
WALKS = (CONTENT, GLOB, LISTING)


@dataclass
class Runner:
    """Makes the samples of one walk's series on one tree."""

    b: Bench
    walk: Walk
    tree: fixtures.Tree
    found: dict[str, int] = field(default_factory=dict)  # series → what it found (last run)

    def __post_init__(self) -> None:
        self.home = self.b.dir("home-walks")

    def sampler(self, series: str) -> Callable[[], Sample]:
        if series in self.walk.ours:
            return lambda: self.ours(series, self.walk.ours[series])
        argv = self.walk.rg_argv if series == "rg" else self.walk.baseline_argv
        return lambda: self.command(series, argv)

    def ours(self, series: str, engine: str) -> Sample:
        walk = self.walk
        params = {"cwd": str(self.tree.root), "name": walk.tool, "args": walk.args}
        env = child_env(self.home, **({ENGINE_VARIABLE: engine} if engine else {}))
        sample = worker("tool", {**params, "config": tool_config()}, env=env, cwd=self.tree.root)
        self.found[series] = int(sample.detail.get(walk.count, -1))
        return sample

    def command(self, series: str, argv: Argv) -> Sample:
        run = argv(self.tree)
        exited = spawn(run, env=child_env(self.home), cwd=self.tree.root.parent, check=False)
        if exited.code not in (0, 1):  # grep and rg: 1 is "nothing found"
            raise failed(run, exited)
        self.found[series] = len(exited.stdout.splitlines())
        return Sample(exited.seconds, exited.rss_mb)

    def measure(self, series: tuple[str, ...]) -> dict[str, list[Sample]]:
        samples = interleave({s: self.sampler(s) for s in series}, self.b.runs)
        for name, runs in samples.items():
            self.b.points[(self.walk.chart, name, self.tree.files)] = median(
                [s.seconds for s in runs]
            )
        return samples


def _figure(
    b: Bench, name: str, walk: Walk, ours: str, baseline: str, target: float, what: str
) -> list[Result]:
    if baseline == "rg" and find_rg() is None:
        return [skipped(name, what, target, "ripgrep is not installed (make install: .[fast])")]
    if baseline != "rg" and shutil.which(baseline) is None:
        return [skipped(name, what, target, f"{baseline} is not on PATH")]
    runner = Runner(b, walk, b.tree)
    measured = runner.measure((ours, baseline))
    samples = {"ours": measured[ours], "baseline": measured[baseline]}
    detail: dict[str, Any] = {"tree": fixtures.describe(b.tree), "found": runner.found}
    if walk.ours[ours]:
        detail["engine"] = f"{ENGINE_VARIABLE}={walk.ours[ours]}"
    return [ratio(name, what, target, samples, **detail)]


def search_content(b: Bench) -> list[Result]:
    what = "search_files content, pure Python vs grep -rIl -i"
    return _figure(b, "search_content", CONTENT, "ours (python)", "grep", 2.0, what)


def search_content_rg(b: Bench) -> list[Result]:
    what = "search_files content, with ripgrep vs rg -il"
    return _figure(b, "search_content_rg", CONTENT, "ours (rg)", "rg", 1.2, what)


def glob_md(b: Bench) -> list[Result]:
    what = "search_files filename '*.md' vs find -name"
    return _figure(b, "glob_md", GLOB, "ours", "find", 2.0, what)


def list_recursive(b: Bench) -> list[Result]:
    what = "list_directory recursive vs find -printf"
    return _figure(b, "list_recursive", LISTING, "ours", "find", 2.0, what)


def scaling(b: Bench) -> list[Result]:
    """Every series of every walk on every tree, but those the figures measured already:
    the chart's points (no Result: the chart has no target)."""
    have_rg = find_rg() is not None
    for tree in b.trees:
        for walk in WALKS:
            wanted = [s for s in walk.series() if have_rg or "rg" not in s]
            missing = tuple(s for s in wanted if (walk.chart, s, tree.files) not in b.points)
            if missing:
                b.say(f"  scaling: {walk.chart} on {fixtures.describe(tree)}")
                Runner(b, walk, tree).measure(missing)
    return []
