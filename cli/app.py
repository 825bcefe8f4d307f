"""The `agent` command: parse flags → build the core objects → consume events → exit code.

This is the one place where errors become exit codes (see `errors.py`). The core is imported
inside the commands, so `agent --help` stays fast.
"""

from __future__ import annotations

import contextlib
import copy
import json
import math
import os
import stat
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TextIO

import typer

from cli import __version__
from cli.commands.complete import model_names, session_names

if TYPE_CHECKING:
    from cli.backends.messages import ModelInfo
    from cli.config.settings import Config
    from cli.journal.changes import ChangeStore
    from cli.loop.agent import Agent
    from cli.loop.events import Event
    from cli.loop.images import Image
    from cli.loop.instructions import Instructions
    from cli.records.audit import AuditLog
    from cli.ui.stream_json import StreamJson
    from cli.ui.trace import LazyConsole, RunTrace
    from cli.wiring import Choices
from cli.errors import (
    EXIT_FAILURE,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_STEP_LIMIT,
    EXIT_USAGE,
    AgentError,
    UsageError,
)

app = typer.Typer(
    name="agent",
    help="metona-agent: let a local Ollama model read, search and change your files, "
    "under a YAML safety policy (see config.example.yaml).",
    # typer's --install-completion / --show-completion (bash, zsh, fish, PowerShell).
    add_completion=True,
    invoke_without_command=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)


@dataclass(frozen=True)
class Terminal:
    """The process's surroundings, read once and passed down."""

    stdin: TextIO
    stdout: TextIO
    stderr: TextIO
    environ: Mapping[str, str]
    cwd: str

    @classmethod
    def from_process(cls) -> Terminal:
        return cls(sys.stdin, sys.stdout, sys.stderr, dict(os.environ), os.getcwd())

    @property
    def home(self) -> str:
        return self.environ.get("HOME") or os.path.expanduser("~")

    def interactive(self) -> bool:
        """Questions need both: stdin to read the answer, stderr to show the question."""
        return _isatty(self.stdin) and _isatty(self.stderr)


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


# -- options shared by run and chat ----------------------------------------------------------

ModelOpt = Annotated[
    str | None,
    typer.Option(
        "-m",
        "--model",
        metavar="NAME",
        help="Model to use (default: ollama.model).",
        autocompletion=model_names,
    ),
]
HostOpt = Annotated[
    str | None,
    typer.Option(
        "--host",
        metavar="HOST",
        help="Ollama server: http(s)://host[:port], host, host:port or :port "
        "(default: $OLLAMA_HOST, then ollama.host, then http://localhost:11434). With --api "
        "openai: the server's base URL, e.g. http://localhost:1234/v1.",
    ),
]
ApiOpt = Annotated[
    str | None,
    typer.Option(
        "--api",
        metavar="native|openai",
        help="The server's protocol: native (Ollama's own API) or openai (an OpenAI-compatible "
        "server: LM Studio, llama.cpp's llama-server, vLLM…; --host is then its base URL, e.g. "
        "http://localhost:1234/v1). Default: ollama.api.",
    ),
]
ConfigOpt = Annotated[
    str | None,
    typer.Option(
        "-c",
        "--config",
        metavar="PATH",
        help="YAML config file (default: $XDG_CONFIG_HOME/metona-agent/config.yaml if it "
        "exists, else built-in defaults).",
    ),
]
ThinkOpt = Annotated[
    bool | None,
    typer.Option(
        "--think/--no-think",
        help="Let a thinking model think, and show its thinking dimmed (default: ollama.think).",
    ),
]
ThinkLevelOpt = Annotated[
    str | None,
    typer.Option(
        "--think-level",
        metavar="LEVEL",
        help="Think at this level: low, medium, high or max (gpt-oss takes low, medium, high); "
        "implies --think.",
    ),
]

McpConfigOpt = Annotated[
    str | None,
    typer.Option(
        "--mcp-config",
        metavar="PATH",
        help='Also use the MCP servers of this {"mcpServers": …} JSON file (Claude Desktop, '
        "Gemini CLI, ollmcp) for this session.",
    ),
]

NoInstructionsOpt = Annotated[
    bool,
    typer.Option(
        "--no-instructions",
        help="Leave out the project's AGENTS.md / CLAUDE.md files (default: "
        "agent.project_instructions).",
    ),
]


def think_choice(think: bool | None, level: str | None) -> bool | str | None:
    """--think/--no-think and --think-level as one choice: a level, a boolean, or None."""
    from cli.config.settings import THINK_LEVELS

    if level is None:
        return think
    if level not in THINK_LEVELS:
        raise UsageError(f"--think-level {level}: expected one of {', '.join(THINK_LEVELS)}")
    if think is False:
        raise UsageError(f"--no-think and --think-level {level} contradict: give one")
    return level


def _version(value: bool) -> None:
    if value:
        typer.echo(f"metona-agent {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    ctx: typer.Context,
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="Show the version and exit."
        ),
    ] = False,
    debug: Annotated[
        bool, typer.Option("--debug", help="Show tracebacks of errors.", hidden=True)
    ] = False,
) -> None:
    ctx.obj = {"debug": debug}
    if ctx.invoked_subcommand is None:
        # `agent` alone: the help, and exit 0 (it is not a usage error to ask what it does).
        typer.echo(ctx.get_help())
        raise typer.Exit(0)


@contextlib.contextmanager
def exit_codes(terminal: Terminal, debug: bool) -> Iterator[None]:
    """Expected failures → one line on stderr and their exit code; Ctrl-C → 130."""
    try:
        yield
    except AgentError as exc:
        if debug:
            raise
        from cli.ui.text import sanitize  # messages may quote the server or the model

        terminal.stderr.write(f"agent: {sanitize(exc.message, multiline=True)}\n")
        raise typer.Exit(exc.exit_code) from None
    except KeyboardInterrupt:
        terminal.stderr.write("\nagent: interrupted\n")
        raise typer.Exit(EXIT_INTERRUPTED) from None
    except Stopped as exc:
        terminal.stderr.write(f"\nagent: {stopped_line(exc.signum)}\n")
        raise typer.Exit(128 + exc.signum) from None


@contextlib.contextmanager
def stopped_by_signals(active: bool) -> Iterator[None]:
    """While MCP servers run: SIGTERM and SIGHUP end the agent through its `finally`s, as
    Ctrl-C does, so that the servers are stopped too (exit 128 + the signal's number). A
    SIGKILL cannot be caught: servers then outlive the agent (README says so)."""
    if not active:
        yield
        return
    import signal

    def stop(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    previous = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


class Stopped(BaseException):
    """SIGTERM or SIGHUP during `agent run`: the run ends as after Ctrl-C (its `end` line,
    its JSON object, the work saved), then exits 128 + the signal's number. Not a
    KeyboardInterrupt, so that no prompt takes it for a "no" and lets the run go on."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


class RunSignals:
    """`agent run`'s handler for SIGINT, SIGTERM and SIGHUP: the first one ends the run
    (KeyboardInterrupt, or Stopped); from then on — and once the run has ended by itself —
    `quiet` is set and more of them are ignored, so that a second Ctrl-C a few ms later (a
    wrapper forwarding it while the terminal sends it too) cannot cut the wind-down short:
    the `end` line, the JSON object, the saved session."""

    def __init__(self) -> None:
        self.quiet = False
        self.received: int | None = None  # the signal that ended the run, if one did

    def __call__(self, signum: int, _frame: object) -> None:
        import signal

        if self.quiet:
            return
        self.quiet = True
        self.received = signum
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        raise Stopped(signum)


@contextlib.contextmanager
def run_signals() -> Iterator[RunSignals | None]:
    """RunSignals, installed while the run lasts (None off the main thread, where Python
    cannot set handlers)."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield None
        return
    handler = RunSignals()
    numbers = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {number: signal.signal(number, handler) for number in numbers}
    try:
        yield handler
    finally:
        for number, old in previous.items():
            # a run that has ended: the process is about to exit with its code, which a
            # late signal (the second Ctrl-C) must not change
            signal.signal(number, signal.SIG_IGN if handler.quiet else old)


def stopped_line(signum: int) -> str:
    """stderr's word for how the run was ended: Ctrl-C, or a signal by its name."""
    import signal

    if signum == signal.SIGINT:
        return "interrupted"
    return f"stopped by {signal.Signals(signum).name}"


@contextlib.contextmanager
def command(ctx: typer.Context) -> Iterator[Terminal]:
    """Every command's frame: the process's terminal, and its errors as exit codes. On native
    Windows, a command that needs POSIX ends here: one line, exit 2, nothing of it imported."""
    terminal = Terminal.from_process()
    from cli.fs import _platform

    if _platform.WINDOWS:
        name = command_name(ctx)
        if name not in WINDOWS_READY:
            terminal.stderr.write(f"agent: `agent {name}`: {_platform.WINDOWS_LINE}\n")
            raise typer.Exit(EXIT_USAGE)
    with exit_codes(terminal, bool(ctx.obj and ctx.obj.get("debug"))):
        yield terminal


# What works on native Windows, by the words after `agent`: reading and writing the config.
# Every other command reaches files through directory fds (openat, O_NOFOLLOW, flock), runs
# commands in a POSIX sandbox, or is built by cli.wiring, which imports the change store and
# the tools (`models` too, though it only asks the server): WSL2 until then.
WINDOWS_READY = frozenset({"config", "config path", "init"})


def command_name(ctx: typer.Context) -> str:
    """The command's words after `agent` ("sessions rm")."""
    words: list[str] = []
    current: typer.Context | None = ctx
    while current is not None and current.parent is not None:
        words.append(current.info_name or "")
        current = current.parent  # type: ignore[assignment]
    return " ".join(reversed(words))


# -- agent run -------------------------------------------------------------------------------


@app.command(
    "run",
    help="Run one prompt to completion and print the answer on stdout; a trace of tool calls "
    "goes to stderr. Piped stdin is appended to the prompt; a prompt of '-' is read from "
    "stdin. Exit codes: 0 answered, 1 server/model/stream failure, 2 usage or config error, "
    "3 step limit reached, answer cut short or empty, 130 interrupted.",
)
def run(
    ctx: typer.Context,
    prompt: Annotated[
        str, typer.Argument(metavar="PROMPT", help="What to ask; '-' reads it from stdin.")
    ],
    model: ModelOpt = None,
    host: HostOpt = None,
    config: ConfigOpt = None,
    yes: Annotated[
        bool,
        typer.Option(
            "-y",
            "--yes",
            help="Approve, without asking, the tools listed in policy.unattended (never for "
            "paths outside the allowed dirs). Other confirmations are still asked on the "
            "terminal, or denied when there is none.",
        ),
    ] = False,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json",
            help="Print one JSON object on stdout instead of the answer: answer, model, steps, "
            "stop_reason, tool_calls, stats (the same as --output-format json).",
        ),
    ] = False,
    output_format: Annotated[
        str | None,
        typer.Option(
            "--output-format",
            metavar="text|json|stream-json",
            help="What stdout carries: text (the answer), json (one object at the end, as "
            "--json) or stream-json (one JSON object a line as the run goes: start, text, "
            "thinking, tool_call, tool_result, step_end, notice, end; see README).",
        ),
    ] = None,
    max_steps: Annotated[
        int | None,
        typer.Option(
            "--max-steps",
            min=1,
            metavar="N",
            help="At most this many model calls (default: agent.max_steps).",
        ),
    ] = None,
    think: ThinkOpt = None,
    think_level: ThinkLevelOpt = None,
    api: ApiOpt = None,
    no_instructions: NoInstructionsOpt = False,
    mcp_config: McpConfigOpt = None,
    attach: Annotated[
        list[str] | None,
        typer.Option(
            "-a",
            "--attach",
            metavar="FILE",
            help="Attach this image (PNG, JPEG, GIF, WebP, BMP; at most 20 MB) for a vision "
            "model; repeatable. Read through the same policy as read_file.",
        ),
    ] = None,
    verbose: Annotated[
        bool,
        typer.Option(
            "-v",
            "--verbose",
            help="Also say on stderr which instruction files were read, and show what MCP "
            "servers write on their stderr (otherwise only in their logs).",
        ),
    ] = False,
) -> None:
    with command(ctx) as terminal:
        from cli.wiring import Choices

        thinking = think_choice(think, think_level)
        choices = Choices(
            model,
            host,
            config,
            thinking,
            max_steps,
            api=api,
            instructions=False if no_instructions else None,
            mcp_config=mcp_config,
            mcp_stderr=_server_stderr(terminal.stderr) if verbose else None,
        )
        output = output_choice(output_format, as_json)
        code = _run(terminal, prompt, yes, output, choices, verbose=verbose, images=attach or [])
    raise typer.Exit(code)


OUTPUT_FORMATS = ("text", "json", "stream-json")


def output_choice(output_format: str | None, as_json: bool) -> str:
    """--output-format and --json as one choice: text, json or stream-json."""
    if output_format is None:
        return "json" if as_json else "text"
    if output_format not in OUTPUT_FORMATS:
        raise UsageError(
            f"--output-format {output_format}: expected one of {', '.join(OUTPUT_FORMATS)}"
        )
    if as_json and output_format != "json":
        raise UsageError(f"--json and --output-format {output_format} contradict: give one")
    return output_format


def _run(
    terminal: Terminal,
    prompt: str,
    yes: bool,
    output: str,
    choices: Choices,
    *,
    verbose: bool = False,
    images: Sequence[str] = (),
) -> int:
    from cli.loop.approval import Approver, NoOneToAsk, UnattendedApprover
    from cli.safety.policy import Policy
    from cli.ui.trace import LazyConsole
    from cli.wiring import build_agent, load

    config = load(choices, terminal.environ)
    text = read_prompt(prompt, terminal.stdin, config.policy.limits.max_read_bytes)
    console = LazyConsole(terminal.stderr, highlight=False, soft_wrap=True)
    asker = None
    # Questions are read where a person types: stdin, or when stdin is a pipe (`cat x |
    # agent run …` at a terminal) the controlling terminal, as the question is shown on it.
    answers = terminal.stdin if terminal.interactive() else _controlling_terminal(terminal)
    if answers is not None:
        from cli.ui.approve import Consequences
        from cli.ui.confirm import LineApprover

        consequences = Consequences(
            config.policy.trash, config.policy.commands.sandbox, undo="agent undo"
        )
        asker = LineApprover(
            console.get(),
            answers,
            cwd=terminal.cwd,
            consequences=consequences,
            bell=config.agent.bell,
        )

    def approver(_policy: Policy) -> Approver:
        fallback: Approver = asker or NoOneToAsk(config.policy.unattended, yes=yes)
        return UnattendedApprover(config.policy.unattended, fallback) if yes else fallback

    agent = build_agent(
        choices,
        config,
        environ=terminal.environ,
        cwd=terminal.cwd,
        home=terminal.home,
        approver=approver,
    )
    from cli.safety.policy import whole_trees
    from cli.ui.text import sanitize

    for tree in whole_trees(agent.policy):  # run from / or ~: said, not asked
        terminal.stderr.write(
            f"note: the allowed directory is {sanitize(tree)}: the model may read and change files "
            "anywhere under it\n"
        )
    with run_signals() as signals:
        try:
            return _drive(
                terminal,
                agent,
                config,
                text,
                console,
                output,
                verbose,
                yes=yes,
                images=images,
                signals=signals,
            )
        finally:
            agent.close()  # its MCP servers: stopped, whatever happened
            if answers is not None and answers is not terminal.stdin:
                answers.close()


def _controlling_terminal(terminal: Terminal) -> TextIO | None:
    """The controlling terminal (/dev/tty), opened for reading, when the question would be
    shown on a terminal (stderr) but stdin is not one; None when there is none."""
    if not _isatty(terminal.stderr):
        return None
    try:
        return open("/dev/tty", encoding="utf-8", errors="replace")
    except OSError:
        return None


def _drive(
    terminal: Terminal,
    agent: Agent,
    config: Config,
    text: str,
    console: LazyConsole,
    output: str,
    verbose: bool,
    *,
    yes: bool = False,
    images: Sequence[str] = (),
    signals: RunSignals | None = None,
) -> int:
    from cli.loop.events import Notice
    from cli.records.audit import audited, session_log
    from cli.ui.trace import RunRecord, RunTrace

    as_json = output == "json"
    record = RunRecord(model=agent.settings.model)
    trace = RunTrace(
        console,
        record,
        show_thinking=bool(agent.settings.think),
        stdin=terminal.stdin,
        # a terminal: the answer streams there, unless stdout carries JSON
        stdout=terminal.stdout if output == "text" else None,
        verbose=verbose,
    )
    stream = None
    if output == "stream-json":
        from cli.ui.stream_json import StreamJson

        stream = StreamJson(lambda line: print_json(terminal.stdout, line), verbose=verbose)

    def said(event: Event) -> None:
        if stream is not None:
            stream.handle(event)
        trace.handle(event)

    # the run's audit records and, if its work is kept, its session: one name
    audit_log = session_log(terminal.environ, agent.policy.cwd, _run_name(terminal))
    if agent.context.changes is not None:  # and its changes, for undo to say where they came from
        agent.context.changes.name = audit_log.session_id
    conversation: list[dict[str, Any]] = []
    try:
        if stream is not None:
            early = agent.mcp_tools()  # the MCP servers' tools belong in the start line
            stream.start(agent, yes=yes, images=images)
            for line in early:
                said(Notice(line))
        seen = _attached_images(agent, images, said, audit_log) if images else []
        if seen:
            from cli.loop.images import image_note

            text = f"{text}\n\n{image_note(seen)}"
        # closing(): on Ctrl-C the audit wrapper records the call that was cut short.
        run = agent.run(conversation, text, [image.data for image in seen])
        with contextlib.closing(audited(run, audit_log)) as events:
            if agent.model_info().note:  # what the backend had to assume, said once
                said(Notice(agent.model_info().note))
            for line in _instruction_lines(agent.instructions, verbose):
                said(Notice(line))
            trace.consume(events if stream is None else stream.tee(events))
    except (AgentError, KeyboardInterrupt, Stopped, OSError) as exc:
        if signals is not None:
            signals.quiet = True  # winding down: a second Ctrl-C cannot cut it short
        received = signals.received if signals is not None else None
        if isinstance(exc, OSError) and received is None:
            # stdout or the terminal gone with no signal (`| head -1`): the work is kept,
            # and the error goes on to be reported as any other
            _save_unfinished(
                terminal,
                agent.settings.model,
                conversation,
                config.agent.max_sessions,
                name=audit_log.session_id,
            )
            raise
        if stream is not None and not isinstance(exc, OSError):
            # if the failure came first: the stream has its start
            stream.start(agent, yes=yes, images=images)
        if not isinstance(exc, AgentError):
            import signal

            # An OSError here came from writing to a terminal the same signal closed (a
            # window shut: SIGHUP, then EIO): it is that signal's ending.
            signum = exc.signum if isinstance(exc, Stopped) else received or int(signal.SIGINT)
            try:
                _interrupted(terminal, trace, output, stream, signum)
            except OSError:
                pass  # stdout gone (the reader had the same SIGHUP): nothing more to write
            finally:
                saved = _save_unfinished(
                    terminal,
                    agent.settings.model,
                    conversation,
                    config.agent.max_sessions,
                    name=audit_log.session_id,
                )
            kept = f"; the work so far is saved: agent chat --resume {saved}" if saved else ""
            with contextlib.suppress(OSError):  # stderr may be the closed terminal too
                terminal.stderr.write(f"agent: {stopped_line(signum)}{kept}\n")
                terminal.stderr.flush()
            return EXIT_INTERRUPTED if signum == signal.SIGINT else 128 + signum
        saved = _save_unfinished(
            terminal,
            agent.settings.model,
            conversation,
            config.agent.max_sessions,
            name=audit_log.session_id,
        )
        if saved:
            exc.message += f" (the work so far is saved: agent chat --resume {saved})"
        if as_json:
            trace.cut_short()  # the steps and the time it took, as far as it got
            record.stop_reason = "error"
            record.error = exc.message
            print_json(terminal.stdout, record.to_json())
        elif stream is not None:
            stream.end("error", error=exc.message)
        raise
    if signals is not None:
        signals.quiet = True  # the run is over: its output is written whole
    if as_json:
        print_json(terminal.stdout, record.to_json())
    elif record.answer and output == "text" and not trace.streams_answer:
        terminal.stdout.write(shown_answer(record.answer, _isatty(terminal.stdout)) + "\n")
        terminal.stdout.flush()
    return exit_code(record.stop_reason)


def _attached_images(
    agent: Agent, paths: Sequence[str], said: Callable[[Event], None], audit_log: AuditLog
) -> list[Image]:
    """`-a FILE`: each image read as read_file reads (policy, gate, audit); a model that
    cannot see images is sent none (a usage error, before anything is sent)."""
    from cli.loop.events import Notice
    from cli.loop.images import cannot_see, read_image, sees_images, too_many_images, unknown_sight

    model = agent.settings.model
    sight = sees_images(agent.model_info())
    if sight is False:
        raise UsageError(f"-a {paths[0]}: {cannot_see(model)}; nothing was sent")
    if sight is None:
        said(Notice(unknown_sight(model)))
    images: list[Image] = []
    for path in dict.fromkeys(paths):
        attached = read_image(agent, path)
        audit_log.record(attached.record)
        if attached.image is None:
            raise UsageError(f"-a {path}: {attached.error}; nothing was sent")
        too_many = too_many_images(sum(image.size for image in images), attached.image)
        if too_many:  # the run could not be saved to resume (README, Images)
            raise UsageError(f"-a {path}: {too_many}; nothing was sent")
        images.append(attached.image)
    return images


def exit_code(stop_reason: str | None) -> int:
    """How a run that ended without an error exits, by why it ended (README, Exit codes)."""
    # The work is not done: the step limit, a refused call repeated, an answer cut for
    # length, an empty answer.
    if stop_reason in ("max_steps", "repeating", "length", "empty"):
        return EXIT_STEP_LIMIT
    return EXIT_OK


def _interrupted(
    terminal: Terminal,
    trace: RunTrace,
    output: str,
    stream: StreamJson | None,
    signum: int,
) -> None:
    """Ctrl-C, SIGTERM or SIGHUP: what the model had written is kept — on stdout (a terminal
    has it already, as it streamed), in the JSON object, or in stream-json's `end` line —
    written before the work is saved (the caller then says on stderr what happened)."""
    if output == "json":
        record = trace.cut_short()  # the steps and the time it took, as far as it got
        record.stop_reason, record.error = "interrupted", stopped_line(signum)
        print_json(terminal.stdout, record.to_json())
    elif stream is not None:
        stream.end("interrupted")
    elif trace.partial_answer.strip() and not trace.streams_answer:
        terminal.stdout.write(shown_answer(trace.partial_answer, _isatty(terminal.stdout)) + "\n")
        terminal.stdout.flush()


def _server_stderr(stream: TextIO) -> Callable[[str, bytes], None]:
    """`-v`: an MCP server's stderr on ours, a line at a time, each naming its server and
    with control characters escaped."""
    from cli.ui.text import sanitize

    def write(server: str, data: bytes) -> None:
        for line in data.decode("utf-8", "replace").splitlines():
            if line.strip():
                stream.write(f"mcp {server}: {sanitize(line)}\n")
        stream.flush()

    return write


def _instruction_lines(instructions: Instructions, verbose: bool) -> list[str]:
    """What `-v` says of the project's instruction files; what was cut is said always."""
    lines = []
    if verbose:
        read = instructions.summary()
        lines.append(f"instructions: {read}" if read else "instructions: no files")
    return lines + [
        f"instructions: {note}" for note in instructions.notes if verbose or "cut" in note
    ]


def shown_answer(answer: str, on_terminal: bool) -> str:
    """The answer as stdout gets it (the final newline is added by the caller): piped or in
    a file, the model's text exactly as it came; on a terminal, with every control sequence
    escaped (an answer must not retitle the window, write the clipboard or erase the trace)."""
    answer = answer.rstrip("\n")
    if not on_terminal:
        return answer
    from cli.ui.text import sanitize

    return sanitize(answer.replace("\r\n", "\n"), multiline=True)


def _run_name(terminal: Terminal) -> str:
    """`run-<time>`, the name a run's audit records carry and its session, if kept, is saved
    under: one no saved session has and no recent audit record carries (runs a second apart
    are two sessions)."""
    from cli.config.settings import data_dir
    from cli.records.audit import default_path, recent_sessions
    from cli.records.sessions import SessionStore, timestamp_name

    store = SessionStore(data_dir(terminal.environ) / "sessions")
    taken = recent_sessions(default_path(terminal.environ))
    base = name = f"run-{timestamp_name()}"
    number = 2
    while name in taken or store.exists(name):
        name, number = f"{base}-{number}", number + 1
    return name


def _save_unfinished(
    terminal: Terminal,
    model: str,
    conversation: list[dict[str, Any]],
    max_sessions: int = 100,
    *,
    name: str = "",
) -> str:
    """Keep a run that failed after the model had started working, so that nothing is
    lost: `agent chat --resume NAME` continues it. The session's name, or "" if not saved."""
    if not any(m.get("role") in ("assistant", "tool") for m in conversation):
        return ""
    from cli.config.settings import data_dir
    from cli.records.sessions import SessionStore, timestamp_name

    name = name or f"run-{timestamp_name()}"
    store = SessionStore(data_dir(terminal.environ) / "sessions")
    try:
        store.save(name, model, conversation, kind="run", cwd=terminal.cwd)
        store.prune(max_sessions, spare=name)
    except (OSError, AgentError):
        return ""
    return name


# -- agent chat ------------------------------------------------------------------------------


@app.command(
    "chat",
    help="An interactive session: the model works on your files turn by turn, every risky "
    "call is confirmed, and the conversation is kept (and saved) across turns. /help inside "
    "lists the commands and keys.",
)
def chat(
    ctx: typer.Context,
    model: ModelOpt = None,
    host: HostOpt = None,
    config: ConfigOpt = None,
    think: ThinkOpt = None,
    think_level: ThinkLevelOpt = None,
    api: ApiOpt = None,
    no_instructions: NoInstructionsOpt = False,
    mcp_config: McpConfigOpt = None,
    resume: Annotated[
        bool,
        typer.Option(
            "--resume",
            help="Reopen a saved session: NAME, or the latest chat of this directory when NAME "
            "is left out.",
        ),
    ] = False,
    name: Annotated[
        str | None,
        typer.Argument(
            metavar="NAME", help="The session --resume reopens.", autocompletion=session_names
        ),
    ] = None,
) -> None:
    with command(ctx) as terminal:
        if name is not None and not resume:
            raise UsageError(
                f"a session name ({name}) only goes with --resume: agent chat --resume {name}"
            )
        from cli.wiring import Choices

        thinking = think_choice(think, think_level)
        choices = Choices(
            model,
            host,
            config,
            thinking,
            api=api,
            instructions=False if no_instructions else None,
            mcp_config=mcp_config,
        )
        code = _chat(terminal, choices, resume, name)
    raise typer.Exit(code)


def _chat(terminal: Terminal, choices: Choices, resume: bool, name: str | None) -> int:
    from rich.markup import escape

    from cli.config.settings import data_dir, state_dir
    from cli.records.audit import session_log
    from cli.records.sessions import SessionStore
    from cli.ui.approve import ChatApprover, Consequences
    from cli.ui.keys import PromptKeys, TypeAhead
    from cli.ui.layout import FittedConsole
    from cli.ui.render import ChatRenderer
    from cli.ui.repl import ChatSession, think_state
    from cli.ui.text import sanitize
    from cli.wiring import build_agent, load

    if not (_isatty(terminal.stdin) and _isatty(terminal.stdout)):
        # prompt-toolkit would warn, repaint into the pipe and read answers from it.
        raise UsageError(
            "agent chat needs a terminal (stdin and stdout); for scripts and pipes use "
            'agent run: echo "…" | agent run -'
        )
    config = load(choices, terminal.environ)
    console = FittedConsole(file=terminal.stdout, highlight=False)  # TERM=dumb too
    consequences = Consequences(config.policy.trash, config.policy.commands.sandbox)
    typeahead = TypeAhead(terminal.stdin, terminal.stdout)
    keys = PromptKeys(typeahead=typeahead)
    approver = ChatApprover(
        console, keys, cwd=terminal.cwd, consequences=consequences, bell=config.agent.bell
    )
    agent = build_agent(
        choices,
        config,
        environ=terminal.environ,
        cwd=terminal.cwd,
        home=terminal.home,
        approver=lambda _policy: approver,
    )
    with contextlib.closing(agent), stopped_by_signals(agent.mcp is not None):
        info = agent.model_info()  # fails here, with exit 1, if the server or model is missing
        settings = agent.settings
        console.print(
            f"[bold]metona-agent[/] · {escape(sanitize(settings.model))} · "
            f"{escape(sanitize(agent.backend.host))} · {escape(sanitize(agent.policy.cwd))} · "
            f"tools {'on' if agent.tools_on() else 'off'} · "
            f"confirm: {escape(agent.policy.config.confirm)} · "
            f"think {think_state(settings.think) if info.supports_thinking else 'off'}"
            " [dim]· /help[/]",
            highlight=False,
        )
        if agent.policy.config.confirm == "none":  # nothing but deletes is asked: said apart
            console.print(f"[yellow]{escape(CONFIRM_NONE)}[/]", highlight=False)
        if info.note:  # what the backend had to assume about the model, said once
            console.print(f"[yellow]note:[/] {escape(sanitize(info.note))}", highlight=False)
        read = agent.instructions.summary()
        if read:
            console.print(f"[dim]instructions: {escape(sanitize(read))}[/]", highlight=False)
        for note in agent.instructions.notes:
            console.print(f"[yellow]instructions:[/] {escape(sanitize(note))}", highlight=False)
        if not _whole_tree_agreed(agent, console, keys):
            return 0
        renderer = ChatRenderer(
            console,
            cwd=agent.policy.cwd,
            show_thinking=bool(settings.think),
            model=settings.model,
            keys=typeahead,
            waited=lambda: approver.waited,
        )
        store = SessionStore(data_dir(terminal.environ) / "sessions")
        session = ChatSession(
            agent,
            console,
            renderer,
            approver,
            store,
            history_file=state_dir(terminal.environ) / "history",
            audit_log=session_log(terminal.environ, agent.policy.cwd),
            max_sessions=config.agent.max_sessions,
        )
        if resume:
            session.load(name)
        return session.run()


CONFIRM_NONE = (
    "confirm: none — writes, edits and moves run without asking; deletes still ask "
    "(/tools lists each tool)"
)


def _whole_tree_agreed(agent: Agent, console: Any, keys: Any) -> bool:
    """Chat started in / or the home directory: said, and asked once whether to go on."""
    from rich.text import Text

    from cli.safety.policy import whole_trees
    from cli.ui.text import sanitize

    trees = whole_trees(agent.policy)
    for tree in trees:
        line = f"⚠ the allowed directory is {sanitize(tree)}: the model may read and change "
        console.print(Text(line + "files anywhere under it", "yellow"))
    if not trees:
        return True
    if keys.read_key("work here anyway?  [y] yes  [n] no, quit  ", "yn") == "y":
        return True
    console.print(Text("cd into your project, then: agent chat", "dim"))
    return False


# -- agent models ----------------------------------------------------------------------------


@app.command(
    "models",
    help="The server's models: name, size on disk, parameters, quantisation, trained context "
    "length, how the agent gives it tools (native: the API's tools field; prompt: described "
    "in the system prompt, for a model without tool support; none: no tools, by "
    "agent.tool_mode or the policy), capabilities (tools, thinking, vision) and whether it is "
    "loaded now. Exit codes: 0 listed, 1 server failure, 2 usage or config error.",
)
def models(
    ctx: typer.Context,
    host: HostOpt = None,
    config: ConfigOpt = None,
    api: ApiOpt = None,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json",
            help="Print one JSON list of objects: name, size, parameter_size, quantization, "
            "context_length, capabilities, loaded, tools (native|prompt|none; null where the "
            "server does not say).",
        ),
    ] = False,
) -> None:
    with command(ctx) as terminal:
        from cli.backends.catalog import gather
        from cli.config.settings import tool_mode_for
        from cli.wiring import Choices, build_backend, build_policy, load

        choices = Choices(host=host, config_path=config, api=api)
        loaded = load(choices, terminal.environ)
        backend = build_backend(choices, loaded, terminal.environ)
        policy = build_policy(loaded, terminal.environ, terminal.cwd, terminal.home)
        enabled = bool(policy.enabled_tools())  # the built-in tools: MCP servers are not started

        def tools(info: ModelInfo) -> str:
            mode = tool_mode_for(loaded.agent.tool_mode, info.supports_tools, enabled)
            return "none" if mode == "off" else mode

        rows = gather(backend, tools=tools)
        if as_json:
            print_json(terminal.stdout, [row.to_json() for row in rows])
        elif not rows:
            terminal.stderr.write(f"no models on {backend.host} (Ollama: `ollama pull qwen3:8b`)\n")
        else:
            from cli.ui.models_view import model_table

            terminal.stdout.write("\n".join(model_table(rows)) + "\n")


# -- agent history / agent undo --------------------------------------------------------------


@app.command(
    "history",
    help="The changes the agent made (writes, deletes, new directories, undos and redos), "
    "oldest first: id, time (UTC), tool (undo or redo for those), action, path, size; an "
    "undone one says by which undo. `agent undo ID` takes one back; in chat: /history.",
)
def history(
    ctx: typer.Context,
    count: Annotated[
        int, typer.Option("-n", min=1, metavar="N", help="How many of the latest.")
    ] = 30,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON record a line.")] = False,
) -> None:
    with command(ctx) as terminal:
        from dataclasses import asdict

        from cli.ui.changes_view import history_rows

        changes = _change_store(terminal).history()[-count:]
        if not changes:
            terminal.stderr.write("no changes recorded yet\n")
        elif as_json:
            for change in changes:
                print_json(terminal.stdout, asdict(change))
        else:
            terminal.stdout.write("\n".join(history_rows(changes, terminal.cwd)) + "\n")


NeverAskOpt = Annotated[
    bool,
    typer.Option("-y", "--yes", help="Never ask: a conflict (the file changed since) is refused."),
]


@app.command(
    "undo",
    help="Take back the newest change the agent made under this directory that is not undone "
    "yet (again: the one before it, and so on), or change ID from `agent history`: a write "
    "gets its old content back, a delete comes back from the trash, a new file or directory "
    "goes. `agent redo` brings back what the last undo took back. A file that changed since "
    "is never overwritten without asking. Exit codes: 0 undone, 1 not undone.",
)
def undo(
    ctx: typer.Context,
    change: Annotated[
        int | None,
        typer.Argument(help="The change to undo (default: the newest not undone here)."),
    ] = None,
    turn: Annotated[
        bool,
        typer.Option(
            "--turn",
            help="Take back every change of the last turn (or of change ID's turn), newest "
            "first, in one step: one `agent redo` brings them all back.",
        ),
    ] = False,
    everywhere: Annotated[
        bool,
        typer.Option("--all", help="Not only the changes under this directory."),
    ] = False,
    yes: NeverAskOpt = False,
) -> None:
    _undo_command(ctx, change, turn=turn, everywhere=everywhere, yes=yes, redo=False)


@app.command(
    "redo",
    help="Bring back what the last `agent undo` under this directory took back (a whole turn "
    "if it took one); again: the undo before it. A new change by the agent clears what can "
    "be redone, as in an editor. Exit codes: 0 redone, 1 not redone.",
)
def redo(
    ctx: typer.Context,
    everywhere: Annotated[
        bool,
        typer.Option("--all", help="Not only the undos of changes under this directory."),
    ] = False,
    yes: NeverAskOpt = False,
) -> None:
    _undo_command(ctx, None, turn=False, everywhere=everywhere, yes=yes, redo=True)


def _undo_command(
    ctx: typer.Context, change: int | None, *, turn: bool, everywhere: bool, yes: bool, redo: bool
) -> None:
    """`agent undo` and `agent redo`: the conversation on stderr, a conflict asked on a tty."""
    with command(ctx) as terminal:
        from cli.ui.changes_view import undo_flow

        def say(line: str) -> None:
            terminal.stderr.write(line + "\n")

        def ask(question: str) -> bool:
            from cli.ui.keys import read_fresh_line

            terminal.stderr.write(f"{question} [y/N] ")
            terminal.stderr.flush()
            return read_fresh_line(terminal.stdin).strip().lower() in ("y", "yes")

        from cli.safety.policy import Policy
        from cli.wiring import Choices, load

        config = load(Choices(), terminal.environ)
        undo_flow(
            _change_store(terminal),
            change,
            cwd=terminal.cwd,
            say=say,
            ask=None if yes or not terminal.interactive() else ask,
            policy=Policy(config.policy, terminal.cwd, terminal.home, config.source),
            turn=turn,
            everywhere=everywhere,
            redo=redo,
        )


def _change_store(terminal: Terminal) -> ChangeStore:
    from cli.wiring import Choices, change_store, load

    return change_store(load(Choices(), terminal.environ), terminal.environ)


# -- agent audit ----------------------------------------------------------------------------

audit_app = typer.Typer(
    name="audit",
    help="The audit log: one record per tool call, chained by hashes "
    "($XDG_STATE_HOME/metona-agent/audit.jsonl).",
    no_args_is_help=True,
    rich_markup_mode=None,
)
app.add_typer(audit_app)


def _add_command_groups() -> None:
    from cli.commands.config import config_app, init
    from cli.commands.mcp import mcp_app
    from cli.commands.sessions import sessions_app

    app.add_typer(sessions_app)
    app.add_typer(mcp_app)
    app.add_typer(config_app)
    app.command(
        "init",
        help="Write a commented config (every key at its default) to the file `agent config "
        "path` names, for you to edit. Never overwrites one.",
    )(init)


_add_command_groups()

AuditFileOpt = Annotated[
    str | None,
    typer.Option(
        "--file",
        metavar="PATH",
        help="The log to read (default: $XDG_STATE_HOME/metona-agent/audit.jsonl).",
    ),
]


@audit_app.command(
    "verify",
    help="Check every record's hash and the chain between them. Exit codes: 0 intact, "
    "1 broken (the first broken line is named) or unreadable.",
)
def audit_verify(ctx: typer.Context, file: AuditFileOpt = None) -> None:
    with command(ctx) as terminal:
        from cli.records.audit import verify

        path = _audit_path(terminal, file)
        try:
            check = verify(path)
        except OSError as exc:
            raise _unreadable(path, exc) from None
        if not check.intact:
            raise AgentError(f"{path}, line {check.line}: {check.problem}")
        if not check.records:  # a fresh install: nothing recorded is not a broken chain
            why = f"{path} is empty" if check.exists else f"no audit log at {path}: {_FIRST_CALL}"
            terminal.stdout.write(f"no records yet ({why})\n")
            return
        plural = "" if check.records == 1 else "s"
        terminal.stdout.write(f"{check.records} record{plural}, chain intact\n")


@audit_app.command(
    "show",
    help="The last records, one per line: time (UTC), session, tool, key argument, "
    "outcome (allowed by whom, declined, denied and the rule, invalid, failed, interrupted), "
    "duration.",
)
def audit_show(
    ctx: typer.Context,
    count: Annotated[int, typer.Option("-n", min=1, metavar="N", help="How many records.")] = 20,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the records as they are stored, one a line.")
    ] = False,
    file: AuditFileOpt = None,
) -> None:
    with command(ctx) as terminal:
        from cli.records.audit import tail
        from cli.ui.audit_view import NOT_A_RECORD, audit_row
        from cli.ui.layout import terminal_width

        width = terminal_width(terminal.stdout)  # piped: one record a line, as scripts read

        path = _audit_path(terminal, file)
        try:
            rows = tail(path, count)
        except FileNotFoundError:
            terminal.stderr.write(f"no tool calls recorded yet ({path} does not exist)\n")
            rows = []
        except OSError as exc:
            raise _unreadable(path, exc) from None
        for number, record in rows:
            if not as_json:
                terminal.stdout.write(audit_row(number, record, width) + "\n")
            elif record is not None:
                terminal.stdout.write(json.dumps(record) + "\n")
            else:
                terminal.stderr.write(f"line {number}: {NOT_A_RECORD}\n")


def _audit_path(terminal: Terminal, file: str | None) -> Path:
    from cli.records.audit import default_path

    return Path(file).expanduser() if file else default_path(terminal.environ)


_FIRST_CALL = "it is written on the first tool call"


def _unreadable(path: Path, exc: OSError) -> AgentError:
    if isinstance(exc, FileNotFoundError):
        return AgentError(f"no audit log at {path}: {_FIRST_CALL}")
    return AgentError(f"cannot read the audit log {path}: {exc.strerror or exc}")


def read_prompt(prompt: str, stdin: TextIO, max_bytes: int) -> str:
    """The prompt, with piped stdin appended; `-` reads the whole prompt from stdin."""
    if prompt == "-":
        text = _read_stdin(stdin, max_bytes)
        if not text.strip():
            raise UsageError("the prompt '-' means read stdin, and stdin was empty: pipe it in")
        return text.strip()
    if not prompt.strip():
        raise UsageError("the prompt is empty: say what the agent should do")
    if _is_piped(stdin):
        piped = _read_stdin(stdin, max_bytes)
        if piped.strip():
            return f"{prompt}\n\n{piped.rstrip()}"
    return prompt


def _is_piped(stdin: TextIO) -> bool:
    """A pipe or a redirected file: not a terminal, not /dev/null, not a closed stdin (which
    would block or read nothing useful)."""
    try:
        mode = os.fstat(stdin.fileno()).st_mode
    except (AttributeError, ValueError, OSError):
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISREG(mode)


def _read_stdin(stdin: TextIO, max_bytes: int) -> str:
    try:
        text = stdin.read(max_bytes + 1)
    except UnicodeDecodeError:
        raise UsageError("stdin is not UTF-8 text: pipe text into agent run") from None
    if len(text.encode("utf-8", "replace")) > max_bytes:
        raise UsageError(
            f"stdin holds more than {max_bytes} bytes (policy.limits.max_read_bytes): pipe "
            "less, or let the agent read the file itself"
        )
    return text


def print_json(stream: TextIO, data: object) -> None:
    """One JSON object a line. Piped, it is `json.dumps` of the data, non-ASCII as is (UTF-8);
    on a terminal, what JSON leaves raw and a terminal would interpret (DEL, C1, bidi) is
    written as \\uXXXX, the same JSON value; an output encoding other than UTF-8 gets ASCII
    JSON, so nothing is lost to replacement characters."""
    encoding = (getattr(stream, "encoding", None) or "utf-8").lower().replace("_", "-")
    # NaN and infinities (an MCP server's result may hold them) are not JSON: null instead.
    # U+2028, U+2029 and U+0085 are escaped: valid JSON either way, but a reader splitting
    # lines the way Python's str.splitlines() does would cut the object in two.
    text = json.dumps(_finite(data), ensure_ascii=encoding not in ("utf-8", "utf8"))
    text = text.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")
    text = text.replace("\x85", "\\u0085")
    if _isatty(stream):
        from cli.ui.text import sanitize

        text = sanitize(text, json=True)
    stream.write(text + "\n")
    stream.flush()


def _finite(data: object) -> object:
    """`data` with every NaN or infinite float as None (JSON has no such numbers)."""
    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if isinstance(data, dict):
        return {key: _finite(value) for key, value in data.items()}
    if isinstance(data, (list, tuple)):
        return [_finite(value) for value in data]
    return data


def tolerate_any_encoding(*streams: object) -> None:
    """A character the stream's encoding cannot hold (`—` on a Latin-1 or ASCII terminal) is
    written as `?`, never raised. UTF-8 holds every character, so there nothing changes:
    piped UTF-8 output stays byte-exact (a lone surrogate, which is not text, becomes `?`)."""
    for stream in streams:
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is None:
            continue
        try:
            reconfigure(errors="replace")
        except (ValueError, OSError):
            pass  # closed, or not a text stream we can change: left as it is


def main() -> None:
    """Console-script entry point."""
    tolerate_any_encoding(sys.stdout, sys.stderr)
    # also under `python -m cli`: help and completion name `agent`
    built_for(app, sys.argv[1:])(prog_name="agent")


def built_for(whole: typer.Typer, argv: Sequence[str]) -> typer.Typer:
    """The app with only the command that `argv` names (`agent run …`: run alone). typer
    builds the parser of every command it holds, reading signatures and evaluating
    annotations, before it runs one: for the twenty of ours, a tenth of `agent --version`'s
    time. The top level takes only flags, so the command is the first word that is not one;
    with none named (`agent`, `agent --help`, completion) or a word that names none, the
    whole app, so help, suggestions and errors are what they always were; and so with any
    top-level flag but --debug and --version (--help, completion). `--version` with no
    command needs none of them."""
    if "_AGENT_COMPLETE" in os.environ:
        return whole  # shell completion: it may be asked about any command
    at = next((i for i, a in enumerate(argv) if a == "--" or not a.startswith("-")), len(argv))
    if any(a not in ("--debug", "--version") for a in argv[:at]):
        return whole  # --help, completion: what they show or do is about the whole app
    word = argv[at] if at < len(argv) else None
    if word is None:
        if "--version" not in argv:
            return whole
        commands: list[Any] = []
        groups: list[Any] = []
    else:
        commands = [c for c in whole.registered_commands if _name_of(c) == word]
        groups = [g for g in whole.registered_groups if _name_of(g) == word]
        if len(commands) + len(groups) != 1:
            return whole
    only = copy.copy(whole)
    only.registered_commands, only.registered_groups = commands, groups
    return only


def _name_of(info: Any) -> str | None:
    """The name a command or a group is invoked by (typer.main's rule: a group's own name when
    add_typer gave it none, a command's function name in kebab case when its decorator did not)."""
    name = getattr(info, "name", None)
    if isinstance(name, str):
        return name
    inner = getattr(getattr(info, "typer_instance", None), "info", None)
    name = getattr(inner, "name", None)
    if isinstance(name, str):
        return name
    callback = getattr(info, "callback", None)
    if callback is not None and getattr(info, "typer_instance", None) is None:
        return typer.main.get_command_name(callback.__name__)
    return None


__all__ = ["EXIT_FAILURE", "app", "main"]
