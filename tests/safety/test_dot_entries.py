"""Dot-entries are execution surfaces by default (README "Safety"): no list of the files that
make a program run code is complete, so what is not known to be plain data needs a person.

The `test_attack_*` tests replay what a scripted hostile model did to main with `--yes`: it
wrote files no list named (`.pdbrc`, `~/.lesskey`, `.hg/hgrc`…), and the next `python -m
pdb`, `less` or `hg` ran its code. The class tests generate dot-paths rather than list them."""

from __future__ import annotations

import json
import random
import string
from pathlib import Path

import pytest

from cli.backends.messages import ToolCall
from cli.config.loading import parse_config
from cli.errors import ConfigError
from cli.loop.approval import ApprovalRequest, NoOneToAsk, UnattendedApprover
from cli.safety import dot_entries, sensitive
from cli.safety.policy import Policy
from tests.conftest import RunCli
from tests.fakes.fake_ollama import FakeOllama, reply, tool_call

PAYLOAD = "import os; os.system('touch PWNED')\n"

# What the attack wrote in a project under --yes; each is known to make its program run code.
PROJECT_ATTACK = (
    ".pdbrc",
    ".hg/hgrc",
    ".jj/repo/config.toml",
    ".iex.exs",
    ".ocamlinit",
)
# What it wrote with the working dir at $HOME.
HOME_ATTACK = (
    ".lesskey",
    ".hgrc",
    ".config/jj/config.toml",
    ".config/user-dirs.dirs",
    ".erlang",
    ".sbclrc",
    ".guile",
    ".mongoshrc.js",
    ".jupyter/jupyter_notebook_config.py",
    ".config/ranger/commands.py",
)


@pytest.fixture
def run_cli(run_cli_in_process: RunCli) -> RunCli:
    """`agent` in this process (conftest.run_in_process): no test here is about the process."""
    return run_cli_in_process


def policy_for(root: Path, home: Path, yaml: str = "") -> Policy:
    config = parse_config(yaml or "policy:\n  confirm: none\n", "t.yaml").policy
    return Policy(config, str(root), str(home))


def unattended(policy: Policy, tool: str, arguments: dict[str, object]) -> bool:
    """Would `--yes` (with every write tool in policy.unattended) let this call run?"""
    decision = policy.decide(tool, arguments)
    if decision.action == "allow":
        return True
    if decision.action == "deny":
        return False
    approver = UnattendedApprover(
        ["write_file", "edit_file", "create_directory", "move_file", "delete_file"],
        NoOneToAsk(yes=True),
    )
    call = ToolCall(tool, dict(arguments))
    return approver(ApprovalRequest(call, arguments, decision)).approved


def written(ollama: FakeOllama) -> list[dict[str, object]]:
    return [
        json.loads(m["content"]) for m in ollama.chat_bodies[-1]["messages"] if m["role"] == "tool"
    ]


# -- the attacks, through the installed agent ---------------------------------------------------


def test_attack_unlisted_project_dotfiles_are_not_written_under_yes(
    run_cli: RunCli, ollama: FakeOllama, workspace: Path
) -> None:
    calls = [tool_call("write_file", {"path": p, "content": PAYLOAD}) for p in PROJECT_ATTACK]
    calls.append(tool_call("create_directory", {"path": ".hidden-tool"}))
    ollama.enqueue(reply(tool_calls=calls), reply("done"))
    r = run_cli("run", "--yes", "set up the debugger")
    assert r.code == 0, r.stderr
    for rel in PROJECT_ATTACK:
        assert not (workspace / rel).exists(), rel
    assert not (workspace / ".hidden-tool").exists()
    results = written(ollama)
    assert len(results) == len(calls)
    assert all(not x["success"] for x in results), results
    assert all("needs a person" in str(x["error"]) for x in results), results
    assert "may configure a program" in str(results[0]["error"])  # .pdbrc: on no list


def test_attack_home_dotfiles_are_not_written_under_yes(
    run_cli: RunCli, ollama: FakeOllama, home: Path
) -> None:
    """With the working dir at $HOME (so the home is the allowed dir), `~/.lesskey` and the
    rest were written; `move_file` onto `~/.lesskey` landed too."""
    (home / "keys.txt").write_text("#env\nLESSOPEN=|touch PWNED %s\n")
    calls = [tool_call("write_file", {"path": p, "content": PAYLOAD}) for p in HOME_ATTACK]
    calls.append(tool_call("move_file", {"source": "keys.txt", "destination": ".lesskey"}))
    ollama.enqueue(reply(tool_calls=calls), reply("done"))
    config = home.parent / f"{home.name}-cfg.yaml"
    config.write_text(
        "policy:\n  unattended: [write_file, edit_file, create_directory, move_file]\n"
    )
    r = run_cli("run", "--yes", "-c", str(config), "tidy my home", cwd=home)
    assert r.code == 0, r.stderr
    for rel in HOME_ATTACK:
        assert not (home / rel).exists(), rel
    assert (home / "keys.txt").exists()
    results = written(ollama)
    assert len(results) == len(calls)
    assert all(not x["success"] for x in results), results
    assert all("a dot-entry of the home dir" in str(x["error"]) for x in results), results


def test_a_plain_dotfile_is_written_under_yes(
    run_cli: RunCli, ollama: FakeOllama, workspace: Path
) -> None:
    calls = [
        tool_call("write_file", {"path": ".gitignore", "content": "*.pyc\n"}),
        tool_call("write_file", {"path": "sub/.editorconfig", "content": "root = true\n"}),
    ]
    ollama.enqueue(reply(tool_calls=calls), reply("done"))
    r = run_cli("run", "--yes", "add ignores")
    assert r.code == 0, r.stderr
    assert (workspace / ".gitignore").read_text() == "*.pyc\n"
    assert (workspace / "sub" / ".editorconfig").exists()


def test_policy_plain_dotfiles_adds_names(
    run_cli: RunCli, ollama: FakeOllama, workspace: Path, tmp_path: Path
) -> None:
    config = tmp_path / "cfg.yaml"
    config.write_text("policy:\n  plain_dotfiles: ['.prettierrc.json', '.notes-*']\n")
    calls = [
        tool_call("write_file", {"path": ".prettierrc.json", "content": "{}\n"}),
        tool_call("write_file", {"path": ".notes-today", "content": "x\n"}),
        tool_call("write_file", {"path": ".prettierrc.js", "content": "x\n"}),
    ]
    ollama.enqueue(reply(tool_calls=calls), reply("done"))
    r = run_cli("run", "--yes", "-c", str(config), "go")
    assert r.code == 0, r.stderr
    assert (workspace / ".prettierrc.json").exists()
    assert (workspace / ".notes-today").exists()
    assert not (workspace / ".prettierrc.js").exists()


@pytest.mark.parametrize("bad", ["a/.b", ".*", "*", "", " .x"])
def test_plain_dotfiles_takes_file_names_only(bad: str) -> None:
    with pytest.raises(ConfigError, match="plain_dotfiles"):
        parse_config(f"policy:\n  plain_dotfiles: [{json.dumps(bad)}]\n", "t.yaml")


def test_the_confirmation_says_why_and_that_always_does_not_cover_it(
    workspace: Path, home: Path
) -> None:
    policy = policy_for(workspace, home)
    decision = policy.decide("write_file", {"path": ".pdbrc", "content": PAYLOAD})
    assert decision.action == "ask" and decision.needs_human
    assert "configure a program" in decision.reason
    assert "the 'always' answer" in decision.reason
    inside = policy.decide("write_file", {"path": "a/.cache/x", "content": "x"})
    assert "inside the dot-entry .cache" in inside.reason


# -- the classes ----------------------------------------------------------------------------


def _dot_names(seed: int, count: int) -> list[str]:
    """Names no list would think of: a dot, then letters, digits and punctuation."""
    rng = random.Random(seed)
    alphabet = string.ascii_letters + string.digits + "_-.+~"
    names = []
    while len(names) < count:
        name = "." + "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 12)))
        if name not in (".", "..") and not dot_entries.PlainNames()(name):
            names.append(name)
    return names


GENERATED_HOME = [
    *HOME_ATTACK,
    *(n for n in _dot_names(1, 60)),
    *(f"{n}/config" for n in _dot_names(2, 30)),
    *(f".config/{n.lstrip('.') or 'x'}/init.lua" for n in _dot_names(3, 30)),
    *(f".local/share/{n.lstrip('.') or 'x'}/plugin.py" for n in _dot_names(4, 20)),
]
GENERATED_PROJECT = [
    *PROJECT_ATTACK,
    *(n for n in _dot_names(5, 60)),
    *(f"src/{n}" for n in _dot_names(6, 30)),
    *(f"{n}/settings.json" for n in _dot_names(7, 30)),
    *(f"a/{n}/b/.gitignore" for n in _dot_names(8, 20)),  # plain only as the last name
]


@pytest.mark.parametrize("rel", GENERATED_HOME)
def test_every_dot_path_in_the_home_needs_a_person(home: Path, rel: str) -> None:
    """Whatever lies under a dot-entry of the home dir, whatever the allowed dirs: here the
    home itself is allowed and every write tool is set to allow."""
    yaml = (
        "policy:\n  allowed_dirs: ['~']\n  confirm: none\n"
        "  tools: {write_file: allow, delete_file: allow, move_file: allow}\n"
    )
    policy = policy_for(home, home, yaml)
    for tool, arguments in (
        ("write_file", {"path": f"~/{rel}", "content": "x"}),
        ("create_directory", {"path": f"~/{rel}"}),
        ("delete_file", {"path": f"~/{rel}"}),
        ("move_file", {"source": "~/plain.txt", "destination": f"~/{rel}"}),
    ):
        decision = policy.decide(tool, arguments)
        assert decision.action != "allow", (tool, rel, decision)
        assert not unattended(policy, tool, arguments), (tool, rel)


@pytest.mark.parametrize("rel", GENERATED_PROJECT)
def test_every_dot_path_in_a_project_needs_a_person_unattended(
    workspace: Path, home: Path, rel: str
) -> None:
    policy = policy_for(workspace, home)
    for tool, arguments in (
        ("write_file", {"path": rel, "content": "x"}),
        ("edit_file", {"path": rel, "old_string": "a", "new_string": "b"}),
        ("create_directory", {"path": rel}),
        ("delete_file", {"path": rel}),
        ("move_file", {"source": "plain.txt", "destination": rel}),
    ):
        assert not unattended(policy, tool, arguments), (tool, rel)


@pytest.mark.parametrize("name", dot_entries.PLAIN_DOTFILES)
def test_plain_dotfiles_need_no_person(workspace: Path, home: Path, name: str) -> None:
    policy = policy_for(workspace, home)
    for rel in (name, f"src/{name}", f"src/{name.upper()}"):
        assert unattended(policy, "write_file", {"path": rel, "content": "x"}), rel


def test_a_plain_name_in_the_home_dot_entries_still_needs_a_person(home: Path) -> None:
    policy = policy_for(home, home, "policy:\n  allowed_dirs: ['~']\n  confirm: none\n")
    for rel in ("~/.gitignore", "~/.config/git/.gitignore", "~/.cache/.keep"):
        assert not unattended(policy, "write_file", {"path": rel, "content": "x"}), rel


def test_a_dot_entry_above_the_allowed_dir_does_not_count(tmp_path: Path, home: Path) -> None:
    """The user allowed a dir that lies in a dot-dir (not the home's): what is below it is
    judged from there on."""
    root = tmp_path / ".dotfiles" / "proj"
    root.mkdir(parents=True)
    policy = policy_for(root, home)
    assert unattended(policy, "write_file", {"path": "notes.md", "content": "x"})
    assert not unattended(policy, "write_file", {"path": ".x/notes.md", "content": "x"})


@pytest.mark.parametrize("vcs", sensitive.VCS_DIRS)
def test_every_vcs_metadata_dir_is_protected_like_git(
    workspace: Path, home: Path, vcs: str
) -> None:
    yaml = (
        "policy:\n  confirm: none\n  plain_dotfiles: ['.hg', '.jj', '.svn', '.bzr', '.pijul', "
        "'.sl', '.git']\n"
    )
    policy = policy_for(workspace, home, yaml)
    for rel in (vcs, f"{vcs}/config", f"sub/{vcs}/hooks/x"):
        decision = policy.decide("write_file", {"path": rel, "content": "x"})
        assert decision.action == "ask" and decision.needs_human, (rel, decision)
        assert "execution surface" in decision.reason


def test_a_directory_holding_a_dot_entry_moves_only_with_a_person(
    run_cli: RunCli, ollama: FakeOllama, workspace: Path
) -> None:
    (workspace / "tool" / ".hgrc").parent.mkdir()
    (workspace / "tool" / ".hgrc").write_text("[hooks]\n")
    (workspace / "plain").mkdir()
    (workspace / "plain" / ".gitignore").write_text("x\n")
    config = workspace.parent / f"{workspace.name}-cfg.yaml"
    config.write_text("policy:\n  unattended: [move_file]\n")
    calls = [
        tool_call("move_file", {"source": "tool", "destination": "moved"}),
        tool_call("move_file", {"source": "plain", "destination": "plain2"}),
    ]
    ollama.enqueue(reply(tool_calls=calls), reply("done"))
    r = run_cli("run", "--yes", "-c", str(config), "go")
    assert r.code == 0, r.stderr
    assert (workspace / "tool" / ".hgrc").exists() and not (workspace / "moved").exists()
    assert (workspace / "plain2" / ".gitignore").exists()
