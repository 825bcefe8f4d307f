"""git_status and git_diff against real repositories in temp dirs, many of them hostile.

Every hostile case plants a program (a "bait") where a repository's config or attributes
can name one, runs our tool, checks that the bait never ran, and then runs plain git on the
same repository to show that the bait was live: without the hardening it runs.
Real git, real files, the real policy; nothing of ours is mocked.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from cli.config.settings import LimitsConfig, PolicyConfig
from cli.fs import _platform
from cli.fs.paths import resolve_path
from cli.safety.policy import Policy
from cli.tools import ToolContext, run_tool
from cli.tools.base import Tool
from cli.tools.definitions import DIFF_MAX_BYTES, GIT_DIFF, GIT_STATUS
from cli.tools.git_run import TIMEOUT_SECONDS
from cli.tools.schema import validate_arguments

pytestmark = pytest.mark.skipif(
    subprocess.run(["git", "--version"], capture_output=True).returncode != 0,
    reason="git is not installed",
)

Result = dict[str, Any]
SECRET = "hunter2-SECRET-VALUE"


# -- repositories --------------------------------------------------------------------------


@dataclass
class Git:
    """Plain, unhardened git for building repositories and for the control runs."""

    home: Path

    def env(self) -> dict[str, str]:
        return {
            "PATH": os.environ["PATH"],
            "HOME": str(self.home),
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_AUTHOR_NAME": "Test",
            "GIT_AUTHOR_EMAIL": "test@example.com",
            "GIT_COMMITTER_NAME": "Test",
            "GIT_COMMITTER_EMAIL": "test@example.com",
            "LC_ALL": "C",
        }

    def __call__(self, repo: Path, *args: str, check: bool = True) -> str:
        proc = subprocess.run(
            ["git", "-c", "init.defaultBranch=main", "-c", "protocol.file.allow=always", *args],
            cwd=repo,
            env=self.env(),
            capture_output=True,
            stdin=subprocess.DEVNULL,
            timeout=60,
        )
        if check:
            assert proc.returncode == 0, proc.stderr.decode()
        return proc.stdout.decode("utf-8", "replace")

    def init(self, repo: Path, files: dict[str, str] | None = None) -> Path:
        repo.mkdir(parents=True, exist_ok=True)
        self(repo, "init", "-q")
        for name, text in (files or {"README.md": "hello\n"}).items():
            write(repo / name, text)
        self(repo, "add", "-A")
        self(repo, "commit", "-q", "-m", "initial")
        return repo


@pytest.fixture
def git(home: Path) -> Git:
    return Git(home)


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def config(repo: Path, text: str) -> None:
    """Append to the repository's own config, as an attacker's download would carry it."""
    with open(repo / ".git" / "config", "a") as f:
        f.write(text)


def touch_later(path: Path) -> None:
    """Change the mtime only: git must re-read the file (through any filter) to know."""
    later = time.time() + 100
    os.utime(path, (later, later))


@dataclass
class Baits:
    """Programs that write their name to a log when run: what a hostile config names."""

    dir: Path

    @property
    def log(self) -> Path:
        return self.dir / "ran.log"

    def make(self, name: str) -> str:
        script = self.dir / name
        script.write_text(f'#!/bin/sh\necho {name} >> "{self.log}"\nexit 0\n')
        script.chmod(0o755)
        return str(script)

    def ran(self) -> list[str]:
        return self.log.read_text().split() if self.log.exists() else []


@pytest.fixture
def baits(tmp_path: Path) -> Baits:
    where = tmp_path / "baits"
    where.mkdir()
    return Baits(where)


# -- calling the tools ---------------------------------------------------------------------


@dataclass
class Tools:
    """The tools as the agent runs them: schema check, the policy's resolved path, the real
    policy's `hides`, and run_tool turning a ToolError into a failure."""

    policy: Policy
    environ: dict[str, str]
    clock: Callable[[], float] = time.monotonic

    def context(self) -> ToolContext:
        return ToolContext(
            cwd=self.policy.cwd,
            limits=self.policy.config.limits,
            hides=self.policy.hides,
            environ=dict(self.environ),
            clock=self.clock,
            roots=self.policy.allowed_dirs,
        )

    def run(self, tool: Tool, **args: Any) -> Result:
        checked = validate_arguments(args, tool.parameters)
        paths = {}
        if "path" in checked:
            paths["path"] = resolve_path(checked["path"], self.policy.cwd, self.policy.home)
        result = run_tool(tool, self.context(), checked, paths)
        # Whatever the file names, the result is valid JSON text (no lone surrogates).
        json.dumps(result, ensure_ascii=False).encode("utf-8")
        return result

    def status(self, **args: Any) -> Result:
        result = self.run(GIT_STATUS, **args)
        assert result["success"] is True, result
        return result

    def diff(self, **args: Any) -> Result:
        result = self.run(GIT_DIFF, **args)
        assert result["success"] is True, result
        return result

    def fails(self, tool: Tool, **args: Any) -> str:
        result = self.run(tool, **args)
        assert result["success"] is False, result
        error = result["error"]
        assert isinstance(error, str) and "\n" not in error
        return error


MakeTools = Callable[..., Tools]


@pytest.fixture
def make_tools(workspace: Path, home: Path) -> MakeTools:
    def make(
        environ: dict[str, str] | None = None,
        clock: Callable[[], float] = time.monotonic,
        **policy: Any,
    ) -> Tools:
        env = {"PATH": os.environ["PATH"], "HOME": str(home)} if environ is None else environ
        return Tools(Policy(PolicyConfig(**policy), str(workspace), str(home)), env, clock)

    return make


@pytest.fixture
def tools(make_tools: MakeTools) -> Tools:
    return make_tools()


def paths_of(entries: list[dict[str, str]]) -> list[str]:
    return sorted(e["path"] for e in entries)


# -- status and diff of ordinary repositories ------------------------------------------------


def test_a_clean_repository(tools: Tools, git: Git, workspace: Path) -> None:
    git.init(workspace)
    result = tools.status()
    head = git(workspace, "rev-parse", "HEAD").strip()
    assert result["root"] == str(workspace)
    assert result["branch"] == "main"
    assert result["detached"] is False
    assert result["head"] == head[:12]
    assert (result["upstream"], result["ahead"], result["behind"]) == (None, None, None)
    assert result["staged"] == result["unstaged"] == result["untracked"] == []
    assert result["unmerged"] == []
    assert result["clean"] is True and result["truncated"] is False
    assert "note" not in result
    diff = tools.diff()
    assert diff["diff"] == "" and diff["files"] == [] and diff["bytes"] == 0
    assert "staged: true" in diff["note"]


def test_staged_unstaged_untracked_renamed_and_deleted(
    tools: Tools, git: Git, workspace: Path
) -> None:
    names = ["a.txt", "b.txt", "c.txt", "d.txt", "e.txt"]
    git.init(workspace, {n: f"line of {n}\n" * 5 for n in names})
    write(workspace / "a.txt", "changed, not staged\n")
    write(workspace / "b.txt", "staged\n")
    git(workspace, "add", "b.txt")
    write(workspace / "b.txt", "staged, then changed again\n")
    git(workspace, "mv", "c.txt", "c-renamed.txt")
    (workspace / "d.txt").unlink()
    git(workspace, "rm", "-q", "e.txt")
    write(workspace / "new.txt", "untracked\n")
    write(workspace / "newdir" / "inside.txt", "untracked dir\n")
    write(workspace / "added.txt", "added\n")
    git(workspace, "add", "added.txt")

    result = tools.status()
    assert sorted(result["staged"], key=lambda e: e["path"]) == [
        {"path": "added.txt", "status": "added"},
        {"path": "b.txt", "status": "modified"},
        {"path": "c-renamed.txt", "status": "renamed", "from": "c.txt"},
        {"path": "e.txt", "status": "deleted"},
    ]
    assert sorted(result["unstaged"], key=lambda e: e["path"]) == [
        {"path": "a.txt", "status": "modified"},
        {"path": "b.txt", "status": "modified"},
        {"path": "d.txt", "status": "deleted"},
    ]
    assert sorted(result["untracked"]) == ["new.txt", "newdir/"]
    assert result["clean"] is False

    unstaged = tools.diff()
    assert unstaged["files"] == ["a.txt", "b.txt", "d.txt"]
    assert "+changed, not staged" in unstaged["diff"]
    assert "-line of d.txt" in unstaged["diff"]
    assert unstaged["bytes"] == len(unstaged["diff"].encode())
    staged = tools.diff(staged=True)
    assert sorted(staged["files"]) == ["added.txt", "b.txt", "c-renamed.txt", "e.txt"]
    assert "rename from c.txt\nrename to c-renamed.txt" in staged["diff"]
    assert "+staged\n" in staged["diff"]


def test_a_conflict_is_listed_as_unmerged_and_its_diff_shown(
    tools: Tools, git: Git, workspace: Path
) -> None:
    git.init(workspace, {"f.txt": "base\n"})
    git(workspace, "checkout", "-q", "-b", "other")
    write(workspace / "f.txt", "theirs\n")
    git(workspace, "commit", "-q", "-am", "theirs")
    git(workspace, "checkout", "-q", "main")
    write(workspace / "f.txt", "ours\n")
    git(workspace, "commit", "-q", "-am", "ours")
    git(workspace, "merge", "-q", "other", check=False)
    result = tools.status()
    assert result["unmerged"] == [{"path": "f.txt", "status": "both modified"}]
    diff = tools.diff()
    assert diff["files"] == ["f.txt"]
    assert diff["diff"].startswith("diff --cc f.txt")


def test_detached_head(tools: Tools, git: Git, workspace: Path) -> None:
    git.init(workspace)
    git(workspace, "checkout", "-q", "--detach")
    head = git(workspace, "rev-parse", "HEAD").strip()
    result = tools.status()
    assert result["branch"] is None
    assert result["detached"] is True
    assert result["head"] == head[:12]


def test_a_repository_without_commits(tools: Tools, git: Git, workspace: Path) -> None:
    git(workspace, "init", "-q")
    write(workspace / "first.txt", "x\n")
    result = tools.status()
    assert (result["branch"], result["head"], result["detached"]) == ("main", None, False)
    assert result["untracked"] == ["first.txt"]


def test_ahead_and_behind_a_local_upstream(
    tools: Tools, git: Git, workspace: Path, tmp_path: Path
) -> None:
    origin = git.init(tmp_path / "origin")
    clone = workspace / "clone"
    git(workspace, "clone", "-q", str(origin), str(clone))
    write(clone / "mine.txt", "mine\n")
    git(clone, "add", "mine.txt")
    git(clone, "commit", "-q", "-m", "mine")
    for n in range(2):
        write(origin / f"theirs{n}.txt", "theirs\n")
        git(origin, "add", "-A")
        git(origin, "commit", "-q", "-m", f"theirs {n}")
    git(clone, "fetch", "-q")
    result = tools.status(path="clone")
    assert result["upstream"] == "origin/main"
    assert (result["ahead"], result["behind"]) == (1, 2)
    assert result["root"] == str(clone)


def test_path_limits_the_result_to_a_subdirectory_or_a_file(
    tools: Tools, git: Git, workspace: Path
) -> None:
    git.init(workspace, {"top.txt": "t\n", "sub/one.txt": "1\n", "sub/two.txt": "2\n"})
    for name in ("top.txt", "sub/one.txt", "sub/two.txt"):
        write(workspace / name, "changed\n")
    write(workspace / "sub" / "new.txt", "n\n")
    write(workspace / "untracked-top.txt", "n\n")

    result = tools.status(path="sub")
    assert paths_of(result["unstaged"]) == ["sub/one.txt", "sub/two.txt"]
    assert result["untracked"] == ["sub/new.txt"]
    assert result["path"] == "sub"
    assert tools.diff(path="sub")["files"] == ["sub/one.txt", "sub/two.txt"]
    one = tools.diff(path="sub/one.txt")
    assert one["files"] == ["sub/one.txt"]
    assert "two.txt" not in one["diff"]
    # A deleted file can still be named: its directory is where git runs.
    (workspace / "sub" / "two.txt").unlink()
    gone = tools.diff(path="sub/two.txt")
    assert gone["files"] == ["sub/two.txt"] and "deleted file mode" in gone["diff"]


def test_paths_are_shown_relative_to_the_working_directory(
    make_tools: MakeTools, git: Git, workspace: Path, home: Path
) -> None:
    repo = git.init(workspace / "repo", {"src/a.txt": "a\n"})
    write(repo / "src" / "a.txt", "b\n")
    result = make_tools().status(path="repo")
    assert result["unstaged"] == [{"path": "repo/src/a.txt", "status": "modified"}]
    assert result["root"] == str(repo)


def test_weird_file_names(tools: Tools, git: Git, workspace: Path) -> None:
    names = ["with space.txt", "new\nline.txt", "tab\there.txt", 'quote".txt', "ünï.txt"]
    git.init(workspace, {n: "old\n" for n in names})
    latin = os.fsencode(str(workspace)) + b"/caf\xe9.txt"
    with open(latin, "wb") as f:
        f.write(b"old\n")
    git(workspace, "add", "-A")
    git(workspace, "commit", "-q", "-m", "latin")
    for name in names:
        write(workspace / name, "new\n")
    with open(latin, "wb") as f:
        f.write(b"new\n")
    write(workspace / "untracked name\n.txt", "u\n")

    result = tools.status()
    shown = [*names, "caf\\xe9.txt"]
    assert paths_of(result["unstaged"]) == sorted(shown)
    assert result["untracked"] == ["untracked name\n.txt"]
    diff = tools.diff()
    assert sorted(diff["files"]) == sorted(shown)
    assert diff["diff"].count("+new") == len(shown)


def test_a_rename_to_a_name_with_spaces_is_attributed(
    tools: Tools, git: Git, workspace: Path
) -> None:
    git.init(workspace, {"plain.txt": "same content\n" * 20})
    (workspace / "a b").mkdir()
    git(workspace, "mv", "plain.txt", "a b/c d.txt")
    assert tools.diff(staged=True)["files"] == ["a b/c d.txt"]
    assert tools.status()["staged"] == [
        {"path": "a b/c d.txt", "status": "renamed", "from": "plain.txt"}
    ]


# -- refusals ------------------------------------------------------------------------------


def test_not_a_work_tree(tools: Tools, git: Git, workspace: Path, home: Path) -> None:
    (workspace / "plain").mkdir()
    error = tools.fails(GIT_STATUS, path="plain")
    assert error == "plain is not inside a git work tree"
    assert "is not inside a git work tree" in tools.fails(GIT_DIFF)


def test_a_bare_repository_and_the_git_dir_are_not_work_trees(
    tools: Tools, git: Git, workspace: Path
) -> None:
    git(workspace, "init", "-q", "--bare", "bare.git")
    assert "not inside a git work tree" in tools.fails(GIT_STATUS, path="bare.git")
    repo = git.init(workspace / "repo")
    assert "not inside a git work tree" in tools.fails(GIT_DIFF, path="repo/.git")
    assert "not inside a git work tree" in tools.fails(GIT_STATUS, path="repo/.git/refs")
    assert repo.exists()


def test_a_missing_path_is_refused(tools: Tools, git: Git, workspace: Path) -> None:
    git.init(workspace)
    assert "does not exist" in tools.fails(GIT_STATUS, path="no/such/dir")


def test_git_not_installed(
    make_tools: MakeTools, git: Git, workspace: Path, tmp_path: Path
) -> None:
    git.init(workspace)
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    tools = make_tools(environ={"PATH": str(empty)})
    assert "git is not installed" in tools.fails(GIT_STATUS)
    assert "git is not installed" in tools.fails(GIT_DIFF)


def test_a_git_in_a_relative_path_entry_is_never_run(
    make_tools: MakeTools, git: Git, workspace: Path, baits: Baits
) -> None:
    git.init(workspace)
    fake = workspace / "git"
    fake.write_text(f'#!/bin/sh\necho fake-git >> "{baits.log}"\n')
    fake.chmod(0o755)
    tools = make_tools(environ={"PATH": f".:{os.environ['PATH']}:"})
    assert tools.status()["untracked"] == ["git"]
    assert baits.ran() == []


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give the repository away")
def test_a_repository_of_another_user_is_refused_not_trusted(
    tools: Tools, git: Git, workspace: Path
) -> None:
    repo = git.init(workspace / "theirs")
    for dirpath, dirnames, filenames in os.walk(repo):
        for name in [dirpath, *(os.path.join(dirpath, n) for n in dirnames + filenames)]:
            os.lchown(name, 65534, 65534)
    error = tools.fails(GIT_STATUS, path="theirs")
    assert "another user" in error and "safe.directory" in error


def test_a_git_file_pointing_at_another_repository_is_refused(
    tools: Tools, git: Git, workspace: Path, tmp_path: Path
) -> None:
    """The other repository lies outside the allowed dirs: its index and objects would
    otherwise be shown through a project's one-line `.git` file."""
    other = git.init(tmp_path / "elsewhere", {"private.txt": "private\n"})
    write(other / "private.txt", "private change\n")
    git(other, "add", "private.txt")
    (workspace / "proj").mkdir()
    write(workspace / "proj" / ".git", f"gitdir: {other / '.git'}\n")
    for tool in (GIT_STATUS, GIT_DIFF):
        error = tools.fails(tool, path="proj")
        assert "outside the allowed directories" in error


def test_core_worktree_pointing_elsewhere_is_not_a_work_tree(
    tools: Tools, git: Git, workspace: Path, tmp_path: Path
) -> None:
    target = tmp_path / "victim"
    write(target / "private.txt", "x\n")
    repo = git.init(workspace / "evil")
    git(repo, "config", "core.worktree", str(target))
    assert "not inside a git work tree" in tools.fails(GIT_STATUS, path="evil")


def test_the_environment_of_the_agent_does_not_reach_git(
    make_tools: MakeTools, git: Git, workspace: Path, tmp_path: Path, baits: Baits, home: Path
) -> None:
    """GIT_DIR, GIT_WORK_TREE, GIT_CONFIG_* and GIT_EXTERNAL_DIFF in our environment would
    point git at another repository or run programs: the allow list drops them."""
    other = git.init(tmp_path / "other", {"other.txt": "o\n"})
    write(other / "other.txt", "other changed\n")
    git.init(workspace, {"mine.txt": "m\n"})
    write(workspace / "mine.txt", "mine changed\n")
    tools = make_tools(
        environ={
            "PATH": os.environ["PATH"],
            "HOME": str(home),
            "GIT_DIR": str(other / ".git"),
            "GIT_WORK_TREE": str(other),
            "GIT_INDEX_FILE": str(other / ".git" / "index"),
            "GIT_CONFIG_PARAMETERS": f"'core.fsmonitor'='{baits.make('params')}'",
            "GIT_CONFIG_COUNT": "1",
            "GIT_CONFIG_KEY_0": "core.fsmonitor",
            "GIT_CONFIG_VALUE_0": baits.make("count"),
            "GIT_EXTERNAL_DIFF": baits.make("extdiff"),
            "GIT_PAGER": baits.make("pager"),
        }
    )
    assert tools.status()["unstaged"] == [{"path": "mine.txt", "status": "modified"}]
    assert tools.diff()["files"] == ["mine.txt"]
    assert baits.ran() == []


# -- hostile repositories --------------------------------------------------------------------


def test_an_fsmonitor_hook_never_runs(
    tools: Tools, git: Git, workspace: Path, baits: Baits
) -> None:
    git.init(workspace, {"a.txt": "a\n"})
    config(workspace, f"[core]\n\tfsmonitor = {baits.make('fsmonitor')}\n")
    write(workspace / "a.txt", "changed\n")
    tools.status()
    tools.diff()
    assert baits.ran() == []
    git(workspace, "status", check=False)  # control: plain git runs it
    assert "fsmonitor" in baits.ran()


FILTER_CONFIGS = {
    "clean": '[filter "evil"]\n\tclean = {bait}\n',
    "clean-required": '[filter "evil"]\n\tclean = {bait}\n\trequired = true\n',
    "process": '[filter "evil"]\n\tprocess = {bait}\n',
    "odd-name": '[filter "e=v.i"]\n\tclean = {bait}\n\tsmudge = {bait}\n',
    "old-syntax": "[filter.evil]\n\tclean = {bait}\n",
    "included": "[include]\n\tpath = extra.config\n",
}


@pytest.mark.parametrize("kind", FILTER_CONFIGS)
def test_a_filter_driver_never_runs(
    tools: Tools, git: Git, workspace: Path, baits: Baits, kind: str
) -> None:
    """A `.gitattributes` entry names a driver; .git/config says which program it is. Git
    runs it when status re-reads a file whose stat changed, and when diff reads one."""
    attributes = f"*.txt filter={'e=v.i' if kind == 'odd-name' else 'evil'}\n"
    git.init(workspace, {"a.txt": "a\n", "b.txt": "b\n"})
    write(workspace / ".git" / "info" / "attributes", attributes)
    bait = baits.make("filter")
    if kind == "included":
        write(workspace / ".git" / "extra.config", f'[filter "evil"]\n\tclean = {bait}\n')
    config(workspace, FILTER_CONFIGS[kind].format(bait=bait))
    touch_later(workspace / "a.txt")
    write(workspace / "b.txt", "b changed\n")

    status = tools.status()
    assert paths_of(status["unstaged"]) == ["b.txt"]
    assert tools.diff()["files"] == ["b.txt"]
    assert baits.ran() == []
    git(workspace, "diff", check=False)  # control: plain git runs it
    assert "filter" in baits.ran()


def test_a_filter_named_in_the_global_config_is_switched_off_too(
    tools: Tools, git: Git, workspace: Path, baits: Baits, home: Path
) -> None:
    git.init(workspace, {"a.txt": "a\n"})
    write(workspace / ".gitattributes", "*.txt filter=lfs-like\n")
    write(home / ".gitconfig", f'[filter "lfs-like"]\n\tclean = {baits.make("global")}\n')
    write(workspace / "a.txt", "changed\n")
    assert tools.diff()["files"] == ["a.txt"]
    assert baits.ran() == []
    git(workspace, "diff", check=False)
    assert "global" in baits.ran()


@pytest.mark.parametrize(
    "driver",
    [
        "[diff]\n\texternal = {bait}\n",
        '[diff "evil"]\n\tcommand = {bait}\n',
        '[diff "evil"]\n\ttextconv = {bait}\n',
    ],
    ids=["diff.external", "diff-driver-command", "textconv"],
)
def test_diff_programs_never_run(
    tools: Tools, git: Git, workspace: Path, baits: Baits, driver: str
) -> None:
    git.init(workspace, {"a.txt": "a\n"})
    write(workspace / ".gitattributes", "*.txt diff=evil\n")
    git(workspace, "add", ".gitattributes")
    git(workspace, "commit", "-q", "-m", "attributes")
    config(workspace, driver.format(bait=baits.make("diff")))
    write(workspace / "a.txt", "changed\n")
    git(workspace, "add", "a.txt")
    write(workspace / "a.txt", "changed again\n")
    assert tools.diff()["files"] == tools.diff(staged=True)["files"] == ["a.txt"]
    assert baits.ran() == []
    git(workspace, "diff", check=False)  # control
    assert "diff" in baits.ran()


def test_a_pager_never_runs(tools: Tools, git: Git, workspace: Path, baits: Baits) -> None:
    git.init(workspace, {"a.txt": "a\n"})
    bait = baits.make("pager")
    config(workspace, f"[core]\n\tpager = {bait}\n[pager]\n\tdiff = {bait}\n\tstatus = {bait}\n")
    write(workspace / "a.txt", "changed\n")
    tools.status()
    assert "+changed" in tools.diff()["diff"]
    assert baits.ran() == []


@pytest.mark.parametrize("where", ["hooksPath", ".git/hooks"])
def test_hooks_never_run(tools: Tools, git: Git, workspace: Path, baits: Baits, where: str) -> None:
    """post-index-change runs whenever git writes the index, which status does to refresh it
    unless it is told to write nothing."""
    git.init(workspace, {"a.txt": "a\n"})
    hooks = baits.dir / "hooks" if where == "hooksPath" else workspace / ".git" / "hooks"
    hooks.mkdir(exist_ok=True)
    hook = hooks / "post-index-change"
    hook.write_text(f'#!/bin/sh\necho hook >> "{baits.log}"\n')
    hook.chmod(0o755)
    if where == "hooksPath":
        config(workspace, f"[core]\n\thooksPath = {hooks}\n")
    touch_later(workspace / "a.txt")
    tools.status()
    tools.diff()
    assert baits.ran() == []
    git(workspace, "status")  # control
    assert "hook" in baits.ran()


def test_the_index_is_never_written(tools: Tools, git: Git, workspace: Path) -> None:
    git.init(workspace, {"a.txt": "a\n", "b.txt": "b\n", "c.txt": "c\n"})
    touch_later(workspace / "a.txt")
    write(workspace / "b.txt", "b changed\n")
    write(workspace / "d.txt", "untracked\n")
    index = workspace / ".git" / "index"
    before = (index.read_bytes(), index.stat().st_mtime_ns)
    tools.status()
    tools.diff()
    tools.diff(staged=True)
    assert (index.read_bytes(), index.stat().st_mtime_ns) == before
    assert not (workspace / ".git" / "index.lock").exists()
    git(workspace, "status")  # control: plain git refreshes the index
    assert index.stat().st_mtime_ns != before[1]


def test_a_partial_clone_never_fetches(
    tools: Tools, git: Git, workspace: Path, tmp_path: Path, baits: Baits
) -> None:
    """A missing object in a partial clone is fetched from the promisor remote through its
    transport; `ext::` runs any command and the repo can allow it (protocol.ext.allow)."""
    origin = git.init(tmp_path / "origin", {"f.txt": "content\n"})
    git(origin, "config", "uploadpack.allowFilter", "true")
    clone = workspace / "pc"
    git(workspace, "clone", "-q", "--filter=blob:none", "--no-checkout", f"file://{origin}", "pc")
    git(clone, "read-tree", "HEAD")  # the index names a blob this clone does not have
    bait = baits.make("fetch")
    git(clone, "config", "remote.origin.url", f"ext::{bait}")
    git(clone, "config", "protocol.ext.allow", "always")
    error = tools.fails(GIT_DIFF, path="pc")
    assert "git diff failed" in error
    assert baits.ran() == []
    git(clone, "-c", "protocol.allow=never", "diff", check=False)  # control
    assert "fetch" in baits.ran()


def test_output_settings_of_the_repository_do_not_confuse_the_parse(
    tools: Tools, git: Git, workspace: Path
) -> None:
    git.init(workspace, {"sub/a.txt": "a\n", ".env": f"{SECRET}\n"})
    config(
        workspace,
        "[color]\n\tui = always\n\tdiff = always\n\tstatus = always\n"
        "[diff]\n\tnoprefix = true\n\tmnemonicPrefix = true\n\trelative = true\n"
        "[core]\n\tquotePath = false\n"
        "[status]\n\tshowUntrackedFiles = no\n\trelativePaths = true\n\taheadBehind = false\n",
    )
    write(workspace / "sub" / "a.txt", "changed ü\n")
    write(workspace / "sub" / "ü new.txt", "n\n")
    write(workspace / ".env", f"{SECRET} changed\n")
    status = tools.status()
    assert status["unstaged"] == [{"path": "sub/a.txt", "status": "modified"}]
    assert status["untracked"] == ["sub/ü new.txt"]
    diff = tools.diff()
    assert diff["files"] == ["sub/a.txt"] == tools.diff(path="sub")["files"]
    assert "\x1b" not in diff["diff"]
    assert diff["diff"].startswith("diff --git a/sub/a.txt b/sub/a.txt\n")
    assert SECRET not in json.dumps(diff)


def test_an_endless_attributes_file_is_stopped_by_the_memory_cap(
    make_tools: MakeTools, git: Git, workspace: Path
) -> None:
    if not _platform.LINUX:
        pytest.skip(f"the memory cap is prlimit, Linux's alone (platform layer: {_platform.NAME})")
    git.init(workspace, {"a.txt": "a\n"})
    config(workspace, "[core]\n\tattributesFile = /dev/zero\n")
    write(workspace / "a.txt", "changed\n")
    tools = make_tools(limits=LimitsConfig(command_memory_mb=256))
    started = time.monotonic()
    assert "git diff failed" in tools.fails(GIT_DIFF)
    assert time.monotonic() - started < TIMEOUT_SECONDS


def test_a_hanging_git_is_killed_at_the_timeout(
    make_tools: MakeTools, git: Git, workspace: Path, tmp_path: Path
) -> None:
    """A FIFO as core.excludesFile blocks git's open() for ever. The clock runs 20 times
    faster than real time, so the 10 s timeout comes after half a second."""
    git.init(workspace, {"a.txt": "a\n"})
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    config(workspace, f"[core]\n\texcludesFile = {fifo}\n")
    tools = make_tools(clock=lambda: time.monotonic() * 20)
    error = tools.fails(GIT_STATUS)
    assert f"did not finish within {TIMEOUT_SECONDS} s" in error
    # Nobody holds the FIFO open for reading any more: git was killed, not left waiting.
    with pytest.raises(OSError):
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))


def test_an_embedded_bare_repository_is_not_used(
    tools: Tools, git: Git, workspace: Path, baits: Baits
) -> None:
    git.init(workspace)
    bare = workspace / "planted"
    git(workspace, "init", "-q", "--bare", "planted")
    config_path = bare / "config"
    config_path.write_text(
        config_path.read_text() + f"[core]\n\tfsmonitor = {baits.make('bare')}\n\tbare = false\n"
        f"\tworktree = {workspace}\n"
    )
    assert "not inside a git work tree" in tools.fails(GIT_STATUS, path="planted")
    assert baits.ran() == []
    git(bare, "status", check=False)  # control: without safe.bareRepository=explicit
    assert "bare" in baits.ran()


# -- caps ----------------------------------------------------------------------------------


def test_a_long_diff_is_capped(tools: Tools, git: Git, workspace: Path) -> None:
    git.init(workspace, {"big.txt": "".join(f"old line {n}\n" for n in range(2000))})
    write(workspace / "big.txt", "".join(f"new line {n}\n" for n in range(2000)))
    result = tools.diff(max_bytes=500)
    assert result["truncated"] is True
    assert 0 < result["bytes"] <= 500
    assert result["diff"].endswith("\n")
    assert result["files"] == ["big.txt"]
    assert "cut at 500 bytes" in result["note"]
    assert tools.diff()["truncated"] is True  # the default, DIFF_DEFAULT_BYTES, is less
    full = tools.diff(max_bytes=DIFF_MAX_BYTES)
    assert full["truncated"] is False and full["bytes"] > 40_000
    assert tools.diff(max_bytes=10 * DIFF_MAX_BYTES)["bytes"] == full["bytes"]
    assert "max_bytes must be at least 1" in tools.fails(GIT_DIFF, max_bytes=0)


def test_a_long_status_is_capped(make_tools: MakeTools, git: Git, workspace: Path) -> None:
    git.init(workspace)
    for n in range(10):
        write(workspace / f"u{n}.txt", "u\n")
    tools = make_tools(limits=LimitsConfig(max_list_entries=3))
    result = tools.status()
    assert len(result["untracked"]) == 3
    assert result["truncated"] is True
    assert "pass a subdirectory" in result["note"]


def test_the_schemas() -> None:
    assert GIT_STATUS.parameters["required"] == []
    assert set(GIT_STATUS.parameters["properties"]) == {"path"}
    assert set(GIT_DIFF.parameters["properties"]) == {"path", "staged", "max_bytes"}
    assert GIT_DIFF.definition()["function"]["name"] == "git_diff"
    assert validate_arguments({"staged": True, "max_bytes": 10}, GIT_DIFF.parameters) == {
        "staged": True,
        "max_bytes": 10,
    }


# -- secrets -------------------------------------------------------------------------------

SECRET_FILES = [".env", "deploy/id_rsa", "certs/server.pem", ".env.production"]


def test_secret_files_never_appear(tools: Tools, git: Git, workspace: Path) -> None:
    """Tracked secrets with staged and unstaged changes, a rename into and out of a secret
    name, an untracked secret: neither their names nor their content reach the model."""
    git.init(
        workspace,
        {
            **{name: f"{SECRET} in {name}\n" for name in SECRET_FILES},
            "code.py": "print(1)\n",
            "was-public.txt": f"{SECRET} moved\n" * 10,
        },
    )
    write(workspace / ".env", f"{SECRET} staged\n")
    write(workspace / "deploy" / "id_rsa", f"{SECRET} staged\n")
    git(workspace, "add", ".env", "deploy/id_rsa")
    git(workspace, "mv", "was-public.txt", ".env.local")
    git(workspace, "mv", ".env.production", "now-public.txt")
    for name in SECRET_FILES[:3]:
        write(workspace / name, f"{SECRET} unstaged {name}\n")
    write(workspace / "code.py", "print(2)\n")
    write(workspace / "untracked.key", f"{SECRET}\n")

    status = tools.status()
    text = json.dumps(status)
    for word in ("env", "id_rsa", "pem", ".key", "now-public", "was-public", SECRET):
        assert word not in text
    assert status["unstaged"] == [{"path": "code.py", "status": "modified"}]
    assert status["staged"] == []
    assert "not listed: secrets or blocked paths" in status["note"]

    for staged in (False, True):
        result = tools.diff(staged=staged)
        text = json.dumps(result)
        for word in ("env", "id_rsa", "pem", "now-public", "was-public", SECRET):
            assert word not in text
        assert result["files"] == ([] if staged else ["code.py"])
        assert "left out: secrets or blocked paths" in result["note"]


def test_a_conflicted_secret_never_appears(tools: Tools, git: Git, workspace: Path) -> None:
    git.init(workspace, {".env": f"{SECRET} base\n", "a.txt": "base\n"})
    git(workspace, "checkout", "-q", "-b", "other")
    write(workspace / ".env", f"{SECRET} theirs\n")
    write(workspace / "a.txt", "theirs\n")
    git(workspace, "commit", "-q", "-am", "theirs")
    git(workspace, "checkout", "-q", "main")
    write(workspace / ".env", f"{SECRET} ours\n")
    write(workspace / "a.txt", "ours\n")
    git(workspace, "commit", "-q", "-am", "ours")
    git(workspace, "merge", "-q", "other", check=False)
    status = tools.status()
    assert status["unmerged"] == [{"path": "a.txt", "status": "both modified"}]
    for staged in (False, True):
        result = tools.diff(staged=staged)
        assert SECRET not in json.dumps(result) and ".env" not in json.dumps(result)
    assert tools.diff()["files"] == ["a.txt"]


def test_a_blocked_directory_inside_the_repository_is_hidden(
    make_tools: MakeTools, git: Git, workspace: Path
) -> None:
    git.init(workspace, {"vault/data.txt": f"{SECRET}\n", "open.txt": "o\n"})
    write(workspace / "vault" / "data.txt", f"{SECRET} changed\n")
    write(workspace / "vault" / "more.txt", "new\n")
    write(workspace / "open.txt", "changed\n")
    tools = make_tools(blocked_dirs=[str(workspace / "vault")])
    for result in (tools.status(), tools.diff()):
        assert "vault" not in json.dumps(result) and SECRET not in json.dumps(result)
    assert tools.status()["unstaged"] == [{"path": "open.txt", "status": "modified"}]


def test_a_mode_change_is_attributed(tools: Tools, git: Git, workspace: Path) -> None:
    """An executable bit change is a diff section without content; it is attributed too."""
    git.init(workspace, {"run.sh": "echo\n"})
    (workspace / "run.sh").chmod(stat.S_IRWXU)
    result = tools.diff()
    assert result["files"] == ["run.sh"] and "new mode 100755" in result["diff"]


def test_a_path_with_glob_characters_names_only_itself(
    tools: Tools, git: Git, workspace: Path
) -> None:
    git.init(workspace, {"[ab].txt": "x\n", "a.txt": "x\n", "b.txt": "x\n"})
    for name in ("[ab].txt", "a.txt", "b.txt"):
        write(workspace / name, "changed\n")
    assert tools.diff(path="[ab].txt")["files"] == ["[ab].txt"]
    assert paths_of(tools.status(path="[ab].txt")["unstaged"]) == ["[ab].txt"]


def test_file_content_and_names_cannot_forge_a_file_section(
    tools: Tools, git: Git, workspace: Path
) -> None:
    """A hidden file's section is dropped whole: lines in a visible file that look like
    section headers, or a name holding a newline, cannot make it look like someone else's."""
    forged_name = "x\ndiff --git a/y b/y"
    git.init(workspace, {".env": f"{SECRET}\n", "notes.txt": "x\n", forged_name: "x\n"})
    write(workspace / "notes.txt", "diff --git a/notes.txt b/notes.txt\n* Unmerged path n\n")
    write(workspace / forged_name, f"diff --cc .env\n{SECRET}?\n")
    write(workspace / ".env", f"{SECRET} changed\n")
    result = tools.diff()
    assert result["files"] == ["notes.txt", forged_name]
    assert result["diff"].count(SECRET) == 1  # the forged name's own content line, not .env's
    assert f"+{SECRET}?" in result["diff"] and f"{SECRET} changed" not in result["diff"]
    assert "1 file(s) left out" in result["note"]


# -- through the agent -------------------------------------------------------------------------


def test_the_model_gets_git_status_and_diff_as_reads(
    run_cli: Any, ollama: Any, git: Git, workspace: Path
) -> None:
    from tests.fakes.fake_ollama import reply, tool_call

    git.init(workspace, {"app.py": "x = 1\n"})
    write(workspace / "app.py", "x = 2\n")
    ollama.enqueue(
        reply(tool_calls=[tool_call("git_status", {}), tool_call("git_diff", {})]),
        reply("app.py changed x from 1 to 2."),
    )
    r = run_cli("run", "--json", "what changed?")  # reads: no --yes, no terminal needed
    assert r.code == 0, r.stderr
    status, diff = (c["result"] for c in json.loads(r.stdout)["tool_calls"])
    assert status["success"] is True and status["unstaged"][0]["path"] == "app.py"
    assert diff["success"] is True and "-x = 1\n+x = 2" in diff["diff"]
    tools = [t["function"]["name"] for t in ollama.chat_bodies[0]["tools"]]
    assert "git_status" in tools and "git_diff" in tools
