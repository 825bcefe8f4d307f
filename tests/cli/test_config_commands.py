"""Configuration you can see: `agent config` (with where each value came from), `agent config
path`, `agent init`, shell completion, one placeholder style, and `agent` alone."""

from __future__ import annotations

import dataclasses
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from cli.config.loading import parse_config
from cli.config.settings import Config
from tests.conftest import REPO, RunCli


@pytest.fixture
def run_cli(run_cli_in_process: RunCli) -> RunCli:
    """`agent` in this process (conftest.run_in_process): no test here is about the process."""
    return run_cli_in_process


def origin(output: str, key: str) -> tuple[str, str]:
    """(value, origin) of the line `key: value  # origin`."""
    match = re.search(rf"^\s*{re.escape(key)}: (.*?)  # (.*)$", output, re.MULTILINE)
    assert match, f"no line for {key} in:\n{output}"
    return match.group(1), match.group(2)


def test_agent_config_says_where_each_value_came_from(
    run_cli: RunCli, workspace: Path, home: Path
) -> None:
    config = home / ".config/metona-agent/config.yaml"
    config.parent.mkdir(parents=True)
    config.write_text("ollama:\n  model: llama3.1:8b\npolicy:\n  confirm: all\n")
    r = run_cli("config", "--api", "native")
    assert r.code == 0, r.stderr
    assert origin(r.stdout, "model") == ("llama3.1:8b", f"{config}, line 2")
    assert origin(r.stdout, "confirm") == ("all", f"{config}, line 4")
    assert origin(r.stdout, "max_steps") == ("10", "default")
    assert origin(r.stdout, "api") == ("native", "--api")
    _host, where = origin(r.stdout, "host")
    assert where == "environment OLLAMA_HOST"  # the tests point OLLAMA_HOST at the fake
    flagged = run_cli("config", "-m", "qwen3:14b", "--host", "gpu:11434")
    assert origin(flagged.stdout, "model") == ("qwen3:14b", "-m")
    assert origin(flagged.stdout, "host") == ("gpu:11434", "--host")


def test_agent_config_output_reads_back_as_the_same_config(
    run_cli: RunCli, workspace: Path
) -> None:
    (workspace / "mine.yaml").write_text("agent:\n  max_steps: 4\npolicy:\n  trash: false\n")
    r = run_cli("config", "-c", "mine.yaml")
    assert r.code == 0, r.stderr
    again = parse_config(r.stdout, "printed")
    mine = parse_config((workspace / "mine.yaml").read_text(), "mine.yaml")
    # The host printed is the one in force (the tests point OLLAMA_HOST at the fake server);
    # everything else reads back as the file said.
    assert again.ollama.host.startswith("http://127.0.0.1:")
    assert dataclasses.replace(again.ollama, host=mine.ollama.host) == mine.ollama
    assert dataclasses.replace(again, ollama=mine.ollama) == mine
    assert again.agent.max_steps == 4 and again.policy.trash is False


def test_agent_config_path(run_cli: RunCli, home: Path) -> None:
    r = run_cli("config", "path")
    expected = home / ".config/metona-agent/config.yaml"
    assert r.code == 0 and r.stdout == f"{expected}\n"
    assert "does not exist yet" in r.stderr and "agent init" in r.stderr


def test_agent_init_writes_the_commented_config_and_never_overwrites(
    run_cli: RunCli, home: Path
) -> None:
    r = run_cli("init")
    target = home / ".config/metona-agent/config.yaml"
    assert r.code == 0, r.stderr
    assert r.stdout == f"{target}\n"
    text = target.read_text()
    assert text == (REPO / "config.example.yaml").read_text()
    assert parse_config(text, str(target)) == Config()  # every key at its default
    assert oct(target.stat().st_mode & 0o777) == oct(0o600)
    assert run_cli("config", "path").stdout == f"{target}\n"
    target.write_text("agent: {max_steps: 3}\n")
    again = run_cli("init")
    assert again.code == 2 and "is not overwritten" in again.stderr
    assert target.read_text() == "agent: {max_steps: 3}\n"


def test_agent_alone_prints_help_and_exits_0(run_cli: RunCli) -> None:
    r = run_cli()
    assert r.code == 0, r.stderr
    assert "Usage: agent" in r.stdout and "run" in r.stdout and "config" in r.stdout


def test_shell_completion_is_offered(run_cli: RunCli) -> None:
    help_text = run_cli("--help").stdout
    assert "--install-completion" in help_text and "--show-completion" in help_text
    # typer reads the shell from the process tree (shellingham), so the agent runs under a
    # bash here, whatever runs the tests; "; true" keeps bash from exec-ing it away.
    out = subprocess.run(
        ["bash", "-c", f"{shlex.quote(sys.executable)} -m cli --show-completion; true"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "_agent_completion" in out.stdout, out.stderr


def test_help_texts_use_one_placeholder_style(run_cli: RunCli) -> None:
    run = run_cli("run", "--help").stdout
    assert "agent run [OPTIONS] [PROMPT]" in run  # [PROMPT]: --command takes its place
    for option in ("--model NAME", "--host HOST", "--config PATH", "--max-steps N"):
        assert option in run, option
    assert "<str>" not in run.split("Options:")[-1] and "<int" not in run
    assert "agent chat [OPTIONS] [NAME]" in run_cli("chat", "--help").stdout
    assert "-n N" in run_cli("history", "--help").stdout
