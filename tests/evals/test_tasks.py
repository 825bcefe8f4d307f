"""Task files: the built-in suite's coverage, and every way a task file can be wrong, each
refused in one line that names the file, the line, the task and the key."""

from __future__ import annotations

import collections
import os
from pathlib import Path

import pytest

from cli.errors import ConfigError
from cli.evals.tasks import CHECKS, TASK_KEYS, builtin_suite, load_tasks, parse_tasks, select

SUITE = builtin_suite()

# What the issue asks the suite to cover, by category.
COVERED = {
    "read",
    "search",
    "count",
    "create",
    "edit",
    "multi-edit",
    "move",
    "tree",
    "delete",
    "multi-step",
    "long-file",
    "git",
    "unicode",
    "recovery",
    "refusal",
    "conflict",
}


def test_the_built_in_suite_has_at_least_40_tasks_covering_every_kind_of_work() -> None:
    assert len(SUITE) >= 40
    assert {task.category for task in SUITE} == COVERED
    assert all(task.solution is not None and task.solution.answer for task in SUITE)
    ids = [task.id for task in SUITE]
    assert len(ids) == len(set(ids))


def test_the_suite_has_what_the_hard_kinds_need() -> None:
    by_id = {task.id: task for task in SUITE}
    # A git history with staged and unstaged changes.
    staged = by_id["git-what-staged"].git
    assert staged is not None and staged.stage == ("b.txt",)
    # Non-ASCII contents and names.
    assert any(any(ord(c) > 0x3000 for c in path) for t in SUITE for path in t.files)
    # A file longer than one read window (500 lines).
    assert by_id["long-last-line"].files["server.log"].count(b"\n") > 500
    # A change under the model, a delete the policy lets run unattended, a secret to refuse.
    assert by_id["conflict-changed-meanwhile"].during
    assert "delete_file" in by_id["delete-file"].policy.unattended
    assert any(c.kind == "answer_excludes" for c in by_id["refusal-env"].checks)
    # Binary contents as base64.
    assert by_id["move-into-folder"].files["logo.png"].startswith(b"\x89PNG")


def test_the_tasks_that_expect_no_change_are_the_refusals() -> None:
    """The ones a model that only answers "done" passes (tests/evals/test_eval_command.py)."""
    quiet = sorted(task.id for task in SUITE if task.expects_no_change)
    assert quiet == ["refusal-env", "refusal-outside-project", "refusal-ssh-key"]


def test_every_check_kind_is_used_by_the_suite() -> None:
    used = collections.Counter(check.kind for task in SUITE for check in task.checks)
    assert set(used) == set(CHECKS)


GOOD = """\
tasks:
  - id: one
    category: read
    prompt: What is in a.txt?
    files:
      a.txt: hello
    checks:
      - answer_contains: hello
"""


def test_a_minimal_task_reads() -> None:
    (task,) = parse_tasks(GOOD, "t.yaml")
    assert task.id == "one" and task.files == {"a.txt": b"hello"}
    assert task.source == "t.yaml, line 2"
    assert task.max_steps == 10 and task.solution is None and task.git is None
    assert task.policy.unattended == ["write_file", "edit_file", "create_directory"]


BAD = [
    ("top-level", "oops: []\n", "tasks t.yaml: the top level must be one key, `tasks:`"),
    ("empty-list", "tasks: []\n", "`tasks:` must be a list of tasks"),
    (
        "unknown-key",
        GOOD + "    prompts: x\n",
        "tasks t.yaml, line 9: task 'one' prompts: unknown key; a task has: "
        + ", ".join(TASK_KEYS),
    ),
    (
        "unknown-check",
        GOOD + "      - file_has: {path: a.txt, text: x}\n",
        "tasks t.yaml, line 9: task 'one' checks.1.file_has: unknown check; the checks are:",
    ),
    ("no-id", GOOD.replace("id: one", "name: one"), "task 1 id: `id` is required"),
    (
        "bad-id",
        GOOD.replace("id: one", "id: One Two"),
        "task 1 id: `id` cannot be a string ('One Two'): 1 to 80 lowercase letters",
    ),
    ("number-id", GOOD.replace("id: one", "id: 5"), "`id` cannot be a number (5)"),
    (
        "list-category",
        GOOD.replace("category: read", "category: [read]"),
        "task 'one' category: `category` must be text, not a list",
    ),
    (
        "two-key-check",
        GOOD.replace("answer_contains: hello", "{answer_contains: a, answer_excludes: b}"),
        "each check is a mapping of one key, the check, to its argument; got 2 keys",
    ),
    ("empty-tasks", "tasks: []\n", "`tasks:` must be a list of tasks, got an empty list"),
    # git reads a repository's own config as commands to run (core.fsmonitor, hooks)
    (
        "git-config",
        GOOD.replace("a.txt: hello", ".git/config: '[core]'"),
        "path '.git/config': a task writes nothing in .git; say `git: true`",
    ),
    ("git-dir-case", GOOD.replace("a.txt: hello", "sub/.GIT/hooks/x: x"), "nothing in .git"),
    (
        "stage-outside",
        GOOD + "    git: {stage: [../b]}\n",
        "git.stage: path '../b': stage only the project's own files or changes",
    ),
    ("stage-unknown", GOOD + "    git: {stage: [nope.txt]}\n", "path 'nope.txt': stage only"),
    # a task's policy opens nothing outside its scratch dir
    (
        "policy-dir-outside",
        GOOD + "    policy: {allowed_dirs: [., /home]}\n",
        "task 'one' policy.allowed_dirs: '/home' is outside the task's scratch dir",
    ),
    (
        "policy-dir-up",
        GOOD + "    policy: {allowed_dirs: [../../..]}\n",
        "'../../..' is outside the task's scratch dir",
    ),
    (
        "policy-home-up",
        GOOD + "    policy: {allowed_dirs: ['~/../..']}\n",
        "'~/../..' is outside",
    ),
    (
        "policy-read-only",
        GOOD + "    policy: {commands: {read_only: [/work]}}\n",
        "policy.commands.read_only: '/work' is outside the task's scratch dir",
    ),
    (
        "policy-no-sandbox",
        GOOD + '    policy: {commands: {sandbox: "off"}}\n',
        "policy.commands.sandbox: a task's commands run in the sandbox",
    ),
    ("no-prompt", GOOD.replace("    prompt: What is in a.txt?\n", ""), "`prompt` is required"),
    ("no-checks", GOOD.split("    checks:")[0], "`checks` is required"),
    (
        "absolute-path",
        GOOD.replace("a.txt: hello", "/etc/passwd: x"),
        "task 'one' files./etc/passwd: path '/etc/passwd': give it relative to the project",
    ),
    ("dot-dot", GOOD.replace("a.txt: hello", "../../x: x"), "path '../../x'"),
    ("inner-dot-dot", GOOD.replace("a.txt: hello", "a/../../x: x"), "path 'a/../../x'"),
    ("bad-base64", GOOD.replace("a.txt: hello", "a.bin: {base64: '!!'}"), "not valid base64"),
    (
        "check-args",
        GOOD.replace("answer_contains: hello", "file_equals: {path: a.txt}"),
        "file_equals takes {path: …, text: …}",
    ),
    (
        "bad-regex",
        GOOD.replace("answer_contains: hello", "answer_matches: '('"),
        "not a valid regular expression",
    ),
    (
        "bad-policy",
        GOOD + "    policy: {confirm: sometimes}\n",
        "tasks t.yaml, line 9: task 'one' policy.confirm: expected one of all, write-only, none",
    ),
    (
        "bad-solution-tool",
        GOOD + "    solution: {calls: [{tool: rm_rf, arguments: {}}], answer: x}\n",
        "unknown tool 'rm_rf'",
    ),
    ("bad-git", GOOD + "    git: {branch: x}\n", "expected true, or a mapping with `changes`"),
    (
        "yaml-date-argument",
        GOOD + "    solution: {calls: [{tool: read_file, arguments: {path: 2024-01-01}}]}\n",
        "solution.calls.0: arguments: JSON values only (quote it)",
    ),
    (
        "bad-during",
        GOOD + "    during: [{after_call: 0, files: {}}]\n",
        "after_call: a whole number of at least 1",
    ),
    ("bad-steps", GOOD + "    max_steps: 0\n", "max_steps: a whole number from 1 to 100"),
    ("alias", GOOD + "    category: *x\n", "YAML aliases (*name) are not supported"),
    ("twice", GOOD + "    id: two\n", "key 'tasks.0.id' appears twice"),
    ("not-yaml", "tasks: [\n", "tasks t.yaml, line 2: invalid YAML"),
]


@pytest.mark.parametrize(("text", "message"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_a_bad_task_file_is_one_line_naming_where(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_tasks(text, "t.yaml")
    assert message in caught.value.message
    assert "\n" not in caught.value.message


def test_a_directory_of_task_files_and_its_errors(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(GOOD)
    (tmp_path / "b.yml").write_text(GOOD.replace("id: one", "id: two"))
    (tmp_path / "notes.txt").write_text("not a task file")
    assert [t.id for t in load_tasks(str(tmp_path))] == ["one", "two"]
    (tmp_path / "c.yaml").write_text(GOOD)
    with pytest.raises(ConfigError, match="task 'one' has the id of the task at"):
        load_tasks(str(tmp_path))
    with pytest.raises(ConfigError, match="no such file or directory"):
        load_tasks(str(tmp_path / "missing"))
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ConfigError, match=r"holds no \.yaml task file"):
        load_tasks(str(empty))
    (tmp_path / "big.yaml").write_bytes(b"#" * (5 * 1024 * 1024))
    with pytest.raises(ConfigError, match=r"big\.yaml"):
        load_tasks(str(tmp_path / "big.yaml"))


def test_only_picks_tasks_in_suite_order_and_names_unknown_ids() -> None:
    assert [t.id for t in select(SUITE, "edit-typo,read-version")] == [
        "read-version",
        "edit-typo",
    ]
    with pytest.raises(ConfigError, match="no task 'nope'"):
        select(SUITE, "read-version,nope")
    for nothing in (",", " ", ""):
        with pytest.raises(ConfigError, match="--only: give task ids"):
            select(SUITE, nothing)


def test_a_policy_may_open_dirs_inside_the_scratch_dir() -> None:
    text = (
        GOOD + "    policy: {allowed_dirs: [., .., sub, '~', '~/notes'], unattended: [read_file]}\n"
    )
    (task,) = parse_tasks(text, "t.yaml")
    assert task.policy.allowed_dirs == [".", "..", "sub", "~", "~/notes"]


def test_tasks_paths_that_are_no_task_file(tmp_path: Path) -> None:
    for where, said in (
        ("", "--tasks: give a task file"),
        ("~no-such-user-here/x", "no such user's home dir"),
        (os.devnull, "not a regular file or a directory"),
    ):
        with pytest.raises(ConfigError, match=said):
            load_tasks(where)
