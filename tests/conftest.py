"""Shared fixtures: an isolated home, a workspace, the fake Ollama, and ways to run the agent."""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from prompt_toolkit.history import InMemoryHistory
from prompt_toolkit.input import PipeInput, create_pipe_input
from prompt_toolkit.output import DummyOutput
from rich.console import Console

from cli.config.loading import parse_config
from cli.config.settings import Config
from cli.loop.agent import Agent
from cli.loop.approval import Approval, ApprovalRequest
from cli.loop.events import Event
from cli.records.sessions import SessionStore
from cli.ui.approve import ChatApprover
from cli.ui.chat_commands import COMMANDS
from cli.ui.editor import ChatCompleter, make_prompt
from cli.ui.keys import PromptKeys
from cli.ui.render import ChatRenderer
from cli.ui.repl import ChatSession
from cli.wiring import Choices, build_agent
from tests.fakes.fake_ollama import FakeOllama
from tests.fakes.fake_openai import FakeOpenAI
from tests.fakes.scripted import ScriptedModel
from tests.pty.driver import Ttys

REPO = Path(__file__).resolve().parent.parent


# A call that blocks (a FIFO opened for reading, a device read to its end) never returns; one
# that does not returns in milliseconds. The bound tells them apart on a loaded machine too:
# it is no timing assertion, only a backstop so that a blocked call fails instead of hanging.
HANG_SECONDS = 60


def without_blocking(fn: Callable[[], Any]) -> Any:
    """fn(), run in a thread: fails the test if it has not returned after HANG_SECONDS (it
    blocked), re-raises what it raised."""
    import threading

    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # re-raised below, in the test's thread
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(HANG_SECONDS)
    assert not thread.is_alive(), f"blocked: did not return within {HANG_SECONDS} s"
    if "error" in box:
        raise box["error"]
    return box.get("value")


# The signals whose disposition a process's children inherit when it is "ignored": a test that
# leaves one ignored (an in-process run ends with them ignored, as it is about to exit) would
# make every process a later test starts in this worker deaf to it (a pty's Ctrl-C, a writer's
# SIGINT), and which test runs after which depends on how xdist shares them out.
_INHERITED = tuple(
    getattr(signal, name)
    for name in ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGPIPE")
    if hasattr(signal, name)
)
LEAKS = os.environ.get("METONA_SIGNAL_LEAKS")  # a file: name each test that left one changed


@pytest.fixture(autouse=True)
def signal_dispositions(request: pytest.FixtureRequest) -> Iterator[None]:
    """Every test starts with the dispositions the session started with, whatever ran before."""
    before = {number: signal.getsignal(number) for number in _INHERITED}
    kernel = _kernel_view() if LEAKS else ""
    yield
    changed = [n for n in _INHERITED if signal.getsignal(n) != before[n]]
    for number in changed:
        signal.signal(number, before[number])  # type: ignore[arg-type]
    after = _kernel_view() if LEAKS else ""
    if (changed or after != kernel) and LEAKS:
        with open(LEAKS, "a", encoding="utf-8") as log:
            names = ", ".join(signal.Signals(n).name for n in changed)
            log.write(f"{os.getpid()} {request.node.nodeid}: {names} {kernel} -> {after}\n")


def _kernel_view() -> str:
    """The kernel's view of this process's ignored and blocked signals (Linux), which C code
    and other threads can change without Python's handlers showing it."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            return " ".join(
                line.strip() for line in status if line.startswith(("SigIgn", "SigBlk"))
            )
    except OSError:
        return ""


@pytest.fixture(autouse=True)
def isolated_env(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Config, state, data and HOME point into a temp dir; no OLLAMA_* from the developer."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    for var, sub in (
        ("XDG_CONFIG_HOME", ".config"),
        ("XDG_STATE_HOME", ".local/state"),
        ("XDG_DATA_HOME", ".local/share"),
    ):
        monkeypatch.setenv(var, str(home / sub))
    for var in ("OLLAMA_HOST", "OLLAMA_API_KEY", "OPENAI_API_KEY", "NO_COLOR", "FORCE_COLOR"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("COLUMNS", "100")
    return home


@pytest.fixture
def home(isolated_env: Path) -> Path:
    return isolated_env


@pytest.fixture
def workspace(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The agent's working directory. Its name is neutral on purpose: a test name such as
    `test_credentials` in the path would match the sensitive patterns and deny everything."""
    ws = tmp_path_factory.mktemp("ws").resolve()
    monkeypatch.chdir(ws)
    return ws


# What the wire-client tests send: one user message, one tool.
MESSAGES = [{"role": "user", "content": "hello"}]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}},
                "required": ["path"],
            },
        },
    }
]


class RecordingSleep:
    """A client's sleep that only records how long it was asked to wait (retry back-off)."""

    def __init__(self) -> None:
        self.calls: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)


@pytest.fixture
def sleeps() -> RecordingSleep:
    return RecordingSleep()


@pytest.fixture
def ollama() -> Iterator[FakeOllama]:
    fake = FakeOllama().start()
    yield fake
    fake.stop()


@pytest.fixture
def ttys(request: pytest.FixtureRequest) -> Iterator[Ttys]:
    """Programs on ptys, driven by state (tests/pty/driver.py); ended after the test."""
    started = Ttys(request)
    yield started
    started.close()


@pytest.fixture
def openai() -> Iterator[FakeOpenAI]:
    """A fake OpenAI-compatible server; its base URL (…/v1) is `openai.url`."""
    fake = FakeOpenAI().start()
    yield fake
    fake.stop()


@dataclass
class ScriptedApprover:
    """Answers "ask"s from a list (True/False/Approval), recording every request."""

    answers: list[Any] = field(default_factory=list)
    requests: list[ApprovalRequest] = field(default_factory=list)

    def __call__(self, request: ApprovalRequest) -> Approval:
        self.requests.append(request)
        answer = self.answers.pop(0) if self.answers else False
        if isinstance(answer, Approval):
            return answer
        return Approval(bool(answer), by="user", reason="" if answer else "the user declined")


@dataclass
class Harness:
    agent: Agent
    approver: ScriptedApprover
    conversation: list[dict[str, Any]]

    def run(self, prompt: str) -> list[Event]:
        return list(self.agent.run(self.conversation, prompt))


MakeAgent = Callable[..., Harness]


def harness(
    choices: Choices, yaml: str, workspace: Path, home: Path, answers: list[Any] | None = None
) -> Harness:
    """The real agent for `choices` (which server, which model), from YAML text like a
    user's config, its asks answered from `answers`."""
    config: Config = parse_config(yaml, "test.yaml")
    approver = ScriptedApprover(list(answers or []))
    agent = build_agent(
        choices,
        config,
        environ=dict(os.environ),
        cwd=str(workspace),
        home=str(home),
        approver=lambda _policy: approver,
    )
    return Harness(agent, approver, [])


@pytest.fixture
def make_agent(ollama: FakeOllama, workspace: Path, home: Path) -> MakeAgent:
    """Build the real agent against the fake server, from YAML text like a user's config."""

    def make(
        yaml: str = "",
        *,
        answers: list[Any] | None = None,
        model: str | None = None,
        think: bool | None = None,
        max_steps: int | None = None,
    ) -> Harness:
        choices = Choices(model=model, host=ollama.url, think=think, max_steps=max_steps)
        return harness(choices, yaml, workspace, home, answers)

    return make


@pytest.fixture
def scripted() -> ScriptedModel:
    """A scripted model in this process (tests/fakes/scripted.py), for the loop's logic."""
    return ScriptedModel()


@pytest.fixture
def make_scripted_agent(scripted: ScriptedModel, workspace: Path, home: Path) -> MakeAgent:
    """The real agent, built as make_agent builds it, talking to the scripted model instead
    of a server: no HTTP, no wire format, only the loop."""

    def make(
        yaml: str = "",
        *,
        answers: list[Any] | None = None,
        model: str | None = None,
        max_steps: int | None = None,
    ) -> Harness:
        # A host nobody listens on: the backend built for it is replaced before any call.
        choices = Choices(model=model, host="http://127.0.0.1:9", max_steps=max_steps)
        made = harness(choices, yaml, workspace, home, answers)
        made.agent.backend = scripted
        return made

    return make


@dataclass
class Completed:
    code: int
    stdout: str
    stderr: str


RunCli = Callable[..., Completed]


@pytest.fixture
def run_cli(workspace: Path, ollama: FakeOllama) -> RunCli:
    """Run the real `agent` program in a subprocess, pointed at the fake server."""

    def run(
        *args: str,
        input: str | None = None,
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
        timeout: float = 60,
        python_flags: tuple[str, ...] = (),  # the interpreter's own: ("-X", "importtime")
    ) -> Completed:
        full_env = {**os.environ, "OLLAMA_HOST": ollama.url, **(env or {})}
        return run_in_subprocess(args, input, full_env, cwd or workspace, timeout, python_flags)

    return run


def run_in_subprocess(
    args: tuple[str, ...],
    input: str | None,
    env: dict[str, str],
    cwd: Path,
    timeout: float,
    python_flags: tuple[str, ...] = (),
) -> Completed:
    proc = subprocess.run(
        [sys.executable, *python_flags, "-m", "cli", *args],
        input=input,
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=timeout,
        stdin=None if input is not None else subprocess.DEVNULL,
    )
    return Completed(proc.returncode, proc.stdout, proc.stderr)


def run_in_process(
    args: tuple[str, ...],
    *,
    input: str | None,
    env: dict[str, str],
    cwd: Path,
) -> Completed:
    """`agent ARGS` as `python -m cli` runs it (cli.app.main under sys.argv), but in this
    process: argv, the environment, the working directory and the three standard streams are
    the program's for the call, and given back after. The streams are real files, as a
    subprocess's are: stdin is /dev/null, or a file holding `input` (piped, as
    subprocess.run(input=…) pipes it); stdout and stderr are files, not terminals; both are
    read back as subprocess.run(text=True) reads them. A command test whose point is not the
    process (signals, a kill, start-up, the interpreter's own flags) runs this way, in
    milliseconds instead of an interpreter's start-up."""
    import tempfile

    from cli.app import main

    saved_env, saved_cwd = dict(os.environ), os.getcwd()
    saved = (sys.argv, sys.stdin, sys.stdout, sys.stderr)
    # Signal dispositions are the process's too: a run that ends sets SIGINT, SIGTERM and
    # SIGHUP to ignored (it is about to exit, and a late Ctrl-C must not change its code).
    # Left so, every process this one starts later would inherit them ignored.
    handlers = {n: signal.getsignal(n) for n in signal.valid_signals()}
    handlers = {n: h for n, h in handlers.items() if h is not None}
    with contextlib.ExitStack() as files:
        if input is None:
            stdin = files.enter_context(open(os.devnull, encoding="utf-8"))
        else:
            stdin = files.enter_context(tempfile.TemporaryFile("w+", encoding="utf-8"))
            stdin.write(input)
            stdin.seek(0)
        out = files.enter_context(tempfile.TemporaryFile("w+b"))
        err = files.enter_context(tempfile.TemporaryFile("w+b"))
        stdout = io.TextIOWrapper(out, encoding="utf-8", line_buffering=True)
        stderr = io.TextIOWrapper(err, encoding="utf-8", line_buffering=True)
        code = 0
        try:
            os.environ.clear()
            os.environ.update(env)
            os.chdir(cwd)
            sys.argv = [str(REPO / "cli" / "__main__.py"), *args]
            sys.stdin, sys.stdout, sys.stderr = stdin, stdout, stderr
            try:
                main()
            except SystemExit as exc:
                if exc.code is None or isinstance(exc.code, int):
                    code = exc.code or 0
                else:  # sys.exit("message"): Python prints it and exits 1
                    print(exc.code, file=stderr)
                    code = 1
            finally:
                stdout.flush()
                stderr.flush()
        finally:
            sys.argv, sys.stdin, sys.stdout, sys.stderr = saved
            for number, handler in handlers.items():
                with contextlib.suppress(OSError, ValueError):  # SIGKILL, SIGSTOP
                    signal.signal(number, handler)
            stdout.detach()  # the files themselves are closed with the stack
            stderr.detach()
            os.chdir(saved_cwd)
            os.environ.clear()
            os.environ.update(saved_env)

        def text(data: io.BufferedRandom) -> str:
            data.seek(0)
            return io.TextIOWrapper(io.BytesIO(data.read()), encoding="utf-8").read()

        return Completed(code, text(out), text(err))


@pytest.fixture
def run_cli_in_process(workspace: Path, ollama: FakeOllama) -> RunCli:
    """run_cli, in this process (run_in_process). A test module whose command tests need no
    process of their own says so by defining its `run_cli` fixture as this one."""

    def run(
        *args: str,
        input: str | None = None,
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
        timeout: float = 60,
        python_flags: tuple[str, ...] = (),
    ) -> Completed:
        full_env = {**os.environ, "OLLAMA_HOST": ollama.url, **(env or {})}
        if python_flags:  # the interpreter's own (-X importtime): they need an interpreter
            return run_in_subprocess(args, input, full_env, cwd or workspace, timeout, python_flags)
        return run_in_process(args, input=input, env=full_env, cwd=cwd or workspace)

    return run


# -- the chat REPL, driven through a pipe ------------------------------------------------


@dataclass
class Chat:
    session: ChatSession
    pipe: PipeInput
    out: io.StringIO
    store: SessionStore

    def type(self, *lines: str) -> None:
        for line in lines:
            self.pipe.send_text(line)

    def run(self, *lines: str) -> int:
        """Type the lines (each ending with Enter unless it is a raw key), then run until
        the input ends (Ctrl-D)."""
        self.type(*lines)
        self.pipe.send_text("\x04")  # Ctrl-D on the empty line ends the session
        return self.session.run()

    @property
    def text(self) -> str:
        return self.out.getvalue()


MakeChat = Callable[..., Chat]


@pytest.fixture
def make_chat(ollama: FakeOllama, workspace: Path, home: Path) -> Iterator[MakeChat]:
    pipes: list[Any] = []

    def make(yaml: str = "", *, choices: Choices | None = None) -> Chat:
        """`choices`: another server than the fake Ollama (the fake OpenAI-compatible one)."""
        context = create_pipe_input()
        pipe = context.__enter__()
        pipes.append(context)
        out = io.StringIO()
        console = Console(file=out, width=100, color_system=None, force_terminal=False)
        approver = ChatApprover(
            console, PromptKeys(input=pipe, output=DummyOutput()), cwd=str(workspace)
        )
        agent = build_agent(
            choices or Choices(host=ollama.url),
            parse_config(yaml, "t.yaml"),
            environ=dict(os.environ),
            cwd=str(workspace),
            home=str(home),
            approver=lambda _policy: approver,
        )
        store = SessionStore(home / "sessions")
        prompt = make_prompt(
            ChatCompleter(COMMANDS, str(workspace)),
            InMemoryHistory(),
            input=pipe,
            output=DummyOutput(),
        )
        renderer = ChatRenderer(console, cwd=str(workspace))
        session = ChatSession(agent, console, renderer, approver, store, prompt=prompt)
        return Chat(session, pipe, out, store)

    yield make
    for context in pipes:
        context.__exit__(None, None, None)


# -- the suite's wall time, for `make bench` to report ---------------------------------------

_SESSION_STARTED: list[float] = []


def pytest_configure(config: pytest.Config) -> None:
    """A suite started in the background of a non-interactive shell (`make test &`, a CI
    runner's job) inherits SIGINT and SIGQUIT ignored, and so would every process a test starts
    (a chat in a pty sent Ctrl-C, a writer sent SIGINT): the tests of Ctrl-C would fail for how
    the suite was started. Each process of the suite (xdist's workers too) takes the defaults."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if signal.getsignal(signal.SIGQUIT) is signal.SIG_IGN:
        signal.signal(signal.SIGQUIT, signal.SIG_DFL)


def pytest_sessionstart(session: pytest.Session) -> None:
    _SESSION_STARTED.append(time.monotonic())


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Note how long a whole-suite run took in .pytest_cache/metona-test-time.json (a run of
    some tests, or one that failed, is not the figure `make bench` reports)."""
    if hasattr(session.config, "workerinput"):  # an xdist worker: the controller reports
        return
    whole = [str(Path(a).resolve()) for a in session.config.args] == [str(REPO / "tests")]
    if not _SESSION_STARTED or exitstatus != 0 or not whole:
        return
    if session.config.option.keyword or session.config.option.markexpr:
        return
    record = {
        "tests": session.testscollected,
        "seconds": round(time.monotonic() - _SESSION_STARTED[0], 1),
        "finished": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    cache = REPO / ".pytest_cache"
    with contextlib.suppress(OSError):
        cache.mkdir(exist_ok=True)
        (cache / "metona-test-time.json").write_text(json.dumps(record) + "\n")
