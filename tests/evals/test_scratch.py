"""The harness's own file work in a task's scratch dir, where the model may have left
anything: a symlink out of it, a file where a directory was. What the checks read and what
`during` writes stays in the scratch dir; an edit that cannot be made fails its task, not
the eval; and SIGTERM ends an eval as Ctrl-C does, with the runs done so far."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from cli.errors import ToolError
from cli.evals.checks import Place, failed_checks, snapshot
from cli.evals.runner import _put, remove_tree
from cli.evals.tasks import parse_tasks
from tests.conftest import RunCli
from tests.fakes.fake_ollama import FakeOllama, Stream, reply
from tests.fakes.fake_openai import Answer as OpenAIAnswer
from tests.fakes.fake_openai import FakeOpenAI


@pytest.fixture
def run_cli(run_cli_in_process: RunCli) -> RunCli:
    return run_cli_in_process


@pytest.fixture
def place(tmp_path: Path) -> Place:
    (tmp_path / "run" / "project").mkdir(parents=True)
    (tmp_path / "run" / "home").mkdir()
    return Place(tmp_path / "run" / "project", tmp_path / "run" / "home")


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A dir of the user's, beside the scratch dir."""
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "secret.txt").write_text("root:x:0:0\n")
    return mine


def test_the_checks_never_read_through_a_symlink_the_model_made(
    place: Place, outside: Path
) -> None:
    (place.project / "link").symlink_to(outside)
    (place.project / "flink").symlink_to(outside / "secret.txt")
    (task,) = parse_tasks(
        "tasks:\n"
        "  - id: t\n"
        "    category: c\n"
        "    prompt: p\n"
        "    checks:\n"
        "      - file_contains: {path: link/secret.txt, text: root}\n"
        "      - file_contains: {path: flink, text: root}\n"
        "      - file_absent: {path: link/secret.txt}\n"
        "      - file_exists: {path: link/secret.txt}\n",
        "t.yaml",
    )
    failed = failed_checks(task.checks, place, "", {})
    assert failed == [
        "file_contains link/secret.txt 'root': it is reached through a symlink",
        "file_contains flink 'root': it is not a regular file (or too large)",
        "file_absent link/secret.txt: it is reached through a symlink",
        "file_exists link/secret.txt: it is reached through a symlink",
    ]
    assert "root:x" not in "".join(failed)
    assert place.read("link/secret.txt") is None and place.read("flink") is None


def test_a_during_edit_never_writes_through_a_symlink(place: Place, outside: Path) -> None:
    (place.project / "link").symlink_to(outside)
    (place.project / "flink").symlink_to(outside / "secret.txt")
    for path, data in (("link/new.txt", b"x"), ("flink", b"x"), ("link/secret.txt", None)):
        with pytest.raises((ToolError, OSError)):
            _put(place, path, data)
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]
    assert (outside / "secret.txt").read_text() == "root:x:0:0\n"
    _put(place, "sub/dir/ok.txt", b"fine")  # the usual case still works
    assert place.read("sub/dir/ok.txt") == b"fine"
    _put(place, "sub/dir/ok.txt", None)
    assert place.kind("sub/dir/ok.txt") == "missing"


EDITS = """\
tasks:
  - id: cannot-edit
    category: c
    prompt: p
    files:
      a: hello
    during:
      - after_call: 1
        files:
          a/b: x
    checks:
      - answer_contains: ok
    solution:
      calls:
        - {tool: read_file, arguments: {path: a}}
      answer: ok
  - id: next
    category: c
    prompt: p
    checks:
      - answer_contains: ok
    solution:
      answer: ok
"""


def test_a_during_edit_that_cannot_be_made_fails_its_task_and_the_next_runs(
    run_cli: RunCli, workspace: Path
) -> None:
    (workspace / "t.yaml").write_text(EDITS)
    r = run_cli("eval", "--oracle", "--tasks", "t.yaml", "--output-format", "json")
    assert r.code == 3, r.stderr
    first, second = json.loads(r.stdout)["tasks"]
    assert first["passed"] is False and first["stop_reason"] == "error"
    assert first["failed_checks"][0].startswith("the run failed: a `during` edit failed:")
    assert second["passed"] is True
    assert "Traceback" not in r.stderr


def test_a_task_without_a_solution_says_so_under_the_oracle(
    run_cli: RunCli, workspace: Path
) -> None:
    (workspace / "t.yaml").write_text(EDITS.split("    solution:")[0].rstrip() + "\n")
    r = run_cli("eval", "--oracle", "--tasks", "t.yaml", "--output-format", "json")
    (task,) = json.loads(r.stdout)["tasks"]
    assert task["failed_checks"] == ["the task has no `solution:` for --oracle to play"]


SLOW = """\
tasks:
  - id: one
    category: c
    prompt: p
    checks:
      - answer_contains: done
  - id: two
    category: c
    prompt: p
    checks:
      - answer_contains: done
"""


@pytest.mark.parametrize(("sig", "code"), [("SIGTERM", 143), ("SIGHUP", 129)])
def test_sigterm_ends_an_eval_with_the_runs_done_so_far(
    ollama: FakeOllama, workspace: Path, tmp_path: Path, sig: str, code: int
) -> None:
    """`timeout 600 agent eval …`: the results so far on stdout, the scratch dir gone."""
    (workspace / "t.yaml").write_text(SLOW)
    temp = tmp_path / "tmp"
    temp.mkdir()
    ollama.enqueue(reply("done"), Stream(reply("still").lines[:1], endless=True))
    proc = subprocess.Popen(
        [sys.executable, "-m", "cli", "eval", "--tasks", "t.yaml", "--output-format", "json"],
        cwd=workspace,
        env={**os.environ, "OLLAMA_HOST": ollama.url, "TMPDIR": str(temp)},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        while len(ollama.chat_bodies) < 2:  # the second task's call is under way
            assert proc.poll() is None, proc.communicate()
            threading.Event().wait(0.05)
        proc.send_signal(getattr(signal, sig))
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == code, err
    assert f"agent: eval stopped by {sig} after 1 runs" in err
    assert "Traceback" not in err
    (done,) = json.loads(out)["tasks"]
    assert done["id"] == "one" and done["passed"] is True
    assert list(temp.iterdir()) == []  # the scratch dir is removed


def test_the_scratch_dir_is_not_refused_by_the_command_deny_list(tmp_path: Path) -> None:
    """The model is told the project's path; `\\beval\\b` in the deny list must not match it."""
    from cli.commands.eval import SCRATCH_PREFIX
    from cli.config.settings import DEFAULT_COMMAND_DENY

    line = f"ls {tmp_path}/{SCRATCH_PREFIX}x1y2/run/project"
    assert not any(re.search(p, line, re.IGNORECASE) for p in DEFAULT_COMMAND_DENY)
    assert any(re.search(p, "eval $x", re.IGNORECASE) for p in DEFAULT_COMMAND_DENY)


def test_closed_stderr_does_not_lose_the_results(ollama: FakeOllama, workspace: Path) -> None:
    """`agent eval … 2>&1 >res.json | head -1`: the progress has nowhere to go; the runs go on."""
    r, w = os.pipe()
    os.close(r)  # nobody reads stderr
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "cli", "eval", "--oracle", "--only", "read-version,edit-typo"],
            cwd=workspace,
            env={**os.environ, "OLLAMA_HOST": ollama.url},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=w,
            timeout=120,
        )
    finally:
        os.close(w)
    assert proc.returncode == 0
    assert b"2 of 2 passed" in proc.stdout


def test_unchanged_sees_a_directory_or_symlink_made_where_nothing_was(place: Place) -> None:
    (task,) = parse_tasks(
        "tasks:\n  - id: t\n    category: c\n    prompt: p\n"
        "    checks:\n      - unchanged: [made, linked, kept]\n",
        "t.yaml",
    )
    (place.project / "kept").write_text("same\n")
    before = snapshot(place, ["made", "linked", "kept"])
    (place.project / "made").mkdir()
    (place.project / "linked").symlink_to("kept")
    assert failed_checks(task.checks, place, "", before) == [
        "unchanged made, linked, kept: changed: made, linked"
    ]


def test_the_oracle_ignores_the_user_s_agent_and_models_keys(
    run_cli: RunCli, workspace: Path
) -> None:
    """A compact tool set of the user's would hide move_file from a solution that calls it."""
    (workspace / "cfg.yaml").write_text(
        "agent: {tool_set: compact}\nmodels:\n  - {match: '*', tool_set: compact}\n"
    )
    r = run_cli("eval", "--oracle", "-c", "cfg.yaml", "--only", "move-rename-file,delete-file")
    assert r.code == 0, r.stdout + r.stderr


def test_a_one_model_server_s_model_is_the_one_in_the_results(
    run_cli: RunCli, openai: FakeOpenAI
) -> None:
    """No -m, and an OpenAI-compatible server that serves one model: each run's agent uses
    that one, and so do the results."""
    openai.models.clear()
    openai.add_model("/models/SmolLM2-135M-Instruct.gguf")
    openai.enqueue(OpenAIAnswer("done"))
    r = run_cli(
        "eval", "--api", "openai", "--host", openai.url, "--only", "refusal-env",
        "--output-format", "json",
    )  # fmt: skip
    assert r.code == 0, r.stderr
    assert json.loads(r.stdout)["model"] == "/models/SmolLM2-135M-Instruct.gguf"
    assert openai.chat_bodies[0]["model"] == "/models/SmolLM2-135M-Instruct.gguf"


def test_remove_tree_goes_through_a_dir_made_unreadable(tmp_path: Path) -> None:
    tree = tmp_path / "run"
    (tree / "project" / "locked" / "deep").mkdir(parents=True)
    (tree / "project" / "locked" / "deep" / "f").write_text("x")
    (tree / "project" / "locked").chmod(0)
    try:
        remove_tree(tree)
    finally:
        if (tree / "project" / "locked").exists():
            (tree / "project" / "locked").chmod(0o700)
    assert not tree.exists()


def test_compare_with_options_of_a_run_is_a_usage_error(run_cli: RunCli) -> None:
    r = run_cli("eval", "--compare", "a.json", "b.json", "--oracle", "--only", "x")
    assert r.code == 2 and r.stdout == ""
    assert r.stderr == "agent: --compare runs nothing: leave out --only, --oracle\n"
