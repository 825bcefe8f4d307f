"""Runs inside a private mount namespace (`unshare -m`, as root): puts the agent's state dir
(and, with PLACE "together", the project too) on a small tmpfs, fills it to leave FREE bytes,
makes one change through the real `agent run`, frees the space, and reports as JSON what
became of the file, the journal and the next change; one JSON line per FREE level.

    unshare -m --propagation private \
        python -m tests.fakes.full_disk_driver ROOT SCENARIO PLACE FREE...

The tmpfs (and whatever is on it) goes with the namespace. The fake Ollama runs in this
process, so each run's replies are its own.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.fakes.fake_ollama import FakeOllama, reply, tool_call

SIZE = 512 * 1024  # the state dir's tmpfs
BIG = "x" * 20_000 + "\n"  # the old content: a backup of it needs five pages
POLICY = (
    "policy:\n  unattended: [write_file, move_file, delete_file]\n  tools: {delete_file: ask}\n"
)
SCENARIOS: dict[str, dict[str, Any]] = {
    "overwrite": {"call": ("write_file", {"path": "a.txt", "content": "new\n"}), "after": "new\n"},
    "delete": {"call": ("delete_file", {"path": "a.txt"}), "after": None},
}


def main(root: Path, scenario: str, place: str, free: int, ollama: FakeOllama) -> dict[str, Any]:
    disk = root / "disk"
    disk.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={SIZE}", "tmpfs", str(disk)], check=True)
    try:
        return _one(disk if place == "together" else root, disk, scenario, free, ollama)
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def _one(base: Path, disk: Path, scenario: str, free: int, ollama: FakeOllama) -> dict[str, Any]:
    root, home, ws, state = base, base / "home", base / "ws", disk / "state"
    for made in (home, ws, state):
        made.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "HOME": str(home),
        "XDG_STATE_HOME": str(state),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "OLLAMA_HOST": ollama.url,
    }
    (root / "agent.yaml").write_text(POLICY)

    def agent(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "cli", *args], cwd=ws, env=env, capture_output=True, text=True
        )

    def change(name: str, arguments: dict[str, Any]) -> subprocess.CompletedProcess[str]:
        ollama.forget()
        ollama.enqueue(reply(tool_calls=[tool_call(name, arguments)]), reply("done"))
        return agent("run", "--yes", "--json", "-c", str(root / "agent.yaml"), "go")

    def history() -> tuple[int, list[dict[str, Any]]]:
        done = agent("history", "--json")
        return done.returncode, [json.loads(x) for x in done.stdout.splitlines() if x.strip()]

    # A first change, so that the store and its journal exist before the disk fills.
    (ws / "warm.txt").write_text("one\n")
    first = change("write_file", {"path": "warm.txt", "content": "two\n"})
    # The journal padded (blank lines are passed over) to end just before a page of the
    # tmpfs: the next record then needs a page of its own, so some fill level meets it.
    journal = state / "metona-agent" / "changes" / "journal.jsonl"
    size = journal.stat().st_size
    with open(journal, "ab") as f:
        f.write(b" " * (-size % 4096 - 2 or 4094) + b"\n")
    (ws / "a.txt").write_text(BIG)
    filler = state / "filler"
    stats = os.statvfs(state)
    room = stats.f_bavail * stats.f_frsize
    with open(filler, "wb") as f:
        f.write(b"\0" * max(room - free, 0))
    name, arguments = SCENARIOS[scenario]["call"]
    run = change(name, arguments)
    filler.unlink()
    code, records = history()
    path = ws / "a.txt"
    now = path.read_text() if path.exists() else None
    live = [r for r in records if r["path"] == str(path) and r["tool"] != "undo"]
    undone = None
    if now != BIG and code == 0:
        undo = agent("undo", "--yes")
        undone = (undo.returncode, path.read_text() if path.exists() else None, undo.stderr)
    # The next change, once there is room again: a new id, and in history.
    (ws / "next.txt").write_text("before\n")
    nxt = change("write_file", {"path": "next.txt", "content": "after\n"})
    after_code, after = history()
    return {
        "first": first.returncode,
        "run": run.returncode,
        "run_err": _errors(run.stdout) or run.stderr[-400:],
        "history_code": code,
        "now": "old" if now == BIG else now,
        "expected_after": SCENARIOS[scenario]["after"],
        "live": [r["id"] for r in live],
        "undone": None if undone is None else [undone[0], undone[1] == BIG, undone[2][-300:]],
        "next": nxt.returncode,
        "after_code": after_code,
        "ids": [r["id"] for r in after],
        "next_recorded": any(r["path"] == str(ws / "next.txt") for r in after),
        "journal_lines": _lines(state / "metona-agent" / "changes" / "journal.jsonl"),
    }


def _errors(output: str) -> str:
    """The errors the run's tool calls ended in (`--json`), whole."""
    try:
        calls = json.loads(output)["tool_calls"]
    except (ValueError, KeyError, TypeError):
        return ""
    return "; ".join(str(c.get("result", {}).get("error", "")) for c in calls).strip("; ")


def _lines(journal: Path) -> list[str]:
    try:
        return journal.read_text().splitlines()
    except OSError:
        return []


if __name__ == "__main__":
    where, what, place = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
    server = FakeOllama().start()
    for level in sys.argv[4:]:
        shutil.rmtree(where, ignore_errors=True)
        print(json.dumps({"free": int(level), **main(where, what, place, int(level), server)}))
