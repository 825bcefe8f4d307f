"""hooks.pre_tool, post_tool and stop through the real `agent run`: real hook programs (a
Python script that does what its argv says) reading the call on stdin, against the fake
Ollama. What a hook's ending does to the call, what the model reads, what the audit log keeps,
and that a project cannot set one."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import RunCli
from tests.fakes.fake_ollama import FakeOllama, reply, tool_call

HOOK = r"""
import json, os, sys, time
record, how = sys.argv[1], sys.argv[2]
data = json.loads(sys.stdin.read())
with open(record, "a") as f:
    seen = {"argv": sys.argv[1:], "stdin": data, "env": os.environ.get("METONA_HOOK")}
    f.write(json.dumps(seen) + "\n")
if how == "deny":
    sys.stderr.write("no writes to a.txt today\n"); sys.exit(2)
if how == "sleep":
    time.sleep(60)
if how == "crash":
    os.kill(os.getpid(), 9)
if how == "fail":
    sys.stderr.write("boom\n"); sys.exit(1)
if how == "chatty":
    print("hello from the hook")
if how == "json-deny":
    print(json.dumps({"decision": "deny", "reason": "the hook says no"}))
if how == "json-allow":
    print(json.dumps({"decision": "allow"}))
if how == "daemon":  # a process of its own session, beyond the group kill, holds stdout
    import subprocess
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], start_new_session=True)
"""


@pytest.fixture
def run_cli(run_cli_in_process: RunCli) -> RunCli:
    return run_cli_in_process


@pytest.fixture
def hook(tmp_path: Path) -> Path:
    path = tmp_path / "hook.py"
    path.write_text(HOOK)
    return path


def config(tmp_path: Path, hooks: dict[str, Any]) -> str:
    path = tmp_path / "agent.yaml"
    path.write_text(yaml.safe_dump({"hooks": hooks}))
    return str(path)


def argv(hook: Path, record: Path, how: str) -> list[str]:
    return [sys.executable, str(hook), str(record), how]


def recorded(record: Path) -> list[dict[str, Any]]:
    if not record.exists():
        return []
    return [json.loads(line) for line in record.read_text().splitlines()]


def write_call() -> Any:
    return reply(tool_calls=[tool_call("write_file", {"path": "a.txt", "content": "hi"})])


def audit_hooks(home: Path) -> list[dict[str, Any]]:
    log = home / ".local" / "state" / "metona-agent" / "audit.jsonl"
    records = [json.loads(line) for line in log.read_text().splitlines()]
    return [r for r in records if r.get("hook")]


def test_pre_tool_exit_0_goes_on_with_the_call_on_stdin(
    run_cli: RunCli, ollama: FakeOllama, workspace: Path, tmp_path: Path, hook: Path, home: Path
) -> None:
    record = tmp_path / "record.jsonl"
    cfg = config(
        tmp_path, {"pre_tool": [{"match": "write_*", "command": argv(hook, record, "ok")}]}
    )
    ollama.enqueue(write_call(), reply("written"))
    r = run_cli("run", "-c", cfg, "--yes", "write a.txt")
    assert r.code == 0, r.stderr
    assert (workspace / "a.txt").read_text() == "hi"
    (ran,) = recorded(record)
    assert ran["env"] == "pre_tool"
    assert ran["argv"] == [str(record), "ok"]  # the config's argv, nothing of the model's
    assert ran["stdin"]["hook"] == "pre_tool" and ran["stdin"]["tool"] == "write_file"
    assert ran["stdin"]["arguments"] == {"path": "a.txt", "content": "hi"}
    assert ran["stdin"]["decision"]["action"] == "ask"
    (logged,) = audit_hooks(home)
    assert logged["hook"] == "pre_tool" and logged["outcome"] == "hook_ok"
    assert logged["tool"] == "write_file" and logged["exit_code"] == 0


def test_a_glob_that_does_not_match_runs_no_hook(
    run_cli: RunCli, ollama: FakeOllama, workspace: Path, tmp_path: Path, hook: Path
) -> None:
    record = tmp_path / "record.jsonl"
    cfg = config(
        tmp_path, {"pre_tool": [{"match": "read_*", "command": argv(hook, record, "deny")}]}
    )
    ollama.enqueue(write_call(), reply("written"))
    assert run_cli("run", "-c", cfg, "--yes", "write").code == 0
    assert (workspace / "a.txt").exists() and recorded(record) == []


def test_pre_tool_exit_2_denies_with_its_stderr_as_the_reason(
    run_cli: RunCli, ollama: FakeOllama, workspace: Path, tmp_path: Path, hook: Path, home: Path
) -> None:
    record = tmp_path / "record.jsonl"
    cfg = config(tmp_path, {"pre_tool": [{"command": argv(hook, record, "deny")}]})
    ollama.enqueue(write_call(), reply("ok, not written"))
    r = run_cli("run", "-c", cfg, "--yes", "--json", "write a.txt")
    assert r.code == 0, r.stderr
    assert not (workspace / "a.txt").exists()
    (call,) = json.loads(r.stdout)["tool_calls"]
    assert call["decision"] == "deny" and call["rule"] == "hook"
    sent = [m for m in ollama.chat_bodies[1]["messages"] if m["role"] == "tool"]
    assert "no writes to a.txt today" in sent[0]["content"]
    (logged,) = audit_hooks(home)
    assert logged["outcome"] == "hook_denied" and logged["exit_code"] == 2


@pytest.mark.parametrize(
    ("how", "said"),
    [
        ("sleep", "timed out after 0.5 s"),
        ("crash", "killed by signal 9"),
        ("fail", "exit status 1: boom"),
        ("chatty", "not empty and not a JSON object"),
        ("json-allow", '"decision" is not "deny" or "ask"'),
    ],
)
def test_a_hook_error_is_shown_and_the_call_is_put_to_a_person_never_allowed(
    run_cli: RunCli,
    ollama: FakeOllama,
    workspace: Path,
    tmp_path: Path,
    hook: Path,
    home: Path,
    how: str,
    said: str,
) -> None:
    """A timeout, a crash, another exit status, malformed stdout: the call needs a person,
    which --yes does not stand in for (no terminal here: it is not run)."""
    record = tmp_path / "record.jsonl"
    command = argv(hook, record, how)
    cfg = config(tmp_path, {"pre_tool": [{"command": command, "timeout_seconds": 0.5}]})
    ollama.enqueue(
        reply(tool_calls=[tool_call("read_file", {"path": "b.txt"})]), reply("could not")
    )
    (workspace / "b.txt").write_text("secret plan")
    r = run_cli("run", "-c", cfg, "--yes", "--json", "read b.txt")
    assert r.code == 0, r.stderr
    shown = [line for line in r.stderr.splitlines() if line.startswith("note: hook pre_tool")]
    assert len(shown) == 1 and said in shown[0]
    assert f"{Path(sys.executable).name} hook.py failed: " in shown[0]
    (call,) = json.loads(r.stdout)["tool_calls"]
    assert call["decision"] == "deny" and call["rule"] == "hook"
    assert "a person" in call["result"]["error"]
    sent = json.dumps(ollama.chat_bodies[1]["messages"])
    assert "secret plan" not in sent
    (logged,) = audit_hooks(home)
    assert logged["outcome"] == "hook_error"


def test_a_deny_on_stdout_denies(
    run_cli: RunCli, ollama: FakeOllama, workspace: Path, tmp_path: Path, hook: Path
) -> None:
    record = tmp_path / "record.jsonl"
    cfg = config(tmp_path, {"pre_tool": [{"command": argv(hook, record, "json-deny")}]})
    ollama.enqueue(write_call(), reply("fine"))
    r = run_cli("run", "-c", cfg, "--yes", "--json", "write")
    (call,) = json.loads(r.stdout)["tool_calls"]
    assert call["decision"] == "deny" and "the hook says no" in call["result"]["error"]
    assert not (workspace / "a.txt").exists()


def test_post_tool_gets_the_result_and_exit_2_tells_the_model(
    run_cli: RunCli, ollama: FakeOllama, workspace: Path, tmp_path: Path, hook: Path
) -> None:
    record = tmp_path / "record.jsonl"
    cfg = config(tmp_path, {"post_tool": [{"command": argv(hook, record, "deny")}]})
    ollama.enqueue(write_call(), reply("noted"))
    r = run_cli("run", "-c", cfg, "--yes", "write")
    assert r.code == 0, r.stderr
    assert (workspace / "a.txt").exists()  # it ran: a post_tool hook comes after
    (ran,) = recorded(record)
    assert ran["stdin"]["hook"] == "post_tool" and ran["stdin"]["result"]["success"] is True
    sent = [m for m in ollama.chat_bodies[1]["messages"] if m["role"] == "tool"]
    assert "no writes to a.txt today" in json.loads(sent[0]["content"])["hook"]


def test_the_stop_hook_gets_the_turns_end(
    run_cli: RunCli, ollama: FakeOllama, workspace: Path, tmp_path: Path, hook: Path
) -> None:
    record = tmp_path / "record.jsonl"
    cfg = config(tmp_path, {"stop": [{"command": argv(hook, record, "ok")}]})
    ollama.enqueue(reply("all done"))
    r = run_cli("run", "-c", cfg, "hello")
    assert r.code == 0, r.stderr
    (ran,) = recorded(record)
    assert ran["stdin"]["hook"] == "stop"
    assert ran["stdin"]["stop_reason"] == "answer" and ran["stdin"]["answer"] == "all done"


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("hooks.yaml", "pre_tool:\n  - command: [{hook}, {record}, ok]\n"),
        ("config.yaml", "hooks:\n  pre_tool:\n    - command: [{hook}, {record}, ok]\n"),
        ("settings.json", '{{"hooks": {{"pre_tool": [{{"command": ["{hook}"]}}]}}}}'),
    ],
)
def test_a_project_cannot_set_a_hook(
    run_cli: RunCli,
    ollama: FakeOllama,
    workspace: Path,
    tmp_path: Path,
    hook: Path,
    name: str,
    text: str,
) -> None:
    record = tmp_path / "record.jsonl"
    (workspace / ".metona").mkdir()
    (workspace / ".metona" / name).write_text(text.format(hook=hook, record=record))
    ollama.enqueue(write_call(), reply("written"))
    r = run_cli("run", "--yes", "write")
    assert r.code == 0, r.stderr
    refusals = [line for line in r.stderr.splitlines() if "a project cannot set hooks" in line]
    assert len(refusals) == 1 and name in refusals[0]
    assert recorded(record) == []


def test_a_hook_that_leaves_its_output_held_open_is_an_error_within_its_timeout(
    run_cli: RunCli, ollama: FakeOllama, workspace: Path, tmp_path: Path, hook: Path, home: Path
) -> None:
    """It exits 0, but a process it started in a session of its own keeps its stdout: the
    hook is bounded by its one timeout, and what it said decides nothing."""
    record = tmp_path / "record.jsonl"
    command = argv(hook, record, "daemon")
    cfg = config(tmp_path, {"pre_tool": [{"command": command, "timeout_seconds": 2}]})
    ollama.enqueue(
        reply(tool_calls=[tool_call("read_file", {"path": "b.txt"})]), reply("could not")
    )
    (workspace / "b.txt").write_text("secret plan")
    started = time.monotonic()
    r = run_cli("run", "-c", cfg, "--yes", "--json", "read b.txt")
    took = time.monotonic() - started
    assert r.code == 0, r.stderr
    assert took < 25  # one timeout of 2 s and the run, not three (nor the daemon's 30 s)
    shown = [line for line in r.stderr.splitlines() if line.startswith("note: hook pre_tool")]
    assert len(shown) == 1 and "still holds its output open" in shown[0]
    (call,) = json.loads(r.stdout)["tool_calls"]
    assert call["decision"] == "deny" and call["rule"] == "hook"
    assert "secret plan" not in json.dumps(ollama.chat_bodies[1]["messages"])


def look_command(tmp_path: Path, home: Path, workspace: Path, hook: Path, how: str) -> str:
    """A user's command `/look` whose body attaches a.txt, and a read_file hook ending `how`:
    the config's path."""
    commands = home / ".config" / "metona-agent" / "commands"
    commands.mkdir(parents=True)
    (commands / "look.md").write_text("look at @a.txt\n")
    (workspace / "a.txt").write_text("hello\n")
    command = argv(hook, tmp_path / "record.jsonl", how)
    return config(tmp_path, {"pre_tool": [{"match": "read_file", "command": command}]})


def test_a_command_s_at_file_runs_the_read_hooks_and_records_them(
    run_cli: RunCli, ollama: FakeOllama, workspace: Path, tmp_path: Path, hook: Path, home: Path
) -> None:
    record = tmp_path / "record.jsonl"
    cfg = look_command(tmp_path, home, workspace, hook, "ok")
    ollama.enqueue(reply("looked"))
    r = run_cli("run", "-c", cfg, "--yes", "--command", "look")
    assert r.code == 0, r.stderr
    (ran,) = recorded(record)
    assert ran["stdin"]["tool"] == "read_file"
    (logged,) = audit_hooks(home)
    assert logged["hook"] == "pre_tool" and logged["outcome"] == "hook_ok"


def test_a_failing_hook_on_a_command_s_at_file_is_shown_recorded_and_sends_nothing(
    run_cli: RunCli, ollama: FakeOllama, workspace: Path, tmp_path: Path, hook: Path, home: Path
) -> None:
    cfg = look_command(tmp_path, home, workspace, hook, "fail")
    r = run_cli("run", "-c", cfg, "--yes", "--command", "look")
    assert r.code == 2, r.stderr
    assert "hook pre_tool" in r.stderr and "exit status 1: boom" in r.stderr
    assert "nothing was sent" in r.stderr and not ollama.chat_bodies
    (logged,) = audit_hooks(home)
    assert logged["outcome"] == "hook_error"


def test_match_takes_an_mcp_tool_by_the_name_its_server_listed_it_by(
    tmp_path: Path, hook: Path
) -> None:
    """As the policy does: a guard written for `mcp__srv__do.thing` runs for the tool the
    model knows as `mcp__srv__do_thing`."""
    from cli.config.settings import HookConfig, HooksConfig
    from cli.loop.hooks import Hooks

    record = tmp_path / "record.jsonl"
    guard = HookConfig(match="mcp__srv__do.thing", command=argv(hook, record, "deny"))
    hooks = Hooks(HooksConfig(pre_tool=[guard]), str(tmp_path), {"PATH": "/usr/bin"})
    (ran,) = hooks.run(
        "pre_tool", {"tool": "mcp__srv__do_thing"}, "mcp__srv__do_thing", "mcp__srv__do.thing"
    )
    assert ran.outcome == "denied" and "no writes" in ran.message
    assert hooks.run("pre_tool", {}, "mcp__srv__do_thing") == []  # by our name alone: no match
