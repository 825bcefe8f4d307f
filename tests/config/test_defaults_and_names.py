"""Issue 21's friction about defaults and names: the default model gives way to a server's
only model, `agent config` tells a default written in the file from a value the user chose,
and the audit log names sessions as `agent sessions` does."""

from __future__ import annotations

import io
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from prompt_toolkit.history import InMemoryHistory
from prompt_toolkit.input import create_pipe_input
from prompt_toolkit.output import DummyOutput
from rich.console import Console

from cli.config.loading import parse_config
from cli.records.audit import default_path, verify
from cli.records.audit_events import AuditLog, new_session_id
from cli.records.sessions import SessionStore
from cli.ui.approve import ChatApprover
from cli.ui.chat_commands import COMMANDS
from cli.ui.editor import ChatCompleter, make_prompt
from cli.ui.keys import PromptKeys
from cli.ui.render import ChatRenderer
from cli.ui.repl import ChatSession
from cli.wiring import Choices, build_agent
from tests.conftest import RunCli
from tests.fakes.fake_ollama import FakeOllama, HttpError, reply, tool_call
from tests.fakes.fake_openai import Answer, FakeOpenAI

GGUF = "/models/smollm2-135m-instruct.gguf"


@pytest.fixture
def run_cli(run_cli_in_process: RunCli) -> RunCli:
    """`agent` in this process (conftest.run_in_process): no test here is about the process."""
    return run_cli_in_process


@pytest.fixture
def one_model() -> Iterator[FakeOpenAI]:
    """llama-server: /v1/models lists its one .gguf, and it answers whatever a request names."""
    fake = FakeOpenAI(strict_models=False)
    fake.models = {GGUF: {"owned_by": "llamacpp"}}
    fake.start()
    try:
        yield fake
    finally:
        fake.stop()


def test_the_default_model_gives_way_to_the_only_model_of_the_server(
    run_cli: RunCli, one_model: FakeOpenAI
) -> None:
    one_model.enqueue(Answer("ok"))
    r = run_cli("run", "--api", "openai", "--host", one_model.url, "hi")
    assert r.code == 0 and r.stdout == "ok\n", r.stderr
    assert "qwen3:8b" not in r.stderr and "serves only" not in r.stderr
    assert one_model.chat_bodies[-1]["model"] == GGUF


def test_the_default_written_by_agent_init_gives_way_too(
    run_cli: RunCli, one_model: FakeOpenAI, home: Path
) -> None:
    assert run_cli("init").code == 0
    config = home / ".config/metona-agent/config.yaml"
    config.write_text(config.read_text().replace("api: native", "api: openai", 1))
    one_model.enqueue(Answer("ok"))
    r = run_cli("run", "--host", one_model.url, "hi")
    assert r.code == 0 and r.stdout == "ok\n", r.stderr
    assert "serves only" not in r.stderr
    assert one_model.chat_bodies[-1]["model"] == GGUF


def test_a_model_the_user_chose_keeps_the_note_on_a_one_model_server(
    run_cli: RunCli, one_model: FakeOpenAI, workspace: Path
) -> None:
    one_model.enqueue(Answer("ok"), Answer("ok"))
    r = run_cli("run", "--api", "openai", "--host", one_model.url, "-m", "smollm2", "hi")
    assert r.code == 0, r.stderr
    assert f"'smollm2' is not in the list of {one_model.url}, which serves only '{GGUF}'" in (
        " ".join(r.stderr.split())
    )
    assert one_model.chat_bodies[-1]["model"] == "smollm2"
    (workspace / "c.yaml").write_text("ollama:\n  api: openai\n  model: smollm2\n")
    r = run_cli("run", "-c", "c.yaml", "--host", one_model.url, "hi")
    assert r.code == 0 and "serves only" in r.stderr, r.stderr


def origin(output: str, key: str) -> str:
    match = re.search(rf"^\s*{re.escape(key)}: .*?  # (.*)$", output, re.MULTILINE)
    assert match, f"no line for {key} in:\n{output}"
    return match.group(1)


def test_agent_config_after_init_marks_the_values_equal_to_the_default(
    run_cli: RunCli, home: Path
) -> None:
    assert run_cli("init").code == 0
    config = home / ".config/metona-agent/config.yaml"
    text = config.read_text()
    line = text.splitlines().index("  max_steps: 10") + 1
    config.write_text(text.replace("  max_steps: 10", "  max_steps: 4", 1))
    model_line = text.splitlines().index('  model: "qwen3:8b"') + 1
    r = run_cli("config")
    assert r.code == 0, r.stderr
    assert origin(r.stdout, "model") == f"default, also in {config}, line {model_line}"
    assert origin(r.stdout, "max_steps") == f"{config}, line {line}"  # changed: the file's
    # no key is "the file's" only because init wrote it
    chosen = [row for row in r.stdout.splitlines() if re.search(r"  # \S+config\.yaml, line", row)]
    assert [row.split(":")[0].strip() for row in chosen] == ["max_steps"]


def records(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_audit_records_a_run_under_the_name_its_session_is_saved_as(
    run_cli: RunCli, ollama: FakeOllama, workspace: Path
) -> None:
    (workspace / "a.txt").write_text("a\n")
    # the model reads a file, then its server fails: the run's work is kept
    ollama.enqueue(
        reply(tool_calls=[tool_call("read_file", {"path": "a.txt"})]), HttpError(400, "boom")
    )
    r = run_cli("run", "read a.txt")
    assert r.code == 1
    saved = re.search(r"agent chat --resume (\S+?)\)", r.stderr)
    assert saved, r.stderr
    logged = records(default_path(os.environ))
    assert [record["session"] for record in logged] == [saved.group(1)]
    assert re.fullmatch(r"run-\d{4}-\d\d-\d\d_\d\d-\d\d-\d\d(-\d+)?", saved.group(1))
    assert saved.group(1) in run_cli("sessions").stdout
    shown = run_cli("audit", "show")
    assert saved.group(1) in shown.stdout.split(), shown.stdout


def test_audit_records_a_chat_under_the_names_agent_sessions_lists(
    ollama: FakeOllama, workspace: Path, home: Path, tmp_path: Path
) -> None:
    (workspace / "a.txt").write_text("a\n")
    read = tool_call("read_file", {"path": "a.txt"})
    ollama.enqueue(reply(tool_calls=[read]), reply("one"), reply(tool_calls=[read]), reply("two"))
    log = AuditLog(tmp_path / "audit.jsonl", new_session_id(), cwd=str(workspace))
    store = SessionStore(home / "sessions")
    with create_pipe_input() as pipe:
        console = Console(file=io.StringIO(), width=100, color_system=None)
        approver = ChatApprover(
            console, PromptKeys(input=pipe, output=DummyOutput()), cwd=str(workspace)
        )
        agent = build_agent(
            Choices(host=ollama.url),
            parse_config("", "t.yaml"),
            environ=dict(os.environ),
            cwd=str(workspace),
            home=str(home),
            approver=lambda _policy: approver,
        )
        prompt = make_prompt(
            ChatCompleter(COMMANDS, str(workspace)),
            InMemoryHistory(),
            input=pipe,
            output=DummyOutput(),
        )
        session = ChatSession(
            agent,
            console,
            approver=approver,
            renderer=ChatRenderer(console, cwd=str(workspace)),
            store=store,
            prompt=prompt,
            audit_log=log,
        )
        first = session.session_name
        pipe.send_text("read it\r/save mywork\rread it again\r\x04")
        assert session.run() == 0
    assert [record["session"] for record in records(log.path)] == [first, "mywork"]
    assert store.exists(first) and store.exists("mywork")  # both in `agent sessions`
    assert verify(log.path).intact
