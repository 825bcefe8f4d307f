"""The bench harness's own logic (bench/), nothing timed: fixtures are deterministic, ratios
and targets are computed as README's Performance section says, a failing figure is a row."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from bench import context, fixtures, measure, report, walks, worker
from bench.measure import Sample
from bench.result import Result, ratio, skipped

SMALL = 0.025  # one package: ~500 files


def _digest(root: Path) -> str:
    sha = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        sha.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return sha.hexdigest()


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> fixtures.Tree:
    root = tmp_path_factory.mktemp("trees") / "tree"
    counts = fixtures._Writer(root).tree(SMALL)
    return fixtures.Tree(root, SMALL, counts["files"], counts["bytes"], counts["needle_files"])


def test_a_tree_is_the_same_every_time(tree: fixtures.Tree, tmp_path: Path) -> None:
    again = fixtures._Writer(tmp_path / "tree").tree(SMALL)
    assert again == {"files": tree.files, "bytes": tree.bytes, "needle_files": tree.needle_files}
    assert _digest(tmp_path / "tree") == _digest(tree.root)


def test_a_tree_has_what_a_source_tree_has(tree: fixtures.Tree) -> None:
    files = [p for p in tree.root.rglob("*") if p.is_file()]
    assert len(files) == tree.files
    assert max(p.stat().st_size for p in files) < 500 * 1024  # search_files skips bigger
    names = {p.name for p in files}
    assert {".env", "id_rsa", "credentials.json", "secrets.yaml", ".gitignore"} <= names
    for where in (".git/objects", "node_modules", ".aws"):
        assert (tree.root / where).is_dir()
    assert any(b"\0" in p.read_bytes()[:64] for p in files if p.suffix == ".bin")
    assert tree.needle_files == 1


def test_a_bigger_tree_begins_with_the_smaller_one(tree: fixtures.Tree, tmp_path: Path) -> None:
    fixtures._Writer(tmp_path / "big").tree(SMALL * 2)
    (package,) = [p for p in tree.root.iterdir() if p.name.endswith("-000")]
    assert _digest(tmp_path / "big" / package.name) == _digest(package)


def test_ours_and_the_baselines_find_the_same(
    tree: fixtures.Tree, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The baselines prune as our walk does: the needle planted in .git, node_modules, a
    hidden file and a binary is found by neither."""
    if not (shutil.which("grep") and shutil.which("find")):
        pytest.skip("grep and find are needed")
    for var, value in context.child_env(tmp_path / "home").items():
        monkeypatch.setenv(var, value)
    for walk in walks.WALKS:
        args = {"cwd": str(tree.root), "name": walk.tool, "args": walk.args}
        done = worker.tool({**args, "config": context.tool_config()})["detail"][walk.count]
        argvs = [walk.baseline_argv(tree)]
        if context.find_rg() and walk is not walks.LISTING:  # rg lists files, not dirs
            argvs.append(walk.rg_argv(tree))
        for argv in argvs:
            out = subprocess.run(argv, cwd=tree.root.parent, capture_output=True, text=True)
            assert len(out.stdout.splitlines()) == done, (walk.chart, argv[0])
    assert done > 0


def test_runs_alternate_and_the_warm_up_is_not_kept() -> None:
    order: list[str] = []

    def run(name: str) -> Sample:
        order.append(name)
        return Sample(float(len(order)))

    kept = measure.interleave({"ours": lambda: run("o"), "base": lambda: run("b")}, 2, warmup=1)
    assert order == ["o", "b"] * 3
    assert [s.seconds for s in kept["ours"]] == [3.0, 5.0]
    assert [s.seconds for s in kept["base"]] == [4.0, 6.0]


def test_a_child_is_measured_by_its_own_memory(tmp_path: Path) -> None:
    env = dict(os.environ)
    big = measure.spawn(
        [sys.executable, "-c", "x = bytearray(80 << 20); x[::4096] = b'1' * len(x[::4096])"],
        env=env,
        cwd=tmp_path,
    )
    assert big.code == 0 and big.rss_mb > 80
    small = measure.spawn(["true"], env=env, cwd=tmp_path)
    assert small.rss_mb < 20  # the spawner's, not the much larger test process's
    with pytest.raises(measure.ChildFailed, match="exited with 3"):
        measure.spawn([sys.executable, "-c", "raise SystemExit(3)"], env=env, cwd=tmp_path)


def test_the_walks_config_drops_only_the_blocked_dir_holding_the_cache(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from cli.config.settings import PolicyConfig

    defaults = PolicyConfig().blocked_dirs

    def blocked() -> list[str]:
        policy = yaml.safe_load(context.tool_config())["policy"]
        assert policy["limits"]["max_search_files"] >= 10**8
        return list(policy["blocked_dirs"])

    monkeypatch.setenv("XDG_CACHE_HOME", "/root/.cache")
    assert blocked() == [d for d in defaults if d != "/root"]
    monkeypatch.setenv("XDG_CACHE_HOME", "/var/tmp/cache")
    assert blocked() == defaults


def test_the_table_and_results_say_what_was_met(tmp_path: Path) -> None:
    fast = {"ours": [Sample(1.0, 30.0)], "baseline": [Sample(1.0, 10.0)]}
    heavy = {"ours": [Sample(1.0, 70.0)], "baseline": [Sample(2.0, 10.0)]}
    results = [
        ratio("even", "ours as fast", 1.2, fast),
        ratio("heavy", "fast but too big", 1.2, heavy),
        skipped("absent", "needs rg", 1.2, "ripgrep is not installed"),
        Result("broken", "", 0.0, error="RuntimeError: no\nmore"),
    ]
    assert [r.met for r in results] == [True, False, None, False]
    table = report.table(results)
    assert "heavy" in table and "(over)" in table and "skip" in table
    notes = report.notes(results)
    assert "  skipped: absent: ripgrep is not installed" in notes
    assert "  error: broken: RuntimeError: no" in notes
    path = tmp_path / "results.json"
    report.write_results(
        results, quick=True, runs=1, trees=[], points={}, others={"render": True}, path=path
    )
    data = json.loads(path.read_text())
    assert data["figures"]["heavy"]["met"] is False
    assert data["figures"]["even"]["samples"]["ours"][0]["rss_mb"] == 30.0
    assert data["peak_rss"] == {
        "rss_mb": 70.0,
        "figure": "heavy",
        "limit_mb": 60.0,
        "met": False,
        "over": ["heavy"],
    }


def test_server_work_has_a_table_of_its_own(tmp_path: Path) -> None:
    counts = {"requests": 41, "compactions": 3, "evaluated": 30_000, "new": 24_000}
    results = [
        ratio("even", "ours as fast", 1.2, {"ours": [Sample(1.0)], "baseline": [Sample(1.0)]}),
        Result(
            "server_work_ollama_8k",
            "evaluated / new",
            1.5,
            shows="n",
            value=1.25,
            ours=30_000.0,
            baseline=24_000.0,
            detail=counts,
            group=report.SERVER_WORK,
        ),
        Result("num_ctx_changes_8k", "changes", 1, unit="n", value=2.0, group=report.SERVER_WORK),
    ]
    assert [r.met for r in results] == [True, True, False]
    main = report.table(results)
    assert "even" in main and "server_work" not in main and "num_ctx" not in main
    server = report.server_table(results).splitlines()
    assert server[0].split()[:3] == ["server", "work", "requests"]
    assert server[1].split() == [
        "server_work_ollama_8k", "41", "3", "30,000", "24,000", "1.25x", "≤", "1.5x", "yes",
    ]  # fmt: skip
    assert server[2].split() == ["num_ctx_changes_8k", "2", "≤", "1", "NO"]
    assert report.server_table(results[:1]) == ""
    path = tmp_path / "results.json"
    report.write_results(results, quick=True, runs=1, trees=[], points={}, others={}, path=path)
    figures = json.loads(path.read_text())["figures"]
    assert figures["server_work_ollama_8k"]["group"] == "server work"
    assert figures["server_work_ollama_8k"]["detail"]["evaluated"] == 30_000
    assert "group" not in figures["even"]
