"""The read gate (cli/tools/gate.py): every byte a tool returns from a file passes the check
read_file makes — secrets by name and by identity, other hard links, blocked dirs, outside the
allowed dirs, size caps — and what a tool cannot ask a person about mid-output is left out,
counted and said.

The finding (issue 18): a tracked file that is a hard link to ~/.ssh/id_rsa came back as `+`
lines from git_diff under --yes, where read_file would have refused it. The class: each tool
that returns content × each reason the gate refuses, run through the real agent (real policy,
real files, real git, the fake Ollama), the refused bytes never reach the model.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from cli.config.loading import parse_config
from cli.config.settings import TOOL_NAMES
from cli.fs import reach
from cli.loop.approval import NoOneToAsk, UnattendedApprover
from cli.loop.events import ToolResult
from cli.tools import ALL_TOOLS
from cli.wiring import Choices, build_agent
from tests.conftest import RunCli
from tests.fakes.fake_ollama import FakeOllama, reply, tool_call

pytestmark = pytest.mark.skipif(
    subprocess.run(["git", "--version"], capture_output=True).returncode != 0,
    reason="git is not installed",
)

# What the refused file holds: two lines whose tails the model never sends (its search query
# and its edit's old_string carry only the heads), so finding a tail anywhere the model was
# sent means the file's content came back.
HEAD, TAIL = "KEYLINE alpha", "TAIL bravo"
MARKS = ("alpha-81c2", "bravo-55x9")
CONTENT = f"{HEAD}-81c2\n{TAIL}-55x9\n"
KEY = f"-----BEGIN OPENSSH PRIVATE KEY-----\n{CONTENT}-----END OPENSSH PRIVATE KEY-----\n"


@pytest.fixture
def run_cli(run_cli_in_process: RunCli) -> RunCli:
    """`agent` in this process (conftest.run_in_process): no test here is about the process."""
    return run_cli_in_process


def git(repo: Path, *args: str) -> None:
    subprocess.run(
        [
            "git",
            "-c",
            "init.defaultBranch=main",
            "-c",
            "user.name=T",
            "-c",
            "user.email=t@e",
            *args,
        ],
        cwd=repo,
        check=True,
        capture_output=True,
        env={**os.environ, "GIT_CONFIG_NOSYSTEM": "1"},
    )


def repo_with(repo: Path, files: dict[str, str]) -> Path:
    """A repository at `repo` whose first commit holds `files`."""
    repo.mkdir(parents=True, exist_ok=True)
    git(repo, "init", "-q")
    for name, text in files.items():
        (repo / name).write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "initial")
    return repo


def ssh_key(home: Path) -> Path:
    (home / ".ssh").mkdir(mode=0o700, exist_ok=True)
    key = home / ".ssh" / "id_rsa"
    key.write_text(KEY)
    key.chmod(0o600)
    return key


def leaked(text: str) -> list[str]:
    return [mark for mark in MARKS if mark in text]


# -- the finding ---------------------------------------------------------------------------------


def test_git_diff_under_yes_never_returns_a_tracked_hard_link_to_the_ssh_key(
    run_cli: RunCli, ollama: FakeOllama, workspace: Path, home: Path
) -> None:
    key = ssh_key(home)
    repo_with(workspace, {"notes.txt": "my notes\n", "staged.txt": "old\n"})
    # Tracked files turned into hard links to the key: one changed in the work tree, one
    # staged from the link (the index then holds the key as a blob).
    for name in ("notes.txt", "staged.txt"):
        (workspace / name).unlink()
        os.link(key, workspace / name)
    git(workspace, "add", "staged.txt")
    ollama.enqueue(
        reply(
            tool_calls=[
                tool_call("git_diff", {}),
                tool_call("git_diff", {"staged": True}),
                tool_call("git_diff", {"path": "notes.txt"}),
            ]
        ),
        reply("Nothing to see."),
    )
    r = run_cli("run", "--yes", "--json", "show me the diff")
    assert r.code == 0, r.stderr
    sent = json.dumps(ollama.chat_bodies, ensure_ascii=False)
    assert leaked(sent) == [] and leaked(r.stdout) == [] and leaked(r.stderr) == []
    assert "PRIVATE KEY" not in sent + r.stdout + r.stderr
    for store in (home / ".local" / "state", home / ".local" / "share"):  # audit log, sessions
        for path in (p for p in store.rglob("*") if p.is_file()):
            assert leaked(path.read_text(errors="replace")) == [], path
    # The calls ran: the whole diffs say what they left out and why; the one naming the
    # link is refused by the policy as the secret it is.
    whole, staged, named = (c["result"] for c in json.loads(r.stdout)["tool_calls"])
    for result in (whole, staged):
        assert result["success"] is True and result["diff"] == "", result
        assert "left out: secrets or blocked paths" in result["note"], result
    assert "under another name (a hard link to it), a secret" in named["error"]


# -- the class: each content tool × each reason -------------------------------------------------


@dataclass
class Place:
    """Where a scenario put things: the workspace (a git repo), the home, the policy YAML."""

    workspace: Path
    home: Path
    yaml: dict[str, Any] = field(default_factory=dict)
    target: str = "notes.txt"  # the file the tools are pointed at
    tree: str = "."  # the directory search, git_status and git_diff look at


def _plain(place: Place) -> None:
    """The control: an ordinary tracked file holding the content; every content tool shows
    it, so the harness would see a leak."""
    (place.workspace / "notes.txt").write_text(CONTENT)


def _secret_by_name(place: Place) -> None:
    (place.workspace / "server.key").write_text(CONTENT)  # tracked, changed
    place.target = "server.key"


def _secret_by_identity(place: Place) -> None:
    key = ssh_key(place.home)
    (place.workspace / "notes.txt").unlink()
    os.link(key, place.workspace / "notes.txt")


def _other_hard_links(place: Place) -> None:
    elsewhere = place.home / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "shared.txt").write_text(CONTENT)
    (place.workspace / "notes.txt").unlink()
    os.link(elsewhere / "shared.txt", place.workspace / "notes.txt")


def _symlink_into_blocked_dir(place: Place) -> None:
    vault = place.home / "vault"
    vault.mkdir()
    (vault / "data.txt").write_text(CONTENT)
    place.yaml["blocked_dirs"] = [str(vault)]
    (place.workspace / "notes.txt").unlink()
    (place.workspace / "notes.txt").symlink_to(vault / "data.txt")


def _symlink_to_secret(place: Place) -> None:
    key = ssh_key(place.home)
    (place.workspace / "notes.txt").unlink()
    (place.workspace / "notes.txt").symlink_to(key)


def _outside_allowed_dirs(place: Place) -> None:
    far = repo_with(place.home / "far", {"notes.txt": "old\n"})
    (far / "notes.txt").write_text(CONTENT)
    place.target = str(far / "notes.txt")
    place.tree = str(far)


def _too_large(place: Place) -> None:
    filler = "".join(f"filler line {n}\n" for n in range(1000))  # ~16 KB
    (place.workspace / "notes.txt").write_text(CONTENT + filler)
    place.yaml["limits"] = {
        "max_read_bytes": 4096,
        "max_write_bytes": 4096,
        "max_search_file_bytes": 4096,
    }


REASONS: dict[str, Callable[[Place], None]] = {
    "plain": _plain,
    "secret by name": _secret_by_name,
    "secret by identity (hard link)": _secret_by_identity,
    "other hard links": _other_hard_links,
    "symlink into a blocked dir": _symlink_into_blocked_dir,
    "symlink to a secret": _symlink_to_secret,
    "outside the allowed dirs": _outside_allowed_dirs,
    "too large": _too_large,
}


@dataclass(frozen=True)
class Variant:
    tool: str
    calls: Callable[[Place], list[dict[str, Any]]]  # what the model calls, in order
    returns_content: bool  # the control shows the content in the last call's result
    staged: bool = False  # stage the target before the call


# Every tool that returns bytes from a file, with the calls that make it do so. A new tool
# that returns file content goes here (and so through every reason above), or, returning
# none, into NO_FILE_CONTENT with why: test_every_tool_is_classified fails otherwise.
VARIANTS: dict[str, Variant] = {
    "read_file": Variant("read_file", lambda p: [tool_call("read_file", {"path": p.target})], True),
    "edit_file": Variant(
        "edit_file",
        # Read first (edit_file works only on a file read), then an old_string that is not
        # there: the error quotes the file's most similar lines.
        lambda p: [
            tool_call("read_file", {"path": p.target}),
            tool_call(
                "edit_file",
                {"path": p.target, "old_string": f"{HEAD}\n{TAIL}", "new_string": "x"},
            ),
        ],
        True,
    ),
    "search_files": Variant(
        "search_files",
        lambda p: [tool_call("search_files", {"path": p.tree, "query": "KEYLINE"})],
        True,
    ),
    "git_diff": Variant("git_diff", lambda p: [tool_call("git_diff", {"path": p.tree})], True),
    "git_diff staged": Variant(
        "git_diff",
        lambda p: [tool_call("git_diff", {"path": p.tree, "staged": True})],
        True,
        staged=True,
    ),
    "git_status": Variant(
        "git_status", lambda p: [tool_call("git_status", {"path": p.tree})], False
    ),
}

NO_FILE_CONTENT = {
    "write_file": "returns the path and a byte count",
    "list_directory": "returns names, kinds, sizes and times",
    "create_directory": "returns the path",
    "move_file": "returns the two paths and kinds",
    "delete_file": "returns the path and what was removed",
    "run_command": "returns a command's output: the command sandbox is what holds there",
}


def test_every_tool_is_classified() -> None:
    content = {v.tool for v in VARIANTS.values()}
    assert not content & set(NO_FILE_CONTENT)
    assert content | set(NO_FILE_CONTENT) == set(ALL_TOOLS) == set(TOOL_NAMES)


@pytest.fixture
def unattended_agent(ollama: FakeOllama, workspace: Path, home: Path) -> Iterator[Any]:
    """Build the agent `agent run --yes` builds, from policy YAML, every tool unattended."""

    def make(policy: dict[str, Any]) -> Any:
        yaml = json.dumps({"policy": {"unattended": list(TOOL_NAMES), **policy}})
        config = parse_config(yaml, "test.yaml")
        return build_agent(
            Choices(host=ollama.url),
            config,
            environ=dict(os.environ),
            cwd=str(workspace),
            home=str(home),
            approver=lambda _p: UnattendedApprover(
                config.policy.unattended, NoOneToAsk(config.policy.unattended, yes=True)
            ),
        )

    yield make


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("reason", list(REASONS))
def test_content_a_gate_refuses_never_reaches_the_model(
    reason: str,
    variant: str,
    unattended_agent: Any,
    ollama: FakeOllama,
    workspace: Path,
    home: Path,
) -> None:
    repo_with(workspace, {"notes.txt": "old\n", "server.key": "old\n"})
    place = Place(workspace, home)
    REASONS[reason](place)
    chosen = VARIANTS[variant]
    if chosen.staged:
        git(Path(place.tree if os.path.isabs(place.tree) else workspace), "add", "-A")
    ollama.enqueue(reply(tool_calls=chosen.calls(place)), reply("Done."))
    agent = unattended_agent(place.yaml)
    events = list(agent.run([], "look at the file"))
    results = [e.result for e in events if isinstance(e, ToolResult)]
    assert results, "no tool ran"
    last = json.dumps(results[-1], ensure_ascii=False)
    sent = json.dumps(ollama.chat_bodies, ensure_ascii=False)
    if reason == "plain":
        # The control: the harness sees content when it comes back.
        assert bool(leaked(last)) == chosen.returns_content, last
    else:
        assert leaked(sent) == [], last
        assert leaked(json.dumps(results, ensure_ascii=False)) == []


# -- the tools call the gate themselves ----------------------------------------------------------


@pytest.fixture
def swap(monkeypatch: pytest.MonkeyPatch) -> Callable[[Callable[[], None]], None]:
    """Run `change` once, between the policy's check and the file operation (the race
    window reach.before_use marks)."""

    def arm(change: Callable[[], None]) -> None:
        done: list[bool] = []

        def hook(_path: str) -> None:
            if not done:
                done.append(True)
                change()

        monkeypatch.setattr(reach, "before_use", hook)

    return arm


def _to_key_link(workspace: Path, key: Path) -> Callable[[], None]:
    def change() -> None:
        (workspace / "notes.txt").unlink()
        os.link(key, workspace / "notes.txt")

    return change


@pytest.mark.parametrize("tool", ["read_file", "edit_file"])
def test_a_file_swapped_for_a_key_link_after_the_check_is_refused_by_the_gate(
    tool: str,
    swap: Callable[[Callable[[], None]], None],
    unattended_agent: Any,
    ollama: FakeOllama,
    workspace: Path,
    home: Path,
) -> None:
    key = ssh_key(home)
    (workspace / "notes.txt").write_text("ordinary notes\n")
    calls = [tool_call("read_file", {"path": "notes.txt"})]
    if tool == "edit_file":
        calls.append(
            tool_call("edit_file", {"path": "notes.txt", "old_string": "nope", "new_string": "x"})
        )
    ollama.enqueue(reply(tool_calls=calls), reply("Done."))
    agent = unattended_agent({})
    # The last call's file becomes the key's link only after the policy said yes to a plain
    # file: what refuses it then is the gate, in the tool.
    if len(calls) == 1:
        swap(_to_key_link(workspace, key))
    results = []
    for event in agent.run([], "go"):
        if isinstance(event, ToolResult):
            results.append(event.result)
            if len(results) == len(calls) - 1:
                swap(_to_key_link(workspace, key))
    error = results[-1]["error"]
    assert error.startswith("notes.txt is ") and error.endswith(
        "/.ssh/id_rsa under another name (a hard link to it), a secret; it is never read"
    )
    assert leaked(json.dumps(ollama.chat_bodies)) == []


# -- identity: a hard link to a secret is that secret --------------------------------------------


def test_read_file_of_a_hard_link_to_the_ssh_key_is_refused_not_put_to_a_person(
    make_agent: Any, ollama: FakeOllama, workspace: Path, home: Path
) -> None:
    key = ssh_key(home)
    os.link(key, workspace / "notes.txt")
    ollama.enqueue(reply(tool_calls=[tool_call("read_file", {"path": "notes.txt"})]), reply("ok"))
    harness = make_agent(answers=[True])  # a person who would say yes to a hard link
    results = [e.result for e in harness.run("read notes.txt") if isinstance(e, ToolResult)]
    assert harness.approver.requests == []  # never asked: the file is the key
    assert results[0]["success"] is False
    assert (
        f"notes.txt is {key} under another name (a hard link to it), a secret"
        in (results[0]["error"])
    )
    assert leaked(json.dumps(ollama.chat_bodies)) == []


def test_a_key_made_after_the_index_is_known_once_its_directory_changed(home: Path) -> None:
    from cli.safety.secret_files import RECHECK_SECONDS, SecretFiles

    now = [0.0]
    first = ssh_key(home)
    files = SecretFiles([str(home / ".ssh"), str(home / ".netrc")], clock=lambda: now[0])
    info = os.stat(first)
    assert files.find(info.st_dev, info.st_ino) == str(first)
    later = home / ".ssh" / "id_ed25519"
    later.write_text(KEY)
    new = os.stat(later)
    now[0] += RECHECK_SECONDS / 2  # looked at again at most once a second: not yet
    assert files.find(new.st_dev, new.st_ino) is None
    now[0] += RECHECK_SECONDS / 2
    assert files.find(new.st_dev, new.st_ino) == str(later)
    netrc = home / ".netrc"  # a root that did not exist when the index was built
    netrc.write_text("machine x password y\n")
    now[0] += RECHECK_SECONDS
    assert files.find(os.stat(netrc).st_dev, os.stat(netrc).st_ino) == str(netrc)
    assert files.find(info.st_dev, info.st_ino + 10**9) is None


# -- git_diff: what it keeps, what it leaves out, and what it says ------------------------------


def _diff(agent: Any, ollama: FakeOllama, args: dict[str, Any]) -> dict[str, Any]:
    ollama.enqueue(reply(tool_calls=[tool_call("git_diff", args)]), reply("ok"))
    results = [e.result for e in agent.run([], "diff") if isinstance(e, ToolResult)]
    assert results[0]["success"] is True, results[0]
    return dict(results[0])


def test_git_diff_keeps_what_passes_and_says_what_it_left_out(
    unattended_agent: Any, ollama: FakeOllama, workspace: Path, home: Path
) -> None:
    names = ["plain.txt", "linked.txt", "large.txt", "gone.txt", "link.txt"]
    repo_with(workspace, {name: "old\n" for name in names})
    (workspace / "plain.txt").write_text("plain change\n")
    elsewhere = home / "elsewhere.txt"
    elsewhere.write_text(CONTENT)
    (workspace / "linked.txt").unlink()
    os.link(elsewhere, workspace / "linked.txt")
    (workspace / "large.txt").write_text(CONTENT + "x" * 5000)
    (workspace / "gone.txt").unlink()  # a deletion: the index's old content, no file now
    (workspace / "link.txt").unlink()
    (workspace / "link.txt").symlink_to("plain.txt")  # its section holds the target's name
    agent = unattended_agent({"limits": {"max_read_bytes": 4096}})
    result = _diff(agent, ollama, {})
    # A file turned into a symlink is two sections: the file's deletion, the link's creation.
    assert result["files"] == ["gone.txt", "link.txt", "link.txt", "plain.txt"]
    assert "+plain change" in result["diff"] and "+plain.txt" in result["diff"]
    assert leaked(result["diff"]) == []
    assert result["note"] == (
        "1 file's section left out: it has other hard links (read it with read_file to be "
        "asked); 1 file's section left out: it is larger than read_file reads "
        "(policy.limits.max_read_bytes)"
    )


def test_git_diff_without_a_path_in_a_working_dir_outside_the_allowed_dirs_leaves_content_out(
    ollama: FakeOllama, workspace: Path, home: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    # No path argument: nothing was put to a person, though git reads the working dir.
    repo_with(workspace, {"notes.txt": "old\n"})
    (workspace / "notes.txt").write_text(CONTENT)
    elsewhere = tmp_path_factory.mktemp("allowed")
    config = parse_config(json.dumps({"policy": {"allowed_dirs": [str(elsewhere)]}}), "t.yaml")
    agent = build_agent(
        Choices(host=ollama.url),
        config,
        environ=dict(os.environ),
        cwd=str(workspace),
        home=str(home),
        approver=lambda _p: NoOneToAsk(),
    )
    result = _diff(agent, ollama, {})
    assert result["diff"] == "" and leaked(json.dumps(ollama.chat_bodies)) == []
    assert result["note"] == (
        "1 file's section left out: it is outside the allowed directories (read it with "
        "read_file to be asked)"
    )


@pytest.mark.parametrize(
    ("tool", "extra"),
    [
        ("read_file", {}),
        ("edit_file", {"old_string": "a", "new_string": "b"}),
        ("write_file", {"content": "x"}),
        ("delete_file", {}),
        ("list_directory", {}),
        ("search_files", {"query": "KEYLINE"}),
        ("git_diff", {}),
        ("git_status", {}),
    ],
)
def test_every_path_tool_refuses_a_hard_link_to_the_key_as_the_secret_it_is(
    tool: str, extra: dict[str, Any], workspace: Path, home: Path
) -> None:
    from cli.config.settings import PolicyConfig
    from cli.safety.policy import Policy

    key = ssh_key(home)
    os.link(key, workspace / "notes.txt")
    policy = Policy(PolicyConfig(), str(workspace), str(home))
    decision = policy.decide(tool, {"path": "notes.txt", **extra})
    assert (decision.action, decision.rule) == ("deny", "sensitive"), decision
    assert "under another name (a hard link to it), a secret" in decision.reason
    # A hard link to a file that is no secret is still a person's call, as before.
    (home / "plain.txt").write_text("plain\n")
    os.link(home / "plain.txt", workspace / "other.txt")
    other = policy.decide(tool, {"path": "other.txt", **extra})
    assert other.rule != "sensitive"
