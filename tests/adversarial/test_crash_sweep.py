"""A kill at every instant of a change loses nothing (README "Safety"): the agent is killed by
strace's syscall injection at each fsync, rename and lock of a write, an edit, a move (also
over an existing file) and a delete, one run per kill point, and after each the file is either
unchanged and no history names the change, or changed and `agent undo` takes it back.

The kill points are counted from a traced run of the same change, not listed by hand: a new
fsync or rename in the write path is swept as soon as it exists."""

from __future__ import annotations

import collections
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from cli.fs import _platform
from tests.fakes.fake_ollama import FakeOllama, reply, tool_call

STRACE = shutil.which("strace")
pytestmark = pytest.mark.skipif(
    STRACE is None and os.environ.get("METONA_STRACE_REQUIRED") != "1",
    reason="needs strace (syscall injection); .ci/run installs it",
)

# The syscalls a change is made of: durability, the renames that make it, the store's lock.
# linkat and unlinkat: the two steps of a move where no no-replace rename exists (the platform
# layer's portable fallback; `make test-portable` sweeps it), and the kill between them.
KILL_AT = ("fsync", "fdatasync", "rename", "renameat", "renameat2", "flock", "linkat", "unlinkat")
OLD, NEW, OTHER = "old content\r\nline two\n", "new content\n", "the file it replaces\n"
POLICY = (
    "policy:\n  unattended: [write_file, edit_file, create_directory, move_file, delete_file]\n"
    "  tools: {delete_file: ask}\n"
)


@dataclass(frozen=True)
class Scenario:
    name: str
    calls: list[dict[str, Any]]  # the model's tool calls, one step each
    before: dict[str, str]  # files at the start
    after: dict[str, str | None]  # files once the change is made (None: gone)


# How many kill points each change has (its fsyncs, renames and locks in a whole `agent run`):
# the sweep checks it finds exactly these, so that README's figure stays what is swept; a
# change to the write path that adds or drops one updates this (and README) on purpose.
KILL_POINTS = {"write": 11, "edit": 12, "move": 8, "move_over": 13, "mkdir": 5, "delete": 10}
if _platform.PORTABLE:  # a move's one renameat2 is a linkat and an unlinkat there
    KILL_POINTS.update(move=9, move_over=14)

SCENARIOS = [
    Scenario(
        "write",
        [tool_call("write_file", {"path": "a.txt", "content": NEW})],
        {"a.txt": OLD},
        {"a.txt": NEW},
    ),
    Scenario(
        "edit",
        [
            tool_call("read_file", {"path": "a.txt"}),
            tool_call("edit_file", {"path": "a.txt", "old_string": "line two", "new_string": "2"}),
        ],
        {"a.txt": OLD},
        {"a.txt": "old content\r\n2\n"},
    ),
    Scenario(
        "move",
        [tool_call("move_file", {"source": "a.txt", "destination": "sub/b.txt"})],
        {"a.txt": OLD},
        {"a.txt": None, "sub/b.txt": OLD},
    ),
    Scenario(
        "move_over",
        [tool_call("move_file", {"source": "a.txt", "destination": "b.txt", "overwrite": True})],
        {"a.txt": OLD, "b.txt": OTHER},
        {"a.txt": None, "b.txt": OLD},
    ),
    Scenario(
        "mkdir",
        [tool_call("create_directory", {"path": "new/deeper/dirs"})],
        {},
        {"new/deeper/dirs/": ""},
    ),
    Scenario(
        "delete",
        [tool_call("delete_file", {"path": "a.txt"})],
        {"a.txt": OLD},
        {"a.txt": None},
    ),
]


@dataclass
class World:
    root: Path
    ollama: FakeOllama

    @property
    def ws(self) -> Path:
        return self.root / "ws"

    @property
    def home(self) -> Path:
        return self.root / "home"

    def env(self) -> dict[str, str]:
        home = str(self.home)
        return {
            **os.environ,
            "HOME": home,
            "XDG_CONFIG_HOME": f"{home}/.config",
            "XDG_STATE_HOME": f"{home}/.local/state",
            "XDG_DATA_HOME": f"{home}/.local/share",
            "OLLAMA_HOST": self.ollama.url,
        }

    def fresh(self, scenario: Scenario) -> None:
        shutil.rmtree(self.root, ignore_errors=True)
        self.ws.mkdir(parents=True)
        self.home.mkdir()
        (self.root / "agent.yaml").write_text(POLICY)
        for rel, text in scenario.before.items():
            (self.ws / rel).write_bytes(text.encode())

    def agent(
        self, *args: str, strace: list[str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "cli", *args]
        if strace is not None:
            argv = [STRACE or "strace", "-f", "-qq", *strace, *argv]
        return subprocess.run(
            argv, cwd=self.ws, env=self.env(), capture_output=True, text=True, timeout=120
        )

    def run_change(self, scenario: Scenario, strace: list[str] | None = None) -> Any:
        self.ollama.forget()
        for call in scenario.calls:
            self.ollama.enqueue(reply(tool_calls=[call]))
        self.ollama.enqueue(reply("done"))
        config = str(self.root / "agent.yaml")
        return self.agent("run", "--yes", "-c", config, "go", strace=strace)

    def files(self, scenario: Scenario) -> dict[str, str | None]:
        out: dict[str, str | None] = {}
        for rel in {*scenario.before, *scenario.after}:
            path = self.ws / rel
            if rel.endswith("/"):  # a directory: "" when it is there
                out[rel] = "" if path.is_dir() else None
            else:
                out[rel] = path.read_bytes().decode() if path.exists() else None
        return out

    def live_changes(self) -> list[dict[str, Any]]:
        """The changes history shows that no undo took back (after any recovery)."""
        done = self.agent("history", "--json")
        records = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
        undone = {r["undoes"] for r in records if r.get("undoes")}
        return [r for r in records if r["id"] not in undone and r["tool"] != "undo"]

    def temp_files(self) -> list[str]:
        return [p.name for p in self.ws.rglob(".metona-tmp.*")]


@pytest.fixture
def world(tmp_path: Path, ollama: FakeOllama) -> World:
    return World(tmp_path / "world", ollama)


def kill_points(world: World, scenario: Scenario) -> list[tuple[str, int]]:
    """Every (syscall, nth call) of the change's run, from a traced run that completes."""
    world.fresh(scenario)
    log = world.root / "trace"
    done = world.run_change(scenario, strace=["-o", str(log), "-e", f"trace={','.join(KILL_AT)}"])
    assert done.returncode == 0, done.stderr
    assert world.files(scenario) == scenario.after, "the traced run did not make the change"
    counts: collections.Counter[str] = collections.Counter()
    for line in log.read_text().splitlines():
        name = re.sub(r"^\d+\s+", "", line).split("(", 1)[0]
        if name in KILL_AT:
            counts[name] += 1
    return [(name, n) for name in KILL_AT for n in range(1, counts[name] + 1)]


def check_invariant(world: World, scenario: Scenario, point: tuple[str, int]) -> str:
    """After a kill: unchanged (and no live change for it), or changed and undone by
    `agent undo`. Returns which, for the tally."""
    live = world.live_changes()  # a new process: recovers what the dead one left in flight
    now = world.files(scenario)
    before = {rel: scenario.before.get(rel) for rel in now}
    assert world.temp_files() == [], (point, world.temp_files())
    if now == before:
        assert live == [], (point, "unchanged, yet history shows a change", live)
        return "unchanged"
    assert now == scenario.after, (point, "neither before nor after", now)
    assert live, (point, "changed, and history does not know it", now)
    undone = world.agent("undo", "--yes")
    assert undone.returncode == 0, (point, undone.stderr)
    assert world.files(scenario) == before, (point, "undo did not restore it")
    return "changed and undone"


# A sweep of many real runs: on a loaded machine it can take minutes. The bound is a backstop
# against a hang (the runs have their own), not a timing assertion.
@pytest.mark.timeout(900)
@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
def test_a_kill_at_every_fsync_rename_and_lock_loses_nothing(
    world: World, scenario: Scenario
) -> None:
    points = kill_points(world, scenario)
    assert len(points) == KILL_POINTS[scenario.name], points
    tally: collections.Counter[str] = collections.Counter()
    for name, nth in points:
        world.fresh(scenario)
        inject = f"inject={name}:signal=SIGKILL:when={nth}"
        killed = world.run_change(
            scenario, strace=["-o", "/dev/null", "-e", f"trace={name}", "-e", inject]
        )
        assert killed.returncode != 0, (name, nth, "the run was not killed")
        tally[check_invariant(world, scenario, (name, nth))] += 1
    assert sum(tally.values()) == len(points)
    # Killed before it and after it: both ends of the change were met.
    assert tally["unchanged"] and tally["changed and undone"], tally
