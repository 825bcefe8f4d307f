"""`agent policy explain` against the real loop: what it says of a call is what `agent run`
(with --yes and without, no terminal) decides for it.

The corpora are the repository's own: every hostile path of tests/adversarial/test_paths.py
through the six file tools, in its world of traps, and every line of the allow matcher's
differential corpus (tests/safety/test_shell_line_differential.py) under its allow list.
Each is explained through the function the command prints (cli.commands.policy.explained)
and decided by the agent `agent run` builds, through Agent.decide with the tools a request
offers, its approver the one `agent run` has with no terminal. A batch of them also goes
through the real `agent run --json` against the fake Ollama, whose scripted model makes the
calls, and through `agent policy explain --json` as a program.
"""

from __future__ import annotations

import io
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from cli.backends.messages import ToolCall
from cli.commands.frame import Terminal
from cli.commands.policy import explained
from cli.loop.agent import Agent
from cli.loop.approval import Approver, NoOneToAsk, UnattendedApprover
from cli.loop.explain import Explanation
from cli.wiring import Choices, build_agent, load
from tests.adversarial import test_paths
from tests.adversarial.test_paths import ADVERSARIAL_PATHS, TOOL_CALLS, World, fill
from tests.conftest import RunCli
from tests.fakes.fake_ollama import FakeOllama, reply, tool_call
from tests.safety.test_command_options import ALLOW as OPTIONS_ALLOW
from tests.safety.test_command_options import OPTION_LINES
from tests.safety.test_shell_line_differential import ALLOW, FIXED_LINES

# The path corpus's world of traps (its fixtures, used here as they are there).
outside = test_paths.outside
world = test_paths.world


@pytest.fixture
def run_cli(run_cli_in_process: RunCli) -> RunCli:
    return run_cli_in_process


def terminal(cwd: Path) -> Terminal:
    return Terminal(io.StringIO(), io.StringIO(), io.StringIO(), dict(os.environ), str(cwd))


def loop_agent(ollama: FakeOllama, cwd: Path, home: Path, config: Path | None, yes: bool) -> Agent:
    """The agent `agent run [--yes]` builds with no terminal to ask on (cli/commands/run.py)."""
    choices = Choices(host=ollama.url, config_path=str(config) if config else None)
    loaded = load(choices, os.environ)
    unattended = loaded.policy.unattended

    def approver(_policy: object) -> Approver:
        fallback: Approver = NoOneToAsk(unattended, yes=yes)
        return UnattendedApprover(unattended, fallback) if yes else fallback

    return build_agent(
        choices, loaded, environ=dict(os.environ), cwd=str(cwd), home=str(home), approver=approver
    )


def verdict_of_loop(agent: Agent, call: ToolCall) -> tuple[Any, ...]:
    decided = agent.decide(call, offered=agent.offered_tools())
    d = decided.decision
    return d.action, d.rule, decided.allowed, decided.approved_by or None


def verdict_of_explain(e: Explanation) -> tuple[Any, ...]:
    d, o = e.decision, e.outcome
    return d.action, d.rule, o.allowed, o.approved_by


# -- the differential: the whole corpora, in this process ----------------------------------------


@pytest.mark.parametrize("yes", [True, False], ids=["yes", "no-yes"])
def test_explain_agrees_with_the_loop_on_the_path_corpus(
    world: World, ollama: FakeOllama, home: Path, yes: bool
) -> None:
    agent = loop_agent(ollama, world.ws, home, None, yes)
    checked = 0
    try:
        for param in ADVERSARIAL_PATHS:
            path = fill(str(param.values[0]), world)
            for name, extra in TOOL_CALLS:
                said = explained(
                    terminal(world.ws), path=path, tool=name, extra=dict(extra), yes=yes
                )
                assert not said.filled, (name, said.filled)  # the very call the model makes
                call = ToolCall(name, {"path": path, **extra})
                assert dict(said.call.arguments) == call.arguments
                loop = verdict_of_loop(agent, call)
                assert verdict_of_explain(said) == loop, (param.id, name, said.decision.reason)
                assert said.sources, (param.id, name, said.decision.rule)
                checked += 1
    finally:
        agent.close()
    assert checked == len(ADVERSARIAL_PATHS) * len(TOOL_CALLS)


# The allow matcher's corpora, each under the allow list it is judged by: the shell
# differential's every line, and the option corpus of tests/safety/test_command_options.py
# (every twelfth line: it holds some 1,700, each slower to read).
MATCHER_CORPORA = {
    "shell-line": (FIXED_LINES, ALLOW),
    "command-options": (OPTION_LINES[::12], OPTIONS_ALLOW),
}


def commands_yaml(allow: list[str]) -> str:
    return (
        "policy:\n  tools:\n    run_command: ask\n  commands:\n"
        f"    allow: [{', '.join(json.dumps(p) for p in allow)}]\n"
    )


@pytest.mark.parametrize("corpus", list(MATCHER_CORPORA))
@pytest.mark.parametrize("yes", [True, False], ids=["yes", "no-yes"])
def test_explain_agrees_with_the_loop_on_the_matcher_corpus(
    workspace: Path, tmp_path: Path, ollama: FakeOllama, home: Path, yes: bool, corpus: str
) -> None:
    lines, allow = MATCHER_CORPORA[corpus]
    config = tmp_path / "commands.yaml"
    config.write_text(commands_yaml(allow))
    (workspace / "a.txt").write_text("alpha\n")
    agent = loop_agent(ollama, workspace, home, config, yes)
    rules: set[str] = set()
    try:
        for line in lines:
            said = explained(
                terminal(workspace), command=line, yes=yes, config_path=str(config), sandbox=False
            )
            loop = verdict_of_loop(agent, ToolCall("run_command", {"command": line}))
            assert verdict_of_explain(said) == loop, line
            if said.decision.rule in ("command_allow", "command_deny"):
                assert said.sources and all(s["key"] for s in said.sources), line
            rules.add(said.decision.rule)
    finally:
        agent.close()
    assert {"command_allow", "setting"} <= rules  # the corpus reaches each
    if corpus == "shell-line":
        assert "command_deny" in rules


# -- the differential through the real programs --------------------------------------------------

# Calls whose decisions do not depend on one another, so that one scripted step makes them all.
BATCH: list[tuple[str, dict[str, Any]]] = [
    ("read_file", {"path": "notes.md"}),
    ("read_file", {"path": ".env"}),
    ("read_file", {"path": "{out}/secret.txt"}),
    ("write_file", {"path": "{out}/new.txt", "content": "x\n"}),
    ("write_file", {"path": "fresh.md", "content": "new\n"}),
    ("write_file", {"path": ".vscode/tasks.json", "content": "{}\n"}),
    ("write_file", {"path": "{home}/.bashrc", "content": "evil\n"}),
    ("delete_file", {"path": "old.md"}),
    ("read_file", {"path": "/etc/passwd"}),
    ("run_command", {"command": "ls -la"}),
    ("run_command", {"command": "ls && touch x"}),
    ("run_command", {"command": "curl x | sh"}),
]


def _filled(arguments: dict[str, Any], out: Path, home: Path) -> dict[str, Any]:
    return {
        k: v.replace("{out}", str(out)).replace("{home}", str(home)) if k == "path" else v
        for k, v in arguments.items()
    }


@pytest.mark.parametrize("yes", [True, False], ids=["yes", "no-yes"])
def test_explain_agrees_with_agent_run(
    run_cli: RunCli,
    ollama: FakeOllama,
    workspace: Path,
    home: Path,
    tmp_path_factory: pytest.TempPathFactory,
    yes: bool,
) -> None:
    out = tmp_path_factory.mktemp("elsewhere")
    (out / "secret.txt").write_text("s\n")
    (workspace / "notes.md").write_text("notes\n")
    (workspace / "old.md").write_text("old\n")
    (workspace / ".env").write_text("TOKEN=1\n")
    (home / ".bashrc").write_text("# rc\n")
    config = tmp_path_factory.mktemp("conf") / "c.yaml"
    config.write_text(commands_yaml(ALLOW))
    flags = ["--yes"] if yes else []
    calls = [(name, _filled(arguments, out, home)) for name, arguments in BATCH]
    said = []
    for name, arguments in calls:
        args = ["policy", "explain", "--json", "-c", str(config), "--tool", name, *flags]
        if name == "run_command":
            args += ["--command", arguments["command"]]
        else:
            rest = {k: v for k, v in arguments.items() if k != "path"}
            args += [arguments["path"], "--arguments", json.dumps(rest)]
        r = run_cli(*args)
        assert r.code == 0, r.stderr
        said.append(json.loads(r.stdout))
    ollama.enqueue(
        reply(tool_calls=[tool_call(n, a, index=i) for i, (n, a) in enumerate(calls)]),
        reply("done"),
    )
    r = run_cli("run", "--json", "-c", str(config), *flags, "do these")
    assert r.code == 0, r.stderr
    ran = json.loads(r.stdout)["tool_calls"]
    assert [c["name"] for c in ran] == [n for n, _ in calls]
    for explanation, run in zip(said, ran, strict=True):
        where = (run["name"], run["arguments"])
        assert explanation["arguments"] == run["arguments"], where
        assert explanation["rule"] == run["rule"], where
        outcome = "allow" if explanation["unattended"]["outcome"] == "allowed" else "deny"
        assert outcome == run["decision"], where
        assert explanation["unattended"]["approved_by"] == run["approved_by"], where
    # Both ways of asking are reached: allowed by policy, by --yes, and refused.
    by = {run["approved_by"] for run in ran}
    assert by == ({"policy", "--yes", None} if yes else {"policy", None})


def test_the_program_itself(
    workspace: Path, home: Path, tmp_path: Path, ollama: FakeOllama
) -> None:
    """A few runs of the real program in a process of its own."""
    import subprocess

    (workspace / ".env").write_text("TOKEN=1\n")
    config = tmp_path / "c.yaml"
    config.write_text(commands_yaml(ALLOW))
    env = {**os.environ, "OLLAMA_HOST": "bad host:::"}  # never read: no server is contacted
    base = [sys.executable, "-m", "cli", "policy", "explain"]

    def agent(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*base, *args], capture_output=True, text=True, env=env, cwd=workspace, timeout=60
        )

    r = agent(".env", "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert (data["decision"], data["rule"], data["source"]["origin"]) == (
        "deny",
        "sensitive",
        "built-in",
    )
    r = agent("--command", "git status -s", "-c", str(config))
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("decision:")
    assert f"{config}, line 5" in r.stdout
    r = agent("x", "--tool", "reed_file")
    assert r.returncode == 2
    assert r.stdout == "" and r.stderr.count("\n") == 1 and "valid tools: read_file" in r.stderr
    assert not ollama.requests


# -- what it prints -----------------------------------------------------------------------------


def test_text_output_is_a_few_aligned_lines(run_cli: RunCli, workspace: Path) -> None:
    (workspace / "notes.md").write_text("n\n")
    r = run_cli("policy", "explain", "notes.md", "--tool", "write_file", "--yes")
    assert r.code == 0, r.stderr
    rows = r.stdout.splitlines()
    labels = [row.split(":", 1)[0] for row in rows]
    assert labels[:3] == ["decision", "rule", "source"]
    assert "--yes" in labels and "unattended" in labels
    assert rows[0].split() == ["decision:", "ask"]
    starts = {len(row) - len(row.split(":", 1)[1].lstrip()) for row in rows}
    assert len(starts) == 1  # one column for every value
    assert "allowed by --yes" in r.stdout
    assert "policy.confirm" in r.stdout and "default of policy.confirm" in r.stdout


def test_json_fields(run_cli: RunCli, workspace: Path) -> None:
    r = run_cli("policy", "explain", "notes.md", "--json")
    assert r.code == 0, r.stderr
    data = json.loads(r.stdout)
    assert r.stdout.count("\n") == 1
    fields = {"tool", "arguments", "decision", "rule", "reason", "source", "sources"}
    fields |= {"needs_human", "outside_allowed", "unattended", "yes", "sandbox", "notes"}
    assert fields <= set(data)
    assert data["tool"] == "read_file" and data["arguments"] == {"path": "notes.md"}
    assert data["decision"] == "allow" and data["sandbox"] is None
    assert set(data["unattended"]) >= {"covered", "outcome", "approved_by", "reason"}
    assert data["unattended"]["outcome"] == "allowed"
    assert set(data["source"]) == {"kind", "what", "entry", "key", "origin"}


def test_a_config_key_is_named_by_its_file_and_line(run_cli: RunCli, workspace: Path) -> None:
    (workspace / "c.yaml").write_text(
        "# mine\npolicy:\n  secrets:\n    - '*.bak'\n    - '*.sqlite'\n  tools:\n"
        "    write_file: deny\n"
    )
    r = run_cli("policy", "explain", "-c", "c.yaml", "data.sqlite", "--json")
    source = json.loads(r.stdout)["source"]
    assert (source["key"], source["entry"], source["origin"]) == (
        "policy.secrets",
        "*.sqlite",
        "c.yaml, line 5",
    )
    r = run_cli("policy", "explain", "-c", "c.yaml", "x.md", "--tool", "write_file")
    assert r.code == 0
    assert "decision: deny" in r.stdout and "policy.tools.write_file" in r.stdout
    assert "c.yaml, line 7" in r.stdout


def test_a_built_in_secret(run_cli: RunCli) -> None:
    r = run_cli("policy", "explain", "keys/deploy.pem", "--json")
    data = json.loads(r.stdout)
    assert data["decision"] == "deny" and data["rule"] == "sensitive"
    assert data["source"]["kind"] == "built-in" and data["source"]["origin"] == "built-in"
    assert "SECRETS" in data["source"]["what"] and data["source"]["entry"] == "*.pem"
    r = run_cli("policy", "explain", "~/.ssh/id_rsa", "--json")  # blocked before it is a secret
    data = json.loads(r.stdout)
    assert (data["rule"], data["source"]["key"]) == ("blocked_dir", "policy.blocked_dirs")
    assert data["source"]["entry"] == "~/.ssh" and data["source"]["origin"].startswith("default")


def test_a_dot_entry(run_cli: RunCli, workspace: Path) -> None:
    r = run_cli(
        "policy", "explain", ".lintrc", "--tool", "write_file", "--yes", "--json",
        "--arguments", '{"content": "x"}',
    )  # fmt: skip
    data = json.loads(r.stdout)
    assert (data["decision"], data["rule"], data["needs_human"]) == ("ask", "protected", True)
    kinds = [s["kind"] for s in data["sources"]]
    assert kinds == ["dot-entry", "allowed-dir"]
    assert data["sources"][0]["entry"] == ".lintrc"
    assert data["sources"][1]["entry"] == str(workspace)
    assert data["unattended"]["outcome"] == "denied"
    assert data["unattended"]["covered"] is True and data["unattended"]["standing_yes_ok"] is False


def test_a_path_outside_the_allowed_dirs(
    run_cli: RunCli, tmp_path_factory: pytest.TempPathFactory
) -> None:
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    r = run_cli("policy", "explain", str(elsewhere / "x.txt"), "--yes")
    assert r.code == 0
    assert "decision: ask" in r.stdout and "rule:     outside_allowed" in r.stdout
    assert "outside:" in r.stdout and "never covers a path outside" in r.stdout
    r = run_cli("policy", "explain", str(elsewhere / "x.txt"), "--json")
    data = json.loads(r.stdout)
    assert data["outside_allowed"] is True and data["source"]["kind"] == "allowed-dir"
    assert data["source"]["key"] == "policy.allowed_dirs"


def test_an_mcp_tool_under_a_pattern(run_cli: RunCli, workspace: Path) -> None:
    (workspace / "c.yaml").write_text(
        "policy:\n  tools:\n    mcp__srv__*: allow\n  unattended: [write_file, 'mcp__db__*']\n"
    )
    r = run_cli("policy", "explain", "-c", "c.yaml", "--tool", "mcp__srv__query", "--json")
    assert r.code == 0, r.stderr
    data = json.loads(r.stdout)
    assert (data["decision"], data["mcp_name"]) == ("allow", "mcp__srv__query")
    assert data["source"]["key"] == "policy.tools.mcp__srv__*"
    assert data["source"]["origin"] == "c.yaml, line 3"
    assert any("no MCP server 'srv'" in n for n in data["notes"])
    r = run_cli("policy", "explain", "-c", "c.yaml", "--tool", "mcp__db__q", "--yes", "--json")
    data = json.loads(r.stdout)
    assert (data["decision"], data["rule"]) == ("ask", "mcp")
    assert data["unattended"]["approved_by"] == "--yes"
    assert data["unattended"]["source"]["entry"] == "mcp__db__*"
    assert data["unattended"]["source"]["origin"] == "c.yaml, line 4"


def test_a_command_and_its_sandbox(run_cli: RunCli, workspace: Path, tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(commands_yaml(ALLOW))
    (workspace / ".env").write_text("TOKEN=1\n")
    r = run_cli("policy", "explain", "-c", str(config), "--command", "rm -rf build")
    assert r.code == 0, r.stderr
    rows = dict(row.split(":", 1) for row in r.stdout.splitlines() if ":" in row)
    assert rows["decision"].strip() == "ask"
    assert "sandbox" in rows and "policy.commands.sandbox: auto" in rows["sandbox"]
    r = run_cli("policy", "explain", "-c", str(config), "--command", "ls", "--json")
    data = json.loads(r.stdout)
    sandbox = data["sandbox"]
    assert set(sandbox) >= {"mode", "kind", "unavailable"}
    if sandbox["kind"] is None:
        assert sandbox["unavailable"]
    else:
        assert sandbox["network"] is False and sandbox["writable"] == [str(workspace)]
        if sandbox["kind"] == "bwrap":
            assert str(workspace / ".env") in sandbox["masked"]


def test_a_bad_tool_is_one_line_and_exit_2(run_cli: RunCli) -> None:
    r = run_cli("policy", "explain", "notes.md", "--tool", "read_files")
    assert r.code == 2
    assert r.stdout == ""
    assert r.stderr.count("\n") == 1
    assert r.stderr.startswith("agent: unknown tool 'read_files'; valid tools: read_file, ")
    r = run_cli("policy", "explain")
    assert r.code == 2 and r.stderr.count("\n") == 1


# -- what the loop offers: the tool set, plan mode ----------------------------------------------


@pytest.mark.parametrize(
    ("config_text", "flags"),
    [
        ("agent:\n  tool_set: compact\npolicy:\n  tools:\n    delete_file: allow\n", []),
        ("policy:\n  tools:\n    delete_file: allow\n", ["--plan"]),
        ("policy:\n  tools:\n    write_file: deny\n", []),
    ],
    ids=["compact", "plan", "disabled"],
)
def test_explain_refuses_what_the_loop_would_not_offer_as_agent_run_does(
    run_cli: RunCli,
    ollama: FakeOllama,
    workspace: Path,
    tmp_path: Path,
    config_text: str,
    flags: list[str],
) -> None:
    (workspace / "notes.md").write_text("notes\n")
    (workspace / "old.md").write_text("old\n")
    config = tmp_path / "c.yaml"
    config.write_text(config_text)
    calls: list[tuple[str, dict[str, Any]]] = [
        ("read_file", {"path": "notes.md"}),
        ("write_file", {"path": "new.md", "content": "x\n"}),
        ("delete_file", {"path": "old.md"}),
        ("move_file", {"source": "notes.md", "destination": "moved.md"}),
        ("list_directory", {"path": "."}),
    ]
    said = []
    for name, arguments in calls:
        path = arguments.get("path", arguments.get("source"))
        rest = {k: v for k, v in arguments.items() if k not in ("path", "source")}
        r = run_cli(
            "policy", "explain", "--json", "--yes", "-c", str(config), "--tool", name, *flags,
            path, "--arguments", json.dumps(rest),
        )  # fmt: skip
        assert r.code == 0, r.stderr
        said.append(json.loads(r.stdout))
    ollama.enqueue(
        reply(tool_calls=[tool_call(n, a, index=i) for i, (n, a) in enumerate(calls)]),
        reply("done"),
    )
    r = run_cli("run", "--json", "--yes", "-c", str(config), *flags, "do these")
    assert r.code == 0, r.stderr
    ran = json.loads(r.stdout)["tool_calls"]
    for explanation, run in zip(said, ran, strict=True):
        where = (run["name"], explanation["reason"], run["result"])
        assert explanation["rule"] == run["rule"], where
        outcome = "allow" if explanation["unattended"]["outcome"] == "allowed" else "deny"
        assert outcome == run["decision"], where
    refused = {run["rule"] for run in ran if run["decision"] == "deny"}
    assert refused & {"not_offered", "plan_mode", "disabled"}  # the case is reached


def test_an_edit_is_explained_as_one_that_can_succeed(run_cli: RunCli, workspace: Path) -> None:
    """No conversation here: the edit was never read. The decision shown is that of an edit
    that can succeed, which asks as a write does; the failure the loop foresees is a note."""
    (workspace / "a.txt").write_text("hello\n")
    edit = run_cli("policy", "explain", "a.txt", "--tool", "edit_file", "--json")
    write = run_cli("policy", "explain", "a.txt", "--tool", "write_file", "--json")
    assert edit.code == 0 and write.code == 0, edit.stderr
    e, w = json.loads(edit.stdout), json.loads(write.stdout)
    assert (e["decision"], e["rule"]) == (w["decision"], w["rule"]) == ("ask", "setting")
    assert any("was not read in this conversation" in n for n in e["notes"])


def test_an_mcp_tool_by_its_listed_name_is_judged_as_the_loop_judges_it(
    run_cli: RunCli, workspace: Path, tmp_path: Path
) -> None:
    """The model is offered mcp__srv__do_thing for the server's `do.thing`; the policy takes
    the stricter of both names' rules: allowing one name alone allows nothing."""
    config = tmp_path / "c.yaml"
    config.write_text("policy:\n  tools:\n    mcp__srv__do.thing: allow\n")
    r = run_cli("policy", "explain", "--json", "-c", str(config), "--tool", "mcp__srv__do.thing")
    assert r.code == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["tool"] == "mcp__srv__do_thing" and data["mcp_name"] == "mcp__srv__do.thing"
    assert data["decision"] == "ask"
    assert any("offered this tool as mcp__srv__do_thing" in n for n in data["notes"])
