"""A full disk loses nothing (README "Safety"): the agent's state dir on a small tmpfs in a
private mount namespace, filled to leave a sweep of free bytes, so that the backup, the notes
of a change in flight, the journal line, the temp file and the rename each meet the full disk
at some level. After each: the file is unchanged and no history names the change, or changed
and undone by `agent undo`; the journal reads; the next change, once there is room again,
gets a new id and is in history (a torn journal line once made it share an id and vanish).

Runs as root (mount needs it: CI runs as root); elsewhere it skips with the reason."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO

UNSHARE = shutil.which("unshare")
pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or UNSHARE is None,
    reason="needs root and unshare(1) for a tmpfs in a private mount namespace",
)

PAGE = 4096
LEVELS = [0, *range(4 * PAGE, 10 * PAGE, PAGE), 16 * PAGE]  # free bytes left on the disk
# Where each case meets the full disk as the levels go up (the old content takes five pages,
# each note of a write or change in flight one, the journal's next line one: it is padded to
# end a page): each reason must be among the failures, or the sweep missed a step.
CASES = {
    ("overwrite", "apart"): (
        "keep the old content",
        "note the write in flight",
        "note the change in flight",
        "record the change",
    ),
    # The project on the full disk too: the temp file beside the file meets it.
    ("overwrite", "together"): ("keep the old content", "a.txt: No space left on device"),
    ("delete", "apart"): ("the trash (in the agent's state dir) has no room", "note the change"),
    ("delete", "together"): ("note the change in flight",),
}


def sweep(tmp_path: Path, scenario: str, place: str) -> list[dict[str, Any]]:
    root = Path(os.path.realpath("/var/tmp")) / f"metona-disk-{os.getpid()}-{scenario}-{place}"
    argv = [UNSHARE or "unshare", "-m", "--propagation", "private", sys.executable, "-m"]
    argv += ["tests.fakes.full_disk_driver", str(root), scenario, place, *map(str, LEVELS)]
    try:
        done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=600)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    assert done.returncode == 0, done.stderr[-2000:]
    return [json.loads(line) for line in done.stdout.splitlines()]


# A sweep of many real runs: on a loaded machine it can take minutes. The bound is a backstop
# against a hang (the runs have their own), not a timing assertion.
@pytest.mark.timeout(900)
@pytest.mark.parametrize(("scenario", "place"), list(CASES), ids=["-".join(c) for c in CASES])
def test_a_full_disk_at_every_step_loses_nothing(tmp_path: Path, scenario: str, place: str) -> None:
    results = sweep(tmp_path, scenario, place)
    assert [r["free"] for r in results] == LEVELS
    outcomes = []
    for r in results:
        level = r["free"]
        assert r["first"] == 0 and r["history_code"] == 0, (level, r)
        if r["now"] == "old":  # not made: nothing names it
            assert r["live"] == [], (level, "unchanged, yet in history", r)
            assert r["undone"] is None
            outcomes.append(r["run_err"])
        else:  # made, and undone
            assert r["now"] == r["expected_after"], (level, r)
            assert r["live"], (level, "changed, and history does not know it", r)
            assert r["undone"] is not None and r["undone"][:2] == [0, True], (level, r)
        assert "Traceback" not in r["run_err"], (level, r["run_err"])
        # Room again: the next change is made, with an id no other record has, and listed.
        assert r["next"] == 0 and r["after_code"] == 0 and r["next_recorded"], (level, r)
        assert len(set(r["ids"])) == len(r["ids"]), (level, r["ids"])
        for line in r["journal_lines"]:
            assert not line.strip() or json.loads(line), (level, "a torn journal line", line)
    # Every level from the emptiest failed cleanly; the fullest room let the change through.
    assert results[0]["now"] == "old" and results[-1]["now"] != "old", results
    assert all("No space left on device" in e for e in outcomes), outcomes
    for step in CASES[scenario, place]:
        assert any(step in e for e in outcomes), (step, "no level met it", outcomes)
