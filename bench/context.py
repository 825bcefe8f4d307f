"""What every figure runs in: a temp dir (homes, workspaces), the fake Ollama on 127.0.0.1,
the environment children get, the config the agent is built from, and the results so far."""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from bench import fixtures
from bench.measure import REPO

if str(REPO) not in sys.path:  # the fake server lives with the tests
    sys.path.insert(0, str(REPO))

from tests.fakes.fake_ollama import FakeOllama

BIN = Path(sys.executable).parent
AGENT = BIN / "agent"  # the console script, as a user runs it


def find_rg() -> str | None:
    """ripgrep: on PATH, or beside this Python (the `ripgrep` wheel installs it there)."""
    found = shutil.which("rg")
    if found:
        return found
    beside = BIN / "rg"
    return str(beside) if beside.exists() else None


def child_env(home: Path, **extra: str) -> dict[str, str]:
    """A child's environment: HOME and the XDG dirs in `home`, so that no user config,
    session or change store is read or written, and nothing else of the caller's (no
    OLLAMA_*, no PYTHON*) but PATH, with the venv's bin dir first (ripgrep)."""
    path = os.pathsep.join([str(BIN), os.environ.get("PATH", "/usr/bin:/bin")])
    env = {
        "PATH": path,
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_STATE_HOME": str(home / ".local" / "state"),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "LC_ALL": "C.UTF-8",
        "COLUMNS": "100",
        "TMPDIR": os.environ.get("TMPDIR", "/tmp"),
    }
    return {**env, **extra}


@dataclass
class Bench:
    quick: bool
    runs: int
    temp: Path
    fake: FakeOllama
    say: Callable[[str], None] = print
    trees: list[fixtures.Tree] = field(default_factory=list)
    # The scaling chart's points: (chart, series, files) → median seconds.
    points: dict[tuple[str, str, int], float] = field(default_factory=dict)

    def dir(self, name: str) -> Path:
        """A new, empty directory in the temp dir."""
        path = self.temp / name
        shutil.rmtree(path, ignore_errors=True)
        path.mkdir(parents=True)
        return path

    def reset_fake(self) -> None:
        """No request recorded, nothing scripted: each run starts from nothing."""
        while self.fake.pending:
            self.fake.next_response()
        self.fake.requests.clear()

    @property
    def tree(self) -> fixtures.Tree:
        """The tree every single-size figure runs on (the smallest of the scaling chart)."""
        return self.trees[0]


def tool_config() -> str:
    """The agent's config for the tree figures: limits raised so that the whole tree is
    walked and every match kept (the defaults stop a walk at 10,000 entries and 500
    results, which would time a truncated search), and no blocked dir that holds the
    cache of trees (as root, the cache is in /root, which the defaults block)."""
    from cli.config.settings import PolicyConfig
    from cli.fs.paths import is_within

    cache = str(fixtures.cache_root().resolve())
    blocked = [
        d for d in PolicyConfig().blocked_dirs if d.startswith("~") or not is_within(cache, d)
    ]
    many = 100_000_000
    policy: dict[str, Any] = {
        "blocked_dirs": blocked,
        "limits": {
            "max_search_files": many,
            "max_search_results": many,
            "search_results": many,
            "max_list_entries": many,
            "list_depth": 64,
        },
    }
    return yaml.safe_dump({"policy": policy}, sort_keys=False)


@contextlib.contextmanager
def session(quick: bool, runs: int, say: Callable[[str], None] = print) -> Iterator[Bench]:
    """A Bench whose temp dir and fake server are gone afterwards, whatever happened."""
    fake = FakeOllama().start()
    temp = Path(tempfile.mkdtemp(prefix="metona-bench-"))
    try:
        yield Bench(quick, runs, temp, fake, say)
    finally:
        fake.stop()
        shutil.rmtree(temp, ignore_errors=True)
