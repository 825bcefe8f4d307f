"""Hostile paths, run the way the agent runs them: schema check → Policy.decide → the tool.

Real files, links, FIFOs and sockets in temp dirs; nothing of ours is mocked. Every test runs
twice, once with openat2 resolving paths in the kernel and once with the O_NOFOLLOW component
walk that stands in for it on older kernels (the `resolver` fixture). The race tests use
`reach.before_use`, called between the policy's check and the file operation, to swap a
symlink in at exactly that moment.

ADVERSARIAL_PATHS holds every hostile path string; one test sends each through all six file
tools and checks that nothing outside the workspace changed and no secret came back.
"""

from __future__ import annotations

import itertools
import json
import os
import socket
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from cli.backends.messages import ToolCall
from cli.config.loading import parse_config
from cli.config.settings import PolicyConfig
from cli.errors import ToolError
from cli.fs import reach, reading, writing
from cli.loop.approval import ApprovalRequest, NoOneToAsk, UnattendedApprover
from cli.safety.policy import Decision, Policy
from cli.tools import ToolContext, check_arguments, execute
from tests.conftest import without_blocking

Result = dict[str, Any]

OUTSIDE_SECRET = "OUTSIDE-SECRET-6f1d"
OUTSIDE_INNER = "OUTSIDE-INNER-93ab"
WS_SECRET = "WS-SECRET-ENV-51c0"
HOME_SECRET = "HOME-SECRET-KEY-a7e2"
SECRETS = (OUTSIDE_SECRET, OUTSIDE_INNER, WS_SECRET, HOME_SECRET)

CHANGED = "changed while being checked (a symlink appeared)"
# 370 components of 10 letters: a path whose absolute form is longer than PATH_MAX (4096),
# kept under it as given, in few enough components to stay fast.
LONG = "d" * 10
DEEP_PATH = f"{LONG}/" * 370


# -- how the agent runs a tool -------------------------------------------------------------


def unattended(decision: Decision) -> bool:
    """Approve like `--yes` with every tool listed: never outside, never a needs_human ask."""
    return not decision.outside_allowed and not decision.needs_human


def person(decision: Decision) -> bool:
    """A person who says yes to everything asked."""
    return True


@dataclass
class Agent:
    policy: Policy

    def context(self) -> ToolContext:
        return ToolContext(
            cwd=self.policy.cwd,
            limits=self.policy.config.limits,
            hides=self.policy.hides,
            roots=self.policy.allowed_dirs,
        )

    def decide(self, name: str, args: dict[str, Any]) -> Decision:
        return self.policy.decide(name, check_arguments(name, args))

    def call(
        self, name: str, args: dict[str, Any], approve: Callable[[Decision], bool] = unattended
    ) -> tuple[Decision, Result]:
        """What the agent does with one call: decide, ask, run."""
        arguments = check_arguments(name, args)
        decision = self.policy.decide(name, arguments)
        if decision.action == "deny" or (decision.action == "ask" and not approve(decision)):
            return decision, {"success": False, "error": f"not run: {decision.reason}"}
        return decision, execute(name, self.context(), arguments, decision.paths)

    def run(
        self, name: str, args: dict[str, Any], approve: Callable[[Decision], bool] = person
    ) -> Result:
        decision, result = self.call(name, args, approve)
        assert decision.action != "deny", (decision.rule, decision.reason)
        return result

    def ok(self, name: str, args: dict[str, Any]) -> Result:
        result = without_blocking(lambda: self.run(name, args))
        assert result["success"] is True, result
        return result

    def fails(self, name: str, args: dict[str, Any]) -> str:
        result = without_blocking(lambda: self.run(name, args))
        assert result["success"] is False, result
        return str(result["error"])


def snapshot(root: Path) -> dict[str, tuple[str, str]]:
    """Every entry below root: its type and content, link target or mode (never opening a
    special file)."""
    seen: dict[str, tuple[str, str]] = {}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in dirnames + filenames:
            path = Path(dirpath, name)
            info = path.lstat()
            relative = str(path.relative_to(root))
            if stat.S_ISLNK(info.st_mode):
                seen[relative] = ("link", os.readlink(path))
            elif stat.S_ISREG(info.st_mode):
                seen[relative] = ("file", f"{path.read_bytes()!r} {info.st_mode:o}")
            elif stat.S_ISDIR(info.st_mode):
                seen[relative] = ("dir", f"{info.st_mode:o}")
            else:
                seen[relative] = ("special", f"{info.st_mode:o}")
    return seen


def remove_deep(top: Path) -> None:
    """Remove a tree nested deeper than Python's recursion limit (rmtree recurses per level,
    so pytest's own clean-up cannot): move each level's children up, one level per round."""
    counter = itertools.count()
    while True:
        with os.scandir(top) as listing:
            entries = list(listing)
        if not entries:
            break
        for entry in entries:
            path = Path(entry.path)
            if not entry.is_dir(follow_symlinks=False):
                path.unlink()
                continue
            with os.scandir(path) as listing:
                children = list(listing)
            for child in children:
                os.rename(child.path, top / f"up{next(counter)}")
            path.rmdir()


# -- fixtures ------------------------------------------------------------------------------


@pytest.fixture(params=["openat2", "walk"])
def resolver(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both ways cli/fs/reach.py reaches a path: the kernel's openat2, and the O_NOFOLLOW walk."""
    if request.param == "openat2" and not reach.openat2_available():
        pytest.skip("this kernel does not offer openat2")
    monkeypatch.setattr(reach, "use_openat2", request.param == "openat2")
    return str(request.param)


@pytest.fixture
def outside(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory next to the workspace, outside every allowed dir."""
    root = tmp_path_factory.mktemp("outside").resolve()
    (root / "secret.txt").write_text(OUTSIDE_SECRET + "\n")
    (root / "dir").mkdir()
    (root / "dir" / "inner.txt").write_text(OUTSIDE_INNER + "\n")
    os.mkfifo(root / "fifo")
    return root


@pytest.fixture
def agent(workspace: Path, home: Path, resolver: str) -> Agent:
    return Agent(Policy(PolicyConfig(), cwd=str(workspace), home=str(home)))


@pytest.fixture
def checker(workspace: Path, home: Path) -> Agent:
    """The same, for tests of decisions only: no file operation, so one resolver is enough."""
    return Agent(Policy(PolicyConfig(), cwd=str(workspace), home=str(home)))


@pytest.fixture
def swap(monkeypatch: pytest.MonkeyPatch) -> Callable[[Callable[[], None]], list[str]]:
    """Run `change` once, at the moment between the policy's check and the use."""

    def install(change: Callable[[], None]) -> list[str]:
        calls: list[str] = []

        def hook(path: str) -> None:
            if not calls:
                change()
            calls.append(path)

        monkeypatch.setattr(reach, "before_use", hook)
        return calls

    return install


@dataclass
class World:
    ws: Path
    outside: Path
    home: Path
    bound: socket.socket


@pytest.fixture
def world(workspace: Path, outside: Path, home: Path) -> Iterator[World]:
    """A workspace full of traps pointing at `outside` and at the home dir."""
    ws = workspace
    (home / ".ssh").mkdir()
    (home / ".ssh" / "id_rsa").write_text(HOME_SECRET + "\n")
    (home / ".bashrc").write_text("# home bashrc\n")
    (ws / "plain.txt").write_text("plain\n")
    (ws / "sub").mkdir()
    (ws / "sub" / "file.txt").write_text("file in sub\n")
    (ws / "sub" / "link_up").symlink_to("../..")
    (ws / "link_out").symlink_to(outside / "secret.txt")
    (ws / "dir_out").symlink_to(outside / "dir")
    (ws / "dir_out_abs").symlink_to(outside)
    (ws / "dangling").symlink_to("nothere.txt")
    (ws / "dangling_out").symlink_to(outside / "missing.txt")
    (ws / "chain1").symlink_to("chain2")
    (ws / "chain2").symlink_to("chain3")
    (ws / "chain3").symlink_to("plain.txt")
    (ws / "chain_out1").symlink_to("chain_out2")
    (ws / "chain_out2").symlink_to(outside / "secret.txt")
    (ws / "loop_a").symlink_to("loop_b")
    (ws / "loop_b").symlink_to("loop_a")
    (ws / "self_loop").symlink_to("self_loop")
    (ws / "ws_self").symlink_to(".")
    (ws / "devnull_link").symlink_to("/dev/null")
    (ws / "fifo_out").symlink_to(outside / "fifo")
    os.mkfifo(ws / "fifo")
    bound = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    bound.bind(str(ws / "sock"))
    os.link(outside / "secret.txt", ws / "hardlink.txt")
    (ws / ".env").write_text(f"TOKEN={WS_SECRET}\n")
    (ws / "env_link").symlink_to(".env")
    (ws / ".git" / "hooks").mkdir(parents=True)
    (ws / ".git" / "config").write_text("[core]\n")
    (ws / ".git" / "hooks" / "pre-commit").write_text("#!/bin/sh\n")
    os.mkdir(str(ws) + "_evil")  # a sibling whose name has the workspace as a prefix
    (Path(str(ws) + "_evil") / "x.txt").write_text("evil twin\n")
    yield World(ws, outside, home, bound)
    bound.close()
    for top in (ws / "d", ws / LONG):
        if top.is_dir():
            remove_deep(top)


# -- every hostile path through every tool -------------------------------------------------

# {ws}, {out}, {outname}, {home} and {up} are filled in from the world; the ids are what the
# test report shows. The README quotes len(ADVERSARIAL_PATHS).
ADVERSARIAL_PATHS = [
    pytest.param("link_out", id="symlink-to-outside-file"),
    pytest.param("dir_out/inner.txt", id="through-dir-symlink-to-outside"),
    pytest.param("dir_out", id="dir-symlink-to-outside"),
    pytest.param("dir_out_abs/secret.txt", id="through-absolute-dir-symlink"),
    pytest.param("dir_out/../secret.txt", id="dir-symlink-then-dotdot"),
    pytest.param("sub/link_up/{outname}/secret.txt", id="symlink-up-then-across"),
    pytest.param("dangling", id="dangling-symlink-inside"),
    pytest.param("dangling_out", id="dangling-symlink-to-outside"),
    pytest.param("chain1", id="symlink-chain-inside"),
    pytest.param("chain_out1", id="symlink-chain-to-outside"),
    pytest.param("loop_a", id="symlink-loop"),
    pytest.param("self_loop", id="symlink-self-loop"),
    pytest.param("loop_a/x", id="through-symlink-loop"),
    pytest.param("ws_self", id="symlink-to-workspace-itself"),
    pytest.param("ws_self/plain.txt", id="through-symlink-to-workspace"),
    pytest.param("fifo", id="fifo"),
    pytest.param("fifo_out", id="symlink-to-outside-fifo"),
    pytest.param("sock", id="unix-socket"),
    pytest.param("devnull_link", id="symlink-to-dev-null"),
    pytest.param("hardlink.txt", id="hard-link-to-outside-file"),
    pytest.param("{out}/secret.txt", id="absolute-outside"),
    pytest.param("{up}{out}/secret.txt", id="dotdot-traversal-to-outside"),
    pytest.param("../{outname}/secret.txt", id="dotdot-to-sibling"),
    pytest.param("{ws}_evil/x.txt", id="sibling-with-workspace-prefix-cve-2025-53110"),
    pytest.param("{up}etc/passwd", id="dotdot-traversal-to-etc-passwd"),
    pytest.param("plain.txt\x00.md", id="nul-byte-inside"),
    pytest.param("\x00", id="nul-byte-only"),
    pytest.param("a" * 5000, id="longer-than-path-max"),
    pytest.param("x" * 300, id="name-longer-than-name-max"),
    pytest.param("d/" * 500 + "f", id="five-hundred-components"),
    pytest.param(DEEP_PATH + "f", id="absolute-form-longer-than-path-max"),
    pytest.param("plain.txt ", id="trailing-space"),
    pytest.param(" plain.txt", id="leading-space"),
    pytest.param("plain.txt\n", id="trailing-newline"),
    pytest.param("'plain.txt'", id="single-quoted"),
    pytest.param('"plain.txt"', id="double-quoted"),
    pytest.param("`plain.txt`", id="backquoted"),
    pytest.param("~", id="tilde-home"),
    pytest.param("~/.ssh/id_rsa", id="tilde-ssh-key"),
    pytest.param("~/.bashrc", id="tilde-bashrc"),
    pytest.param("~root/.bashrc", id="tilde-other-user"),
    pytest.param("~/../../etc/passwd", id="tilde-then-dotdot"),
    pytest.param("/proc/self/root/etc/passwd", id="proc-self-root-etc"),
    pytest.param("/proc/self/root{ws}/plain.txt", id="proc-self-root-workspace"),
    pytest.param("/proc/self/cwd/plain.txt", id="proc-self-cwd"),
    pytest.param("/proc/self/fd/0", id="proc-self-fd"),
    pytest.param("/dev/zero", id="dev-zero"),
    pytest.param("/dev/stdin", id="dev-stdin"),
    pytest.param(".env", id="dotenv"),
    pytest.param(".env.local", id="dotenv-local"),
    pytest.param("sub/../.env", id="dotenv-via-dotdot"),
    pytest.param("env_link", id="plain-name-linking-to-dotenv"),
    pytest.param(".git/config", id="git-config"),
    pytest.param(".git/hooks/pre-commit", id="git-hook"),
    pytest.param(".GIT/Config", id="git-config-other-case"),
    pytest.param(".", id="workspace-root-dot"),
    pytest.param("{ws}", id="workspace-root-absolute"),
    pytest.param("sub/..", id="workspace-root-via-dotdot"),
    pytest.param("//{ws}/plain.txt", id="leading-double-slash"),
    pytest.param("./sub/./file.txt", id="dot-components"),
    pytest.param("sub//file.txt", id="double-slash-inside"),
    pytest.param("plain.txt/", id="trailing-slash-on-file"),
    pytest.param("plain.txt/.", id="file-then-dot"),
    pytest.param("...", id="three-dots-name"),
    pytest.param("-rf", id="dash-name"),
    pytest.param("sub/*", id="glob-star"),
    pytest.param("..\\..\\etc\\passwd", id="backslash-traversal"),
    pytest.param("%2e%2e/%2e%2e/etc/passwd", id="url-encoded-traversal"),
    pytest.param("file:///etc/passwd", id="file-url"),
    pytest.param("plain\u202etxt.exe", id="right-to-left-override"),
    pytest.param("sub/\x1b[2Jfile", id="ansi-escape-in-name"),
]

# What each tool is asked to do with the path.
TOOL_CALLS: list[tuple[str, dict[str, Any]]] = [
    ("read_file", {}),
    ("write_file", {"content": "PWNED\n"}),
    ("list_directory", {"recursive": True, "include_hidden": True}),
    ("search_files", {"query": "SECRET"}),
    ("create_directory", {}),
    ("delete_file", {"recursive": True}),
]


def fill(template: str, world: World) -> str:
    return template.format(
        ws=world.ws,
        out=world.outside,
        outname=world.outside.name,
        home=world.home,
        up="../" * (len(world.ws.parts) + 2),
    )


def test_adversarial_paths_are_at_least_forty() -> None:
    assert len(ADVERSARIAL_PATHS) >= 40
    ids = [p.id for p in ADVERSARIAL_PATHS]
    assert len(set(ids)) == len(ids)


@pytest.mark.parametrize("template", ADVERSARIAL_PATHS)
def test_every_tool_holds_against_the_path(agent: Agent, world: World, template: str) -> None:
    path = fill(template, world)
    outside_before = snapshot(world.outside)
    home_before = snapshot(world.home)
    guarded = [world.ws / ".env", world.ws / ".git" / "config"]
    guarded.append(world.ws / ".git" / "hooks" / "pre-commit")
    guarded_before = [p.read_bytes() for p in guarded]
    for name, extra in TOOL_CALLS:
        decision, result = without_blocking(
            lambda n=name, e=extra: agent.call(n, {"path": path, **e})
        )
        assert isinstance(result["success"], bool), (name, result)
        if not result["success"]:
            assert isinstance(result["error"], str) and result["error"], (name, result)
        shown = json.dumps(result)
        for secret in SECRETS:
            assert secret not in shown, (name, decision.rule, result)
        assert snapshot(world.outside) == outside_before, name
        assert snapshot(world.home) == home_before, name
        assert [p.read_bytes() for p in guarded] == guarded_before, name


# -- races: a symlink swapped in between check and use -------------------------------------


def _swap_for_link(path: Path, target: Path | str) -> Callable[[], None]:
    def change() -> None:
        if path.is_dir() and not path.is_symlink():
            path.rename(path.with_name(path.name + ".moved"))
        else:
            path.unlink()
        path.symlink_to(target)

    return change


def test_race_file_swapped_for_symlink_before_read(
    agent: Agent, workspace: Path, outside: Path, swap: Any
) -> None:
    (workspace / "notes.txt").write_text("notes\n")
    calls = swap(_swap_for_link(workspace / "notes.txt", outside / "secret.txt"))
    error = agent.fails("read_file", {"path": "notes.txt"})
    assert CHANGED in error and OUTSIDE_SECRET not in error
    assert calls == [str(workspace / "notes.txt")]


def test_race_file_swapped_for_symlink_before_write(
    agent: Agent, workspace: Path, outside: Path, swap: Any
) -> None:
    (workspace / "notes.txt").write_text("notes\n")
    swap(_swap_for_link(workspace / "notes.txt", outside / "secret.txt"))
    assert CHANGED in agent.fails("write_file", {"path": "notes.txt", "content": "PWNED"})
    assert (outside / "secret.txt").read_text() == OUTSIDE_SECRET + "\n"
    assert os.readlink(workspace / "notes.txt") == str(outside / "secret.txt")


def test_race_new_file_name_taken_by_symlink_before_write(
    agent: Agent, workspace: Path, outside: Path, swap: Any
) -> None:
    swap(lambda: (workspace / "new.txt").symlink_to(outside / "secret.txt"))
    assert CHANGED in agent.fails("write_file", {"path": "new.txt", "content": "PWNED"})
    assert (outside / "secret.txt").read_text() == OUTSIDE_SECRET + "\n"


def test_race_symlink_to_a_secret_inside_is_refused_too(
    agent: Agent, workspace: Path, swap: Any
) -> None:
    # RESOLVE_BENEATH alone would follow this link: it stays inside the workspace. The policy
    # never saw .env, so it must not be read (RESOLVE_NO_SYMLINKS, and the walk's O_NOFOLLOW).
    (workspace / ".env").write_text(f"TOKEN={WS_SECRET}\n")
    (workspace / "notes.txt").write_text("notes\n")
    swap(_swap_for_link(workspace / "notes.txt", ".env"))
    error = agent.fails("read_file", {"path": "notes.txt"})
    assert CHANGED in error and WS_SECRET not in error


def test_race_parent_dir_swapped_for_symlink_before_write(
    agent: Agent, workspace: Path, outside: Path, swap: Any
) -> None:
    (workspace / "sub").mkdir()
    swap(_swap_for_link(workspace / "sub", outside / "dir"))
    assert CHANGED in agent.fails("write_file", {"path": "sub/new.txt", "content": "PWNED"})
    assert sorted(os.listdir(outside / "dir")) == ["inner.txt"]


def test_race_parent_dir_swapped_for_symlink_during_create_directory(
    agent: Agent, workspace: Path, outside: Path, swap: Any
) -> None:
    (workspace / "a").mkdir()
    swap(_swap_for_link(workspace / "a", outside / "dir"))
    assert CHANGED in agent.fails("create_directory", {"path": "a/b/c"})
    assert sorted(os.listdir(outside / "dir")) == ["inner.txt"]


def test_race_new_dir_swapped_for_symlink_between_mkdir_and_open(
    agent: Agent, workspace: Path, outside: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_mkdir = os.mkdir

    def mkdir_then_swap(name: Any, mode: int = 0o777, *, dir_fd: int | None = None) -> None:
        real_mkdir(name, mode, dir_fd=dir_fd)
        if name == "b":  # an attacker wins the race right after our mkdirat
            os.rmdir(name, dir_fd=dir_fd)
            os.symlink(str(outside / "dir"), name, dir_fd=dir_fd)

    monkeypatch.setattr(os, "mkdir", mkdir_then_swap)
    assert CHANGED in agent.fails("create_directory", {"path": "a/b/c"})
    assert sorted(os.listdir(outside / "dir")) == ["inner.txt"]


def test_race_dir_swapped_for_symlink_before_list(
    agent: Agent, workspace: Path, outside: Path, swap: Any
) -> None:
    (workspace / "sub").mkdir()
    swap(_swap_for_link(workspace / "sub", outside / "dir"))
    error = agent.fails("list_directory", {"path": "sub"})
    assert CHANGED in error and "inner.txt" not in error


def test_race_dir_swapped_for_symlink_before_search(
    agent: Agent, workspace: Path, outside: Path, swap: Any
) -> None:
    (workspace / "sub").mkdir()
    swap(_swap_for_link(workspace / "sub", outside / "dir"))
    error = agent.fails("search_files", {"path": "sub", "query": "OUTSIDE"})
    assert CHANGED in error and OUTSIDE_INNER not in error


def test_race_dir_swapped_for_symlink_before_recursive_delete(
    agent: Agent, workspace: Path, outside: Path, swap: Any
) -> None:
    (workspace / "tree").mkdir()
    (workspace / "tree" / "a.txt").write_text("a")
    swap(_swap_for_link(workspace / "tree", outside / "dir"))
    result = agent.ok("delete_file", {"path": "tree", "recursive": True})
    assert result["type"] == "symlink"  # only the link planted there went
    assert (outside / "dir" / "inner.txt").read_text() == OUTSIDE_INNER + "\n"
    assert (workspace / "tree.moved" / "a.txt").exists()


@pytest.mark.parametrize("tool", ["list_directory", "search_files"])
def test_race_dir_swapped_for_symlink_mid_walk_is_not_entered(
    agent: Agent, workspace: Path, outside: Path, monkeypatch: pytest.MonkeyPatch, tool: str
) -> None:
    (workspace / "sub").mkdir()
    (workspace / "sub" / "mine.txt").write_text("OUTSIDE? no, mine\n")
    real_open_subdir = reach.open_subdir

    def swap_then_open(dir_fd: int, name: str) -> int | None:
        if name == "sub":  # listed as a directory, swapped before the walk enters it
            _swap_for_link(workspace / "sub", outside / "dir")()
        return real_open_subdir(dir_fd, name)

    monkeypatch.setattr(reach, "open_subdir", swap_then_open)
    args = {"recursive": True} if tool == "list_directory" else {"query": "OUTSIDE"}
    result = agent.ok(tool, {"path": ".", **args})
    shown = json.dumps(result)
    assert "inner.txt" not in shown and OUTSIDE_INNER not in shown


def test_race_file_swapped_for_fifo_before_read(agent: Agent, workspace: Path, swap: Any) -> None:
    (workspace / "notes.txt").write_text("notes\n")

    def to_fifo() -> None:
        (workspace / "notes.txt").unlink()
        os.mkfifo(workspace / "notes.txt")

    swap(to_fifo)
    assert "FIFO" in agent.fails("read_file", {"path": "notes.txt"})


def test_race_file_swapped_for_hard_link_to_outside_before_read(
    agent: Agent, workspace: Path, outside: Path, swap: Any
) -> None:
    (workspace / "notes.txt").write_text("notes\n")

    def to_hard_link() -> None:
        (workspace / "notes.txt").unlink()
        os.link(outside / "secret.txt", workspace / "notes.txt")

    swap(to_hard_link)
    error = agent.fails("read_file", {"path": "notes.txt"})
    assert "hard links" in error and OUTSIDE_SECRET not in error


def test_race_approved_hard_link_swapped_for_another_before_read(
    agent: Agent, workspace: Path, outside: Path, swap: Any
) -> None:
    (outside / "shared.txt").write_text("shared\n")
    os.link(outside / "shared.txt", workspace / "notes.txt")

    def to_other() -> None:
        (workspace / "notes.txt").unlink()
        os.link(outside / "secret.txt", workspace / "notes.txt")

    swap(to_other)
    # A person approved reading the hard link they were shown, not the one swapped in.
    error = agent.fails("read_file", {"path": "notes.txt"})
    assert "hard links" in error and OUTSIDE_SECRET not in error


def test_race_outside_read_swapped_for_symlink(
    agent: Agent, outside: Path, home: Path, swap: Any
) -> None:
    # A read outside the allowed dirs, approved by a person, has "/" as its root: it is still
    # never followed through a symlink that appeared after the check.
    (outside / "notes.txt").write_text("notes\n")
    swap(_swap_for_link(outside / "notes.txt", outside / "secret.txt"))
    error = agent.fails("read_file", {"path": str(outside / "notes.txt")})
    assert CHANGED in error and OUTSIDE_SECRET not in error


def test_race_hook_runs_between_check_and_use_once_per_call(
    agent: Agent, workspace: Path, swap: Any
) -> None:
    calls = swap(lambda: None)
    (workspace / "tree").mkdir()
    for name, args in [
        ("read_file", {"path": "plain.txt"}),
        ("write_file", {"path": "plain.txt", "content": "x"}),
        ("list_directory", {"path": "."}),
        ("search_files", {"path": ".", "query": "x"}),
        ("create_directory", {"path": "made"}),
        ("delete_file", {"path": "tree"}),
    ]:
        (workspace / "plain.txt").write_text("x\n")
        agent.ok(name, args)
    ws = str(workspace)
    assert calls == [f"{ws}/plain.txt", f"{ws}/plain.txt", ws, ws, f"{ws}/made", f"{ws}/tree"]


# -- symlinks: dangling, chains, loops, deletes --------------------------------------------


def test_dangling_symlink_read_fails_write_creates_the_target_delete_removes_the_link(
    agent: Agent, workspace: Path
) -> None:
    (workspace / "dangling").symlink_to("nothere.txt")
    assert "does not exist" in agent.fails("read_file", {"path": "dangling"})
    assert agent.ok("write_file", {"path": "dangling", "content": "now\n"})["created"] is True
    assert (workspace / "nothere.txt").read_text() == "now\n"
    assert os.readlink(workspace / "dangling") == "nothere.txt"
    assert agent.ok("delete_file", {"path": "dangling"})["type"] == "symlink"
    assert (workspace / "nothere.txt").exists() and not (workspace / "dangling").is_symlink()


def test_dangling_symlink_to_outside_write_is_denied_and_creates_nothing(
    agent: Agent, workspace: Path, outside: Path
) -> None:
    (workspace / "dangling_out").symlink_to(outside / "missing.txt")
    decision, result = agent.call("write_file", {"path": "dangling_out", "content": "x"})
    assert (decision.action, decision.rule) == ("deny", "outside_allowed")
    assert not (outside / "missing.txt").exists() and result["success"] is False


def test_symlink_chain_inside_reads_its_last_target(agent: Agent, workspace: Path) -> None:
    (workspace / "end.txt").write_text("the end\n")
    (workspace / "c3").symlink_to("end.txt")
    (workspace / "c2").symlink_to("c3")
    (workspace / "c1").symlink_to("c2")
    result = agent.ok("read_file", {"path": "c1"})
    assert result["content"] == "the end\n" and result["path"] == str(workspace / "end.txt")


def test_symlink_chain_ending_outside_is_not_followed(
    agent: Agent, workspace: Path, outside: Path
) -> None:
    (workspace / "c2").symlink_to(outside / "secret.txt")
    (workspace / "c1").symlink_to("c2")
    decision, result = agent.call("read_file", {"path": "c1"})
    assert (decision.action, decision.rule) == ("ask", "outside_allowed")
    assert decision.paths["path"].real == str(outside / "secret.txt")
    assert OUTSIDE_SECRET not in json.dumps(result)
    decision, _ = agent.call("write_file", {"path": "c1", "content": "x"})
    assert decision.rule == "outside_allowed" and decision.action == "deny"


@pytest.mark.parametrize("name", ["loop_a", "self_loop", "loop_a/inner"])
def test_symlink_loops_fail_cleanly(agent: Agent, workspace: Path, name: str) -> None:
    (workspace / "loop_a").symlink_to("loop_b")
    (workspace / "loop_b").symlink_to("loop_a")
    (workspace / "self_loop").symlink_to("self_loop")
    for tool, extra in [
        ("read_file", {}),
        ("write_file", {"content": "x"}),
        ("list_directory", {}),
        ("search_files", {"query": "x"}),
        ("create_directory", {}),
    ]:
        error = agent.fails(tool, {"path": name, **extra})
        assert "symlink loop" in error, (tool, error)
    assert os.readlink(workspace / "loop_a") == "loop_b"


def test_deleting_a_symlink_loop_removes_only_the_link(agent: Agent, workspace: Path) -> None:
    (workspace / "loop_a").symlink_to("loop_b")
    (workspace / "loop_b").symlink_to("loop_a")
    assert agent.ok("delete_file", {"path": "loop_a"})["type"] == "symlink"
    assert os.readlink(workspace / "loop_b") == "loop_a"


@pytest.mark.parametrize("kind", ["file", "directory", "dangling", "fifo"])
def test_deleting_a_symlink_removes_only_the_link(agent: Agent, workspace: Path, kind: str) -> None:
    target = workspace / "target"
    if kind == "file":
        target.write_text("stay\n")
    elif kind == "directory":
        target.mkdir()
        (target / "inner.txt").write_text("stay\n")
    elif kind == "fifo":
        os.mkfifo(target)
    (workspace / "link").symlink_to("target")
    before = snapshot(workspace)
    result = agent.ok("delete_file", {"path": "link", "recursive": True})
    assert result["type"] == "symlink"
    after = snapshot(workspace)
    assert after == {k: v for k, v in before.items() if k != "link"}


def test_recursive_delete_never_follows_links_out(
    agent: Agent, workspace: Path, outside: Path, home: Path
) -> None:
    tree = workspace / "tree"
    (tree / "deep" / "deeper").mkdir(parents=True)
    (tree / "a.txt").write_text("a")
    (tree / "deep" / "to_outside_dir").symlink_to(outside / "dir")
    (tree / "deep" / "to_outside_file").symlink_to(outside / "secret.txt")
    (tree / "deep" / "deeper" / "to_root").symlink_to("/")
    (tree / "deep" / "deeper" / "to_home").symlink_to(home)
    (tree / "deep" / "up").symlink_to("../..")
    os.link(outside / "secret.txt", tree / "hard.txt")
    os.mkfifo(tree / "deep" / "fifo")
    outside_before, home_before = snapshot(outside), snapshot(home)
    result = agent.ok("delete_file", {"path": "tree", "recursive": True})
    assert result["removed"] == {"files": 8, "directories": 3}
    assert not tree.exists()
    assert snapshot(outside) == outside_before and snapshot(home) == home_before
    assert (outside / "secret.txt").read_text() == OUTSIDE_SECRET + "\n"


def test_a_deep_tree_is_deleted(agent: Agent, workspace: Path) -> None:
    # Deeper than the old limit (256, for rmtree's recursion): the delete walks by fds.
    deep = workspace / "tree"
    deep.joinpath(*["d"] * 299).mkdir(parents=True)
    result = agent.ok("delete_file", {"path": "tree", "recursive": True})
    assert result["removed"] == {"files": 0, "directories": 300}
    assert not deep.exists()


# -- hard links ----------------------------------------------------------------------------


@pytest.mark.parametrize("tool", ["read_file", "write_file"])
def test_hard_link_to_outside_asks_a_person(
    checker: Agent, workspace: Path, outside: Path, tool: str
) -> None:
    os.link(outside / "secret.txt", workspace / "notes.txt")
    args = {"path": "notes.txt", "content": "x"} if tool == "write_file" else {"path": "notes.txt"}
    decision = checker.decide(tool, args)
    assert (decision.action, decision.rule, decision.needs_human) == ("ask", "hard_link", True)
    assert "hard link" in decision.reason
    request = ApprovalRequest(ToolCall(tool, args), args, decision)
    approval = UnattendedApprover([tool], NoOneToAsk([tool], yes=True))(request)
    assert approval.approved is False  # --yes never approves it


def test_hard_link_read_approved_by_a_person_reads_the_shared_content(
    agent: Agent, workspace: Path, outside: Path
) -> None:
    os.link(outside / "secret.txt", workspace / "notes.txt")
    assert agent.ok("read_file", {"path": "notes.txt"})["content"] == OUTSIDE_SECRET + "\n"


def test_hard_link_write_approved_replaces_only_the_inside_name(
    agent: Agent, workspace: Path, outside: Path
) -> None:
    os.link(outside / "secret.txt", workspace / "notes.txt")
    agent.ok("write_file", {"path": "notes.txt", "content": "new\n"})
    assert (workspace / "notes.txt").read_text() == "new\n"
    assert (outside / "secret.txt").read_text() == OUTSIDE_SECRET + "\n"
    assert (outside / "secret.txt").stat().st_nlink == 1


def test_search_does_not_print_lines_of_hard_linked_files(
    agent: Agent, workspace: Path, outside: Path
) -> None:
    os.link(outside / "secret.txt", workspace / "notes.txt")
    (workspace / "plain.txt").write_text("SECRET-less plain\n")
    result = agent.ok("search_files", {"path": ".", "query": "SECRET"})
    assert [r["path"] for r in result["results"]] == ["plain.txt"]
    assert result["hard_links_skipped"] == 1 and "hard links" in result["note"]
    assert OUTSIDE_SECRET not in json.dumps(result)


def test_deleting_a_hard_link_keeps_the_other_name(
    agent: Agent, workspace: Path, outside: Path
) -> None:
    os.link(outside / "secret.txt", workspace / "notes.txt")
    assert agent.ok("delete_file", {"path": "notes.txt"})["type"] == "file"
    assert (outside / "secret.txt").read_text() == OUTSIDE_SECRET + "\n"


# -- strings that are not paths ------------------------------------------------------------


@pytest.mark.parametrize(
    "raw",
    ["a\x00b", "\x00", "notes.txt\x00../../etc/passwd"],
    ids=["nul-inside", "nul-only", "nul-then-traversal"],
)
@pytest.mark.parametrize("tool", ["read_file", "write_file", "delete_file"])
def test_nul_bytes_are_denied(checker: Agent, raw: str, tool: str) -> None:
    decision = checker.decide(
        tool, {"path": raw, "content": "x"} if tool == "write_file" else {"path": raw}
    )
    assert (decision.action, decision.rule) == ("deny", "bad_path")
    assert "NUL" in decision.reason


def test_very_long_paths_are_denied(checker: Agent) -> None:
    for raw in ["a" * 4097, "d/" * 2049]:
        decision = checker.decide("write_file", {"path": raw, "content": "x"})
        assert (decision.action, decision.rule) == ("deny", "bad_path")


def test_a_name_longer_than_name_max_fails_cleanly(agent: Agent, workspace: Path) -> None:
    assert "too long" in agent.fails("write_file", {"path": "x" * 300, "content": "x"})
    assert "too long" in agent.fails("create_directory", {"path": "x" * 300})
    assert sorted(os.listdir(workspace)) == []


def test_a_255_byte_name_is_written_with_a_shorter_temp_name(agent: Agent, workspace: Path) -> None:
    name = "n" * 255
    assert agent.ok("write_file", {"path": name, "content": "ok\n"})["created"] is True
    assert os.listdir(workspace) == [name]


def test_a_path_deeper_than_path_max_is_reached_by_fds(agent: Agent, workspace: Path) -> None:
    # The absolute form is longer than PATH_MAX; only a walk by dir fds can reach it. As given
    # the path is exactly PATH_MAX long, so that holds under any workspace dir (with
    # "f.txt" at the end, a --basetemp under 21 characters made it 4095 long).
    deep = DEEP_PATH + "f" * (4096 - len(DEEP_PATH))
    assert len(str(workspace / deep)) > 4096
    try:
        assert agent.ok("write_file", {"path": deep, "content": "deep\n"})["created"] is True
        assert agent.ok("read_file", {"path": deep})["content"] == "deep\n"
        removed = agent.ok("delete_file", {"path": LONG, "recursive": True})["removed"]
        assert removed == {"files": 1, "directories": 370}
        assert not (workspace / LONG).exists()
    finally:
        if (workspace / LONG).is_dir():
            remove_deep(workspace / LONG)


@pytest.mark.parametrize(
    "raw",
    ["notes.txt ", " notes.txt", "notes.txt\n", "'notes.txt'", '"notes.txt"', "`notes.txt`"],
    ids=[
        "trailing-space",
        "leading-space",
        "newline",
        "single-quotes",
        "double-quotes",
        "backticks",
    ],
)
def test_trailing_spaces_and_quotes_are_denied(checker: Agent, workspace: Path, raw: str) -> None:
    (workspace / "notes.txt").write_text("x")
    decision = checker.decide("write_file", {"path": raw, "content": "y"})
    assert (decision.action, decision.rule) == ("deny", "bad_path")
    assert sorted(os.listdir(workspace)) == ["notes.txt"]


def test_tilde_is_the_injected_home(checker: Agent, home: Path) -> None:
    decision = checker.decide("list_directory", {"path": "~"})
    assert decision.paths["path"].real == str(home)
    assert (decision.action, decision.rule) == ("ask", "outside_allowed")
    decision = checker.decide("write_file", {"path": "~/notes.txt", "content": "x"})
    assert (decision.action, decision.rule) == ("deny", "outside_allowed")


def test_tilde_in_an_allowed_home_reads_there(workspace: Path, home: Path, resolver: str) -> None:
    config = parse_config("policy:\n  allowed_dirs: ['.', '~']\n", "t.yaml").policy
    agent = Agent(Policy(config, cwd=str(workspace), home=str(home)))
    (home / "notes.txt").write_text("at home\n")
    assert agent.ok("read_file", {"path": "~/notes.txt"})["content"] == "at home\n"
    assert agent.policy.root_of(str(home / "notes.txt")) == str(home)


def test_proc_self_root_is_blocked(checker: Agent, workspace: Path) -> None:
    for raw in ["/proc/self/root/etc/passwd", f"/proc/self/root{workspace}/notes.txt"]:
        decision = checker.decide("read_file", {"path": raw})
        assert (decision.action, decision.rule) == ("deny", "blocked_dir"), raw


def test_proc_self_root_unblocked_reaches_only_the_resolved_path(
    workspace: Path, home: Path, resolver: str
) -> None:
    config = parse_config("policy:\n  blocked_dirs: []\n", "t.yaml").policy
    agent = Agent(Policy(config, cwd=str(workspace), home=str(home)))
    (workspace / "notes.txt").write_text("notes\n")
    result = agent.ok("read_file", {"path": f"/proc/self/root{workspace}/notes.txt"})
    assert result["path"] == str(workspace / "notes.txt")  # the magic link was never walked


def test_proc_files_are_capped_on_what_is_read_not_their_size(resolver: str) -> None:
    path = f"/proc/{os.getpid()}/status"  # not /proc/self: that is a symlink, never walked
    status = reach.Target(path, "/", "status")
    assert os.stat(path).st_size == 0
    with pytest.raises(ToolError, match="too large"):
        reading.read(status, 16)
    assert b"Name:" in reading.read(status, 1 << 20).data


# -- special files -------------------------------------------------------------------------


def _make_special(workspace: Path, kind: str) -> socket.socket | None:
    if kind == "fifo":
        os.mkfifo(workspace / "special")
        return None
    if kind == "socket":
        bound = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        bound.bind(str(workspace / "special"))
        bound.listen(1)
        return bound
    (workspace / "special").symlink_to("/dev/zero")  # device: the link resolves into /dev
    return None


@pytest.mark.parametrize("kind", ["fifo", "socket", "device"])
def test_special_files_are_refused_within_a_second(
    agent: Agent, workspace: Path, kind: str
) -> None:
    bound = _make_special(workspace, kind)
    try:
        for tool, extra in [
            ("read_file", {}),
            ("write_file", {"content": "x"}),
            ("list_directory", {}),
            ("search_files", {"query": "x"}),
        ]:
            _, result = without_blocking(
                lambda t=tool, e=extra: agent.call(t, {"path": "special", **e})
            )
            assert result["success"] is False, (tool, result)
        found = without_blocking(
            lambda: agent.ok("search_files", {"path": ".", "query": "special"})
        )
        assert found["results"] == []
    finally:
        if bound is not None:
            bound.close()


def test_fifo_is_refused_before_it_is_opened(
    agent: Agent, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    os.mkfifo(workspace / "pipe")
    opened: list[str] = []
    real_open = os.open

    def spy(path: Any, flags: int, mode: int = 0o777, *, dir_fd: int | None = None) -> int:
        opened.append(str(path))
        return real_open(path, flags, mode, dir_fd=dir_fd)

    monkeypatch.setattr(os, "open", spy)
    assert "FIFO" in agent.fails("read_file", {"path": "pipe"})
    assert "pipe" not in opened  # lstat'd and refused: opening a device can act on it


def test_real_devices_outside_are_refused_without_reading(
    workspace: Path, home: Path, resolver: str
) -> None:
    config = parse_config("policy:\n  blocked_dirs: []\n", "t.yaml").policy
    agent = Agent(Policy(config, cwd=str(workspace), home=str(home)))
    for device in ["/dev/zero", "/dev/null", "/dev/urandom"]:
        error = agent.fails("read_file", {"path": device})
        assert "a device" in error, device


# -- sensitive names -----------------------------------------------------------------------

NEW_SENSITIVE = [
    ".env",
    ".env.local",
    ".env.production",
    "config/.env.test",
    ".envrc",
    "prod.env",
    ".netrc",
    ".git-credentials",
    ".npmrc",
    ".pypirc",
    ".aws/credentials",
    "id_rsa",
    "id_ed25519",
    "id_ecdsa",
    "id_dsa",
    "id_ed25519.pub",
    "backup/id_ed25519_sk",
    "server.pem",
    "tls.key",
    "bundle.p12",
    "keys/.gnupg/pubring.kbx",
    "credentials.json",
    "password.txt",
]


@pytest.mark.parametrize("name", NEW_SENSITIVE)
@pytest.mark.parametrize("tool", ["read_file", "write_file", "delete_file", "list_directory"])
def test_sensitive_names_are_denied(checker: Agent, name: str, tool: str) -> None:
    args = {"path": name, "content": "x"} if tool == "write_file" else {"path": name}
    decision = checker.decide(tool, args)
    assert (decision.action, decision.rule) == ("deny", "sensitive")


@pytest.mark.parametrize(
    "name",
    ["environment.py", "env.py", "envs/dev.txt", "venv.txt", "keyboard.txt", "pemmican.txt"],
)
def test_names_that_only_look_sensitive_are_not(checker: Agent, name: str) -> None:
    assert checker.decide("read_file", {"path": name}).rule != "sensitive"


@pytest.mark.parametrize("name", [".env.local", ".netrc", ".npmrc", "id_ed25519", "tls.key"])
def test_search_never_prints_lines_from_sensitive_files(
    agent: Agent, workspace: Path, name: str
) -> None:
    (workspace / name).write_text(f"needle {WS_SECRET}\n")
    (workspace / "plain.txt").write_text("needle\n")
    for query in ("needle", "*", name):
        result = agent.ok("search_files", {"path": ".", "query": query, "search_type": "both"})
        assert {r["path"] for r in result["results"]} <= {"plain.txt"}
        assert WS_SECRET not in json.dumps(result)


# -- protected writes ----------------------------------------------------------------------

PROTECTED = [
    ".git/config",
    ".git/hooks/pre-commit",
    ".git/hooks",
    ".bashrc",
    "~/.bashrc",
    "~/.zshrc",
    "~/.profile",
    "~/.config/fish/config.fish",
    "~/.config/metona-agent/config.yaml",
    ".GIT/CONFIG",
]


@pytest.mark.parametrize("raw", PROTECTED)
@pytest.mark.parametrize("tool", ["write_file", "create_directory", "delete_file"])
def test_protected_writes_always_ask_a_person(
    workspace: Path, home: Path, raw: str, tool: str
) -> None:
    # Everything allowed, nothing confirmed, home an allowed dir: still a person must say yes.
    yaml = (
        "policy:\n  confirm: none\n  allowed_dirs: ['.', '~']\n"
        "  tools: {write_file: allow, create_directory: allow, delete_file: allow}\n"
    )
    policy = Policy(parse_config(yaml, "t.yaml").policy, cwd=str(workspace), home=str(home))
    args = {"path": raw, "content": "x"} if tool == "write_file" else {"path": raw}
    decision = policy.decide(tool, args)
    assert (decision.action, decision.rule, decision.needs_human) == ("ask", "protected", True)
    request = ApprovalRequest(ToolCall(tool, args), args, decision)
    assert UnattendedApprover([tool], NoOneToAsk([tool], yes=True))(request).approved is False


def test_protected_files_can_still_be_read(checker: Agent, workspace: Path) -> None:
    (workspace / ".git").mkdir()
    (workspace / ".git" / "config").write_text("[core]\n")
    decision = checker.decide("read_file", {"path": ".git/config"})
    assert (decision.action, decision.rule) == ("allow", "setting")


def test_protected_through_a_symlink_is_still_protected(checker: Agent, workspace: Path) -> None:
    (workspace / ".git" / "hooks").mkdir(parents=True)
    (workspace / "hooks").symlink_to(".git/hooks")
    decision = checker.decide("write_file", {"path": "hooks/post-checkout", "content": "x"})
    assert (decision.rule, decision.needs_human) == ("protected", True)


@pytest.mark.parametrize("spelling", ["agent.yaml", "link.yaml", "./cfg/../agent.yaml"])
def test_the_agents_own_config_file_is_protected(
    workspace: Path, home: Path, spelling: str
) -> None:
    (workspace / "agent.yaml").write_text("policy: {confirm: none}\n")
    (workspace / "link.yaml").symlink_to("agent.yaml")
    (workspace / "cfg").mkdir()
    config = PolicyConfig(confirm="none", tools={"delete_file": "allow"})
    policy = Policy(config, str(workspace), str(home), config_path=str(workspace / "agent.yaml"))
    decision = policy.decide("write_file", {"path": spelling, "content": "policy: {}"})
    assert (decision.action, decision.rule, decision.needs_human) == ("ask", "protected", True)
    assert "own config" in decision.reason


def test_the_config_given_as_a_symlink_protects_the_link_too(workspace: Path, home: Path) -> None:
    (workspace / "real.yaml").write_text("{}\n")
    (workspace / "agent.yaml").symlink_to("real.yaml")
    config = PolicyConfig(confirm="none", tools={"delete_file": "allow"})
    policy = Policy(config, str(workspace), str(home), config_path="agent.yaml")
    for tool, raw in [("delete_file", "agent.yaml"), ("write_file", "real.yaml")]:
        decision = policy.decide(tool, {"path": raw, "content": "{}"})
        assert (decision.rule, decision.needs_human) == ("protected", True), (tool, raw)


def test_deleting_a_directory_that_holds_the_config_is_protected(
    workspace: Path, home: Path
) -> None:
    (workspace / "conf").mkdir()
    (workspace / "conf" / "agent.yaml").write_text("{}\n")
    config = PolicyConfig(confirm="none", tools={"delete_file": "allow"})
    policy = Policy(config, str(workspace), str(home), config_path="conf/agent.yaml")
    decision = policy.decide("delete_file", {"path": "conf", "recursive": True})
    assert (decision.rule, decision.needs_human) == ("protected", True)
    assert "holding" in decision.reason


def test_without_a_config_path_only_the_patterns_protect(workspace: Path, home: Path) -> None:
    policy = Policy(PolicyConfig(confirm="none"), str(workspace), str(home))
    assert policy.decide("write_file", {"path": "agent.yaml", "content": "{}"}).action == "allow"


def test_order_sensitive_before_outside_before_protected(
    checker: Agent, workspace: Path, outside: Path
) -> None:
    # blocked/sensitive → outside allowed → (hard link, protected) → setting
    assert checker.decide("write_file", {"path": ".git/.env", "content": "x"}).rule == "sensitive"
    outside_hook = str(outside / ".git" / "hooks" / "x")
    assert checker.decide("write_file", {"path": outside_hook, "content": "x"}).rule == (
        "outside_allowed"
    )
    (workspace / ".git").mkdir()
    os.link(outside / "secret.txt", workspace / ".git" / "config")
    decision = checker.decide("write_file", {"path": ".git/config", "content": "x"})
    assert decision.rule in ("hard_link", "protected") and decision.needs_human


# -- the two resolvers ---------------------------------------------------------------------


def test_openat2_is_used_when_the_kernel_has_it(
    agent: Agent, workspace: Path, resolver: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = reach._openat2()
    calls: list[str] = []

    def counting(dir_fd: int, path: str, flags: int) -> int:
        calls.append(path)
        assert real is not None
        return real(dir_fd, path, flags)

    monkeypatch.setattr(reach, "_openat2", lambda: counting)
    (workspace / "sub").mkdir()
    (workspace / "sub" / "f.txt").write_text("f\n")
    agent.ok("read_file", {"path": "sub/f.txt"})
    if resolver == "openat2":
        assert calls and calls[-1] == "sub"
    else:
        assert calls == []


def test_a_kernel_without_openat2_falls_back_to_the_walk(
    agent: Agent, workspace: Path, outside: Path, swap: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(reach, "openat2_available", lambda: False)
    (workspace / "notes.txt").write_text("notes\n")
    assert agent.ok("read_file", {"path": "notes.txt"})["content"] == "notes\n"
    swap(_swap_for_link(workspace / "notes.txt", outside / "secret.txt"))
    assert CHANGED in agent.fails("read_file", {"path": "notes.txt"})


def test_a_context_without_roots_still_refuses_swapped_symlinks(
    workspace: Path, outside: Path, home: Path, resolver: str, swap: Any
) -> None:
    policy = Policy(PolicyConfig(), cwd=str(workspace), home=str(home))
    (workspace / "notes.txt").write_text("notes\n")
    decision = policy.decide("read_file", {"path": "notes.txt"})
    swap(_swap_for_link(workspace / "notes.txt", outside / "secret.txt"))
    context = ToolContext(cwd=policy.cwd, hides=policy.hides)  # no roots: anchored at "/"
    result = execute("read_file", context, {"path": "notes.txt"}, decision.paths)
    assert result["success"] is False and CHANGED in result["error"]


def test_root_of_is_the_innermost_allowed_dir(workspace: Path, home: Path) -> None:
    (workspace / "inner").mkdir()
    config = PolicyConfig(allowed_dirs=[".", "inner"])
    policy = Policy(config, cwd=str(workspace), home=str(home))
    assert policy.root_of(str(workspace / "inner" / "x")) == str(workspace / "inner")
    assert policy.root_of(str(workspace / "x")) == str(workspace)
    assert policy.root_of(str(workspace) + "_evil/x") is None


def test_a_target_must_be_a_normalized_path_below_its_root() -> None:
    with pytest.raises(ValueError):
        reach.Target("/a/b", "/c", "b")
    with pytest.raises(ValueError):
        reach.Target("/a/../b", "/", "b")
    with pytest.raises(ValueError):
        reach.Target("relative", "/", "relative")
    assert reach.Target("/a/b", "/a", "b").parts == ("b",)
    assert reach.Target("/a", "/a", "a").parts == ()
    assert reach.Target("/a/b", "/", "b").parts == ("a", "b")


def test_unchecked_paths_resolve_their_parent_and_never_follow_the_name(
    workspace: Path, outside: Path, resolver: str
) -> None:
    # Session files and the approval card's diff use these: a symlinked parent (a home dir on
    # another disk) is fine, a symlink as the file itself is not followed.
    (workspace / "state").symlink_to(outside / "dir")
    assert writing.atomic_write(str(workspace / "state" / "s.json"), b"{}") is True
    assert (outside / "dir" / "s.json").read_bytes() == b"{}"
    assert reading.read_regular(str(workspace / "state" / "s.json"), "s", 100).data == b"{}"
    (workspace / "link.json").symlink_to(outside / "secret.txt")
    with pytest.raises(OSError):
        writing.atomic_write(str(workspace / "link.json"), b"PWNED")
    with pytest.raises(ToolError, match="symlink"):
        reading.read_regular(str(workspace / "link.json"), "link.json", 100)
    assert (outside / "secret.txt").read_text() == OUTSIDE_SECRET + "\n"
