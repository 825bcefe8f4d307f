"""The terminal as a person sees it: `agent chat` and `agent run` in a real pseudo-terminal,
their output played on a small terminal emulator (tests/fakes/vt.py) at 60 and 120 columns —
Ctrl-C, keys typed and the window resized while an answer streams, status lines while
nothing arrives, questions and help that fit the width — and without a terminal at all.

The fake server's streams wait on a gate the test opens, so no assertion depends on how
fast this machine is."""

from __future__ import annotations

import io
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pexpect
import pytest
from rich.console import Console

from cli.backends.messages import ToolCall
from cli.config.loading import parse_config
from cli.loop.approval import ApprovalRequest
from cli.safety.policy import Policy
from tests.conftest import RunCli
from tests.fakes.context import typed
from tests.fakes.fake_ollama import FakeOllama, Stream, reply, tool_call
from tests.fakes.vt import Screen
from tests.pty.driver import ROWS, Ttys, env_for

pytestmark = pytest.mark.pty
PROMPT = "›"


def words(count: int, stem: str = "w") -> str:
    return " ".join(f"{stem}{n:03d}" for n in range(1, count + 1))


def gated(stream: Stream, at: int | str) -> tuple[Stream, threading.Event]:
    """The stream waits before its line `at` (or the line after the one that completes the
    text `at`) until the test opens the gate."""
    gate = threading.Event()
    if isinstance(at, str):
        sent = ""
        for index, line in enumerate(stream.lines):
            assert isinstance(line, dict)
            sent += line["message"].get("content", "")
            if at in sent:
                at = index + 1
                break
    assert isinstance(at, int)
    stream.gate, stream.gate_at = gate, at
    return stream, gate


def count(screen: Screen, word: str) -> int:
    return len(re.findall(rf"\b{re.escape(word)}\b", screen.text()))


@pytest.fixture
def gates() -> Iterator[list[threading.Event]]:
    """Every gate is opened at the end, so no server thread waits after its test."""
    opened: list[threading.Event] = []
    yield opened
    for gate in opened:
        gate.set()


# -- the emulator itself ---------------------------------------------------------------------


def test_the_emulator_wraps_erases_and_reflows() -> None:
    screen = Screen(10, 5)
    screen.feed("abcdefghijkl\r\nxy\x1b[1A\r\x1b[2Kz")
    assert screen.rows()[:3] == ["abcdefghij", "z", "xy"]
    screen = Screen(10, 5)
    screen.feed("0123456789")  # the last column: the wrap is pending
    screen.feed("\r\x1b[K")
    assert screen.transcript() == []
    screen.feed("hello world, again\r\nnext")
    screen.resize(6, 5)
    assert screen.transcript() == ["hello", "world,", " again", "next"]
    still = Screen(10, 5, reflow=False)
    still.feed("0123456789\r\nab")
    still.resize(5, 5)
    assert still.transcript() == ["01234", "ab"]


# -- 1. keys and resizes while the answer streams ---------------------------------------------


@pytest.mark.parametrize("cols", [60, 120])
def test_ctrl_c_mid_stream_leaves_the_partial_answer_once(
    ollama: FakeOllama, workspace: Path, ttys: Ttys, gates: list[threading.Event], cols: int
) -> None:
    stream, gate = gated(reply(words(300), token=5), "w040")
    gates.append(gate)
    ollama.enqueue(stream)
    term = ttys.chat(host=ollama.url, cols=cols)
    term.line("count")
    term.wait("w040")
    term.settle()
    term.interrupt()
    term.wait_turn_end(then="interrupted")
    term.settle()
    shown = term.screen.transcript()
    assert "^C" not in term.screen.text()
    assert all(count(term.screen, f"w{n:03d}") == 1 for n in range(1, 41)), shown
    stop = shown.index("⏹ interrupted")
    assert shown[stop - 1] == "" and shown[stop - 2].endswith("w040"), shown


def test_keys_typed_while_streaming_wait_in_the_next_input_line(
    ollama: FakeOllama, workspace: Path, ttys: Ttys, gates: list[threading.Event]
) -> None:
    stream, gate = gated(reply(words(60), token=5), "w020")
    gates.append(gate)
    ollama.enqueue(stream, reply("Second answer."))
    term = ttys.chat(host=ollama.url, cols=60)
    term.line("count")
    term.wait("w020")
    term.type_ahead("hello typed ahead")
    term.settle()
    assert "hello typed ahead" not in term.screen.text()  # not echoed into the answer
    gate.set()
    term.wait_turn_end(then="w060", holding="hello typed ahead")
    assert count(term.screen, "w020") == 1
    term.keys("\r")
    term.wait("Second answer.")
    users = [typed(m["content"]) for m in ollama.chat_bodies[-1]["messages"] if m["role"] == "user"]
    assert users == ["count", "hello typed ahead"]


def test_keys_typed_before_ctrl_c_are_kept_for_the_next_prompt(
    ollama: FakeOllama, workspace: Path, ttys: Ttys, gates: list[threading.Event]
) -> None:
    stream, gate = gated(reply(words(60), token=5), "w020")
    gates.append(gate)
    ollama.enqueue(stream)
    term = ttys.chat(host=ollama.url, cols=60)
    term.line("count")
    term.wait("w020")
    term.type_ahead("hello typed ahead")
    term.settle()
    term.interrupt()
    term.wait_turn_end(then="interrupted", holding="hello typed ahead")
    assert "ahead^C" not in term.screen.text()
    assert term.screen.text().count("hello typed ahead") == 1


@pytest.mark.parametrize(
    ("before", "after", "reflow"),
    [(120, 60, True), (120, 60, False), (60, 120, True)],
    ids=["narrower-reflowing", "narrower-xterm", "wider"],
)
def test_a_resize_mid_stream_leaves_every_word_once(
    ollama: FakeOllama,
    workspace: Path,
    ttys: Ttys,
    gates: list[threading.Event],
    before: int,
    after: int,
    reflow: bool,
) -> None:
    first = words(40, "p")
    stream, gate = gated(reply(f"{first}\n\n{words(200)}", token=5), "w060")
    gates.append(gate)
    ollama.enqueue(stream)
    xterm = {} if reflow else {"XTERM_VERSION": "XTerm(390)"}
    term = ttys.chat(host=ollama.url, cols=before, reflow=reflow, env=xterm)
    term.line("count")
    term.wait("w060")
    term.settle()
    term.resize(after, ROWS)
    term.settle()
    gate.set()
    term.wait_turn_end(then="tokens")
    term.settle()
    shown = "\n".join(term.screen.transcript())
    twice = [w for w in re.findall(r"\b[pw]\d{3}\b", shown) if count(term.screen, w) > 1]
    assert not twice, shown
    assert all(count(term.screen, f"w{n:03d}") == 1 for n in range(1, 201)), shown
    if reflow:  # xterm cuts what was printed before the window narrowed: nothing to redraw
        assert all(count(term.screen, f"p{n:03d}") == 1 for n in range(1, 41)), shown


# -- 2. what is offered fits the width -----------------------------------------------------


def test_the_question_shows_every_key_at_60_columns(
    ollama: FakeOllama, workspace: Path, ttys: Ttys
) -> None:
    ollama.enqueue(
        reply(tool_calls=[tool_call("write_file", {"path": "todo.md", "content": "x\n"})]),
        reply("Stopped."),
    )
    term = ttys.chat(host=ollama.url, cols=60)
    term.line("write it")
    term.wait_card(then="allow?")
    term.settle()
    rows = term.screen.rows()
    for label in ("[y] yes", "[n] no", "[a] yes to every write_file this session", "[q] stop"):
        assert any(label in row for row in rows), rows
    assert all(len(row) <= 60 for row in rows)
    term.press("q")
    term.wait("stopped this turn")


@pytest.mark.parametrize(
    ("tool", "choices", "width"),
    [("write_file", "ynaq", 60), ("create_directory", "ynaq", 40), ("delete_file", "ynq", 30)],
)
def test_question_lines_fit_and_keep_every_key(tool: str, choices: str, width: int) -> None:
    from cli.ui.approve import question

    lines = question(tool, choices, width).rstrip().split("\n")
    assert all(len(line) < width for line in lines), lines
    text = " ".join(lines)
    for key in choices:
        assert f"[{key}]" in text
    assert question(tool, choices, 200).count("\n") == 0


def test_help_wraps_with_a_hanging_indent_at_60_columns(
    ollama: FakeOllama, workspace: Path, ttys: Ttys
) -> None:
    term = ttys.chat(host=ollama.url, cols=60)
    term.say("/help", then="confirmations")
    term.settle()
    shown = term.screen.transcript()
    start = next(
        i for i, row in enumerate(shown) if row.endswith("/help") and row.startswith(PROMPT)
    )
    rows = [row for row in shown[start + 1 : -1] if row]
    assert rows and all(row.startswith("  ") for row in rows), rows
    assert not any(term.screen.lines[i].wrapped for i in range(len(term.screen.lines)))
    entry = next(i for i, row in enumerate(rows) if row.lstrip().startswith("/think"))
    assert rows[entry + 1].startswith(" " * 23), rows  # the help text's own column
    assert "q stop this turn" in " ".join(r.strip() for r in rows)


def test_audit_show_fits_80_columns(
    run_cli: RunCli, ollama: FakeOllama, workspace: Path, ttys: Ttys
) -> None:
    long = "a-rather-long-directory-name/" * 3 + "notes.txt"
    (workspace / long).parent.mkdir(parents=True)
    (workspace / long).write_text("notes\n")
    calls = [tool_call("read_file", {"path": long}), tool_call("list_directory", {"path": "."})]
    ollama.enqueue(reply(tool_calls=calls), reply("Done."))
    assert run_cli("run", "go").code == 0
    piped = run_cli("audit", "show").stdout.splitlines()
    assert len(piped) == 2 and len(piped[0]) > 80  # piped: one a line, as scripts read it
    term = ttys.run("audit", "show", host=ollama.url, cols=80)
    term.wait(lambda s: not term.child.isalive() or "list_directory" in s.text())
    term.settle()
    rows = term.screen.transcript()
    assert not any(row.wrapped for row in term.screen.lines), rows
    assert len([r for r in rows if r[:1].isdigit()]) == 2  # each record starts a line
    assert all(r[:1].isdigit() or r.startswith("    ") for r in rows), rows
    text = " ".join(rows)
    for field in ("read_file", "allowed by policy", "ms", "list_directory"):
        assert field in text
    assert "a-rather-long-directory-name/a-rather" in text
    cut = re.search(r"a-rather-long-dir\S*…\+(\d+)", text)  # a cut field says how much
    assert cut and len(long) - int(cut.group(1)) == len(cut.group(0).split("…")[0])


# -- 3. signs of life --------------------------------------------------------------------------

STATUS = re.compile(r"[⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏] (?P<what>.+) · (?P<seconds>\d+) s$")


def status(screen: Screen) -> str:
    """What the status line says is awaited, or "" when there is none."""
    for row in screen.rows():
        match = STATUS.search(row)
        if match:
            return match.group("what")
    return ""


def test_chat_shows_what_it_waits_for_and_then_only_the_answer(
    ollama: FakeOllama, workspace: Path, ttys: Ttys, gates: list[threading.Event]
) -> None:
    first, gate_1 = gated(reply(words(30), token=5), 0)  # before the first token
    stall, gate_2 = gated(reply(words(30, "s"), token=5), "s010")  # a stall mid-answer
    gates += [gate_1, gate_2]
    ollama.enqueue(first, stall)
    term = ttys.chat(host=ollama.url, cols=60)
    term.line("count")
    term.wait(lambda s: status(s) == "waiting for qwen3:8b")
    gate_1.set()
    term.wait_turn_end(then="w030")
    term.settle()
    assert not status(term.screen) and "waiting for" not in term.screen.text()
    term.line("again")
    term.wait("s010")
    term.wait(lambda s: status(s) == "waiting for qwen3:8b")
    assert count(term.screen, "s010") == 1  # the status line is below the text, not in it
    gate_2.set()
    term.wait_turn_end(then="s030")
    term.settle()
    assert "waiting for" not in term.screen.text()
    assert all(count(term.screen, f"{stem}{n:03d}") == 1 for stem in "ws" for n in range(1, 31))


def test_chat_shows_the_tool_that_runs(ollama: FakeOllama, workspace: Path, ttys: Ttys) -> None:
    (workspace / "c.yaml").write_text(
        "policy:\n  tools:\n    run_command: allow\n  commands:\n    sandbox: 'off'\n"
    )
    wait = "while [ ! -e go ]; do sleep 0.1; done; echo went"
    ollama.enqueue(reply(tool_calls=[tool_call("run_command", {"command": wait})]), reply("Ran."))
    term = ttys.chat("-c", "c.yaml", host=ollama.url, cols=60)
    term.line("run it")
    term.wait(lambda s: status(s).startswith("running run_command"))
    (workspace / "go").write_text("")
    term.wait_turn_end(then="Ran.")
    term.settle()
    assert not status(term.screen) and "running run_command" not in term.screen.text()


def test_run_shows_the_status_on_a_terminal_stderr(
    ollama: FakeOllama, workspace: Path, ttys: Ttys, gates: list[threading.Event]
) -> None:
    stream, gate = gated(reply("The answer."), 0)
    gates.append(gate)
    ollama.enqueue(stream)
    term = ttys.run("run", "go", host=ollama.url, cols=60)
    term.wait(lambda s: status(s) == "waiting for qwen3:8b")
    gate.set()
    term.wait_exit()
    assert term.screen.transcript() == ["The answer."]


def test_run_never_writes_a_status_into_a_pipe(run_cli: RunCli, ollama: FakeOllama) -> None:
    slow = reply("The answer.")
    slow.header_delay = 1.5
    ollama.enqueue(slow)
    r = run_cli("run", "go", env={"TERM": "xterm-256color"})
    assert (r.code, r.stdout, r.stderr) == (0, "The answer.\n", "")


# -- 4. agent run streams on a terminal --------------------------------------------------------


def test_run_on_a_terminal_shows_the_answer_as_it_streams(
    ollama: FakeOllama, workspace: Path, ttys: Ttys, gates: list[threading.Event]
) -> None:
    stream, gate = gated(reply("# Title\n\n" + words(80), token=5), -1)
    gates.append(gate)
    ollama.enqueue(stream)
    term = ttys.run("run", "go", host=ollama.url, cols=60)
    term.wait("w080", timeout=30)  # before the stream has ended
    gate.set()
    assert term.wait_exit() == 0
    assert "# Title" not in term.screen.text() and count(term.screen, "Title") == 1  # Markdown
    assert all(count(term.screen, f"w{n:03d}") == 1 for n in range(1, 81))


# -- 5. Ctrl-C in agent run --------------------------------------------------------------------


def test_ctrl_c_in_run_on_a_terminal_is_one_line_after_the_partial_answer(
    ollama: FakeOllama, workspace: Path, ttys: Ttys, gates: list[threading.Event]
) -> None:
    stream, gate = gated(reply(words(100), token=5), "w030")
    gates.append(gate)
    ollama.enqueue(stream)
    term = ttys.run("run", "count", host=ollama.url, cols=120)
    term.wait("w030")
    term.settle()
    term.interrupt()
    assert term.wait_exit() == 130
    rows = term.screen.transcript()
    assert "^C" not in term.screen.text()
    notes = [row for row in rows if row.startswith("agent:")]
    assert len(notes) == 1 and notes[0].startswith("agent: interrupted"), rows
    assert rows[-1] == notes[0] and "" not in rows, rows
    assert all(count(term.screen, f"w{n:03d}") == 1 for n in range(1, 31))


def test_ctrl_c_in_run_keeps_the_partial_answer_on_piped_stdout(
    ollama: FakeOllama, workspace: Path, gates: list[threading.Event]
) -> None:
    chunk: dict[str, Any] = {"model": "qwen3:8b", "done": False}
    lines: list[Any] = [
        {**chunk, "message": {"role": "assistant", "content": piece}}
        for piece in ("The partial ", "answer so far.")
    ]
    lines.append({**chunk, "message": {"role": "assistant", "content": "", "thinking": "MARK"}})
    lines.append({**chunk, "done": True, "message": {"role": "assistant", "content": " more"}})
    stream, gate = gated(Stream(lines), -1)
    gates.append(gate)
    ollama.enqueue(stream)
    proc = subprocess.Popen(
        [sys.executable, "-m", "cli", "run", "--think", "count"],
        cwd=workspace,
        env=env_for(ollama.url),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        seen = ""
        while "MARK" not in seen:  # the thinking after the text: the text was read
            char = proc.stderr.read(1)
            assert char, "agent run ended early"
            seen += char
        # Past the write of MARK, into the wait for the rest: a signal in the middle of
        # rich's print (written, not yet cleared from its buffer) would print it twice.
        time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130
    assert out == "The partial answer so far.\n"
    rest = (seen + err).split("\n")
    assert rest[0] == "MARK" and rest[-1] == "", rest
    assert len(rest) == 3 and rest[1].startswith("agent: interrupted"), rest


# -- 6. chat needs a terminal ------------------------------------------------------------------


def test_chat_without_a_terminal_says_to_use_agent_run(run_cli: RunCli, ollama: FakeOllama) -> None:
    r = run_cli("chat", input="hello\ny\n")
    assert r.code == 2
    assert r.stdout == ""
    assert len(r.stderr.splitlines()) == 1 and "agent run" in r.stderr, r.stderr
    assert "not a terminal" not in r.stderr.lower() or "agent run" in r.stderr
    assert ollama.chat_bodies == []


def test_chat_with_stdout_piped_says_to_use_agent_run(
    ollama: FakeOllama, workspace: Path, ttys: Ttys
) -> None:
    child = pexpect.spawn(
        "/bin/sh",
        ["-c", f"{sys.executable} -m cli chat | cat"],
        cwd=str(workspace),
        env=env_for(ollama.url),
        encoding="utf-8",
        timeout=60,
    )
    child.expect(pexpect.EOF)
    child.close()
    assert "agent run" in (child.before or "")
    assert ollama.chat_bodies == []


# -- 7. the card says what else happens --------------------------------------------------------


class Keys:
    def __init__(self, *keys: str) -> None:
        self.keys = list(keys)
        self.asked: list[str] = []

    def read_key(self, prompt: str, choices: str) -> str:
        self.asked.append(prompt)
        return self.keys.pop(0)

    def read_line(self, prompt: str) -> str:
        return ""


def card_for(workspace: Path, home: Path, tool: str, yaml: str = "", **arguments: Any) -> list[str]:
    from cli.ui.approval_card import Consequences
    from cli.ui.approve import ChatApprover

    config = parse_config(yaml, "t.yaml")
    policy = Policy(config.policy, cwd=str(workspace), home=str(home))
    out = io.StringIO()
    console = Console(file=out, width=100, color_system=None)
    consequences = Consequences(
        trash=config.policy.trash, sandbox_mode=config.policy.commands.sandbox
    )
    approver = ChatApprover(console, Keys("n"), cwd=str(workspace), consequences=consequences)
    decision = policy.decide(tool, arguments)
    assert decision.action == "ask", decision
    approver(ApprovalRequest(ToolCall(tool, arguments), arguments, decision))
    return out.getvalue().splitlines()


def test_a_delete_says_it_goes_to_the_trash(workspace: Path, home: Path) -> None:
    (workspace / "old.txt").write_text("x")
    assert "  goes to the trash (undo: /undo)" in card_for(
        workspace, home, "delete_file", path="old.txt"
    )
    gone = card_for(workspace, home, "delete_file", "policy:\n  trash: false\n", path="old.txt")
    assert "  is deleted for good (policy.trash is false): no undo" in gone


def test_a_write_names_the_parent_dirs_it_creates(workspace: Path, home: Path) -> None:
    lines = card_for(workspace, home, "write_file", path="a/b/c.txt", content="x\n")
    assert "  also creates the parent directories a and a/b" in lines
    (workspace / "a").mkdir()
    lines = card_for(workspace, home, "write_file", path="a/b/c.txt", content="x\n")
    assert "  also creates the parent directory a/b" in lines


@pytest.mark.parametrize(
    ("mode", "line"),
    [
        ("bwrap", "  runs in the bubblewrap sandbox: no network, writes only in the allowed dirs"),
        ("landlock", "  runs under Landlock: no network, writes only in the allowed dirs"),
        ("off", "  runs unconfined (policy.commands.sandbox is off): no sandbox, network on"),
    ],
)
def test_a_command_says_which_sandbox_it_runs_in(
    workspace: Path, home: Path, mode: str, line: str
) -> None:
    from cli.safety.sandbox import launch as sandbox

    if mode == "bwrap" and sandbox.bwrap_problem():
        pytest.skip(f"no bubblewrap here: {sandbox.bwrap_problem()}")
    if mode == "landlock" and sandbox.landlock_problem():
        pytest.skip(f"no Landlock here: {sandbox.landlock_problem()}")
    yaml = f"policy:\n  tools:\n    run_command: ask\n  commands:\n    sandbox: '{mode}'\n"
    assert line in card_for(workspace, home, "run_command", yaml, command="ls")
